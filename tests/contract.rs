//! Regressions for contract defects found by held-out testing (issue 9): each test is the
//! documented promise, in the smallest case that broke it.

mod support;

use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::*;

use support::index::{capped_on, tokens};

/// A manual-clock index (no background sweeper) with block size 1 and the given caps.
fn index_with(
    ttl: Duration,
    per_worker: Option<usize>,
    total: Option<usize>,
) -> (ApproxKvIndexer, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    (capped_on(&clock, ttl, per_worker, total), clock)
}

fn stored_event(worker: WorkerId, parent: Option<u64>, blocks: &[(u64, u64)]) -> RouterEvent {
    let blocks = blocks
        .iter()
        .map(|&(tokens_hash, block_hash)| KvCacheStoredBlockData {
            block_hash: SequenceHash(block_hash),
            tokens_hash: LocalBlockHash(tokens_hash),
            expires_in: None,
        });
    RouterEvent {
        worker_id: worker,
        event_id: 0,
        data: KvCacheEventData::Stored(KvCacheStoreData {
            parent_hash: parent.map(SequenceHash),
            blocks: blocks.collect(),
        }),
    }
}

fn removed_event(worker: WorkerId, hashes: &[u64]) -> RouterEvent {
    RouterEvent {
        worker_id: worker,
        event_id: 0,
        data: KvCacheEventData::Removed(KvCacheRemoveData {
            block_hashes: hashes.iter().map(|&h| SequenceHash(h)).collect(),
        }),
    }
}

/// Issue 9, item 4: replaying `dump_events()` through `apply_event` ignored each event's
/// TTL left, so replayed approximate entries never expired.
#[test]
fn replaying_a_dump_rebuilds_the_state_with_its_ttls() {
    let ttl = Duration::from_secs(10);
    let (original, clock) = index_with(ttl, None, None);
    original.process_routing_decision_for_request(&[1, 2, 3], 0);
    clock.advance(Duration::from_secs(4));
    original.process_routing_decision_for_request(&[1, 2, 7], 1);
    original.apply_event(&stored_event(2, None, &[(5, 5)]));
    let replayed = capped_on(&clock, ttl, None, None);
    for event in original.dump_events() {
        replayed.apply_event(&event);
    }
    assert_eq!(replayed.stats().rejected_events, 0);
    assert_eq!(replayed.dump_events(), original.dump_events());
    for at in [5, 6, 9, 10, 14, 100] {
        clock.set(Duration::from_secs(at));
        for query in [&[1, 2, 3][..], &[1, 2, 7], &[5]] {
            let (a, b) = (
                original.find_matches_for_request(query),
                replayed.find_matches_for_request(query),
            );
            assert_eq!(a.scores, b.scores, "at {at} s for {query:?}");
        }
    }
    assert_eq!(
        replayed.sweep_expired(),
        6,
        "the approximate entries expired"
    );
    assert_eq!(replayed.stats().entries, 1, "the exact entry stays");
}

/// Issue 9, item 9: engines publish their own block hashes; a find looks blocks up by this
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
