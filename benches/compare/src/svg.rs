//! Hand-written SVG line charts of the medians (no plotting crate).

use std::fmt::Write as _;

/// One line: its name, colour and y values (one per x).
pub struct Series<'a> {
    pub name: &'a str,
    pub colour: &'a str,
    pub ys: Vec<f64>,
}

const W: f64 = 560.0;
const H: f64 = 340.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

fn scale(v: f64, lo: f64, hi: f64, log: bool) -> f64 {
    if log {
        (v.ln() - lo.ln()) / (hi.ln() - lo.ln())
    } else {
        (v - lo) / (hi - lo)
    }
}

fn label(v: f64) -> String {
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

/// A chart of `series` over `xs`; `log_y` puts y on a log scale (x positions are evenly
/// spaced and labelled with `xs`).
pub fn chart(
    title: &str,
    x_name: &str,
    y_name: &str,
    xs: &[f64],
    series: &[Series<'_>],
    log_y: bool,
) -> String {
    let ys = series
        .iter()
        .flat_map(|s| s.ys.iter().copied())
        .filter(|v| v.is_finite() && *v > 0.0);
    let (mut lo, mut hi) = ys.fold((f64::MAX, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    if lo > hi {
        (lo, hi) = (1.0, 10.0);
    }
    if log_y {
        lo = 10f64.powf(lo.log10().floor());
        hi = 10f64.powf(hi.log10().ceil());
    } else {
        lo = 0.0;
        hi *= 1.1;
    }
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let px = |i: usize| LEFT + pw * (i as f64 + 0.5) / xs.len() as f64;
    let py = |v: f64| TOP + ph * (1.0 - scale(v, lo, hi, log_y));
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{title}</text>"#,
        LEFT + pw / 2.0
    );
    let ticks: Vec<f64> = if log_y {
        let mut t = Vec::new();
        let mut v = lo;
        while v <= hi * 1.0001 {
            t.push(v);
            v *= 10.0;
        }
        t
    } else {
        (0..=5).map(|k| hi * k as f64 / 5.0).collect()
    };
    for t in ticks {
        let y = py(t);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##,
            LEFT + pw
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            y + 4.0,
            label(t)
        );
    }
    for (i, x) in xs.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            px(i),
            TOP + ph + 18.0,
            x
        );
    }
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{x_name}</text>"#,
        LEFT + pw / 2.0,
        H - 10.0
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">{y_name}</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0
    );
    for (k, se) in series.iter().enumerate() {
        let pts: Vec<String> = se
            .ys
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite() && **v > 0.0)
            .map(|(i, v)| format!("{:.1},{:.1}", px(i), py(*v)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>"#,
            pts.join(" "),
            se.colour
        );
        for p in &pts {
            let (x, y) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(
                s,
                r#"<circle cx="{x}" cy="{y}" r="3.5" fill="{}"/>"#,
                se.colour
            );
        }
        let ly = TOP + 10.0 + 20.0 * k as f64;
        let lx = LEFT + pw + 12.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{}" stroke-width="2"/>"#,
            lx + 18.0,
            se.colour
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}">{}</text>"#,
            lx + 24.0,
            ly + 4.0,
            se.name
        );
    }
    s.push_str("</svg>\n");
    s
}
