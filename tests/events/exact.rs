//! Exact KV events alongside approximate routing decisions: `Stored` blocks have no TTL
//! and may continue a decision's chain; `Removed` ends both claims and frees the entry at
//! once; `Cleared` forgets one worker, exact entries included; events for unknown workers
//! are harmless (an unresolvable parent drops the event); an exact block below an expired
//! decision does not extend the leading run.

use std::time::Duration;

use approx_kv_index::*;

use super::TTL;
use crate::support::events;
use crate::support::index::{manual_index, tokens};

fn hashes(t: &[u32]) -> (Vec<LocalBlockHash>, Vec<SequenceHash>) {
    let local = compute_block_hash_for_seq(t, 2);
    let seq = compute_seq_hashes(&local);
    (local, seq)
}

fn stored(worker: WorkerId, parent: Option<SequenceHash>, t: &[u32], skip: usize) -> RouterEvent {
    let (local, seq) = hashes(t);
    let blocks = local.iter().zip(&seq).skip(skip);
    let blocks = blocks.map(|(&l, &s)| events::block(s, l, None)).collect();
    events::stored(worker, parent, blocks)
}

fn removed(worker: WorkerId, blocks: Vec<SequenceHash>) -> RouterEvent {
    RouterEvent {
        worker_id: worker,
        event_id: 0,
        data: KvCacheEventData::Removed(KvCacheRemoveData {
            block_hashes: blocks,
        }),
    }
}

#[test]
fn stored_blocks_have_no_ttl() {
    let (index, clock) = manual_index(2, TTL);
    index.apply_event(&stored(1, None, &tokens(0, 6), 0));
    clock.advance(TTL * 100);
    index.sweep_expired();
    assert_eq!(index.find_matches_for_request(&tokens(0, 6)).scores[&1], 3);
    assert_eq!(index.stats().entries, 3);
    let dump = index.dump_events();
    assert!(dump.iter().all(|e| match &e.data {
        KvCacheEventData::Stored(d) => d.blocks[0].expires_in.is_none(),
        _ => false,
    }));
}

#[test]
fn stored_chain_continues_an_approximate_prefix() {
    let (index, _clock) = manual_index(2, TTL);
    let t = tokens(0, 8);
    index.process_routing_decision_for_request(&t[..4], 1); // blocks 0,1 approximate
    let (_, seq) = hashes(&t);
    index.apply_event(&stored(1, Some(seq[1]), &t, 2)); // blocks 2,3 exact
    assert_eq!(index.find_matches_for_request(&t).scores[&1], 4);
}

#[test]
fn removed_event_ends_both_claims_and_memory_comes_back() {
    let (index, clock) = manual_index(2, TTL);
    let t = tokens(0, 6);
    let (_, seq) = hashes(&t);
    index.process_routing_decision_for_request(&t, 1); // approximate on 3 blocks
    index.apply_event(&stored(1, None, &t, 0)); // and exact on the same blocks
    index.apply_event(&removed(1, vec![seq[2]])); // the engine evicted the last block
    assert_eq!(index.find_matches_for_request(&t).scores[&1], 2);
    clock.advance(TTL * 2); // the approximate claims expire; the exact ones stay
    assert_eq!(index.find_matches_for_request(&t).scores[&1], 2);
    assert_eq!(
        index.stats().entries,
        2,
        "the removed entry is freed at once"
    );
    index.sweep_expired();
    assert_eq!(index.stats().entries, 2, "the exact entries stay");
    index.apply_event(&removed(1, vec![seq[0], seq[1]]));
    assert!(index.find_matches_for_request(&t).scores.is_empty());
    assert_eq!((index.stats().entries, index.stats().nodes), (0, 0));
}

#[test]
fn removed_event_on_an_approximate_entry_only() {
    let (index, clock) = manual_index(2, TTL);
    let t = tokens(0, 6);
    let (_, seq) = hashes(&t);
    index.process_routing_decision_for_request(&t, 1);
    index.apply_event(&removed(1, vec![seq[1]]));
    assert_eq!(index.find_matches_for_request(&t).scores[&1], 1);
    // A new decision for the same prompt revives the block.
    index.process_routing_decision_for_request(&t, 1);
    assert_eq!(index.find_matches_for_request(&t).scores[&1], 3);
    clock.advance(TTL);
    index.sweep_expired();
    assert_eq!(index.stats().entries, 0);
}

#[test]
fn cleared_forgets_one_worker_including_exact_entries() {
    let (index, clock) = manual_index(2, TTL);
    let t = tokens(0, 6);
    index.apply_event(&stored(1, None, &t, 0));
    index.apply_event(&stored(2, None, &t, 0));
    index.process_routing_decision_for_request(&t, 1);
    index.apply_event(&RouterEvent {
        worker_id: 1,
        event_id: 0,
        data: KvCacheEventData::Cleared,
    });
    let found = index.find_matches_for_request(&t);
    assert_eq!(found.scores.keys().copied().collect::<Vec<_>>(), vec![2]);
    index.sweep_expired(); // purges the dead slot's exact entries
    assert_eq!(index.stats().entries, 3);
    clock.advance(TTL);
    index.sweep_expired();
    assert_eq!(index.stats().entries, 3, "worker 2's exact entries stay");
}

