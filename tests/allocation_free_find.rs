//! The promise of `find_matches_into`: once a thread's `OverlapScores` has grown to the
//! workers that match, a find allocates nothing. Counted by a global allocator that counts
//! the calling thread's allocations (its own test binary, so no other test's threads count).

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use approx_kv_index::*;
use support::index::{manual_index, tokens};

struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to `System` unchanged; counting touches only a
// thread-local `Cell` with a const initialiser, which never allocates.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: forwarded with the caller's arguments.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

fn allocations_during(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

#[test]
fn a_warm_find_into_allocates_nothing() {
    let (index, _clock) = manual_index(4, Duration::from_secs(60));
    let prompt = tokens(0, 400); // 100 blocks

    // 200 workers holding prefixes of every length (both find paths' scans, the last-block
    // probe).
    for w in 0..200u64 {
        index.process_routing_decision_for_request(&prompt[..4 * (1 + w as usize % 100)], w);
    }
    let local = compute_block_hash_for_seq(&prompt, 4);
    let queries = [&local[..], &local[..1], &local[..37], &[]];
    let mut found = OverlapScores::default();
    for q in queries {
        index.find_matches_into(q, &mut found); // warm: maps and scratch grow here
    }
    for q in queries {
        let n = allocations_during(|| index.find_matches_into(q, &mut found));
        assert_eq!(
            n,
            0,
            "a warm find of {} blocks allocated {n} times",
            q.len()
        );
    }
    assert_eq!(found.scores.len(), 0);
    index.find_matches_into(&local[..37], &mut found);
    assert_eq!(found.scores.len(), 200);
    assert!(found
        .scores
        .iter()
        .all(|(&w, &s)| s as usize == (1 + w as usize % 100).min(37)));

    // The walk, for holder sets that need not be nested: any KV event switches finds to
    // it for good.
    let seq = compute_seq_hashes(&local);
    let stored = KvCacheStoreData {
        parent_hash: None,
        blocks: vec![KvCacheStoredBlockData {
            block_hash: seq[0],
            tokens_hash: local[0],
            expires_in: None,
        }],
    };
    index.apply_event(&RouterEvent {
        worker_id: 5_000,
        event_id: 0,
        data: KvCacheEventData::Stored(stored),
    });
    for q in queries {
        index.find_matches_into(q, &mut found);
    }
    for q in queries {
        let n = allocations_during(|| index.find_matches_into(q, &mut found));
        assert_eq!(
            n,
            0,
            "a warm walk of {} blocks allocated {n} times",
            q.len()
        );
    }
    // From tokens (hashed into a per-thread buffer), plain and salted.
    let salt = HashSalt::new(Some("adapter"), None);
    let token_queries = [&prompt[..], &prompt[..4], &prompt[..150], &[]];
    for t in token_queries {
        index.find_matches_for_request_into(t, &mut found);
        index.find_matches_for_request_salted_into(t, salt, &mut found);
    }
    for t in token_queries {
        let n = allocations_during(|| index.find_matches_for_request_into(t, &mut found));
        assert_eq!(
            n,
            0,
            "a warm find of {} tokens allocated {n} times",
            t.len()
        );
        let n =
            allocations_during(|| index.find_matches_for_request_salted_into(t, salt, &mut found));
        assert_eq!(n, 0, "a warm salted find of {} tokens allocated", t.len());
    }
    index.find_matches_for_request_into(&prompt[..150], &mut found);
    assert_eq!(found, index.find_matches_for_request(&prompt[..150]));
    assert_eq!(found.scores.len(), 201); // the 200 workers and worker 5,000 (block 0)
                                         // A fresh answer does allocate: the count is not vacuous.
    assert!(allocations_during(|| drop(index.find_matches(&local))) > 0);
}

/// The sequence-hash and callback forms: warm, they allocate nothing either (the callback
/// form not even the answer), and they report what `find_matches` reports.
#[test]
fn warm_finds_by_sequence_and_by_callback_allocate_nothing() {
    let (index, _clock) = manual_index(4, Duration::from_secs(60));
    let prompt = tokens(0, 400); // 100 blocks
    for w in 0..200u64 {
        index.process_routing_decision_for_request(&prompt[..4 * (1 + w as usize % 100)], w);
    }
    let local = compute_block_hash_for_seq(&prompt, 4);
    let seq = compute_seq_hashes(&local);
    let mut found = OverlapScores::default();
    let mut visited = 0u64;
    let mut count = |_: WorkerId, score: u32| visited += u64::from(score);
    for k in [100, 1, 37, 0] {
        index.find_matches_by_sequence_into(&seq[..k], &mut found);
        index.find_matches_by_sequence_with(&seq[..k], &mut count);
        index.find_matches_with(&local[..k], &mut count);
    }
    for k in [100, 1, 37, 0] {
        let n = allocations_during(|| index.find_matches_by_sequence_into(&seq[..k], &mut found));
        assert_eq!(
            n, 0,
            "a warm find of {k} sequence hashes allocated {n} times"
        );
        let n = allocations_during(|| index.find_matches_by_sequence_with(&seq[..k], &mut count));
        assert_eq!(
            n, 0,
            "a warm callback find of {k} blocks allocated {n} times"
        );
        let n = allocations_during(|| index.find_matches_with(&local[..k], &mut count));
        assert_eq!(
            n, 0,
            "a warm callback find of {k} local hashes allocated {n} times"
        );
    }
    // The same answer as an `OverlapScores`.
    let want = index.find_matches(&local[..37]).scores;
    let mut got = std::collections::HashMap::new();
    index.find_matches_by_sequence_with(&seq[..37], |w, s| assert!(got.insert(w, s).is_none()));
    assert_eq!(got.len(), 200);
    assert!(got.iter().all(|(w, s)| want.get(w) == Some(s)));
}

/// A callback may call the index: a nested find answers on its own, a record neither
/// blocks nor breaks the find that is running.
#[test]
fn a_callback_may_call_the_index() {
    let (index, _clock) = manual_index(4, Duration::from_secs(60));
    let prompt = tokens(0, 40); // 10 blocks
    for w in 0..8u64 {
        index.process_routing_decision_for_request(&prompt[..4 * (1 + w as usize)], w);
    }
    let local = compute_block_hash_for_seq(&prompt, 4);
    let mut seen = Vec::new();
    index.find_matches_with(&local, |w, score| {
        // A find inside a find (its scratch is taken: it uses a fresh one).
        assert_eq!(index.find_matches(&local).scores[&w], score);
        // A record inside a find, for a new worker and for this one.
        index.process_routing_decision_for_request(&prompt, 100 + w);
        index.process_routing_decision_for_request(&prompt, w);
        seen.push((w, score));
    });
    seen.sort_unstable();
    assert_eq!(seen, (0..8).map(|w| (w, w as u32 + 1)).collect::<Vec<_>>());
    let after = index.find_matches(&local);
    assert_eq!(after.scores.len(), 16);
    assert!(after.scores.values().all(|&s| s == 10));
}
