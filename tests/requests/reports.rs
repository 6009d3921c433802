//! Engines' reports of cached prompt tokens, against the index's predictions.

use std::time::Duration;

use approx_kv_index::*;

use crate::support::index::{index_with, manual_index, record_in_turn, score_or_zero, tokens};

const TTL: Duration = Duration::from_secs(60);

#[test]
fn reports_sum_predicted_and_delivered_per_worker() {
    let (index, _clock) = manual_index(4, TTL);
    index.record(1, Query::tokens(&tokens(0, 16))).unwrap();
    let a = index.begin_request(1, &tokens(0, 16)); // predicts 4
    let b = index.begin_request(2, &tokens(0, 16)); // predicts 0
    assert!(index.observe_cached(&a, 16));
    assert!(index.observe_cached(&b, 7)); // 1 full block
    let reports = index.cache_reports();
    assert_eq!(reports.len(), 2);
    let (w, r) = reports[0];
    assert_eq!(
        (w, r.reports, r.predicted_blocks, r.delivered_blocks),
        (1, 1, 4, 4)
    );
    let (w, r) = reports[1];
    assert_eq!(
        (w, r.reports, r.predicted_blocks, r.delivered_blocks),
        (2, 1, 0, 1)
    );
    let total = index.stats().cache;
    assert_eq!(
        (
            total.reports,
            total.predicted_blocks,
            total.delivered_blocks
        ),
        (2, 4, 5)
    );
    index.remove_worker(2);
    assert_eq!(
        index.cache_reports().len(),
        1,
        "a removed worker's reports go"
    );
}

#[test]
fn a_shortfall_drops_older_claims_and_never_the_requests_own() {
    let (index, clock) = index_with(TTL, None, None);
    index.record(1, Query::tokens(&tokens(100, 3))).unwrap(); // used first
    clock.advance(Duration::from_micros(1));
    index.record(1, Query::tokens(&tokens(0, 4))).unwrap();
    clock.advance(Duration::from_micros(1));
    index.record(1, Query::tokens(&tokens(200, 2))).unwrap(); // used after
    let request = index.begin_request(1, &tokens(0, 6));
    assert_eq!(request.predicted_blocks(), 4);
    assert!(index.observe_cached(&request, 2));
    assert_eq!(
        score_or_zero(&index, &tokens(100, 3), 1),
        0,
        "used no later: gone"
    );
    assert_eq!(
        score_or_zero(&index, &tokens(200, 2), 1),
        2,
        "used later: kept"
    );
    assert_eq!(
        score_or_zero(&index, &tokens(0, 6), 1),
        6,
        "its own blocks stay"
    );
    assert_eq!(index.stats().dropped_by_reports, 3);
    let r = index.cache_reports()[0].1;
    assert_eq!((r.predicted_blocks, r.delivered_blocks), (4, 2));
}

#[test]
fn a_report_that_meets_the_prediction_drops_nothing() {
    let (index, _clock) = index_with(TTL, None, None);
    index.record(1, Query::tokens(&tokens(100, 3))).unwrap();
    index.record(1, Query::tokens(&tokens(0, 2))).unwrap();
    let request = index.begin_request(1, &tokens(0, 3));
    assert!(index.observe_cached(&request, 3)); // more than predicted: fine
    assert_eq!(score_or_zero(&index, &tokens(100, 3), 1), 3);
    assert_eq!(index.stats().dropped_by_reports, 0);
}

#[test]
fn a_lost_block_another_request_pinned_means_a_restart() {
    let (index, _clock) = index_with(TTL, None, None);
    index.record(1, Query::tokens(&tokens(100, 3))).unwrap();
    let running = index.begin_request(1, &tokens(0, 2));
    let request = index.begin_request(1, &tokens(0, 3));
    assert_eq!(request.predicted_blocks(), 2);
    assert!(index.observe_cached(&request, 0));
    assert_eq!(
        score_or_zero(&index, &tokens(100, 3), 1),
        0,
        "every unpinned claim goes"
    );
    assert_eq!(
        score_or_zero(&index, &tokens(0, 3), 1),
        3,
        "pinned ones stay"
    );
    drop(running);
}

#[test]
fn bad_reports_are_refused_without_change() {
    let (index, _clock) = manual_index(2, TTL);
    index.record(1, Query::tokens(&tokens(0, 4))).unwrap();
    let request = index.begin_request(1, &tokens(0, 5));
    assert!(
        !index.observe_cached(&request, 6),
        "beyond the prompt's 5 tokens"
    );
    assert!(!index.observe_cached(&request, usize::MAX));
    assert!(index.observe_cached(&request, 5));
    assert!(!index.observe_cached(&request, 0), "a second report");
    assert_eq!(index.cache_reports()[0].1.reports, 1);
    assert_eq!(score_or_zero(&index, &tokens(0, 4), 1), 2);
}

