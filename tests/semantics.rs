//! The contract of `ApproxKvIndexer`, one rule per test, on a manual clock.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use approx_kv_index::*;
use support::index::{manual_index, tokens};

const TTL: Duration = Duration::from_secs(10);

#[test]
fn ttl_boundary_is_exact_for_reads() {
    let (index, clock) = manual_index(4, TTL);
    index.process_routing_decision_for_request(&tokens(0, 8), 1);
    clock.advance(TTL - Duration::from_nanos(1));
    assert_eq!(index.find_matches_for_request(&tokens(0, 8)).scores[&1], 2);
    clock.advance(Duration::from_nanos(1)); // exactly t + ttl
    assert!(index
        .find_matches_for_request(&tokens(0, 8))
        .scores
        .is_empty());
}

#[test]
fn refresh_of_a_prefix_keeps_the_prefix_only() {
    let (index, clock) = manual_index(4, TTL);
    index.process_routing_decision_for_request(&tokens(0, 12), 1); // 3 blocks at t=0
    clock.advance(Duration::from_secs(6));
    index.process_routing_decision_for_request(&tokens(0, 4), 1); // block 1 refreshed at t=6
    clock.advance(Duration::from_secs(5)); // t=11: blocks 2,3 expired, block 1 live
    assert_eq!(index.find_matches_for_request(&tokens(0, 12)).scores[&1], 1);
    assert_eq!(index.sweep_expired(), 2);
    assert_eq!(index.stats().entries, 1);
    clock.advance(Duration::from_secs(5)); // t=16: all expired
    assert_eq!(index.sweep_expired(), 1);
    assert_eq!((index.stats().entries, index.stats().nodes), (0, 0));
}

#[test]
fn score_is_the_leading_run_not_the_total() {
    let (index, _clock) = manual_index(1, TTL);
    // Worker 1 holds blocks [a, b, c]; worker 2 holds [a, x] and, separately, the whole
    // of another prompt that shares nothing with the query.
    index.process_routing_decision_for_request(&[1, 2, 3], 1);
    index.process_routing_decision_for_request(&[1, 9], 2);
    index.process_routing_decision_for_request(&[5, 6, 7, 8], 2);
    let found = index.find_matches_for_request(&[1, 2, 3, 4]);
    assert_eq!(found.scores[&1], 3);
    assert_eq!(found.scores[&2], 1);
    assert_eq!(found.tree_sizes[&1], 3);
    assert_eq!(found.tree_sizes[&2], 6);
    // A query starting elsewhere matches no one, even if later blocks coincide.
    assert!(index.find_matches_for_request(&[7, 2, 3]).scores.is_empty());
}

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

