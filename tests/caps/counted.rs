//! What counts toward the caps: the entries of any number of workers under the global cap;
//! exact entries, which push out approximate decisions; not the blocks a `Removed` event
//! ended in capacity-only mode; and a restored index evicting in the original order.

use std::time::Duration;

use approx_kv_index::*;

use crate::support::events::{removed_event, stored_event};
// These tests read a score of 0 for a worker that has none.
use crate::support::index::{capped_on, index_with, score_or_zero as score, tokens};

/// Regression: the global cap held only while a rotating sample of 8 workers had
/// something to evict: past 8 workers entries grew without bound.
#[test]
fn global_cap_holds_for_any_number_of_workers() {
    let (index, _) = index_with(Duration::from_secs(60), None, Some(1));
    for w in 0..=8u32 {
        index.process_routing_decision_for_request(&[w], u64::from(w));
    }
    for t in 100..103 {
        index.process_routing_decision_for_request(&[t], 42);
        assert_eq!(index.stats().entries, 1);
        assert_eq!(score(&index, &[t], 42), 1, "the newest decision stays");
    }

    for workers in [200u64, 10_000] {
        let (index, _) = index_with(Duration::from_secs(60), None, Some(64));
        for w in 0..workers {
            index.process_routing_decision_for_request(&[w as u32], w);
            assert!(index.stats().entries <= 64);
        }
        for p in 0..50u32 {
            let prompt: Vec<u32> = (0..8).map(|i| 1_000_000 + 8 * p + i).collect();
            index.process_routing_decision_for_request(&prompt, 7);
            assert!(index.stats().entries <= 64, "{:?}", index.stats());
            assert_eq!(score(&index, &prompt, 7), 8);
        }
    }
}

/// Regression: `Stored` events bypassed the caps: exact entries now count toward the
/// worker's capacity and push out its least recently recorded approximate decisions.
#[test]
fn stored_events_count_toward_the_caps() {
    let (index, clock) = index_with(Duration::from_secs(60), Some(6), None);
    index.process_routing_decision_for_request(&[1, 2, 3], 0);
    clock.advance(Duration::from_millis(1));
    index.process_routing_decision_for_request(&[4, 5, 6], 0);
    let local = compute_block_hash_for_seq(&[7, 8, 9], 1);
    let seq = compute_seq_hashes(&local);
    let blocks: Vec<_> = local.iter().zip(&seq).map(|(l, s)| (l.0, s.0)).collect();
    index.apply_event(&stored_event(0, None, &blocks));
    assert_eq!(index.stats().entries, 6);
    assert_eq!(score(&index, &[1, 2, 3], 0), 0, "the oldest decision went");
    assert_eq!(score(&index, &[4, 5, 6], 0), 3);
    assert_eq!(score(&index, &[7, 8, 9], 0), 3);
    // Exact entries are never evicted: a worker whose engine stores more than the cap
    // holds what the engine says, and nothing approximate.
    let local = compute_block_hash_for_seq(&tokens(20, 8), 1);
    let seq = compute_seq_hashes(&local);
    let blocks: Vec<_> = local.iter().zip(&seq).map(|(l, s)| (l.0, s.0)).collect();
    index.apply_event(&stored_event(0, None, &blocks));
    assert_eq!(score(&index, &tokens(20, 8), 0), 8);
    assert_eq!(score(&index, &[4, 5, 6], 0), 0);
    assert_eq!(index.stats().entries, 11);
}

/// Regression: in capacity-only mode, blocks ended by a `Removed` event kept counting
/// against the cap (they waited for a timer that never exists), so live blocks were
/// evicted.
#[test]
fn removed_blocks_stop_counting_at_once_in_capacity_only_mode() {
    let (index, _) = index_with(Duration::MAX, Some(4), None);
    index.process_routing_decision_for_request(&[1, 2], 0);
    index.process_routing_decision_for_request(&[3, 4], 0);
    let seq = compute_seq_hashes(&compute_block_hash_for_seq(&[3, 4], 1));
    index.apply_event(&removed_event(0, &[seq[0].0, seq[1].0]));
    assert_eq!(index.stats().entries, 2, "freed when the event is applied");
    index.sweep_expired();
    index.process_routing_decision_for_request(&[5, 6], 0);
    assert_eq!(
        score(&index, &[1, 2], 0),
        2,
        "the worker holds only 4 blocks"
    );
    assert_eq!(score(&index, &[5, 6], 0), 2);
    assert_eq!(index.stats().entries, 4);
}

/// Regression: a restored index evicted first blocks (restored in parents-first order)
/// instead of the deepest, leaving unreachable blocks stored.
#[test]
fn restore_keeps_the_eviction_order() {
    for ttl in [Duration::from_secs(60), Duration::MAX] {
        let (original, clock) = index_with(ttl, Some(4), None);
        original.process_routing_decision_for_request(&[1, 2, 3, 4], 0);
        let restored = capped_on(&clock, ttl, Some(4), None);
        restored.restore(&original.snapshot()).unwrap();
        for index in [&original, &restored] {
            index.process_routing_decision_for_request(&[9], 0);
            assert_eq!(score(index, &[1, 2, 3, 4], 0), 3, "deepest block evicted");
            assert_eq!(score(index, &[9], 0), 1);
            assert_eq!(index.stats().entries, 4);
        }
    }
}
