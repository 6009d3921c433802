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

thread_local! {
    /// Set on a thread whose next clock reading panics.
    static PANIC_NEXT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A manual clock whose reading panics once on a thread that asked for it.
#[derive(Debug, Default)]
struct PanickingClock(ManualClock);

impl Clock for PanickingClock {
    fn now(&self) -> Duration {
        if PANIC_NEXT.with(|p| p.replace(false)) {
            panic!("the clock failed");
        }
        self.0.now()
    }
}

/// `ApproxKvIndexer`, "Unwind safety": "a `Clock` is read before a call changes anything,
/// so a clock that panics leaves the index as it was". Records, events and requests whose
/// clock reading panics begin no write, so a removal frees everything (capacity-only mode:
/// no TTL would), and a report whose reading panics is not counted.
#[test]
fn a_clock_that_panics_leaves_the_index_as_it_was() {
    let clock = std::sync::Arc::new(PanickingClock::default());
    let index = ApproxKvIndexer::builder()
        .block_size(1)
        .ttl(Duration::MAX)
        .clock(clock.clone())
        .background_sweeper(false)
        .build()
        .unwrap();
    let panics = |call: &dyn Fn()| {
        PANIC_NEXT.with(|p| p.set(true));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(call));
        PANIC_NEXT.with(|p| p.set(false));
        assert!(result.is_err(), "the call read the clock");
    };
    index.record(1, Query::tokens(&[1, 2, 3])).unwrap();
    let request = index.begin_request(1, &[1, 2, 3]);
    panics(&|| index.record(1, Query::tokens(&[7, 8, 9, 10])).unwrap());
    panics(&|| drop(index.begin_request(1, &[5, 6])));
    let stored = crate::support::events::stored_event(1, None, &[(40, 41)]);
    panics(&|| index.apply_event(&stored));
    panics(&|| {
        index.observe_cached(&request, 0);
    });
    assert_eq!(index.cache_reports().len(), 0, "the report was not counted");
    assert!(index.observe_cached(&request, 3), "nor marked taken");
    index.finish_request(request);
    assert_eq!(index.find(Query::tokens(&[1, 2, 3])).scores[&1], 3);
    index.remove_worker(1);
    index.sweep_expired();
    index.sweep_expired();
    assert_eq!((index.stats().entries, index.stats().nodes), (0, 0));
}
