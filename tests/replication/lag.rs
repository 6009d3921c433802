//! The lag of applied decisions: percentiles report the median and the slow tail; decisions
//! skipped as expired are no sample; the histogram counts durations past its range as its
//! top, clamps a quantile's fraction and rounds up to a bucket's top.

use std::time::Duration;

use approx_kv_index::replication::{Applied, LagHistogram};

use super::{manual, replica_on, route, EPOCH};

/// src/sharing/mod.rs, `ReplicationStats::lag_p50`: "Median time from a decision to its
/// arrival here (wall clocks of both replicas)"; `lag_p99`: "99th percentile of the same";
/// docs/design.md, Lag: "a log-linear histogram (1/8 resolution)".
#[test]
fn lag_percentiles_report_the_median_and_the_slow_tail() {
    let clock = manual(EPOCH);
    let b = replica_on(2, &clock).build().unwrap();
    for seq in 1..=100u64 {
        let age = if seq <= 97 { 1 } else { 5 };
        let d = route(seq, EPOCH - Duration::from_secs(age));
        assert_eq!(b.apply_decision(&d), Applied::Applied);
    }
    let s = b.replication_stats();
    let within = |d: Duration, secs: f64| (secs..=secs * 1.125).contains(&d.as_secs_f64());
    assert!(within(s.lag_p50, 1.0), "{s:?}");
    assert!(within(s.lag_p99, 5.0), "{s:?}");
}

/// docs/design.md, Lag: "Each applied decision's age goes into a log-linear histogram";
/// src/sharing/lag.rs: "how long applied decisions took to arrive". A decision skipped as
/// a TTL old ([`Applied::Expired`]) is not applied, so its age is no sample.
#[test]
fn decisions_skipped_as_expired_do_not_count_in_the_lag() {
    let clock = manual(EPOCH);
    let b = replica_on(2, &clock).build().unwrap();
    assert_eq!(
        b.apply_decision(&route(1, EPOCH - Duration::from_secs(2))),
        Applied::Applied
    );
    assert_eq!(
        b.apply_decision(&route(2, EPOCH - Duration::from_secs(3600))),
        Applied::Expired
    );
    let s = b.replication_stats();
    assert_eq!((s.applied, s.expired), (1, 1));
    assert!(s.lag_p99 <= Duration::from_millis(2250), "{s:?}");
}

/// src/sharing/lag.rs, `LagHistogram::record`: "Counts one duration (durations past 2^64
/// µs count as that)."
#[test]
fn durations_past_the_histograms_range_count_as_its_top() {
    let h = LagHistogram::default();
    h.record(Duration::MAX);
    h.record(Duration::from_micros(u64::MAX) + Duration::from_secs(1));
    assert_eq!(h.count(), 2);
    assert_eq!(h.quantile(0.5), Duration::from_micros(u64::MAX));
    h.record(Duration::from_micros(3));
    assert_eq!(h.quantile(0.0), Duration::from_micros(3));
}

/// src/sharing/lag.rs, `LagHistogram::quantile`: "The duration below which a fraction `q`
/// (clamped to 0..=1) of those counted fall, rounded up to its bucket's top".
#[test]
fn quantiles_clamp_their_fraction_and_round_up_to_a_bucket_top() {
    let h = LagHistogram::default();
    for ms in [2u64, 40, 900] {
        h.record(Duration::from_millis(ms));
    }
    assert_eq!(h.quantile(-3.0), h.quantile(0.0));
    assert_eq!(h.quantile(7.0), h.quantile(1.0));
    let (low, high) = (h.quantile(0.0), h.quantile(1.0));
    assert!(
        low >= Duration::from_millis(2) && low <= Duration::from_micros(2_250),
        "{low:?}"
    );
    assert!(
        high >= Duration::from_millis(900) && high <= Duration::from_micros(1_012_500),
        "{high:?}"
    );
    let mid = h.quantile(0.5);
    assert!(
        mid >= Duration::from_millis(40) && mid <= Duration::from_millis(45),
        "{mid:?}"
    );
}
