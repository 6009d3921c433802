//! Finds keep galloping over an engine's exact events while every worker's entries stay a
//! prefix of each prompt (`IndexStats::finds_gallop`), as an engine that stores chains below
//! blocks it stored and evicts leaves first keeps them; an event that may leave a gap turns
//! galloping off for good, and finds then stop at the gap.

use std::sync::Arc;

use approx_kv_index::*;

use super::TTL;
use crate::support::index::{manual_index, tokens};

/// Block size of these tests.
const BS: u32 = 2;

fn chain(t: &[u32]) -> (Vec<LocalBlockHash>, Vec<SequenceHash>) {
    let local = compute_block_hash_for_seq(t, BS);
    let seq = compute_seq_hashes(&local);
    (local, seq)
}

/// An exact `Stored` event of `worker` for the blocks `from..` of `t`, below block
/// `from - 1`.
fn stored(worker: WorkerId, t: &[u32], from: usize) -> RouterEvent {
    let (local, seq) = chain(t);
    let blocks = (from..seq.len()).map(|i| KvCacheStoredBlockData {
        block_hash: seq[i],
        tokens_hash: local[i],
        expires_in: None,
    });
    RouterEvent {
        worker_id: worker,
        event_id: 0,
        data: KvCacheEventData::Stored(KvCacheStoreData {
            parent_hash: from.checked_sub(1).map(|i| seq[i]),
            blocks: blocks.collect(),
        }),
    }
}

/// A `Removed` event of `worker` for the blocks `at` of `t`, in that order.
fn removed(worker: WorkerId, t: &[u32], at: impl IntoIterator<Item = usize>) -> RouterEvent {
    let seq = chain(t).1;
    RouterEvent {
        worker_id: worker,
        event_id: 0,
        data: KvCacheEventData::Removed(KvCacheRemoveData {
            block_hashes: at.into_iter().map(|i| seq[i]).collect(),
        }),
    }
}

fn score(index: &ApproxKvIndexer, t: &[u32], worker: WorkerId) -> u32 {
    index
        .find(Query::tokens(t))
        .scores
        .get(&worker)
        .copied()
        .unwrap_or(0)
}

#[test]
fn an_lru_engines_events_from_many_threads_keep_a_thousand_workers_galloping() {
    const WORKERS: u64 = 1024;
    let (index, _clock) = manual_index(BS, TTL);
    let index = Arc::new(index);
    // Each worker: a shared 8-block system prompt, then 4 blocks of its own, stored below
    // it; the odd ones then evict their own blocks, leaves first.
    let prompt = |w: u64| {
        let mut t = tokens(0, 16);
        t.extend(tokens(1000 + 8 * w as u32, 8));
        t
    };
    std::thread::scope(|s| {
        for part in 0..4u64 {
            let index = index.clone();
            s.spawn(move || {
                for w in (0..WORKERS).filter(|w| w % 4 == part) {
                    index.apply_event(&stored(w, &prompt(w)[..16], 0));
                    index.apply_event(&stored(w, &prompt(w), 8));
                    if w % 2 == 1 {
                        index.apply_event(&removed(w, &prompt(w), [11, 10]));
                        index.apply_event(&removed(w, &prompt(w), [9]));
                    }
                }
            });
        }
        let index = index.clone();
        s.spawn(move || {
            for w in 0..WORKERS {
                // Whatever the events have done so far: at most the whole prompt, and
                // at least the system prompt once both events are in.
                assert!(score(&index, &prompt(w), w) <= 12);
            }
        });
    });
    assert!(index.stats().finds_gallop);
    for w in 0..WORKERS {
        let want = if w % 2 == 1 { 9 } else { 12 };
        assert_eq!(score(&index, &prompt(w), w), want, "worker {w}");
    }
    let shared = index.find(Query::tokens(&tokens(0, 16)));
    assert_eq!(shared.scores.len(), WORKERS as usize);
    assert!(shared.scores.values().all(|&s| s == 8));
}

