//! Recording routing decisions and removing workers: from tokens and from precomputed
//! hashes, empty and partial input, hashes that are not a chain; removal, re-registration
//! and the reuse of a removed worker's slot; the builder's defaults; the counters and the
//! memory estimate of `stats()`. `worker_keys`: workers keyed by data-parallel rank.

#[path = "../support/mod.rs"]
mod support;

mod worker_keys;

use std::time::Duration;

use approx_kv_index::*;
use support::index::{index_with, manual_index, tokens};

const TTL: Duration = Duration::from_secs(10);
/// The block size of the seed's tests.
const BLOCK: u32 = 4;

#[test]
fn partial_and_empty_inputs() {
    let (index, _clock) = manual_index(4, TTL);
    index.process_routing_decision_for_request(&[], 1);
    index.process_routing_decision_for_request(&[1, 2, 3], 1); // no full block
    assert_eq!(index.stats().entries, 0);
    assert_eq!(
        index.stats().workers,
        0,
        "nothing recorded, nothing registered"
    );
    assert!(index.find_matches_for_request(&[]).scores.is_empty());
    index.process_routing_decision_for_request(&[1, 2, 3, 4, 5, 6], 1); // one full block
    assert_eq!(index.stats().entries, 1);
    assert_eq!(
        index.find_matches_for_request(&[1, 2, 3, 4, 0]).scores[&1],
        1
    );
    assert!(index.process_routing_decision(1, &[], &[]).is_ok());
}

#[test]
fn mismatched_hash_lengths_store_nothing() {
    let (index, _clock) = manual_index(4, TTL);
    let local = compute_block_hash_for_seq(&tokens(0, 8), 4);
    let seq = compute_seq_hashes(&local);
    let err = index
        .process_routing_decision(1, &local, &seq[..1])
        .unwrap_err();
    assert_eq!(err, RecordError::LengthMismatch { local: 2, seq: 1 });
    assert!(err.to_string().contains("2 local"));
    assert_eq!(index.stats().entries, 0);
    assert!(index.find_matches(&local).scores.is_empty());
}

#[test]
fn precomputed_hashes_and_tokens_agree() {
    let (index, _clock) = manual_index(4, TTL);
    let t = tokens(100, 16);
    let local = compute_block_hash_for_seq(&t, 4);
    index
        .process_routing_decision(3, &local, &compute_seq_hashes(&local))
        .unwrap();
    assert_eq!(index.find_matches_for_request(&t).scores[&3], 4);
    index.process_routing_decision_for_request(&t, 4);
    assert_eq!(index.find_matches(&local).scores[&4], 4);
    assert_eq!(
        index.stats().nodes,
        4,
        "both decisions share the same nodes"
    );
}

/// Found by the differential fuzz target: a decision whose sequence hashes are not the
/// chain of its local hashes (here they repeat, so its parent links formed a cycle) was
/// stored under those hashes; the walks of expiry and eviction, which follow parent links
/// from the decision's last block, could not reach all of its entries, so the global cap
/// stayed exceeded and the entries were never freed. Such a decision is now placed by the
/// chain of its local hashes (what finds look up), like any other.
#[test]
fn decisions_whose_sequence_hashes_are_not_a_chain_are_placed_by_the_chain() {
    let ttl = Duration::from_nanos(256);
    let (index, clock) = index_with(ttl, Some(8), Some(8));
    let local: Vec<LocalBlockHash> = [5, 7, 1, 5, 7, 0].map(LocalBlockHash).to_vec();
    let not_a_chain: Vec<SequenceHash> = [7, 7, 0, 7, 5, 5].map(SequenceHash).to_vec();
    index
        .process_routing_decision(1, &local, &not_a_chain)
        .unwrap();
    assert_eq!(index.find_matches(&local).scores[&1], 6);
    assert_eq!(index.stats().entries, 6);
    // Another worker's 8 blocks push all of worker 1's out under the global cap of 8.
    index.process_routing_decision_for_request(&tokens(100, 8), 2);
    assert_eq!(index.stats().entries, 8);
    assert!(index.find_matches(&local).scores.is_empty());
    clock.advance(ttl);
    index.sweep_expired();
    let stats = index.stats();
    assert_eq!(
        (stats.entries, stats.nodes, stats.pending_timers),
        (0, 0, 0)
    );
}

