//! [`LagHistogram`]: how long applied decisions took to arrive, for percentiles without
//! keeping every sample.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Below this many microseconds a bucket is one microsecond wide; above, each power of
/// two is cut into `SUB` buckets (so a percentile is within 1/8 of the true value).
const SUB: usize = 8;
const BUCKETS: usize = SUB + 61 * SUB;

/// A concurrent log-linear histogram of durations, in microseconds.
///
/// ```
/// use std::time::Duration;
/// use approx_kv_index::replication::LagHistogram;
/// let h = LagHistogram::default();
/// for ms in 1..=100 {
///     h.record(Duration::from_millis(ms));
/// }
/// let p50 = h.quantile(0.5).as_secs_f64() * 1e3;
/// assert!((50.0..=57.0).contains(&p50), "{p50}");
/// ```
pub struct LagHistogram {
    counts: Box<[AtomicU64]>,
}

impl Default for LagHistogram {
    fn default() -> Self {
        Self {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl std::fmt::Debug for LagHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LagHistogram")
            .field("count", &self.count())
            .field("p50", &self.quantile(0.5))
            .field("p99", &self.quantile(0.99))
            .finish()
    }
}

fn bucket(micros: u64) -> usize {
    if micros < SUB as u64 {
        return micros as usize;
    }
    let e = 63 - micros.leading_zeros() as usize; // 3 ..= 63
    let sub = ((micros >> (e - 3)) & (SUB as u64 - 1)) as usize;
    SUB + (e - 3) * SUB + sub
}

/// The largest value that falls in bucket `i`.
fn upper(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let (e, sub) = ((i - SUB) / SUB + 3, (i - SUB) % SUB);
    let lower = ((SUB + sub) as u64) << (e - 3);
    lower.saturating_add((1u64 << (e - 3)) - 1)
}

/// The bucket of a duration (durations past 2^64 µs count as that).
pub(super) fn bucket_of(lag: Duration) -> usize {
    bucket(u64::try_from(lag.as_micros()).unwrap_or(u64::MAX))
}

impl LagHistogram {
    /// Counts one duration (durations past 2^64 µs count as that).
    pub fn record(&self, lag: Duration) {
        self.add(bucket_of(lag), 1);
    }

    /// Counts `n` durations of bucket `bucket` ([`bucket_of`]).
    pub(super) fn add(&self, bucket: usize, n: u64) {
        self.counts[bucket].fetch_add(n, Ordering::Relaxed);
    }

    /// Durations counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The duration below which a fraction `q` (clamped to 0..=1) of those counted fall,
    /// rounded up to its bucket's top; zero when nothing was counted.
    pub fn quantile(&self, q: f64) -> Duration {
        let counts: Vec<u64> = self
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return Duration::ZERO;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Duration::from_micros(upper(i));
            }
        }
        Duration::from_micros(upper(BUCKETS - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order() {
        for v in (0..4096).chain([u64::MAX / 3, u64::MAX - 1, u64::MAX]) {
            let i = bucket(v);
            assert!(i < BUCKETS);
            assert!(upper(i) >= v, "{v}");
            assert!(i == 0 || upper(i - 1) < v, "{v}");
        }
    }

    #[test]
    fn quantiles_are_within_an_eighth() {
        let h = LagHistogram::default();
        assert_eq!(h.quantile(0.99), Duration::ZERO);
        for us in 1..=10_000 {
            h.record(Duration::from_micros(us));
        }
        let p99 = h.quantile(0.99).as_micros() as f64;
        assert!((9_900.0..=9_900.0 * 1.125).contains(&p99), "{p99}");
        assert_eq!(h.count(), 10_000);
    }
}