#[test]
fn a_block_removed_above_blocks_its_worker_still_stores_stops_galloping() {
    let (index, _clock) = manual_index(BS, TTL);
    let t = tokens(0, 8);
    index.apply_event(&stored(1, &t, 0));
    index.apply_event(&stored(2, &t, 0));
    index.apply_event(&removed(1, &t, [3]));
    assert!(index.stats().finds_gallop, "a leaf: no gap");
    index.apply_event(&removed(1, &t, [1]));
    assert!(!index.stats().finds_gallop);
    assert_eq!(score(&index, &t, 1), 1, "the find stops at the gap");
    assert_eq!(score(&index, &t, 2), 4);
}

#[test]
fn an_exact_block_below_one_held_only_by_a_decision_stops_galloping() {
    let (index, clock) = manual_index(BS, TTL);
    let t = tokens(0, 6);
    index.apply_event(&stored(1, &t[..2], 0));
    index.record(1, Query::tokens(&t[..4])).unwrap();
    // Block 2 below block 1, which the worker holds only until its decision expires.
    index.apply_event(&stored(1, &t, 2));
    assert!(!index.stats().finds_gallop);
    clock.advance(TTL * 2);
    assert_eq!(
        score(&index, &t, 1),
        1,
        "block 1 expired: a gap above block 2"
    );
}

#[test]
fn a_block_removed_while_a_decision_below_it_is_live_stops_galloping() {
    let t = tokens(0, 6);
    for expired in [false, true] {
        let (index, clock) = manual_index(BS, TTL);
        index.apply_event(&stored(1, &t[..2], 0));
        index.record(1, Query::tokens(&t)).unwrap();
        if expired {
            clock.advance(TTL * 2);
        }
        index.apply_event(&removed(1, &t, [0]));
        // Once the decision has expired, nothing below the block is live: no gap.
        assert_eq!(index.stats().finds_gallop, expired);
        assert_eq!(score(&index, &t, 1), 0);
    }
}

/// Whether every live entry's parent is held by the same worker, from a dump.
fn prefixes_only(index: &ApproxKvIndexer) -> bool {
    let held: std::collections::HashSet<(WorkerId, u64)> = index
        .dump_events()
        .iter()
        .filter_map(|e| match &e.data {
            KvCacheEventData::Stored(d) => Some((e.worker_id, d.blocks[0].block_hash.0)),
            _ => None,
        })
        .collect();
    index.dump_events().iter().all(|e| match &e.data {
        KvCacheEventData::Stored(d) => d
            .parent_hash
            .map_or(true, |p| held.contains(&(e.worker_id, p.0))),
        _ => true,
    })
}

#[test]
fn a_stored_chain_racing_the_removal_of_its_parent_always_sees_the_gap() {
    // One worker's engine stores blocks below block 1 on one thread while another thread
    // removes block 1. Either order leaves a gap (blocks 2 and 3 without block 1), and
    // either order sees it: the `Stored` finds its parent gone, or the `Removed` finds
    // exact children below it. Interleaved, both checks could pass (the `Stored` sees the
    // parent before the removal, the `Removed` sees no child before the store); each event
    // holds the slot's exact chains from its first look to its last change, so they are
    // not (releasing them before the `Stored`'s check fails this within a few rounds).
    let t = tokens(0, 8);
    for round in 0..500 {
        let (index, _clock) = manual_index(BS, TTL);
        index.apply_event(&stored(1, &t[..4], 0));
        let start = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                start.wait();
                index.apply_event(&stored(1, &t, 2));
            });
            s.spawn(|| {
                start.wait();
                index.apply_event(&removed(1, &t, [1]));
            });
        });
        assert!(!index.stats().finds_gallop, "round {round}");
        assert!(!prefixes_only(&index), "round {round}: the gap is there");
        assert_eq!(score(&index, &t, 1), 1, "round {round}");
    }
}
