//! The seed's (Dynamo's actor-based indexer) seven tests, rewritten for a synchronous API:
//! no spinning, no sleeps; expiry is driven by a manual clock.

mod support;

use std::time::Duration;

use support::index::manual_index;

const BLOCK: u32 = 4;

#[test]
fn entries_expire_after_ttl() {
    let (index, clock) = manual_index(BLOCK, Duration::from_millis(50));
    for (i, tokens) in [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]
        .iter()
        .enumerate()
    {
        index.process_routing_decision_for_request(tokens, i as u64);
    }
    assert_eq!(index.stats().entries, 3);
    clock.advance(Duration::from_millis(70));
    assert_eq!(index.sweep_expired(), 3);
    assert_eq!(index.stats().entries, 0);
    assert_eq!(index.stats().nodes, 0);
}

#[test]
fn recording_again_resets_the_ttl() {
    let (index, clock) = manual_index(BLOCK, Duration::from_millis(50));
    let tokens = [42, 43, 44, 45];
    index.process_routing_decision_for_request(&tokens, 1);
    clock.advance(Duration::from_millis(25));
    index.process_routing_decision_for_request(&tokens, 1);
    clock.advance(Duration::from_millis(30)); // 55 ms: past the first expiry only
    assert_eq!(
        index.sweep_expired(),
        0,
        "expired prematurely despite the refresh"
    );
    assert_eq!(
        index.find_matches_for_request(&tokens).scores.get(&1),
        Some(&1)
    );
    clock.advance(Duration::from_millis(30)); // 85 ms: past the refreshed expiry
    assert!(index.find_matches_for_request(&tokens).scores.is_empty());
    assert_eq!(index.sweep_expired(), 1);
}

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
fn common_prefix_overlap() {
    let (index, _clock) = manual_index(BLOCK, Duration::from_secs(5));
    index.process_routing_decision_for_request(&[1, 2, 3, 4], 11);
    let found = index.find_matches_for_request(&[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(found.scores.get(&11), Some(&1));
}

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
