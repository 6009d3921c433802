//! Caps and entries that did not come from decisions: the global cap counts exact entries
//! and never evicts them; a restore enforces the caps, and a replayed dump evicts, in the
//! original order (least recently recorded first, deepest blocks first).

use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::*;

use crate::support::events::stored_ours;
use crate::support::index::{capped_on, score};

/// src/config.rs, `Builder::max_entries`: "Exact entries count toward the cap and are never
/// evicted, as with `max_blocks_per_worker`"; src/indexer.rs, `apply_event`: "exact entries
/// count toward the worker's (and the index's) capacity and push out least recently
/// recorded approximate decisions".
#[test]
fn the_global_cap_counts_exact_entries_and_never_evicts_them() {
    let clock = Arc::new(ManualClock::new());
    let index = capped_on(&clock, Duration::from_secs(60), None, Some(4));
    index.process_routing_decision_for_request(&[1, 2, 3], 1);
    clock.advance(Duration::from_millis(1));
    index.apply_event(&stored_ours(2, &[10, 11, 12], 1, None));
    assert_eq!(index.stats().entries, 4);
    assert_eq!(score(&index, &[1, 2, 3], 1), Some(1), "deepest blocks went");
    assert_eq!(score(&index, &[10, 11, 12], 2), Some(3));
    index.apply_event(&stored_ours(2, &[20, 21, 22], 1, None));
    assert_eq!(score(&index, &[1, 2, 3], 1), None);
    assert_eq!(score(&index, &[10, 11, 12], 2), Some(3));
    assert_eq!(score(&index, &[20, 21, 22], 2), Some(3));
    assert_eq!(
        index.stats().entries,
        6,
        "over the cap by exact entries only"
    );
    index.process_routing_decision_for_request(&[5], 3);
    assert_eq!(index.stats().entries, 6);
    assert_eq!(score(&index, &[10, 11, 12], 2), Some(3));
}

/// src/indexer.rs, `restore`: "Caps are enforced once everything is back", and restored
/// entries are evicted "least recently recorded first, deepest blocks first".
#[test]
fn restore_enforces_the_caps_in_the_original_order() {
    let clock = Arc::new(ManualClock::new());
    let original = capped_on(&clock, Duration::from_secs(60), None, None);
    original.process_routing_decision_for_request(&[1, 2, 3], 0);
    clock.advance(Duration::from_secs(1));
    original.process_routing_decision_for_request(&[7, 8, 9], 0);
    let snap = original.snapshot();
    assert_eq!(snap.entries.len(), 6);
    for (per_worker, total) in [(Some(4), None), (None, Some(4))] {
        let capped = capped_on(&clock, Duration::from_secs(60), per_worker, total);
        capped.restore(&snap).unwrap();
        assert_eq!(capped.stats().entries, 4, "{per_worker:?} {total:?}");
        assert_eq!(score(&capped, &[7, 8, 9], 0), Some(3));
        assert_eq!(score(&capped, &[1, 2, 3], 0), Some(1));
    }
}

/// src/config.rs, `Builder::max_blocks_per_worker`: "Restored and replayed entries count
/// too, and are evicted in their original order" (the replayed half: `dump_events`
/// through `apply_event`).
#[test]
fn replayed_dumps_evict_in_the_original_order() {
    let clock = Arc::new(ManualClock::new());
    let ttl = Duration::from_secs(60);
    let original = capped_on(&clock, ttl, Some(4), None);
    original.process_routing_decision_for_request(&[1, 2, 3], 0);
    clock.advance(Duration::from_secs(1));
    original.process_routing_decision_for_request(&[7], 0);
    let replayed = capped_on(&clock, ttl, Some(4), None);
    for e in original.dump_events() {
        replayed.apply_event(&e);
    }
    assert_eq!(replayed.stats().rejected_events, 0);
    clock.advance(Duration::from_secs(1));
    for index in [&original, &replayed] {
        index.process_routing_decision_for_request(&[20], 0);
        assert_eq!(
            score(index, &[1, 2, 3], 0),
            Some(2),
            "the oldest, deepest first"
        );
        index.process_routing_decision_for_request(&[21], 0);
        assert_eq!(score(index, &[1, 2, 3], 0), Some(1));
        assert_eq!(score(index, &[7], 0), Some(1));
        assert_eq!(index.stats().entries, 4);
    }
}

/// A restored claim later than the worker's claim on its block's parent (a snapshot taken
/// while callers ran, or a record racing the restore): the decision that gave the parent
/// its claim walks from the restored block, so its eviction stops there, and the restored
/// claim's eviction takes that block alone. The parent's path is logged at the parent's
/// expiry too, so that its eviction takes the parent. Before, the parent stayed in no
/// log, past every TTL (its decision's timer found the block below gone, and so did the
/// restored claim's).
#[test]
fn a_restored_claim_later_than_its_parents_leaves_the_parent_evictable() {
    let clock = Arc::new(ManualClock::new());
    let index = capped_on(&clock, Duration::from_secs(100), Some(4), None);
    let prompt = [1, 2];
    index.record(1, Query::tokens(&prompt)).unwrap();
    clock.advance(Duration::from_secs(10));
    let local = compute_block_hash_for_seq(&prompt, 1);
    let seq = compute_seq_hashes(&local);
    let snapshot = Snapshot {
        block_size: 1,
        entries: vec![SnapshotEntry {
            worker_id: 1,
            dp_rank: 0,
            block: seq[1],
            parent: seq[0],
            local: local[1],
            depth: 1,
            exact: false,
            ttl_left: Duration::from_secs(100),
        }],
        capacities: vec![],
    };
    index.restore(&snapshot).unwrap();
    assert_eq!(score(&index, &prompt, 1), Some(2));
    // Four newer decisions: the cap of 4 evicts both blocks of the prompt.
    for i in 0..4 {
        clock.advance(Duration::from_nanos(1));
        index.record(1, Query::tokens(&[10 + i])).unwrap();
    }
    assert_eq!(score(&index, &prompt, 1), None);
    assert_eq!(index.worker_entries(1), 4);
    clock.advance(Duration::from_secs(1000));
    index.sweep_expired();
    let stats = index.stats();
    assert_eq!((stats.entries, stats.nodes), (0, 0), "{stats:?}");
}
