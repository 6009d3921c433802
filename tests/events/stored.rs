//! What a `Stored` event's parent, block names and TTLs left mean: blocks stored under an
//! engine's hashes are found, resolved as parents and removed by those names; a TTL left
//! expires that long from now (at most the TTL); a parent must be held live by the worker
//! (or named by this index's hashes); an event whose names repeat is rejected and changes
//! nothing. `Cleared` of a `WorkerWithDpRank` forgets one rank.

use std::collections::HashSet;
use std::time::Duration;

use approx_kv_index::*;

use super::{NS, TTL};
use crate::support::events::{block, removed_event, stored, stored_event, stored_ours};
use crate::support::index::{chain, index_with, manual_index, ranked_index, score, tokens};

/// Regression: engines publish their own block hashes; a find looks blocks up by this
/// index's chain of tokens hashes. Stored blocks were filed under the engine's hashes, so
/// they were never found.
#[test]
fn blocks_stored_under_engine_hashes_are_found() {
    let (index, clock) = index_with(Duration::from_secs(60), None, None);
    let prompt = tokens(0, 6);
    let local = compute_block_hash_for_seq(&prompt, 1);
    // Engine hashes unrelated to ours, and different on the two workers.
    let engine = |w: u64, i: usize| 0xE000_0000 + 100 * w + i as u64;
    for w in [1u64, 2] {
        let first: Vec<_> = (0..3).map(|i| (local[i].0, engine(w, i))).collect();
        let second: Vec<_> = (3..6).map(|i| (local[i].0, engine(w, i))).collect();
        index.apply_event(&stored_event(w, None, &first));
        index.apply_event(&stored_event(w, Some(engine(w, 2)), &second));
    }
    let found = index.find_matches(&local);
    assert_eq!((found.scores[&1], found.scores[&2]), (6, 6));
    // A parent named by another worker's engine hash is unknown to this worker.
    index.apply_event(&stored_event(1, Some(engine(2, 5)), &[(local[0].0, 77)]));
    assert_eq!(index.stats().rejected_events, 1);
    // Removals by engine hash end the right block (and the name).
    index.apply_event(&removed_event(1, &[engine(1, 3)]));
    let found = index.find_matches(&local);
    assert_eq!((found.scores[&1], found.scores[&2]), (3, 6));
    index.apply_event(&removed_event(1, &[engine(1, 3)])); // already gone: no effect
    assert_eq!(index.stats().entries, 11);
    // Exact entries do not expire; removing the worker forgets its names too.
    clock.advance(Duration::from_secs(3600));
    index.remove_worker(1);
    index.sweep_expired();
    assert_eq!(index.stats().entries, 6);
    assert_eq!(index.find_matches(&local).scores[&2], 6);
}

/// src/indexer.rs, `apply_event`: "A block with `expires_in: Some(ttl_left)` (a dumped
/// approximate entry) gets an approximate claim expiring that long from now (at most the
/// TTL), as the original would."
#[test]
fn a_stored_ttl_left_expires_that_long_from_now_at_most_the_ttl() {
    let (index, clock) = manual_index(1, TTL);
    index.apply_event(&stored_ours(
        1,
        &[1, 2],
        1,
        Some(Duration::from_secs(1_000)),
    ));
    index.apply_event(&stored_ours(2, &[1, 2], 1, Some(Duration::from_secs(3))));
    clock.set(Duration::from_secs(3) - NS);
    assert_eq!(score(&index, &[1, 2], 1), Some(2));
    assert_eq!(score(&index, &[1, 2], 2), Some(2));
    clock.set(Duration::from_secs(3));
    assert_eq!(score(&index, &[1, 2], 2), None);
    clock.set(TTL - NS);
    assert_eq!(score(&index, &[1, 2], 1), Some(2));
    clock.set(TTL);
    assert_eq!(score(&index, &[1, 2], 1), None, "at most the TTL");
    assert_eq!(index.sweep_expired(), 4);
}

