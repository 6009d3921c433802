//! The chart of the real prefix-hit rate of each run, against the oracle's.

use approx_kv_tools::chart::{self, hex, Bar, Bars, RGBColor};

use crate::policy::Policy;
use crate::report::Row;

/// The policy families, in the order of the legend: colour and label.
const FAMILIES: [(&str, &str); 8] = [
    ("#9e9e9e", "round-robin"),
    ("#c7c7c7", "random"),
    ("#4477aa", "approx (TTL sweep)"),
    ("#228833", "approx, capacity only"),
    ("#ee7733", "oracle"),
    ("#aa3377", "approx, request-aware"),
    ("#66ccee", "KV events only"),
    ("#bbbbbb", "bound (own requests, exact)"),
];

/// The family of a policy, an index into [`FAMILIES`].
fn family(p: &Policy) -> usize {
    match p {
        Policy::RoundRobin => 0,
        Policy::Random => 1,
        Policy::Approx { .. } => 2,
        Policy::ApproxCapacity { .. } => 3,
        Policy::Oracle => 4,
        Policy::Requests { .. } => 5,
        Policy::EventsOnly { .. } => 6,
        Policy::Bound => 7,
    }
}

fn colour(k: usize) -> RGBColor {
    hex(FAMILIES[k].0)
}

/// The SVG: one bar per run, in order, labelled with its hit rate and its ratio to the
/// oracle's; the oracle's level dashed across; `subtitle` lines describe the trace and
/// cluster.
pub fn svg(rows: &[Row], subtitle: &[String]) -> Result<String, String> {
    let bars: Vec<Bar> = rows
        .iter()
        .map(|r| Bar {
            label: r.name.clone(),
            value: r.hit_rate,
            colour: colour(family(&r.policy)),
            note: match r.vs_oracle {
                Some(v) if r.policy != Policy::Oracle => format!("{v:.2}x oracle"),
                _ => String::new(),
            },
        })
        .collect();
    let mut present: Vec<usize> = rows.iter().map(|r| family(&r.policy)).collect();
    present.sort_unstable();
    present.dedup();
    let legend: Vec<(&str, RGBColor)> = present
        .iter()
        .filter(|&&k| k != 4)
        .map(|&k| (FAMILIES[k].1, colour(k)))
        .collect();
    let oracle = rows
        .iter()
        .find(|r| r.policy == Policy::Oracle)
        .map(|o| (o.hit_rate, "oracle's hit rate", colour(4)));
    chart::bars(&Bars {
        title: "Real prefix-hit rate per routing policy",
        subtitle,
        value_desc: "hit rate (prompt blocks found in the chosen worker's LRU / prompt blocks)",
        category_desc: "routing policy",
        bars: &bars,
        reference: oracle,
        legend: &legend,
        percent: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_one_bar_per_row_with_its_ratio() {
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
            pred_deliv: None,
        };
        let rows = [row(Policy::RoundRobin, 0.1), row(Policy::Oracle, 0.5)];
        let svg = svg(&rows, &["a <b> & c".into()]).unwrap();
        assert!(svg.contains("a &lt;b&gt; &amp; c"));
        assert!(svg.contains("10.0% (0.20x oracle)") && svg.contains("50.0%"));
        assert!(svg.contains("round-robin") && svg.contains("oracle&apos;s hit rate"));
    }
}
