//! The hit rate of index policies against the number of router replicas, with and
//! without sharing decisions: a table and a chart, relative to one replica.

use approx_kv_tools::chart::{self, hex, Lines, Series, SeriesLabelPosition};

use crate::fleet::{Fleet, Sharing};
use crate::report::Row;

/// One index policy's runs: (replicas, synced, hit rate).
struct Policy {
    name: String,
    runs: Vec<(usize, bool, f64)>,
}

/// Every index policy run with more than one replica, by policy.
pub struct Scaling {
    policies: Vec<Policy>,
    counts: Vec<usize>,
    sync: String,
}

impl Scaling {
    /// `None` when no run had more than one replica.
    pub fn of(rows: &[Row]) -> Option<Scaling> {
        let mut policies: Vec<Policy> = Vec::new();
        let mut counts = Vec::new();
        let mut sync = String::new();
        for row in rows {
            let Some(fleet) = row.policy.fleet() else {
                continue;
            };
            let synced = fleet.sharing != Sharing::None;
            if synced {
                sync = Fleet {
                    replicas: 2,
                    ..fleet.clone()
                }
                .suffix();
                sync = sync.trim_start_matches(", 2 replicas ").to_string();
            }
            let name = row.name.split(',').next().unwrap_or_default().to_string();
            let at = match policies.iter().position(|p| p.name == name) {
                Some(at) => at,
                None => {
                    policies.push(Policy {
                        name,
                        runs: Vec::new(),
                    });
                    policies.len() - 1
                }
            };
            policies[at]
                .runs
                .push((fleet.replicas, synced, row.hit_rate));
            counts.push(fleet.replicas);
        }
        counts.sort_unstable();
        counts.dedup();
        (counts.len() > 1).then_some(Scaling {
            policies,
            counts,
            sync,
        })
    }

    fn rate(p: &Policy, replicas: usize, synced: bool) -> Option<f64> {
        let found = p
            .runs
            .iter()
            .find(|r| r.0 == replicas && (r.1 == synced || replicas == 1));
        found.map(|r| r.2)
    }

    /// Hit rate relative to one replica, or `None`.
    fn relative(p: &Policy, replicas: usize, synced: bool) -> Option<f64> {
        let one = Self::rate(p, 1, false).filter(|&r| r > 0.0)?;
        Self::rate(p, replicas, synced).map(|r| r / one)
    }

    /// The table: per policy and replica count, the hit rate unsynced and synced, each
    /// with its ratio to one replica.
    pub fn table(&self) -> String {
        let synced = if self.sync.is_empty() {
            "synced".into()
        } else {
            self.sync.clone()
        };
        let w = self
            .policies
            .iter()
            .map(|p| p.name.len())
            .fold(18, usize::max);
        let mut out = format!(
            "{:<w$} {:>8}  {:>16}  {:>16}\n",
            "policy", "replicas", "unsynced", synced
        );
        let cell = |p: &Policy, n, s| match (Self::rate(p, n, s), Self::relative(p, n, s)) {
            (Some(r), Some(x)) => format!("{:.1}% ({x:.2}x)", r * 100.0),
            (Some(r), None) => format!("{:.1}%", r * 100.0),
            _ => "-".into(),
        };
        for p in &self.policies {
            for &n in &self.counts {
                let synced = if n == 1 { "-".into() } else { cell(p, n, true) };
                out.push_str(&format!(
                    "{:<w$} {n:>8}  {:>16}  {synced:>16}\n",
                    p.name,
                    cell(p, n, false)
                ));
            }
        }
        out.push_str(
            "hit rate (ratio to one replica); requests spread uniformly over the replicas\n",
        );
        out
    }

    /// The chart: hit rate relative to one replica against the replica count, a solid
    /// colour per policy, unsynced and synced.
    pub fn svg(&self, subtitle: &str) -> Result<String, String> {
        const COLOURS: [&str; 6] = [
            "#228833", "#4477aa", "#66ccee", "#aa3377", "#ccbb44", "#ee6677",
        ];
        let xs: Vec<f64> = self.counts.iter().map(|&n| n as f64).collect();
        let mut names = Vec::new();
        for p in &self.policies {
            names.push(format!("{}, unsynced", p.name));
            names.push(format!("{}, synced", p.name));
        }
        let mut series = Vec::new();
        for (i, p) in self.policies.iter().enumerate() {
            for synced in [false, true] {
                let ys: Vec<f64> = self
                    .counts
                    .iter()
                    .map(|&n| Self::relative(p, n, synced).unwrap_or(f64::NAN))
                    .collect();
                if ys.iter().filter(|y| y.is_finite()).count() < 2 {
                    continue;
                }
                let colour = hex(COLOURS[(2 * i + usize::from(synced)) % COLOURS.len()]);
                let name = &names[2 * i + usize::from(synced)];
                series.push(Series { name, colour, ys });
            }
        }
        let title = format!("Hit rate with N router replicas, relative to one ({subtitle})");
        chart::lines(&Lines {
            title: &title,
            x_desc: "router replicas",
            y_desc: "hit rate / hit rate of one replica",
            xs: &xs,
            series: &series,
            legend: SeriesLabelPosition::LowerLeft,
        })
    }
}
