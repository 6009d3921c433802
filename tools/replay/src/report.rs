//! Turning run results into figures and the final table.

use std::fmt::Write;

use crate::policy::Policy;
use crate::replay::RunResult;

/// The figures of one run, as reported.
#[derive(Debug, Clone)]
pub struct Row {
    /// Policy name.
    pub name: String,
    /// The policy.
    pub policy: Policy,
    /// Real prefix-hit rate: hit blocks / prompt blocks.
    pub hit_rate: f64,
    /// `hit_rate` / the oracle's, when an oracle ran and hit anything.
    pub vs_oracle: Option<f64>,
    /// Max / mean requests per worker.
    pub balance: f64,
    /// Requests/s the routing threads sustain on find + choose + record alone.
    pub req_per_s: Option<f64>,
    /// p50 and p99 of a find, µs.
    pub find_us: Option<(f64, f64)>,
    /// p50 and p99 of a record, µs.
    pub record_us: Option<(f64, f64)>,
    /// Peak (block, worker) entries in the index.
    pub peak_entries: Option<usize>,
    /// Index runs: blocks predicted (the chosen worker's found depth) over blocks
    /// delivered (its real prefix hit).
    pub pred_deliv: Option<f64>,
}

/// The `q` quantile (0..=1) of `xs`, nearest rank; `xs` is reordered.
pub fn quantile<T: Copy + Ord>(xs: &mut [T], q: f64) -> Option<T> {
    if xs.is_empty() {
        return None;
    }
    let k = ((xs.len() - 1) as f64 * q).round() as usize;
    Some(*xs.select_nth_unstable(k).1)
}

fn percentiles_us(ns: &mut [u64]) -> Option<(f64, f64)> {
    let p50 = quantile(ns, 0.5)?;
    let p99 = quantile(ns, 0.99)?;
    Some((p50 as f64 / 1e3, p99 as f64 / 1e3))
}

/// Figures for every run; `threads` is the number of routing threads.
pub fn rows(results: &mut [RunResult], threads: usize) -> Vec<Row> {
    let rate = |r: &RunResult| r.hit_blocks as f64 / r.prompt_blocks.max(1) as f64;
    let oracle = results
        .iter()
        .find(|r| r.policy == Policy::Oracle)
        .map(rate)
        .filter(|&o| o > 0.0);
    results
        .iter_mut()
        .map(|r| {
            let total: u64 = r.served.iter().sum();
            let mean = total as f64 / r.served.len().max(1) as f64;
            let max = r.served.iter().copied().max().unwrap_or(0) as f64;
            let uses_index = r.policy.uses_index();
            let n = r.find_ns.len();
            Row {
                name: r.policy.name(),
                policy: r.policy.clone(),
                hit_rate: rate(r),
                vs_oracle: oracle.map(|o| rate(r) / o),
                balance: if mean > 0.0 { max / mean } else { 0.0 },
                req_per_s: (uses_index && r.route_ns > 0)
                    .then(|| n as f64 * threads as f64 / (r.route_ns as f64 / 1e9)),
                find_us: percentiles_us(&mut r.find_ns),
                record_us: percentiles_us(&mut r.record_ns),
                peak_entries: uses_index.then_some(r.peak_entries),
                pred_deliv: (r.policy.predicts() && r.hit_blocks > 0)
                    .then(|| r.predicted_blocks as f64 / r.hit_blocks as f64),
            }
        })
        .collect()
}

fn opt(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".into())
}

/// The result table, one line per run.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    let w = rows
        .iter()
        .map(|r| r.name.chars().count())
        .fold(18, usize::max);
    let _ = writeln!(
        s,
        "{:<w$} {:>8} {:>9} {:>8} {:>10} {:>15} {:>15} {:>10} {:>10}",
        "policy",
        "hit rate",
        "vs oracle",
        "balance",
        "req/s",
        "find p50/p99",
        "record p50/p99",
        "entries",
        "predicted"
    );
    let _ = writeln!(
        s,
        "{:<w$} {:>8} {:>9} {:>8} {:>10} {:>15} {:>15} {:>10} {:>10}",
        "", "", "", "max/mean", "(router)", "µs", "µs", "(peak)", "/delivered"
    );
    for r in rows {
        let pair = |p: Option<(f64, f64)>| opt(p.map(|(a, b)| format!("{a:.1} / {b:.1}")));
        let _ = writeln!(
            s,
            "{:<w$} {:>7.1}% {:>9} {:>8.2} {:>10} {:>15} {:>15} {:>10} {:>10}",
            r.name,
            r.hit_rate * 100.0,
            opt(r.vs_oracle.map(|v| format!("{v:.2}x"))),
            r.balance,
            opt(r.req_per_s.map(|v| format!("{v:.0}"))),
            pair(r.find_us),
            pair(r.record_us),
            opt(r.peak_entries.map(|v| v.to_string())),
            opt(r.pred_deliv.map(|v| format!("{v:.2}"))),
        );
    }
    s
}

/// How long the oracle's caches really kept blocks, to read TTLs against.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Evictions seen.
    pub evictions: usize,
    /// p10, p50 and p90 of the time an evicted block had gone unused, in seconds.
    pub unused_s: (f64, f64, f64),
}

impl Retention {
    /// From the oracle's run, if there was one.
    pub fn of(results: &mut [RunResult]) -> Option<Self> {
        let r = results.iter_mut().find(|r| r.policy == Policy::Oracle)?;
        let ages = &mut r.eviction_ages_ms;
        let evictions = ages.len();
        let mut q = |p| quantile(ages, p).map_or(0.0, |ms| f64::from(ms) / 1000.0);
        let unused_s = (q(0.1), q(0.5), q(0.9));
        Some(Self {
            evictions,
            unused_s,
        })
    }

    /// A one-line summary.
    pub fn line(&self) -> String {
        let (p10, p50, p90) = self.unused_s;
        match self.evictions {
            0 => "cache retention (oracle): no block was ever evicted".into(),
            n => format!(
                "cache retention (oracle): an evicted block had gone unused for {p50:.0} s \
                 (median; p10 {p10:.0} s, p90 {p90:.0} s; {n} evictions)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles() {
        let mut xs = [5u64, 1, 4, 2, 3];
        assert_eq!(quantile(&mut xs, 0.5), Some(3));
        assert_eq!(quantile(&mut xs, 0.0), Some(1));
        assert_eq!(quantile(&mut xs, 1.0), Some(5));
        assert_eq!(quantile::<u64>(&mut [], 0.5), None);
    }
}
