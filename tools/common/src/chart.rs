//! The charts of both tools, drawn with `plotters` into SVG strings: horizontal bars
//! (the replay's hit rate per policy against the oracle) and lines over a few x values
//! on a log y axis (the comparison's throughput and latency).

use plotters::coord::ranged1d::SegmentValue;
use plotters::coord::CoordTranslate;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

pub use plotters::chart::SeriesLabelPosition;
pub use plotters::style::RGBColor;

const FONT: &str = "sans-serif";
const WIDTH: u32 = 900;
const GREY: RGBColor = RGBColor(85, 85, 85);

/// Any drawing error, as text.
fn err(e: impl std::fmt::Display) -> String {
    format!("cannot draw the chart: {e}")
}

/// The legend of `chart`'s labelled series, at `at`.
fn legend<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    at: SeriesLabelPosition,
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate,
{
    chart
        .configure_series_labels()
        .position(at)
        .label_font((FONT, 16))
        .background_style(WHITE.mix(0.9))
        .border_style(GREY)
        .draw()
        .map_err(err)
}

/// `#rrggbb` as a colour (black if malformed).
pub fn hex(s: &str) -> RGBColor {
    let s = s.trim_start_matches('#');
    let c = |i: usize| {
        s.get(i..i + 2)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .unwrap_or(0)
    };
    RGBColor(c(0), c(2), c(4))
}

/// One bar: its label (left of it), value, colour, and a note printed after the value.
#[derive(Debug, Clone)]
pub struct Bar {
    /// Shown on the category axis.
    pub label: String,
    /// Length of the bar.
    pub value: f64,
    /// Fill colour.
    pub colour: RGBColor,
    /// Printed after the value at the end of the bar (may be empty).
    pub note: String,
}

/// A horizontal bar chart, first bar on top.
#[derive(Debug, Clone)]
pub struct Bars<'a> {
    /// Bold title.
    pub title: &'a str,
    /// Grey lines under the title.
    pub subtitle: &'a [String],
    /// What the value axis measures.
    pub value_desc: &'a str,
    /// What the category axis lists.
    pub category_desc: &'a str,
    /// The bars.
    pub bars: &'a [Bar],
    /// A dashed line across the bars at this value, with its legend label.
    pub reference: Option<(f64, &'a str, RGBColor)>,
    /// Legend entries for the bar colours.
    pub legend: &'a [(&'a str, RGBColor)],
    /// Values are fractions, labelled as percentages.
    pub percent: bool,
}

/// The SVG of `c`.
pub fn bars(c: &Bars<'_>) -> Result<String, String> {
    let n = c.bars.len().max(1) as u32;
    let head = 44 + 18 * c.subtitle.len() as u32;
    let height = head + 36 * n + 70;
    let top = c
        .bars
        .iter()
        .map(|b| b.value)
        .chain(c.reference.map(|r| r.0))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    // Room after the longest bar for its value and note.
    let mut x_max = if top > 0.0 { top * 1.3 } else { 1.0 };
    if c.percent {
        x_max = ((x_max * 20.0).ceil() / 20.0).min(1.3);
    }
    let fmt_value = |v: f64| {
        if c.percent {
            format!("{:.1}%", v * 100.0)
        } else {
            format!("{v:.3}")
        }
    };
    // The first bar is drawn on top: segment n - 1 - i.
    let seg = |i: usize| n - 1 - i as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (header, body) = root.split_vertically(head);
        header
            .draw(&Text::new(
                c.title,
                (16, 12),
                (FONT, 22).into_font().style(FontStyle::Bold),
            ))
            .map_err(err)?;
        for (k, line) in c.subtitle.iter().enumerate() {
            header
                .draw(&Text::new(
                    line.as_str(),
                    (16, 40 + 18 * k as i32),
                    (FONT, 16).into_font().color(&GREY),
                ))
                .map_err(err)?;
        }
        let labels: Vec<&str> = c.bars.iter().map(|b| b.label.as_str()).collect();
        let mut chart = ChartBuilder::on(&body)
            .margin_left(8)
            .margin_right(24)
            .margin_top(8)
            .x_label_area_size(52)
            .y_label_area_size(150)
            // A segmented a..b has one segment per value of a..=b: n bars.
            .build_cartesian_2d(0.0..x_max, (0..n - 1).into_segmented())
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc(c.value_desc)
            .y_desc(c.category_desc)
            .axis_desc_style((FONT, 17))
            .label_style((FONT, 16))
            .y_labels(n as usize)
            .x_label_formatter(&|v| {
                if c.percent {
                    format!("{:.0}%", v * 100.0)
                } else {
                    format!("{v}")
                }
            })
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(s) if *s < n => labels
                    .get((n - 1 - s) as usize)
                    .map_or_else(String::new, |l| l.to_string()),
                _ => String::new(),
            })
            .draw()
            .map_err(err)?;
        chart
            .draw_series(c.bars.iter().enumerate().map(|(i, b)| {
                let mut r = Rectangle::new(
                    [
                        (0.0, SegmentValue::Exact(seg(i))),
                        (b.value.max(0.0), SegmentValue::Exact(seg(i) + 1)),
                    ],
                    b.colour.filled(),
                );
                r.set_margin(5, 5, 0, 0);
                r
            }))
            .map_err(err)?;
        let value_style = (FONT, 16)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Left, VPos::Center));
        chart
            .draw_series(c.bars.iter().enumerate().map(|(i, b)| {
                let text = if b.note.is_empty() {
                    fmt_value(b.value)
                } else {
                    format!("{} ({})", fmt_value(b.value), b.note)
                };
                EmptyElement::at((b.value.max(0.0), SegmentValue::CenterOf(seg(i))))
                    + Text::new(text, (6, 0), value_style.clone())
            }))
            .map_err(err)?;
        for &(label, colour) in c.legend {
            chart
                .draw_series(std::iter::empty::<Rectangle<(f64, SegmentValue<u32>)>>())
                .map_err(err)?
                .label(label)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 6), (x + 12, y + 6)], colour.filled())
                });
        }
        if let Some((v, label, colour)) = c.reference {
            // Dashes in the gaps between bars only, so the line never crosses a label.
            let style = colour.stroke_width(2);
            for k in 0..=n {
                let (x, y) = chart.backend_coord(&(v, SegmentValue::Exact(k)));
                let (top, bottom) = (if k == n { 0 } else { 5 }, if k == 0 { 0 } else { 5 });
                root.draw(&PathElement::new(
                    vec![(x, y - top), (x, y + bottom)],
                    style,
                ))
                .map_err(err)?;
            }
            chart
                .draw_series(std::iter::empty::<PathElement<(f64, SegmentValue<u32>)>>())
                .map_err(err)?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x + 5, y - 7), (x + 5, y + 7)], style)
                });
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// One line of a [`Lines`] chart.
#[derive(Debug, Clone)]
pub struct Series<'a> {
    /// Legend label.
    pub name: &'a str,
    /// Line colour.
    pub colour: RGBColor,
    /// One value per x (values that are not finite and > 0 are left out).
    pub ys: Vec<f64>,
}

