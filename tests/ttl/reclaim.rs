//! Reclamation: who reclaims expired and removed entries, and when. Without a background
//! sweeper (or after `shutdown`) only `sweep_expired` does; with one, recording callers help
//! when it falls behind; a removed worker's entries go at the next sweep, whatever their TTL
//! left, and leave a shared holder array at its next copy; pending timers; exact entries in
//! the middle of a decision.

use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::*;

use super::TTL;
use crate::support::events::{block, stored, stored_data, stored_ours};
use crate::support::index::{chain, manual_index};

/// An index of one-token blocks with a 1 s TTL and a 10 ms tick on a manual clock, with or
/// without a background sweeper.
fn one_second_ttl(background: bool) -> (ApproxKvIndexer, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let index = ApproxKvIndexer::builder()
        .block_size(1)
        .ttl(Duration::from_secs(1))
        .tick(Duration::from_millis(10))
        .clock(clock.clone())
        .background_sweeper(background)
        .build()
        .unwrap();
    (index, clock)
}

/// src/config.rs, `Builder::background_sweeper`: "Without it, memory is reclaimed only by
/// calls to `sweep_expired`"; design.md: "Callers help only when a background sweeper runs
/// (with `background_sweeper(false)`, reclamation stays with `sweep_expired`)".
#[test]
fn without_a_background_sweeper_recording_callers_reclaim_nothing() {
    let (index, clock) = one_second_ttl(false);
    for p in 0..100u32 {
        index.process_routing_decision_for_request(&[p, 1, 2, 3], 0);
    }
    clock.advance(Duration::from_secs(2)); // all due, 200 ticks after any sweep
    for p in 0..100u32 {
        index.process_routing_decision_for_request(&[1_000 + p, 1, 2, 3], 0);
    }
    let stats = index.stats();
    assert_eq!(
        (stats.entries, stats.expirations, stats.caller_expirations),
        (800, 0, 0),
        "{stats:?}"
    );
    assert_eq!(index.sweep_expired(), 400);
    assert_eq!(index.stats().entries, 400);
}

/// src/indexer.rs, `shutdown`: "The index keeps answering and recording afterwards; only
/// reclamation stops (call `sweep_expired` to reclaim by hand)"; src/stats.rs,
/// `caller_expirations`: "Callers only help when a background sweeper runs".
#[test]
fn after_shutdown_recording_callers_reclaim_nothing() {
    let (index, clock) = one_second_ttl(true);
    index.shutdown(); // no background sweeper runs from here on
    for p in 0..100u32 {
        index.process_routing_decision_for_request(&[p, 1, 2, 3], 0);
    }
    clock.advance(Duration::from_secs(2));
    for p in 0..100u32 {
        index.process_routing_decision_for_request(&[1_000 + p, 1, 2, 3], 0);
    }
    let stats = index.stats();
    assert_eq!(
        (stats.entries, stats.caller_expirations),
        (800, 0),
        "{stats:?}"
    );
    assert_eq!(index.sweep_expired(), 400, "reclaimed by hand");
}

/// Regression: when the sweeper falls behind, recording callers reclaim due entries
/// themselves without waiting (`core::sweep` has the deterministic unit test,
/// `benches/soak.rs` measures the plateau under overload). Here the manual clock leaps far
/// past the sweeper's last sweep; whoever reclaims, memory comes back with no
/// `sweep_expired`.
#[test]
fn memory_comes_back_without_sweep_expired() {
    let clock = Arc::new(ManualClock::new());
    let index = ApproxKvIndexer::builder()
        .block_size(1)
        .ttl(Duration::from_secs(1))
        .tick(Duration::from_millis(10))
        .clock(clock.clone())
        .build()
        .unwrap();
    for p in 0..100u32 {
        index.process_routing_decision_for_request(&[p, 1, 2, 3], 0);
    }
    assert_eq!(index.stats().entries, 400);
    clock.advance(Duration::from_secs(2)); // all due, hundreds of ticks behind
    for p in 0..100u32 {
        index.process_routing_decision_for_request(&[1_000 + p, 1, 2, 3], 0);
    }
    index.shutdown(); // waits for a sweep in progress, so the counts are final

    // The recorders reclaimed (or the sweeper did, if it woke meanwhile).
    let stats = index.stats();
    assert_eq!(stats.entries, 400, "{stats:?}");
    assert_eq!(stats.expirations, 400, "{stats:?}");
}

/// src/stats.rs, `IndexStats::expirations`: "(block, worker) pairs reclaimed by the sweeper
/// since creation (expired or removed)"; src/indexer/workers.rs, `remove_worker`: "the next sweep
/// (the sweeper's next tick) frees its entries".
#[test]
fn entries_of_removed_workers_are_reclaimed_and_counted_as_expirations() {
    let (index, clock) = manual_index(1, TTL);
    index.process_routing_decision_for_request(&[1, 2, 3], 1);
    index.apply_event(&stored_ours(2, &[10, 11], 1, None)); // exact: no timer
    index.remove_worker(1);
    index.remove_worker(2);
    assert_eq!(index.stats().entries, 5);
    let mut freed = index.sweep_expired();
    clock.advance(TTL);
    freed += index.sweep_expired();
    let stats = index.stats();
    assert_eq!(freed, 5);
    assert_eq!(
        (stats.entries, stats.nodes, stats.expirations),
        (0, 0, 5),
        "{stats:?}"
    );
}