#[test]
fn a_loss_with_no_capacity_gives_it_a_first_value() {
    let (index, clock) = index_with(TTL, None, None);
    record_in_turn(
        &index,
        &clock,
        1,
        &[(100, 4), (200, 4), (300, 4), (0, 4), (400, 2)],
    );
    assert_eq!(index.worker_capacity(1), None);
    let request = index.begin_request(1, &tokens(0, 4));
    // Block 1 of 4 lost. Dropped: the three decisions used before it; kept: its own 4
    // and the later 2.
    assert!(index.observe_cached(&request, 1));
    assert_eq!(index.worker_entries(1), 6);
    // The first value is what the worker held when the loss showed: 18 entries.
    assert_eq!(index.worker_capacity(1), Some(18));
    assert_eq!(index.stats().capacities_learned, 1);
}

#[test]
fn a_loss_well_inside_a_capacity_lowers_it_by_an_eighth() {
    let (index, clock) = index_with(TTL, None, None);
    index.set_worker_capacity(1, Some(80));
    record_in_turn(&index, &clock, 1, &[(100, 4), (200, 4), (300, 4), (0, 8)]);
    // 20 held of 80: well inside. The loss drops the 12 used before the lost block and
    // keeps the request's own 8, fewer than five eighths of those held (a restart looks
    // so): the capacity drops by an eighth.
    let request = index.begin_request(1, &tokens(0, 8));
    assert!(index.observe_cached(&request, 2));
    assert_eq!(index.worker_entries(1), 8);
    assert_eq!(index.worker_capacity(1), Some(70));
    let again = index.begin_request(1, &tokens(0, 8));
    assert!(
        index.observe_cached(&again, 8),
        "delivered as predicted: no change"
    );
    assert_eq!(index.worker_capacity(1), Some(70));
}

#[test]
fn a_loss_that_keeps_most_claims_lowers_the_capacity_halfway_to_them() {
    let (index, clock) = index_with(TTL, None, None);
    index.set_worker_capacity(1, Some(80));
    record_in_turn(&index, &clock, 1, &[(100, 2), (0, 8), (200, 6)]);
    // 16 held of 80. The loss drops the 2 used before the lost block and keeps 14, at
    // least five eighths of those held: an LRU engine that evicted the lost block held at
    // most those, so the capacity goes halfway down to them (14 + 66 / 2), below the
    // eighth's 70.
    let request = index.begin_request(1, &tokens(0, 8));
    assert!(index.observe_cached(&request, 3));
    assert_eq!(index.worker_entries(1), 14);
    assert_eq!(index.worker_capacity(1), Some(47));
    assert_eq!(index.stats().capacities_learned, 1);
    // Near the capacity now: another such loss still halves the distance to the claims
    // kept.
    index.finish_request(request);
    clock.advance(Duration::from_micros(1));
    record_in_turn(&index, &clock, 1, &[(300, 10), (400, 10), (500, 10)]);
    assert_eq!(index.worker_entries(1), 44); // 14 + 30 held of 47: near it
    let request = index.begin_request(1, &tokens(300, 10));
    assert!(index.observe_cached(&request, 4)); // drops the 14 used before
    assert_eq!(index.worker_entries(1), 30);
    assert_eq!(index.worker_capacity(1), Some(38), "30 + 17 / 2");
}

#[test]
fn a_loss_near_the_capacity_changes_nothing() {
    let (index, clock) = index_with(TTL, None, None);
    index.set_worker_capacity(1, Some(8));
    index.record(1, Query::tokens(&tokens(100, 4))).unwrap();
    clock.advance(Duration::from_micros(1));
    index.record(1, Query::tokens(&tokens(0, 4))).unwrap(); // 8 held of 8
    let request = index.begin_request(1, &tokens(0, 4));
    assert!(index.observe_cached(&request, 2));
    assert_eq!(
        index.worker_capacity(1),
        Some(8),
        "an LRU cache at its capacity"
    );
    assert_eq!(index.stats().capacities_learned, 0);
}

