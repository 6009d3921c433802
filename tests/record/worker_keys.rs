//! Workers keyed by data-parallel rank (`WorkerWithDpRank`): ranks are separate caches;
//! removing a worker removes all its ranks and only them; events and dumps carry the rank;
//! plain ids are rank 0; `worker_entries` sums every rank.

use std::time::Duration;

use approx_kv_index::*;

fn ranked() -> ApproxKvIndexer<WorkerWithDpRank> {
    ApproxKvIndexer::builder()
        .block_size(2)
        .ttl(Duration::from_secs(60))
        .build_for::<WorkerWithDpRank>()
        .unwrap()
}

#[test]
fn ranks_are_separate_caches() {
    let index = ranked();
    let r = |w, d| WorkerWithDpRank::new(w, d);
    index.process_routing_decision_for_request(&[1, 2, 3, 4], r(1, 0));
    index.process_routing_decision_for_request(&[1, 2], r(1, 1));
    index.process_routing_decision_for_request(&[1, 2, 3, 4], r(2, 0));
    let found = index.find_matches_for_request(&[1, 2, 3, 4]);
    assert_eq!(found.scores[&r(1, 0)], 2);
    assert_eq!(found.scores[&r(1, 1)], 1);
    assert_eq!(found.scores[&r(2, 0)], 2);
    assert_eq!(found.tree_sizes[&r(1, 1)], 1);
    assert_eq!(index.stats().workers, 3);
}

#[test]
fn remove_worker_removes_all_its_ranks_and_only_them() {
    let index = ranked();
    let r = |w, d| WorkerWithDpRank::new(w, d);
    for d in 0..4 {
        index.process_routing_decision_for_request(&[1, 2], r(1, d));
    }
    index.process_routing_decision_for_request(&[1, 2], r(2, 0));
    index.remove_worker_key(r(1, 3));
    assert_eq!(index.find_matches_for_request(&[1, 2]).scores.len(), 4);
    index.remove_worker(1);
    let found = index.find_matches_for_request(&[1, 2]);
    assert_eq!(
        found.scores.keys().copied().collect::<Vec<_>>(),
        vec![r(2, 0)]
    );
    // Re-adding one rank starts it fresh.
    index.process_routing_decision_for_request(&[1, 2, 3, 4], r(1, 2));
    let found = index.find_matches_for_request(&[1, 2, 3, 4]);
    assert_eq!(found.scores[&r(1, 2)], 2);
    assert_eq!(found.tree_sizes[&r(1, 2)], 2);
}

#[test]
fn events_and_dumps_carry_the_rank() {
    let index = ranked();
    let key = WorkerWithDpRank::new(9, 3);
    index.process_routing_decision_for_request(&[5, 6, 7, 8], key);
    let dump = index.dump_events();
    assert_eq!(dump.len(), 2);
    assert!(dump.iter().all(|e| e.worker_id == key));
    index.apply_event(&RouterEvent {
        worker_id: key,
        event_id: 0,
        data: KvCacheEventData::Cleared,
    });
    assert!(index.find_matches_for_request(&[5, 6]).scores.is_empty());
}

#[test]
fn plain_ids_are_rank_zero() {
    assert_eq!(7u64.dp_rank(), 0);
    assert_eq!(<u64 as WorkerKey>::from_parts(7, 5), 7);
    let index = ApproxKvIndexer::new(2, Duration::from_secs(60)).unwrap();
    index.process_routing_decision_for_request(&[1, 2], 7);
    index.remove_worker_key(7);
    assert!(index.find_matches_for_request(&[1, 2]).scores.is_empty());
}

/// `worker_entries` sums every rank of a worker, those holding none of a query included,
/// and follows removals of one rank or of the whole worker.
#[test]
fn worker_entries_sum_every_rank() {
    let index = ranked();
    let r = |w, d| WorkerWithDpRank::new(w, d);
    index.process_routing_decision_for_request(&[1, 2, 3, 4], r(1, 0));
    index.process_routing_decision_for_request(&[7, 7, 8, 8, 9, 9], r(1, 3));
    index.process_routing_decision_for_request(&[1, 2], r(2, 0));
    let found = index.find_matches_for_request(&[1, 2, 3, 4]);
    assert!(!found.scores.contains_key(&r(1, 3)));
    assert_eq!(index.worker_entries(1), 5);
    assert_eq!(index.worker_entries(2), 1);
    assert_eq!(index.worker_entries(3), 0);
    index.remove_worker_key(r(1, 0));
    assert_eq!(index.worker_entries(1), 3);
    index.remove_worker(1);
    assert_eq!(index.worker_entries(1), 0);
    // A plain index: the worker's one key.
    let plain = ApproxKvIndexer::new(2, Duration::from_secs(60)).unwrap();
    plain.process_routing_decision_for_request(&[1, 2, 3, 4], 5);
    assert_eq!(plain.worker_entries(5), 2);
}