/// src/indexer/workers.rs, `remove_worker`: "the next sweep (the sweeper's next tick) frees its
/// entries, whatever their TTL left". A removed worker's decisions of different ages,
/// some of them refreshed, are all freed by the first sweep after the removal, not each at
/// its own TTL; the timers left behind free nothing more; `stats().nodes` stays the number
/// of distinct prefixes throughout, also once another worker's prompt continues through
/// them.
#[test]
fn a_removed_workers_decisions_are_freed_by_the_next_sweep() {
    let (index, clock) = manual_index(1, TTL);
    index.process_routing_decision_for_request(&[1, 2], 1);
    clock.advance(TTL / 2);
    index.process_routing_decision_for_request(&[1, 3], 1); // refreshes block [1]
    index.process_routing_decision_for_request(&[1, 3, 4], 2);
    index.remove_worker(1);
    assert_eq!(index.stats().entries, 6);
    assert_eq!(index.sweep_expired(), 3, "worker 1's three entries");
    let stats = index.stats();
    assert_eq!(
        (stats.entries, stats.nodes),
        (3, 3),
        "worker 2's: {stats:?}"
    );
    assert_eq!(index.find_matches_for_request(&[1, 3, 4]).scores[&2], 3);
    // Worker 1's timers come due and find nothing left; worker 2's own TTL ends later.
    clock.advance(TTL / 2);
    assert_eq!(index.sweep_expired(), 0);
    clock.advance(TTL / 2);
    assert_eq!(index.sweep_expired(), 3, "worker 2's, at its TTL");
    assert_eq!(index.stats().nodes, 0);
}

/// src/stats.rs, `IndexStats::pending_timers`: "one per recorded decision not yet swept,
/// and one per restored or replayed approximate claim" (and none for exact entries:
/// design.md, "entries with no approximate claim have no timer").
#[test]
fn pending_timers_count_decisions_and_restored_or_replayed_claims() {
    let (original, _c) = manual_index(1, TTL);
    original.process_routing_decision_for_request(&[1, 2, 3], 1);
    original.process_routing_decision_for_request(&[1, 2], 2);
    original.apply_event(&stored_ours(3, &[7], 1, None));
    assert_eq!(original.stats().pending_timers, 2, "one per decision");

    let (restored, clock) = manual_index(1, TTL);
    restored.restore(&original.snapshot()).unwrap();
    assert_eq!(
        restored.stats().pending_timers,
        5,
        "one per approximate claim"
    );

    let (replayed, clock2) = manual_index(1, TTL);
    for e in original.dump_events() {
        replayed.apply_event(&e);
    }
    assert_eq!(replayed.stats().rejected_events, 0);
    assert_eq!(
        replayed.stats().pending_timers,
        5,
        "one per approximate claim"
    );

    for (index, clock) in [(&restored, &clock), (&replayed, &clock2)] {
        clock.advance(TTL);
        assert_eq!(index.sweep_expired(), 5);
        let stats = index.stats();
        assert_eq!((stats.pending_timers, stats.entries), (0, 1), "{stats:?}");
    }
}

/// docs/design.md, One timer per decision: "**Exact bits do not stop walks.** A walk
/// compares only the approximate claim; when it ends the approximate claim of an exact
/// entry it keeps the entry and goes on."
#[test]
fn an_exact_entry_in_the_middle_of_a_decision_does_not_stop_its_expiry() {
    let (index, clock) = manual_index(1, TTL);
    let (local, seq) = chain(&[1, 2, 3], 1);
    index.process_routing_decision_for_request(&[1, 2, 3], 1);
    // The engine reports the middle block: exact as well as approximate.
    index.apply_event(&stored(
        1,
        Some(seq[0]),
        vec![block(seq[1], local[1], None)],
    ));
    assert_eq!(index.stats().entries, 3);
    clock.advance(TTL);
    assert_eq!(index.sweep_expired(), 2, "the first and last blocks");
    assert_eq!(index.stats().entries, 1, "the exact entry stays");
    let dump = index.dump_events();
    assert_eq!(dump.len(), 1);
    let kept = stored_data(&dump[0]).blocks[0];
    assert_eq!((kept.block_hash, kept.expires_in), (seq[1], None));
}

/// src/indexer/workers.rs, `remove_worker`: "the holders of removed workers never pile up on
/// shared blocks under churn"; design.md, "Holder arrays": a copy of a holder array leaves
/// the removed workers' holders out. Six of eight workers sharing a prompt are removed;
/// forty new workers join it with no sweep: the first copy of the shared run's array (a
/// growth) drops the six, and their entries are uncounted at once.
#[test]
fn removed_workers_holders_leave_a_shared_array_at_its_next_copy() {
    let (index, _clock) = manual_index(1, TTL);
    let prompt = [1, 2];
    for w in 0..8 {
        index.process_routing_decision_for_request(&prompt, w);
    }
    for w in 0..6 {
        index.remove_worker(w);
    }
    assert_eq!(index.stats().entries, 16, "not swept: still counted");
    for w in 100..140 {
        index.process_routing_decision_for_request(&prompt, w);
    }
    assert_eq!(index.stats().entries, 2 * 42, "the six dropped by a copy");
    let found = index.find_matches_for_request(&prompt);
    assert_eq!(found.scores.len(), 42);
    assert!((0..6).all(|w| !found.scores.contains_key(&w)));
    assert!(found.scores.values().all(|&s| s == 2));
    assert_eq!(index.sweep_expired(), 0, "nothing left for the purge");
    assert_eq!(index.stats().entries, 2 * 42);
}
