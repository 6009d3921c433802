//! The progress of the runs: one `indicatif` bar on stderr, reset for each run.

use approx_kv_tools::progress::{self, When};
use indicatif::ProgressBar;

/// Progress of the runs: which run, and requests routed in it.
#[derive(Debug)]
pub struct Bar {
    bar: ProgressBar,
    runs: usize,
}

impl Bar {
    /// A bar for `runs` runs of `total` requests each.
    pub fn new(when: When, runs: usize, total: usize) -> Self {
        Self {
            bar: progress::bar(when, total as u64),
            runs,
        }
    }

    /// Starts run `run` (0-based) named `name`: position, rate and ETA start over.
    pub fn start(&self, run: usize, name: &str) {
        self.bar.reset();
        self.bar
            .set_prefix(format!("[{}/{}] {name:<15}", run + 1, self.runs));
    }

    /// One more request routed (called by the routing threads).
    pub fn inc(&self) {
        self.bar.inc(1);
    }

    /// Clears the bar at the end.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