#[test]
fn events_for_unknown_workers_are_harmless() {
    let (index, _clock) = manual_index(2, TTL);
    index.apply_event(&removed(42, vec![SequenceHash(1)]));
    index.apply_event(&RouterEvent {
        worker_id: 42,
        event_id: 0,
        data: KvCacheEventData::Cleared,
    });
    // A parent the worker does not hold, named by a hash that is not ours: the blocks
    // cannot be placed, so the event is dropped (and counted), as Dynamo drops it.
    index.apply_event(&stored(
        u64::MAX,
        Some(SequenceHash(12345)),
        &tokens(0, 4),
        0,
    ));
    let stats = index.stats();
    assert_eq!(
        (stats.entries, stats.workers, stats.rejected_events),
        (0, 0, 1)
    );
    index.apply_event(&stored(u64::MAX, None, &tokens(0, 4), 0));
    assert_eq!(index.stats().entries, 2);
    assert_eq!(index.stats().workers, 1);
}

/// A worker's exact entry below an approximate one outlives it: once the approximate claim
/// expires, the worker holds the blocks before and after it but not the one in the middle,
/// and its leading run stops there. (A find that took holding the last block for holding
/// every block before it would answer 3.)
#[test]
fn an_exact_block_below_an_expired_decision_does_not_extend_the_leading_run() {
    let (index, clock) = manual_index(2, TTL);
    let query = tokens(0, 6);
    let (_, seq) = hashes(&query);
    index.process_routing_decision_for_request(&query[..4], 1);
    // The first block becomes exact too; the third is stored exactly below the second.
    index.apply_event(&stored(1, None, &query[..2], 0));
    index.apply_event(&stored(1, Some(seq[1]), &query, 2));
    assert_eq!(index.find_matches_for_request(&query).scores[&1], 3);
    clock.advance(TTL * 2);
    assert_eq!(index.find_matches_for_request(&query).scores[&1], 1);
    assert_eq!(index.find_matches_by_sequence(&seq).scores[&1], 1);
    // Another worker's decisions afterwards change nothing for worker 1.
    index.process_routing_decision_for_request(&query, 2);
    let scores = index.find_matches_for_request(&query).scores;
    assert_eq!((scores[&1], scores[&2]), (1, 3));
}

/// Decisions and events in one tree: a report's loss drops the approximate claims older
/// than the lost block, and what an engine stored stays, exactly, until it says it
/// removed it; a `Cleared` then forgets the worker and fences its running requests.
#[test]
fn a_reported_loss_drops_decisions_and_keeps_what_events_stored() {
    let (index, clock) = manual_index(2, TTL);
    let stored_prompt = tokens(100, 8); // 4 blocks, recorded, then stored by the engine
    let decided = tokens(200, 8); // 4 blocks, recorded only
    index.record(1, Query::tokens(&stored_prompt)).unwrap();
    index.apply_event(&stored(1, None, &stored_prompt, 0));
    index.record(1, Query::tokens(&decided)).unwrap();
    clock.advance(Duration::from_micros(1));
    let asked = tokens(0, 8);
    index.record(1, Query::tokens(&asked)).unwrap();
    let request = index.begin_request(1, &asked);
    assert_eq!(request.predicted_blocks(), 4);
    // The engine had only the first block: the decisions used before it are gone.
    assert!(index.observe_cached(&request, 2));
    assert_eq!(index.find(Query::tokens(&decided)).scores.get(&1), None);
    let scores = index.find(Query::tokens(&stored_prompt)).scores;
    assert_eq!(
        scores[&1], 4,
        "stored exactly: only its approximate claim went"
    );
    // The exact entries outlive any TTL, and go when the engine removes them.
    clock.advance(TTL * 10);
    index.sweep_expired();
    assert_eq!(index.find(Query::tokens(&stored_prompt)).scores[&1], 4);
    let (_, seq) = hashes(&stored_prompt);
    index.apply_event(&removed(1, vec![seq[3]]));
    assert_eq!(index.find(Query::tokens(&stored_prompt)).scores[&1], 3);
    // A restart: everything of the worker goes, and its running request is fenced.
    index.apply_event(&RouterEvent {
        worker_id: 1,
        event_id: 0,
        data: KvCacheEventData::Cleared,
    });
    assert!(index.find(Query::tokens(&stored_prompt)).scores.is_empty());
    assert!(!index.observe_cached(&request, 8), "fenced by the Cleared");
    drop(request);
    assert!(index.find(Query::tokens(&asked)).scores.is_empty());
}