/// src/indexer.rs, `apply_event`: "The parent must be a block the worker stored (named by
/// its engine hash), or a block it holds live or that the event names by this index's
/// sequence hash ...; otherwise the event is dropped and counted in
/// `IndexStats::rejected_events`". Also src/scores.rs, `OverlapScores::scores`: "Workers
/// with none are absent" (a worker holding a later block but not the first).
#[test]
fn a_stored_parent_must_be_held_live_by_the_worker() {
    let (index, clock) = manual_index(1, TTL);
    let (local, seq) = chain(&[1, 2, 3, 4], 1);
    index.process_routing_decision_for_request(&[1, 2], 1);
    // Blocks named by an engine's hashes, under parent seq[1].
    let engine_child = |worker: u64, name: u64, i: usize| {
        stored(
            worker,
            Some(seq[1]),
            vec![block(SequenceHash(name), local[i], None)],
        )
    };
    index.apply_event(&engine_child(1, 0xE1, 2)); // held live: accepted
    assert_eq!(index.stats().rejected_events, 0);
    assert_eq!(score(&index, &[1, 2, 3], 1), Some(3));
    index.apply_event(&engine_child(2, 0xE2, 2)); // another worker's block: dropped
    assert_eq!(index.stats().rejected_events, 1);
    assert_eq!(score(&index, &[1, 2, 3], 2), None);

    clock.advance(TTL); // worker 1's claim on the parent expired (not yet swept)
    index.apply_event(&engine_child(1, 0xE4, 3));
    assert_eq!(
        index.stats().rejected_events,
        2,
        "an expired parent is not held"
    );

    // Named by this index's own hashes, the event is placed without its parent: worker 3
    // then holds the third block and not the first, so no find reports it.
    index.apply_event(&stored(
        3,
        Some(seq[1]),
        vec![block(seq[2], local[2], None)],
    ));
    assert_eq!(index.stats().rejected_events, 2);
    let found = index.find_matches(&local);
    assert!(!found.scores.contains_key(&3), "{found:?}");
    assert!(!found.tree_sizes.contains_key(&3));
    index.find_matches_with(&local, |w, _| assert_ne!(w, 3));
    assert_eq!(index.find_matches(&local[2..3]).scores.get(&3), None);
}

/// src/indexer.rs, `apply_event`: "So is an event that names two of its blocks alike (by
/// `block_hash`) or a block as its own parent: it changes nothing." The case: a
/// worker stored `[1]` under name 100; a store with parent 100 whose first block is also
/// named 100 (then 200) once rebound the name, so the worker held `[1]`, `[1, 1]` and
/// `[1, 1, 2]`, and a later `Removed(100)` removed `[1, 1]` instead of `[1]`.
#[test]
fn a_stored_event_whose_names_repeat_is_rejected_and_changes_nothing() {
    let (index, _clock) = manual_index(1, TTL);
    let local = |tokens: &[u32]| compute_block_hash_for_seq(tokens, 1);
    let named = |name: u64, token: u32| block(SequenceHash(name), local(&[token])[0], None);
    index.apply_event(&stored(7, None, vec![named(100, 1)]));
    assert_eq!(score(&index, &[1, 1, 2], 7), Some(1));
    let before = index.dump_events();
    let entries = index.stats().entries;

    let malformed = [
        // The first block named as its parent.
        stored(
            7,
            Some(SequenceHash(100)),
            vec![named(100, 1), named(200, 2)],
        ),
        // A later block named as the parent.
        stored(
            7,
            Some(SequenceHash(100)),
            vec![named(300, 1), named(100, 2)],
        ),
        // Two blocks named alike, with and without a parent.
        stored(
            7,
            Some(SequenceHash(100)),
            vec![named(300, 1), named(300, 2)],
        ),
        stored(7, None, vec![named(400, 5), named(500, 6), named(400, 7)]),
    ];
    for (k, event) in malformed.iter().enumerate() {
        index.apply_event(event);
        assert_eq!(index.stats().rejected_events, k as u64 + 1, "{event:?}");
        assert_eq!(index.stats().entries, entries, "{event:?}");
        assert_eq!(index.dump_events(), before, "{event:?}");
    }
    assert_eq!(score(&index, &[1, 1, 2], 7), Some(1));
    assert_eq!(score(&index, &[5, 6, 7], 7), None);

    // The name still means `[1]`: its removal removes that block.
    index.apply_event(&RouterEvent {
        worker_id: 7,
        event_id: 0,
        data: KvCacheEventData::Removed(KvCacheRemoveData {
            block_hashes: vec![SequenceHash(100)],
        }),
    });
    assert_eq!(score(&index, &[1], 7), None);
    assert_eq!(index.stats().entries, 0);
    // A well-formed store with distinct names is accepted.
    index.apply_event(&stored(7, None, vec![named(100, 1), named(200, 2)]));
    assert_eq!(score(&index, &[1, 2], 7), Some(2));
    assert_eq!(index.stats().rejected_events, malformed.len() as u64);
}

/// src/indexer.rs, `apply_event`: "`Cleared` forgets that key: for `WorkerWithDpRank` one
/// rank (like `remove_worker_key`)".
#[test]
fn cleared_forgets_one_rank_and_keeps_the_others() {
    let (index, _c) = ranked_index(2, TTL);
    let r = WorkerWithDpRank::new;
    for key in [r(7, 0), r(7, 1), r(8, 1)] {
        index.process_routing_decision_for_request(&[1, 2], key);
    }
    index.apply_event(&RouterEvent {
        worker_id: r(7, 1),
        event_id: 0,
        data: KvCacheEventData::Cleared,
    });
    let found = index.find_matches_for_request(&[1, 2]);
    let keys: HashSet<_> = found.scores.keys().copied().collect();
    assert_eq!(keys, HashSet::from([r(7, 0), r(8, 1)]));
    assert_eq!(index.stats().workers, 2);
}
