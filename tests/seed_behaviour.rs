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
