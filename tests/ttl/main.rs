//! Expiry: an entry lives exactly one TTL from its last record or refresh, in every read;
//! a refresh of a prefix keeps only the prefix. `never`: a TTL of 2^62 ns or more means
//! never, also through snapshots and dump replays, and a clock reading beyond the index's
//! range. `clocks`: clocks past 2^63 ns and at the end of their range, `ManualClock`'s
//! rules. `reclaim`: who reclaims expired and removed entries, and when.

#[path = "../support/mod.rs"]
mod support;

mod clocks;
mod never;
mod reclaim;

use std::time::Duration;

use support::index::{chain, manual_index, score, tokens};

const TTL: Duration = Duration::from_secs(10);
const NS: Duration = Duration::from_nanos(1);
/// The block size of the seed's tests.
const BLOCK: u32 = 4;

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

/// From the seed's tests (Dynamo's actor-based indexer), on a manual clock instead of sleeps.
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

/// From the seed's tests (Dynamo's actor-based indexer), on a manual clock instead of sleeps.
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

/// src/indexer.rs, Guarantees: "An entry recorded or refreshed at time `t` is reported by
/// finds before `t + ttl` and never from `t + ttl` on", for every find form; and
/// `dump_events` ("Every live (block, worker) pair") and `snapshot` ("The live state";
/// design.md: "lists every live entry") leave out an entry that expired but is not yet
/// swept (`IndexStats::entries`: "expired ones included until swept").
#[test]
fn a_refreshed_entry_lives_exactly_one_ttl_from_its_refresh_in_every_read() {
    let (index, clock) = manual_index(2, TTL);
    let prompt = tokens(0, 4); // 2 blocks
    let (local, seq) = chain(&prompt, 2);
    index.process_routing_decision_for_request(&prompt, 1);
    let refreshed_at = Duration::from_secs(4);
    clock.set(refreshed_at);
    index.process_routing_decision_for_request(&prompt, 1);

    clock.set(refreshed_at + TTL - NS);
    assert_eq!(score(&index, &prompt, 1), Some(2));
    assert_eq!(index.find_matches_by_sequence(&seq).scores[&1], 2);
    let mut visited = Vec::new();
    index.find_matches_with(&local, |w, s| visited.push((w, s)));
    assert_eq!(visited, [(1, 2)]);
    assert_eq!(index.dump_events().len(), 2);
    let snap = index.snapshot();
    assert_eq!(snap.entries.len(), 2);
    assert!(snap.entries.iter().all(|e| e.ttl_left == NS), "{snap:?}");

    clock.set(refreshed_at + TTL);
    assert_eq!(score(&index, &prompt, 1), None);
    assert!(index.find_matches_by_sequence(&seq).scores.is_empty());
    index.find_matches_with(&local, |w, s| panic!("reported {w}: {s}"));
    assert!(
        index.dump_events().is_empty(),
        "expired entries are not live"
    );
    assert!(
        index.snapshot().entries.is_empty(),
        "expired entries are not live"
    );
    assert_eq!(index.stats().entries, 2, "not yet swept");
    assert_eq!(index.sweep_expired(), 2);
}