/// Lines over a few x values, evenly spaced and labelled with their value, on a log y axis
/// (the figures span decades).
#[derive(Debug, Clone)]
pub struct Lines<'a> {
    /// Title.
    pub title: &'a str,
    /// What x is.
    pub x_desc: &'a str,
    /// What y is.
    pub y_desc: &'a str,
    /// The x values.
    pub xs: &'a [f64],
    /// The lines.
    pub series: &'a [Series<'a>],
    /// Where the legend goes (a corner the lines leave free).
    pub legend: SeriesLabelPosition,
}

/// `1.2M`, `35k`, `120`, `3.5`: a compact axis label.
pub fn compact(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The SVG of `c`.
pub fn lines(c: &Lines<'_>) -> Result<String, String> {
    let ok = |v: &f64| v.is_finite() && *v > 0.0;
    let (lo, hi) = c
        .series
        .iter()
        .flat_map(|s| s.ys.iter().copied())
        .filter(ok)
        .fold((f64::MAX, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    // Some room around the values; plotters picks the ticks.
    let (lo, hi) = if lo > hi {
        (1.0, 10.0)
    } else {
        (lo / 1.5, hi * 1.5)
    };
    let n = c.xs.len().max(1) as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH * 3 / 4, 460)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(c.title, (FONT, 22))
            .margin(12)
            .x_label_area_size(48)
            .y_label_area_size(72)
            // One segment per x value (a segmented a..b has one per value of a..=b).
            .build_cartesian_2d((0..n - 1).into_segmented(), (lo..hi).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc(c.x_desc)
            .y_desc(c.y_desc)
            .axis_desc_style((FONT, 17))
            .label_style((FONT, 16))
            .x_labels(n as usize)
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => {
                    c.xs.get(*i as usize)
                        .map_or_else(String::new, |x| format!("{x}"))
                }
                _ => String::new(),
            })
            .y_label_formatter(&|v| compact(*v))
            .draw()
            .map_err(err)?;
        for s in c.series {
            let colour = s.colour;
            let points: Vec<_> =
                s.ys.iter()
                    .enumerate()
                    .filter(|(_, v)| ok(v))
                    .map(|(i, &v)| (SegmentValue::CenterOf(i as u32), v))
                    .collect();
            chart
                .draw_series(LineSeries::new(points, colour.stroke_width(2)).point_size(4))
                .map_err(err)?
                .label(s.name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                });
        }
        legend(&mut chart, c.legend.clone())?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_carry_labels_values_notes_and_axes() {
        let bar = |label: &str, value, note: &str| Bar {
            label: label.into(),
            value,
            colour: hex("#4477aa"),
            note: note.into(),
        };
        let svg = bars(&Bars {
            title: "T <&>",
            subtitle: &["sub".into()],
            value_desc: "hit blocks / prompt blocks",
            category_desc: "policy",
            bars: &[bar("round-robin", 0.1, "0.20x"), bar("oracle", 0.5, "")],
            reference: Some((0.5, "oracle", hex("#ee7733"))),
            legend: &[("approx", hex("#4477aa"))],
            percent: true,
        })
        .unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        for text in [
            "T &lt;&amp;&gt;",
            "round-robin",
            "10.0% (0.20x)",
            "50.0%",
            "hit blocks / prompt blocks",
            "policy",
            "approx",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
    }

    #[test]
    fn lines_carry_series_axes_and_x_values() {
        let svg = lines(&Lines {
            title: "Throughput",
            x_desc: "router threads",
            y_desc: "requests / s",
            xs: &[1.0, 2.0, 4.0],
            series: &[Series {
                name: "ours",
                colour: hex("#1f77b4"),
                ys: vec![1e4, 2e4, f64::NAN],
            }],
            legend: SeriesLabelPosition::LowerRight,
        })
        .unwrap();
        if let Ok(path) = std::env::var("APPROX_KV_CHART_DUMP") {
            std::fs::write(path, &svg).unwrap();
        }
        for text in [
            "Throughput",
            "router threads",
            "requests / s",
            "ours",
            "\n4\n",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        assert_eq!(compact(1.5e6), "1.5M");
        assert_eq!(hex("#ff8000"), RGBColor(255, 128, 0));
    }
}
