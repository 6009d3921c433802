//! "Never" TTLs and the end of the clock's range: a TTL of 2^62 ns or more means never
//! and one nanosecond less is a real TTL; never-TTL entries survive snapshots and dump
//! replays, even more than 2^62 ns after the decision; a clock reading beyond the range
//! is its last instant, never an early time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::*;

use super::{NS, TTL};
use crate::support::events::stored_data;
use crate::support::index::{manual_index, score};

/// src/config.rs, `Builder::ttl`: "A TTL of 2^62 ns (about 146 years) or more ... means
/// **never**: approximate entries never expire (whatever the clock reads), no timers are
/// kept ... Shorter TTLs are real TTLs".
#[test]
fn a_ttl_of_two_to_the_62_ns_means_never_and_one_nanosecond_less_is_real() {
    let never = Duration::from_nanos(1 << 62);
    let (index, clock) = manual_index(1, never);
    index.process_routing_decision_for_request(&[1, 2], 0);
    assert_eq!(index.stats().pending_timers, 0, "no timers are kept");
    for at in [1u64 << 62, (1 << 62) + 1, u64::MAX - 1, u64::MAX] {
        clock.set(Duration::from_nanos(at));
        assert_eq!(score(&index, &[1, 2], 0), Some(2), "at {at} ns");
    }
    assert_eq!(index.sweep_expired(), 0);
    assert_eq!(index.stats().entries, 2);

    let real = Duration::from_nanos((1 << 62) - 1);
    let (index, clock) = manual_index(1, real);
    index.process_routing_decision_for_request(&[1, 2], 0);
    assert_eq!(index.stats().pending_timers, 1, "a real TTL keeps a timer");
    clock.set(real - NS);
    assert_eq!(score(&index, &[1, 2], 0), Some(2));
    clock.set(real);
    assert_eq!(score(&index, &[1, 2], 0), None, "expired a TTL after");
    assert_eq!(index.sweep_expired(), 2);
}

/// docs/design.md, Time: with a "never" TTL, "approximate claims still carry `now + 2^62`
/// (which ... gives snapshots a TTL left), but finds, dumps and snapshots read them at time
/// 0, so they are always live, and no timers are kept"; src/indexer.rs, `restore`:
/// "Afterwards the index answers every find as the snapshotted one did", and `dump_events`:
/// replaying "rebuilds the state". Here 100 years after the decision (less than 2^62 ns).
#[test]
fn never_ttl_entries_survive_snapshot_and_dump_replay() {
    let (index, clock) = manual_index(1, Duration::MAX);
    index.process_routing_decision_for_request(&[1, 2], 0);
    clock.set(Duration::from_secs(100 * 365 * 24 * 3600));
    check_never_round_trip(&index);
}

/// As `never_ttl_entries_survive_snapshot_and_dump_replay`, with the clock 300 years after
/// the decision (src/clock.rs, `Clock`: "every reading from zero to 2^64 - 1 ns ... is
/// exact"; config.rs, `ttl`: "approximate entries never expire (whatever the clock
/// reads)"), even more than 2^62 ns after the decision, when the claim's expiry lies before
/// the clock: the entries keep a TTL left of at least 1 ns, so `restore` and `apply_event`
/// put them back (with none left, both would take them as "nothing left" and drop them).
#[test]
fn never_ttl_entries_survive_snapshot_and_dump_replay_past_two_to_the_62_ns() {
    let (index, clock) = manual_index(1, Duration::MAX);
    index.process_routing_decision_for_request(&[1, 2], 0);
    clock.set(Duration::from_secs(300 * 365 * 24 * 3600));
    check_never_round_trip(&index);
}

/// `index` (never TTL) holds worker 0 on blocks [1, 2]: its dump and snapshot list them as
/// approximate entries with a TTL left, and both rebuild them in a fresh never-TTL index.
fn check_never_round_trip(index: &ApproxKvIndexer) {
    assert_eq!(score(index, &[1, 2], 0), Some(2));
    let dump = index.dump_events();
    assert_eq!(dump.len(), 2);
    let snap = index.snapshot();
    assert_eq!(snap.entries.len(), 2);
    assert!(snap.entries.iter().all(|e| !e.exact));

    let (restored, clock2) = manual_index(1, Duration::MAX);
    restored.restore(&snap).unwrap();
    let (replayed, clock3) = manual_index(1, Duration::MAX);
    for e in &dump {
        replayed.apply_event(e);
    }
    for (copy, clock) in [(&restored, &clock2), (&replayed, &clock3)] {
        assert_eq!(copy.stats().pending_timers, 0, "no timers are kept");
        assert_eq!(score(copy, &[1, 2], 0), Some(2), "{:?}", copy.stats());
        clock.set(Duration::from_nanos(u64::MAX));
        assert_eq!(score(copy, &[1, 2], 0), Some(2));
        assert_eq!(copy.sweep_expired(), 0);
    }
    for e in &dump {
        let left = stored_data(e).blocks[0].expires_in;
        assert!(left.is_some_and(|d| !d.is_zero()), "{left:?}");
    }
    assert!(
        snap.entries.iter().all(|e| !e.ttl_left.is_zero()),
        "{snap:?}"
    );
}

/// A clock that can read beyond the index's range (2^64 - 2 ns): `far_secs`, when set,
/// is the reading in whole seconds, else `nanos`.
#[derive(Default)]
struct FarClock {
    nanos: AtomicU64,
    far_secs: AtomicU64,
}

impl Clock for FarClock {
    fn now(&self) -> Duration {
        match self.far_secs.load(Ordering::SeqCst) {
            0 => Duration::from_nanos(self.nanos.load(Ordering::SeqCst)),
            secs => Duration::from_secs(secs),
        }
    }
}

/// src/clock.rs, `Clock`: "every reading from zero to 2^64 - 2 ns (about 584 years) is
/// exact, and a later reading ... is taken as 2^64 - 2 ns, the index's last instant, where
/// its time stops" (design.md, Time: "a `Clock` reading beyond ... is taken as the last
/// instant"). A reading far beyond the range must
/// not wrap around to an early time, where an expired entry would read as live.
#[test]
fn a_clock_reading_beyond_the_range_is_the_end_of_the_range() {
    let clock = Arc::new(FarClock::default());
    let build = |ttl| {
        ApproxKvIndexer::builder()
            .block_size(1)
            .ttl(ttl)
            .clock(clock.clone())
            .background_sweeper(false)
            .build()
            .unwrap()
    };
    let index = build(TTL);
    let never = build(Duration::MAX);
    clock
        .nanos
        .store(u64::MAX - 20_000_000_000, Ordering::SeqCst); // 20 s before the end
    index.process_routing_decision_for_request(&[1], 0);
    never.process_routing_decision_for_request(&[1], 0);
    clock
        .nanos
        .store(u64::MAX - 15_000_000_000, Ordering::SeqCst);
    assert_eq!(score(&index, &[1], 0), Some(1));
    // About 31,700 years: 10^21 ns, which modulo 2^64 would be about 3.9 * 10^18 ns
    // (124 years), before the entry's expiry.
    clock.far_secs.store(1_000_000_000_000, Ordering::SeqCst);
    assert_eq!(
        score(&index, &[1], 0),
        None,
        "the end of time is past its TTL"
    );
    assert_eq!(index.sweep_expired(), 1);
    assert_eq!(score(&never, &[1], 0), Some(1), "never means never");
    never.process_routing_decision_for_request(&[2], 0);
    assert_eq!(score(&never, &[2], 0), Some(1));
}
