//! Finds: what a find reports (each worker's leading run of the query, not its total;
//! prefixes of a query; a thousand workers on one prefix, and 300 holding prefixes of
//! every length; a run answering like one node per block). `forms`: every find form agrees
//! with `find_matches`, the best worker, the finds counter, and a find that ends when a
//! claim it read is refreshed meanwhile. `long`: queries of local hashes longer than the
//! 32 blocks a find chains whole answer as their sequence hashes do, through nodes and
//! runs. `query`: the one find and the one record by
//! `Query`, every form of a prompt alike, every kind of sink, and Dynamo's names.

#[path = "../support/mod.rs"]
mod support;

mod forms;
mod long;
mod query;

use std::time::Duration;

use approx_kv_index::*;
use support::index::{manual_index, tokens};

const TTL: Duration = Duration::from_secs(10);
/// The block size of the seed's tests.
const BLOCK: u32 = 4;

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

/// From the seed's tests (Dynamo's actor-based indexer), on a manual clock instead of sleeps.
#[test]
fn basic_flow_no_match_then_match_then_expired() {
    let (index, clock) = manual_index(BLOCK, Duration::from_millis(200));
    let tokens = [1, 2, 3, 4];
    assert!(index.find_matches_for_request(&tokens).scores.is_empty());
    index.process_routing_decision_for_request(&tokens, 0);
    assert_eq!(
        index.find_matches_for_request(&tokens).scores.get(&0),
        Some(&1)
    );
    clock.advance(Duration::from_millis(250));
    assert!(index.find_matches_for_request(&tokens).scores.is_empty());
}

/// From the seed's tests (Dynamo's actor-based indexer), on a manual clock instead of sleeps.
#[test]
fn common_prefix_overlap() {
    let (index, _clock) = manual_index(BLOCK, Duration::from_secs(5));
    index.process_routing_decision_for_request(&[1, 2, 3, 4], 11);
    let found = index.find_matches_for_request(&[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(found.scores.get(&11), Some(&1));
}

/// From the seed's tests (Dynamo's actor-based indexer), on a manual clock instead of sleeps.
#[test]
fn multiple_workers_same_block() {
    let (index, _clock) = manual_index(BLOCK, Duration::from_secs(5));
    let tokens = [9, 8, 7, 6];
    index.process_routing_decision_for_request(&tokens, 21);
    index.process_routing_decision_for_request(&tokens, 22);
    let found = index.find_matches_for_request(&tokens);
    assert_eq!(found.scores.get(&21), Some(&1));
    assert_eq!(found.scores.get(&22), Some(&1));
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