/// `observe_cached` refuses a count beyond the prompt's tokens; a request begun from hashes
/// (which drop the partial last block) takes counts up to its full blocks and a partial
/// block, as one begun from the tokens does for its real partial block.
#[test]
fn a_request_begun_from_hashes_takes_counts_inside_its_partial_last_block() {
    let prompt = tokens(0, 14); // 3 full blocks of 4, and 2 tokens
    let hashes = PromptHashes::new(&prompt, 4);
    for (count, by_tokens, by_hashes) in [
        (13, true, true),
        (14, true, true),
        (15, false, true),
        (16, false, false),
    ] {
        let (index, _clock) = manual_index(4, TTL);
        let request = index.begin_request(1, &prompt);
        assert_eq!(
            index.observe_cached(&request, count),
            by_tokens,
            "{count} by tokens"
        );
        let (index, _clock) = manual_index(4, TTL);
        let request = index.begin_request(1, Query::prompt(&hashes));
        assert_eq!(
            index.observe_cached(&request, count),
            by_hashes,
            "{count} by hashes"
        );
        let (local, seq) = (hashes.local(), hashes.seq());
        let (index, _clock) = manual_index(4, TTL);
        let request = index.begin_request(1, Query::hashes(local, seq));
        assert_eq!(
            index.observe_cached(&request, count),
            by_hashes,
            "{count} by both hashes"
        );
    }
}

/// `observe_cached`: "every claim of that worker made no later than its claim on the
/// deepest predicted block (before this request) is dropped: decisions of the worker taken
/// at the same clock reading as that claim too, unless the index was already logging
/// decisions". The first loss starts logging; the decisions it then logs are still those
/// of that reading, all of them.
#[test]
fn a_first_loss_drops_every_decision_of_the_claims_reading() {
    let (index, clock) = manual_index(1, TTL);
    let us = Duration::from_micros(1);
    index.record(1, Query::tokens(&tokens(100, 2))).unwrap(); // earlier
    clock.advance(us);
    index.record(1, Query::tokens(&tokens(0, 3))).unwrap(); // the predicted block's claim
    for start in [200, 300, 400, 500] {
        index.record(1, Query::tokens(&tokens(start, 2))).unwrap(); // the same reading
    }
    clock.advance(us);
    index.record(1, Query::tokens(&tokens(600, 2))).unwrap(); // later: kept
    let request = index.begin_request(1, &tokens(0, 3));
    assert_eq!(request.predicted_blocks(), 3);
    assert!(index.observe_cached(&request, 0));
    for start in [100, 200, 300, 400, 500] {
        assert_eq!(score_or_zero(&index, &tokens(start, 2), 1), 0, "{start}");
    }
    assert_eq!(score_or_zero(&index, &tokens(600, 2), 1), 2);
    assert_eq!(
        score_or_zero(&index, &tokens(0, 3), 1),
        3,
        "its own blocks stay"
    );
    assert_eq!(index.stats().dropped_by_reports, 10);
}

/// The same rule under `max_entries` alone (decisions logged index-wide only): the first
/// loss drops the worker's older claims.
#[test]
fn a_first_loss_under_the_global_cap_drops_older_claims() {
    let clock = std::sync::Arc::new(ManualClock::new());
    let index = crate::support::index::capped_on(&clock, TTL, None, Some(1000));
    index.record(1, Query::tokens(&tokens(100, 3))).unwrap();
    clock.advance(Duration::from_micros(1));
    index.record(1, Query::tokens(&tokens(0, 4))).unwrap();
    clock.advance(Duration::from_micros(1));
    let request = index.begin_request(1, &tokens(0, 4));
    assert_eq!(request.predicted_blocks(), 4);
    assert!(index.observe_cached(&request, 1));
    assert_eq!(
        score_or_zero(&index, &tokens(100, 3), 1),
        0,
        "used before the lost block"
    );
    assert_eq!(index.stats().dropped_by_reports, 3);
    assert_eq!(index.worker_entries(1), 4);
}

/// A prompt shorter than a block pins nothing yet, but its handle is live: its output's
/// blocks join it as they fill, and a report is taken (0 blocks predicted and delivered).
#[test]
fn a_request_shorter_than_a_block_is_live() {
    let (index, _clock) = manual_index(4, TTL);
    let request = index.begin_request(1, &[1, 2, 3]);
    assert_eq!((request.predicted_blocks(), request.blocks()), (0, 0));
    assert_eq!(index.request_output(&request, &[1, 2, 3, 4, 5]), 1);
    assert_eq!(request.blocks(), 1);
    assert!(index.observe_cached(&request, 3));
    assert_eq!(index.cache_reports()[0].1.reports, 1);
}