/// From the seed's tests (Dynamo's actor-based indexer), on a manual clock instead of sleeps.
#[test]
fn remove_worker_clears_its_entries() {
    let (index, _clock) = manual_index(BLOCK, Duration::from_secs(5));
    let tokens = [10, 11, 12, 13];
    index.process_routing_decision_for_request(&tokens, 7);
    assert!(index
        .find_matches_for_request(&tokens)
        .scores
        .contains_key(&7));
    index.remove_worker(7);
    assert!(!index
        .find_matches_for_request(&tokens)
        .scores
        .contains_key(&7));
}

/// From the seed's tests (Dynamo's actor-based indexer), on a manual clock instead of sleeps.
#[test]
fn remove_worker_preserves_other_workers() {
    let (index, _clock) = manual_index(BLOCK, Duration::from_secs(5));
    let tokens = [100, 101, 102, 103];
    index.process_routing_decision_for_request(&tokens, 30);
    index.process_routing_decision_for_request(&tokens, 31);
    index.remove_worker(30);
    let found = index.find_matches_for_request(&tokens);
    assert!(!found.scores.contains_key(&30));
    assert_eq!(found.scores.get(&31), Some(&1));
}

#[test]
fn remove_then_re_add_starts_fresh() {
    let (index, clock) = manual_index(4, TTL);
    index.process_routing_decision_for_request(&tokens(0, 16), 5);
    index.remove_worker(5);
    assert!(index
        .find_matches_for_request(&tokens(0, 16))
        .scores
        .is_empty());
    assert_eq!(index.stats().workers, 0);
    // Re-added with a shorter prompt: only what was recorded after the removal counts.
    index.process_routing_decision_for_request(&tokens(0, 4), 5);
    let found = index.find_matches_for_request(&tokens(0, 16));
    assert_eq!(found.scores[&5], 1);
    assert_eq!(
        found.tree_sizes[&5], 1,
        "old entries do not count for the new registration"
    );
    // The old entries are reclaimed by the sweeper in time.
    clock.advance(TTL);
    index.sweep_expired();
    assert_eq!(index.stats().entries, 0);
    assert_eq!(index.stats().nodes, 0);
}

#[test]
fn removed_worker_is_reclaimed_and_its_slot_reused_safely() {
    let (index, clock) = manual_index(4, TTL);
    for round in 0..50u64 {
        index.process_routing_decision_for_request(&tokens(0, 8), round);
        index.remove_worker(round);
        clock.advance(TTL);
        index.sweep_expired();
    }
    assert_eq!(index.stats().entries, 0);
    index.process_routing_decision_for_request(&tokens(0, 4), 999);
    let found = index.find_matches_for_request(&tokens(0, 8));
    assert_eq!(found.scores.keys().copied().collect::<Vec<_>>(), vec![999]);
    assert_eq!(found.scores[&999], 1);
}

#[test]
fn defaults_are_as_documented() {
    assert_eq!(DEFAULT_TTL, Duration::from_secs(120));
    assert_eq!(DEFAULT_TICK, Duration::from_millis(100));
    assert_eq!(
        ApproxKvIndexer::builder().build().unwrap().block_size(),
        DEFAULT_BLOCK_SIZE
    );
}

#[test]
fn stats_count_records_finds_and_expirations() {
    let (index, clock) = manual_index(4, TTL);
    index.process_routing_decision_for_request(&tokens(0, 8), 1);
    index.process_routing_decision_for_request(&tokens(0, 8), 2);
    index.find_matches_for_request(&tokens(0, 8));
    let s = index.stats();
    assert_eq!(
        (s.records, s.finds, s.entries, s.nodes, s.workers),
        (2, 1, 4, 2, 2)
    );
    assert_eq!(s.pending_timers, 2);
    clock.advance(TTL);
    index.sweep_expired();
    let s = index.stats();
    assert_eq!((s.expirations, s.entries, s.pending_timers), (4, 0, 0));
}

#[test]
fn estimated_bytes_grow_with_entries_within_a_plausible_range() {
    let (index, _clock) = manual_index(4, TTL);
    let empty = index.stats().estimated_bytes;
    for w in 0..10u64 {
        index.process_routing_decision_for_request(&tokens(w as u32 * 4_000, 4_000), w);
    }
    let stats = index.stats();
    assert_eq!(stats.entries, 10_000);
    // Each prompt's blocks are new, so each is one run: 16 bytes of hashes per block, a
    // head and a tail marker in the map (a node per block, 41 bytes or more, when runs are
    // split up).
    let per_entry = (stats.estimated_bytes - empty) / stats.entries;
    assert!(
        (16..400).contains(&per_entry),
        "{per_entry} bytes per entry"
    );
}
