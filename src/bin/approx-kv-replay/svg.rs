//! A hand-written SVG bar chart of the real prefix-hit rate of each run.

use std::fmt::Write;

use crate::policy::Policy;
use crate::report::Row;

const BAR: f64 = 46.0;
const GAP: f64 = 18.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 84.0;
const PLOT_H: f64 = 300.0;
const BOTTOM: f64 = 100.0;

/// Bar colour and legend label of a policy's family.
fn family(p: &Policy) -> (&'static str, &'static str) {
    match p {
        Policy::RoundRobin => ("#9e9e9e", "round-robin"),
        Policy::Random => ("#c7c7c7", "random"),
        Policy::Approx { .. } => ("#4477aa", "approx (TTL sweep)"),
        Policy::ApproxCapacity { .. } => ("#228833", "approx, capacity only"),
        Policy::Oracle => ("#ee7733", "oracle"),
    }
}

/// Escapes text for XML.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The chart: one bar per run, in order; `subtitle` lines describe the trace and cluster.
pub fn chart(rows: &[Row], subtitle: &[String]) -> String {
    let n = rows.len().max(1) as f64;
    let width = LEFT + n * (BAR + GAP) + GAP + RIGHT;
    let height = TOP + PLOT_H + BOTTOM;
    let top_rate = rows.iter().map(|r| r.hit_rate).fold(0.0, f64::max);
    // Axis to the next 10 %, at least 10 %.
    let y_max = ((top_rate * 10.0).ceil() / 10.0).clamp(0.1, 1.0);
    let y = |v: f64| TOP + PLOT_H * (1.0 - v / y_max);
    let base = y(0.0);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="24" font-size="16" font-weight="bold">Real prefix-hit rate per routing policy</text>"#
    );
    for (k, line) in subtitle.iter().take(2).enumerate() {
        let _ = writeln!(
            s,
            r##"<text x="{LEFT}" y="{}" fill="#555">{}</text>"##,
            42 + 16 * k,
            escape(line)
        );
    }
    // Grid and y axis.
    for k in 0..=((y_max * 10.0).round() as usize) {
        let v = k as f64 / 10.0;
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{:.0}%</text>"##,
            width - RIGHT,
            LEFT - 6.0,
            yy + 4.0,
            v * 100.0
        );
    }
    let _ = writeln!(
        s,
        r#"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{base:.1}" stroke="black"/><line x1="{LEFT}" y1="{base:.1}" x2="{:.1}" y2="{base:.1}" stroke="black"/>"#,
        width - RIGHT
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">hit blocks / prompt blocks</text>"#,
        TOP + PLOT_H / 2.0
    );
    // Bars.
    for (i, r) in rows.iter().enumerate() {
        let x = LEFT + GAP + i as f64 * (BAR + GAP);
        let top = y(r.hit_rate);
        let (colour, _) = family(&r.policy);
        let cx = x + BAR / 2.0;
        let _ = writeln!(
            s,
            r#"<rect x="{x:.1}" y="{top:.1}" width="{BAR}" height="{:.1}" fill="{colour}"><title>{}: {:.1}%</title></rect>"#,
            base - top,
            escape(&r.name),
            r.hit_rate * 100.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle">{:.1}%</text>"#,
            top - 5.0,
            r.hit_rate * 100.0
        );
        if let (Some(v), false) = (r.vs_oracle, r.policy == Policy::Oracle) {
            let _ = writeln!(
                s,
                r##"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="10" fill="#555">{v:.2}x</text>"##,
                top - 19.0
            );
        }
        let _ = writeln!(
            s,
            r#"<text transform="translate({:.1} {:.1}) rotate(-35)" text-anchor="end">{}</text>"#,
            cx + 4.0,
            base + 14.0,
            escape(&r.name)
        );
    }
    // The oracle's level, dashed across the chart.
    if let Some(o) = rows.iter().find(|r| r.policy == Policy::Oracle) {
        let yy = y(o.hit_rate);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ee7733" stroke-dasharray="6 4"/>"##,
            width - RIGHT
        );
    }
    // Legend: each family present, in order of appearance.
    let mut seen: Vec<&str> = Vec::new();
    for r in rows {
        let (colour, label) = family(&r.policy);
        if seen.contains(&label) {
            continue;
        }
        let ly = TOP + 10.0 + seen.len() as f64 * 20.0;
        let lx = width - RIGHT + 20.0;
        let _ = writeln!(
            s,
            r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{colour}"/><text x="{:.1}" y="{ly:.1}">{label}</text>"#,
            ly - 10.0,
            lx + 18.0
        );
        seen.push(label);
    }
    let ly = TOP + 10.0 + seen.len() as f64 * 20.0;
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{ly:.1}" font-size="10" fill="#555">0.95x = hit rate / oracle's</text>"##,
        width - RIGHT + 20.0
    );
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_one_bar_per_row_and_escapes() {
        let row = |policy: Policy, hit_rate| Row {
            name: policy.name(),
            policy,
            hit_rate,
            vs_oracle: Some(hit_rate / 0.5),
            balance: 1.0,
            req_per_s: None,
            find_us: None,
            record_us: None,
            peak_entries: None,
        };
        let rows = [row(Policy::RoundRobin, 0.1), row(Policy::Oracle, 0.5)];
        let svg = chart(&rows, &["a <b> & c".into()]);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<title>").count(), 2);
        assert!(svg.contains("a &lt;b&gt; &amp; c"));
        assert!(svg.contains("50.0%"));
    }
}