#[test]
fn invalid_configuration_is_an_error() {
    let b = || ApproxKvIndexer::builder();
    assert_eq!(
        b().block_size(0).build().unwrap_err(),
        ConfigError::ZeroBlockSize
    );
    assert_eq!(
        b().tick(Duration::ZERO).build().unwrap_err(),
        ConfigError::ZeroTick
    );
    assert_eq!(
        b().ttl(Duration::ZERO).build().unwrap_err(),
        ConfigError::ZeroTtl
    );
    assert!(ApproxKvIndexer::new(0, TTL).is_err());
    assert!(b().ttl(Duration::MAX).tick(Duration::MAX).build().is_ok());
    assert!(!ConfigError::ZeroTick.to_string().is_empty());
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
fn a_thousand_workers_share_a_prefix() {
    let (index, _clock) = manual_index(4, TTL);
    let shared = tokens(0, 32); // 8 blocks
    for w in 0..1_000u64 {
        let mut prompt = shared.clone();
        prompt.extend(tokens(10_000 + w as u32 * 4, 4)); // one private block each
        index.process_routing_decision_for_request(&prompt, w);
    }
    let found = index.find_matches_for_request(&shared);
    assert_eq!(found.scores.len(), 1_000);
    assert!(found.scores.values().all(|&s| s == 8));
    assert!(found.tree_sizes.values().all(|&s| s == 9));
    let mut own = shared.clone();
    own.extend(tokens(10_000 + 7 * 4, 4));
    let found = index.find_matches_for_request(&own);
    assert_eq!(found.scores[&7], 9);
    assert_eq!(found.scores.values().filter(|&&s| s == 8).count(), 999);
    assert_eq!(index.stats().entries, 9_000);
    assert_eq!(index.stats().nodes, 8 + 1_000);
}

#[test]
fn many_workers_holding_prefixes_of_every_length_score_each_its_own() {
    // 300 workers (more than the 64 from which a find tries the last block first), worker
    // w holding the first 1 + w % 40 blocks of one 40-block prompt, recorded in ascending
    // and then descending worker order (appends in place, then inserts in the middle);
    // half of them recorded again later, so expiry removes the others.
    let (index, clock) = manual_index(4, TTL);
    let prompt = tokens(0, 160);
    let blocks = |w: u64| 1 + (w % 40) as usize;
    let order: Vec<u64> = (0..150).chain((150..300).rev()).collect();
    for &w in &order {
        index.process_routing_decision_for_request(&prompt[..4 * blocks(w)], w);
    }
    let mut found = OverlapScores::default();
    let local = compute_block_hash_for_seq(&prompt, 4);
    index.find_matches_into(&local, &mut found);
    assert_eq!(found.scores.len(), 300);
    for w in 0..300u64 {
        assert_eq!(found.scores[&w], blocks(w) as u32, "worker {w}");
        assert_eq!(found.tree_sizes[&w], blocks(w));
    }
    // Every worker whose prefix is whole: all of them on a query of one block, the
    // workers with 40 blocks on the whole prompt.
    index.find_matches_into(&local[..1], &mut found);
    assert!(found.scores.len() == 300 && found.scores.values().all(|&s| s == 1));
    clock.advance(TTL / 2);
    for w in (0..300u64).filter(|w| w % 2 == 0) {
        index.process_routing_decision_for_request(&prompt, w);
    }
    clock.advance(TTL / 2);
    index.sweep_expired();
    index.find_matches_into(&local, &mut found);
    assert_eq!(found.scores.len(), 150);
    assert!(found.scores.iter().all(|(w, &s)| w % 2 == 0 && s == 40));
    assert_eq!(found, index.find_matches(&local));
    assert_eq!(index.stats().entries, 150 * 40);
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

fn stored(e: &RouterEvent) -> &KvCacheStoreData {
    match &e.data {
        KvCacheEventData::Stored(data) => data,
        other => panic!("a dump holds only Stored events, got {other:?}"),
    }
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

/// A decision's new blocks are stored as one run (`docs/design.md`, "Runs"): nothing of it
/// shows. Every block is a node in `stats().nodes` and one `Stored` event in the dump; a
/// prompt ending inside it, one branching off it and a second worker on it get the scores
/// one node per block would give; each block keeps its own expiry; all of it is freed.
#[test]
fn runs_answer_count_and_expire_like_one_node_per_block() {
    let (index, clock) = manual_index(4, TTL);
    let prompt = tokens(0, 64); // 16 blocks, all new: one run
    index.process_routing_decision_for_request(&prompt, 1);
    let s = index.stats();
    assert_eq!((s.entries, s.nodes), (16, 16));
    assert_eq!(index.dump_events().len(), 16);
    assert_eq!(index.find_matches_for_request(&prompt).scores[&1], 16);
    assert_eq!(index.find_matches_for_request(&prompt[..30]).scores[&1], 7);
    let mut branch = prompt[..40].to_vec();
    branch.extend(tokens(1_000, 24));
    assert_eq!(index.find_matches_for_request(&branch).scores[&1], 10);
    clock.advance(TTL / 2);
    // A second worker on the first 6 blocks, and worker 1 refreshing only 8 of them.
    index.process_routing_decision_for_request(&prompt[..24], 2);
    index.process_routing_decision_for_request(&prompt[..32], 1);
    let s = index.stats();
    assert_eq!((s.entries, s.nodes), (22, 16));
    let found = index.find_matches_for_request(&prompt);
    assert_eq!((found.scores[&1], found.scores[&2]), (16, 6));
    // The blocks past the refresh expire with the first decision, the rest later.
    clock.advance(TTL / 2);
    let found = index.find_matches_for_request(&prompt);
    assert_eq!((found.scores[&1], found.scores[&2]), (8, 6));
    index.sweep_expired();
    assert_eq!(index.stats().entries, 14);
    clock.advance(TTL);
    index.sweep_expired();
    let s = index.stats();
    assert_eq!((s.entries, s.nodes), (0, 0));
}
