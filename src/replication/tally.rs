//! [`Tally`]: the counts of a stretch of applied decisions, kept on the applying thread
//! and added to the index's shared counters once at its end.
//!
//! Threads applying different origins' decisions at once would otherwise write the same
//! counters and histogram buckets for every decision, trading their cache lines.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::{Applied, Replication};

/// Counts of applied and skipped decisions, and their lags, not yet added to the shared
/// counters ([`Tally::add_to`]).
#[derive(Debug, Default)]
pub(super) struct Tally {
    applied: u64,
    duplicates: u64,
    expired: u64,
    gaps: u64,
    restarts: u64,
    superseded: u64,
    /// Consecutive lags falling in one histogram bucket: the bucket, and how many (a
    /// stretch's decisions arrive with much the same lag, so this is rarely flushed).
    lags: Option<(usize, u64)>,
}

impl Tally {
    /// Counts a duplicate.
    pub(super) fn duplicate(&mut self) {
        self.duplicates += 1;
    }

    /// Counts `n` sequence numbers skipped in an origin's sequence. Wrapping, as the
    /// shared counter's atomic add does: numbers from untrusted streams can skip nearly
    /// 2^64 at once, and a sum of wrapping adds is the same in any grouping.
    pub(super) fn gaps(&mut self, n: u64) {
        self.gaps = self.gaps.wrapping_add(n);
    }

    /// Counts an origin seen restarting.
    pub(super) fn restart(&mut self) {
        self.restarts += 1;
    }

    /// Counts a decision skipped as superseded (it is also counted as applied).
    pub(super) fn superseded(&mut self) {
        self.superseded += 1;
    }

    /// Counts an applied decision's outcome, `age` old on arrival (only those applied
    /// count in the lag: one skipped for being a TTL old, as a late joiner reads many from
    /// a loosely trimmed stream, would stretch the percentiles with decisions that changed
    /// nothing here; nor capacities, `None`, which replicas share again dated from their
    /// change).
    pub(super) fn outcome(&mut self, outcome: Applied, age: Option<Duration>, to: &Replication) {
        if outcome == Applied::Expired {
            self.expired += 1;
            return;
        }
        self.applied += 1;
        let Some(age) = age else {
            return;
        };
        let bucket = super::lag::bucket_of(age);
        match &mut self.lags {
            Some((b, n)) if *b == bucket => *n += 1,
            lags => {
                if let Some((b, n)) = lags.replace((bucket, 1)) {
                    to.lag.add(b, n);
                }
            }
        }
    }

    /// Adds the counts to `to`'s shared counters.
    pub(super) fn add_to(self, to: &Replication) {
        for (counter, n) in [
            (&to.applied, self.applied),
            (&to.duplicates, self.duplicates),
            (&to.expired, self.expired),
            (&to.gaps, self.gaps),
            (&to.restarts, self.restarts),
            (&to.superseded, self.superseded),
        ] {
            if n > 0 {
                counter.fetch_add(n, Relaxed);
            }
        }
        if let Some((b, n)) = self.lags {
            to.lag.add(b, n);
        }
    }
}
