//! Time at the edges: a "never" TTL (`Duration::MAX`) still holds after 584 years and at
//! the end of time; clocks past 2^63 ns keep time, and a TTL that would reach past the end
//! of the range ends there; a `ManualClock` never goes back and saturates at 2^64 - 1 ns.

use std::time::Duration;

use approx_kv_index::*;

// These tests read a score of 0 for a worker that has none.
use crate::support::index::{index_with, score_or_zero as score};

/// Regression: a "never" TTL (`Duration::MAX`) ran out after about 146 years.
#[test]
fn a_never_ttl_never_ends() {
    let (index, clock) = index_with(Duration::MAX, None, None);
    index.process_routing_decision_for_request(&[1, 2], 0);
    for years in [147u64, 300, 584] {
        clock.set(Duration::from_secs(years * 365 * 24 * 3600));
        assert_eq!(score(&index, &[1, 2], 0), 2, "gone after {years} years");
    }
    clock.set(Duration::MAX);
    assert_eq!(score(&index, &[1, 2], 0), 2, "gone at the end of time");
    assert_eq!(index.sweep_expired(), 0);
}

/// Regression: past 2^63 ns (about 292 years) the index's time stood still: a 10 s
/// entry was still found 11 s later. Time now runs to 2^64 - 1 ns, the range of
/// `ManualClock`.
#[test]
fn clocks_past_two_to_the_63_keep_time() {
    let ttl = Duration::from_secs(10);
    for start in [
        1u64 << 63,
        300 * 365 * 24 * 3600 * 1_000_000_000,
        u64::MAX - 20_000_000_000,
    ] {
        let (index, clock) = index_with(ttl, None, None);
        clock.set(Duration::from_nanos(start));
        index.process_routing_decision_for_request(&[1, 2], 0);
        clock.advance(Duration::from_secs(9));
        assert_eq!(score(&index, &[1, 2], 0), 2, "at {start} + 9 s");
        clock.advance(Duration::from_secs(1));
        assert_eq!(score(&index, &[1, 2], 0), 0, "at {start} + 10 s");
        clock.advance(Duration::from_secs(1));
        assert_eq!(index.sweep_expired(), 2);
        assert_eq!(index.stats().entries, 0);
    }
    // At the end of the clock's range, a TTL that would reach past it ends at the last
    // instant, 2^64 - 2 ns, where the index's time stops.
    let (index, clock) = index_with(ttl, None, None);
    clock.set(Duration::from_nanos(u64::MAX - 5_000_000_000));
    index.process_routing_decision_for_request(&[1], 0);
    clock.set(Duration::from_nanos(u64::MAX - 2));
    assert_eq!(score(&index, &[1], 0), 1);
    clock.set(Duration::from_nanos(u64::MAX - 1));
    assert_eq!(score(&index, &[1], 0), 0);
    clock.advance(Duration::from_secs(1)); // ManualClock saturates at u64::MAX ns
    assert_eq!(score(&index, &[1], 0), 0);
    assert_eq!(index.sweep_expired(), 1);
    // A decision recorded there is over at once (nothing to sweep: its timer is due).
    index.process_routing_decision_for_request(&[2], 0);
    assert_eq!(score(&index, &[2], 0), 0);
    assert_eq!(index.sweep_expired(), 1);
}

/// Regression (found by an audit against `RequestHandle`'s "never expired"): a pin is
/// the last expiry there is, and a clock at 2^64 - 1 ns read it as over, so a running
/// request's blocks vanished there, and a request begun there was never seen. Time now
/// stops one nanosecond earlier for the index, and pins outlive it.
#[test]
fn pins_outlive_the_end_of_time() {
    let ttl = Duration::from_secs(10);
    let (index, clock) = index_with(ttl, None, None);
    clock.set(Duration::from_nanos(u64::MAX - 30_000_000_000));
    let running = index.begin_request(2, &[0u32, 1, 2][..]);
    index.process_routing_decision_for_request(&[0, 1, 2, 3], 1);
    for at in [u64::MAX - 1, u64::MAX] {
        clock.set(Duration::from_nanos(at));
        assert_eq!(score(&index, &[0, 1, 2], 2), 3, "pinned, at {at} ns");
        assert_eq!(score(&index, &[0, 1, 2, 3], 1), 0, "a decision, at {at} ns");
    }
    let begun_at_the_end = index.begin_request(3, &[7u32, 8][..]);
    assert_eq!(score(&index, &[7, 8], 3), 2, "read your writes at the end");
    index.sweep_expired();
    assert_eq!(score(&index, &[0, 1, 2], 2), 3, "the sweep leaves pins");
    // Released at the end: a decision taken then, over at once.
    index.finish_request(running);
    index.finish_request(begun_at_the_end);
    assert_eq!(score(&index, &[0, 1, 2], 2), 0);
    assert_eq!(score(&index, &[7, 8], 3), 0);
    index.sweep_expired();
    assert_eq!(index.stats().entries, 0);
}

/// src/clock.rs, `ManualClock::set`: "Moves the clock to `to`, if that is not in its past
/// (a clock never goes back)"; `advance`: "saturating at 2^64 - 1 ns".
#[test]
fn a_manual_clock_never_goes_back_and_saturates_at_the_end() {
    let clock = ManualClock::new();
    assert_eq!(clock.now(), Duration::ZERO);
    clock.advance(Duration::from_secs(5));
    clock.set(Duration::from_secs(3));
    assert_eq!(clock.now(), Duration::from_secs(5));
    clock.set(Duration::from_secs(7));
    assert_eq!(clock.now(), Duration::from_secs(7));
    clock.advance(Duration::MAX);
    assert_eq!(clock.now(), Duration::from_nanos(u64::MAX));
    clock.advance(Duration::from_secs(1));
    clock.set(Duration::MAX);
    assert_eq!(clock.now(), Duration::from_nanos(u64::MAX));
}
