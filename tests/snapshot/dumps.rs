//! `dump_events`: every live (block, worker) pair once, parents first, with its TTL left;
//! replaying a dump through `apply_event` rebuilds the state, TTLs included.

use std::collections::HashSet;
use std::time::Duration;

use approx_kv_index::*;

use crate::support::events::stored_event;
use crate::support::index::{capped_on, index_with, manual_index};

const TTL: Duration = Duration::from_secs(10);

#[test]
fn dump_covers_every_live_pair_parents_first() {
    let (index, clock) = manual_index(2, TTL);
    index.process_routing_decision_for_request(&[1, 2, 3, 4, 5, 6], 1);
    index.process_routing_decision_for_request(&[1, 2, 7, 8], 2);
    clock.advance(Duration::from_secs(4));
    index.process_routing_decision_for_request(&[9, 9], 3);
    index.process_routing_decision_for_request(&[1, 2, 3, 4], 4);
    index.remove_worker(4);
    let events = index.dump_events();
    let mut pairs = HashSet::new();
    let mut seen_blocks: HashSet<(u64, SequenceHash)> = HashSet::new();
    for e in &events {
        let data = stored(e);
        let block = data.blocks[0];
        if let Some(parent) = data.parent_hash {
            assert!(
                seen_blocks.contains(&(e.worker_id, parent)),
                "parent dumped first"
            );
        }
        seen_blocks.insert((e.worker_id, block.block_hash));
        let expected_left = if e.worker_id == 3 {
            TTL
        } else {
            TTL - Duration::from_secs(4)
        };
        assert_eq!(block.expires_in, Some(expected_left));
        assert!(
            pairs.insert((e.worker_id, block.block_hash)),
            "no duplicates"
        );
    }
    let seq = |t: &[u32]| compute_seq_hashes(&compute_block_hash_for_seq(t, 2));
    let mut expected = HashSet::new();
    for (w, t) in [
        (1, vec![1, 2, 3, 4, 5, 6]),
        (2, vec![1, 2, 7, 8]),
        (3, vec![9, 9]),
    ] {
        expected.extend(seq(&t).into_iter().map(|s| (w, s)));
    }
    assert_eq!(pairs, expected);
    // Replaying the dump into a fresh index reproduces every find.
    let (copy, _c) = manual_index(2, TTL);
    for e in &events {
        let data = stored(e);
        let b = data.blocks[0];
        // Rebuild each block's chain from the dump: collect the path to the root.
        let mut path = vec![(b.tokens_hash, b.block_hash)];
        let mut parent = data.parent_hash;
        while let Some(p) = parent {
            let up = events
                .iter()
                .find_map(|x| {
                    let d = stored(x);
                    (x.worker_id == e.worker_id && d.blocks[0].block_hash == p)
                        .then(|| (d.blocks[0], d.parent_hash))
                })
                .expect("parent in dump");
            path.push((up.0.tokens_hash, up.0.block_hash));
            parent = up.1;
        }
        path.reverse();
        let (local, seqs): (Vec<_>, Vec<_>) = path.into_iter().unzip();
        copy.process_routing_decision(e.worker_id, &local, &seqs)
            .unwrap();
    }
    for q in [&[1u32, 2, 3, 4, 5, 6][..], &[1, 2, 7, 8], &[9, 9, 1, 2]] {
        assert_eq!(
            copy.find_matches_for_request(q).scores,
            index.find_matches_for_request(q).scores
        );
    }
}

/// The data of `e`, a `Stored` event (all a dump holds).
fn stored(e: &RouterEvent) -> &KvCacheStoreData {
    match &e.data {
        KvCacheEventData::Stored(data) => data,
        other => panic!("a dump holds only Stored events, got {other:?}"),
    }
}

/// Regression: replaying `dump_events()` through `apply_event` ignored each event's
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

/// A block first stored by another worker's engine below a parent nobody holds takes its
/// real position once a decision from the prompt's first block covers it: snapshots give
/// it its depth, dumps list it after its parent, and a replayed copy evicts it first.
#[test]
fn a_block_first_stored_below_an_unknown_parent_takes_its_position_from_a_decision() {
    let clock = std::sync::Arc::new(ManualClock::new());
    let prompt = [1, 2, 3, 4, 5, 6];
    let (local, seq) = crate::support::index::chain(&prompt, 1);
    let original = capped_on(&clock, TTL, Some(6), None);
    // Worker 2's engine stores the sixth block alone, named by this index's hashes.
    let sixth = crate::support::events::block(seq[5], local[5], None);
    original.apply_event(&crate::support::events::stored(
        2u64,
        Some(seq[4]),
        vec![sixth],
    ));
    original.record(1, Query::tokens(&prompt)).unwrap();
    let snapshot = original.snapshot();
    let depths: Vec<u32> = seq
        .iter()
        .map(|&s| {
            snapshot
                .entries
                .iter()
                .find(|e| e.worker_id == 1 && e.block == s)
                .unwrap()
                .depth
        })
        .collect();
    assert_eq!(depths, [0, 1, 2, 3, 4, 5]);
    let dump = original.dump_events();
    let at = |s: SequenceHash| {
        dump.iter()
            .position(|e| e.worker_id == 1 && stored(e).blocks[0].block_hash == s)
    };
    assert!(at(seq[4]) < at(seq[5]), "parents first");
    let replayed = capped_on(&clock, TTL, Some(6), None);
    for event in &dump {
        replayed.apply_event(event);
    }
    for index in [&original, &replayed] {
        index.record(1, Query::tokens(&[9])).unwrap(); // one over the cap: the deepest goes
        assert_eq!(index.find(Query::tokens(&prompt)).scores[&1], 5);
    }
}
