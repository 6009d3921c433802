//! What an index shares and how receivers count it: decisions numbered from the creation
//! time and dated by the wall clock; routes longer than `MAX_BLOCKS` cut; default replica
//! ids drawn per index; salted and precomputed routes shared, rejected ones and exact KV
//! events not; a full outbox drops and counts (and receivers count the drops as gaps) while
//! the index records; outbox capacities; `Outbox::wait`; applied removals counted and
//! deduplicated like routes.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::replication::{Action, Applied, Decision, MAX_BLOCKS};
use approx_kv_index::*;

use super::{clock, manual, replica_builder, replica_on, EPOCH, TTL};
use crate::support::index::{score, tokens};

fn drain<W: WorkerKey>(from: &ApproxKvIndexer<W>) -> Vec<Decision> {
    let outbox = from.outbox().unwrap();
    std::iter::from_fn(|| outbox.pop()).collect()
}

/// docs/design.md, Sharing decisions, Producing: "each local route (its tokens hashes, at
/// most `MAX_BLOCKS`), `remove_worker` and `remove_worker_key` becomes a `Decision { origin,
/// seq, decided_at, action }` ... `seq` starts at half the wall-clock nanoseconds of the
/// index's creation ... `decided_at` is wall-clock time"; src/sharing/decision.rs, `Decision::seq`:
/// "each decision gets the next one".
#[test]
fn shared_decisions_are_numbered_from_the_creation_time_and_dated_by_the_wall_clock() {
    let wall = Arc::new(ManualClock::new());
    wall.set(EPOCH);
    let index = ApproxKvIndexer::builder()
        .block_size(2)
        .wall_clock(wall.clone())
        .background_sweeper(false)
        .replica_id(42)
        .share_decisions(16)
        .build()
        .unwrap();
    wall.advance(Duration::from_secs(1));
    index.process_routing_decision_for_request(&[1, 2, 3, 4, 5], 3);
    wall.advance(Duration::from_secs(1));
    index.remove_worker(3);
    wall.advance(Duration::from_secs(1));
    index.remove_worker_key(4);
    let outbox = index.outbox().unwrap();
    let sent: Vec<_> = std::iter::from_fn(|| outbox.pop()).collect();
    assert_eq!(sent.len(), 3);
    let first = EPOCH.as_nanos() as u64 / 2;
    for (i, d) in sent.iter().enumerate() {
        assert_eq!(d.origin, 42);
        assert_eq!(d.seq, first + i as u64);
        assert_eq!(d.decided_at, EPOCH + Duration::from_secs(1 + i as u64));
    }
    assert_eq!(
        sent[0].action,
        Action::Route {
            worker_id: 3,
            dp_rank: 0,
            blocks: compute_block_hash_for_seq(&[1, 2, 3, 4], 2),
        }
    );
    assert_eq!(sent[1].action, Action::RemoveWorker { worker_id: 3 });
    assert_eq!(
        sent[2].action,
        Action::RemoveKey {
            worker_id: 4,
            dp_rank: 0
        }
    );
}

/// src/sharing/decision.rs, `MAX_BLOCKS`: "A longer prompt's decision is shared as its
/// first `MAX_BLOCKS` blocks"; the local index records the whole prompt.
#[test]
fn a_route_longer_than_max_blocks_is_shared_as_its_first_max_blocks() {
    let index = ApproxKvIndexer::builder()
        .block_size(1)
        .background_sweeper(false)
        .share_decisions(4)
        .build()
        .unwrap();
    let prompt = tokens(0, MAX_BLOCKS as u32 + 3);
    index.process_routing_decision_for_request(&prompt, 1);
    assert_eq!(score(&index, &prompt, 1), Some(MAX_BLOCKS as u32 + 3));
    let d = index.outbox().unwrap().pop().unwrap();
    let local = compute_block_hash_for_seq(&prompt, 1);
    match d.action {
        Action::Route { blocks, .. } => assert!(blocks == local[..MAX_BLOCKS]),
        other => panic!("{other:?}"),
    }
}

/// src/config.rs, `Builder::replica_id`: "by default a random one".
#[test]
fn default_replica_ids_are_drawn_per_index() {
    let ids: HashSet<_> = (0..8)
        .map(|_| {
            let index = ApproxKvIndexer::builder()
                .background_sweeper(false)
                .build()
                .unwrap();
            index.replication_stats().replica_id
        })
        .collect();
    assert_eq!(ids.len(), 8);
}

/// src/sharing/decision.rs, `Action::Route`: "Routed a prompt whose full blocks have these
/// tokens hashes (salted, if the request was)"; `process_routing_decision_for_request_salted`:
/// "its blocks only ever match finds with the same [`HashSalt`]" (on the receiver too).
#[test]
fn salted_routes_are_shared_salted_and_match_only_the_same_salt_on_the_receiver() {
    let clock = manual(EPOCH);
    let a = replica_on(1, &clock).block_size(2).build().unwrap();
    let b = replica_on(2, &clock).block_size(2).build().unwrap();
    let salt = HashSalt::new(Some("lora-x"), Some("tenant-a"));
    let tokens = [1, 2, 3, 4];
    a.process_routing_decision_for_request_salted(&tokens, 6, salt);
    let sent = drain(&a);
    assert_eq!(sent.len(), 1);
    let salted = compute_block_hash_for_seq_salted(&tokens, 2, salt);
    assert_ne!(salted, compute_block_hash_for_seq(&tokens, 2));
    assert_eq!(
        sent[0].action,
        Action::Route {
            worker_id: 6,
            dp_rank: 0,
            blocks: salted,
        }
    );
    assert_eq!(b.apply_decision(&sent[0]), Applied::Applied);
    assert_eq!(
        b.find_matches_for_request_salted(&tokens, salt)
            .scores
            .get(&6),
        Some(&2)
    );
    assert!(b.find_matches_for_request(&tokens).scores.is_empty());
    let other = HashSalt::new(Some("lora-x"), Some("tenant-b"));
    assert!(b
        .find_matches_for_request_salted(&tokens, other)
        .scores
        .is_empty());
}

/// src/config.rs, `Builder::share_decisions`: "every local routing decision and worker
/// removal is also queued" (also those recorded from precomputed hashes, which are placed
/// by the chain of their local hashes); `process_routing_decision`: "Slices of different
/// lengths are an error and store nothing" (nor share anything).
#[test]
fn decisions_from_precomputed_hashes_are_shared_and_rejected_ones_are_not() {
    let clock = manual(EPOCH);
    let a = replica_on(1, &clock).build().unwrap();
    let b = replica_on(2, &clock).build().unwrap();
    let local = compute_block_hash_for_seq(&[5, 6, 7], 1);
    let seq = compute_seq_hashes(&local);
    assert!(a.process_routing_decision(3, &local, &seq[..2]).is_err());
    assert_eq!(a.replication_stats().shared, 0);
    assert!(a.outbox().unwrap().is_empty());
    // Sequence hashes that are not the chain: still a decision, shared by its local hashes.
    let bogus = [SequenceHash(1), SequenceHash(2), SequenceHash(3)];
    a.process_routing_decision(3, &local, &bogus).unwrap();
    let sent = drain(&a);
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].action,
        Action::Route {
            worker_id: 3,
            dp_rank: 0,
            blocks: local.clone(),
        }
    );
    assert_eq!(b.apply_decision(&sent[0]), Applied::Applied);
    assert_eq!(b.find_matches(&local).scores.get(&3), Some(&3));
}

/// src/replication/mod.rs: "Only the approximate side is shared: exact KV events
/// ([`apply_event`](crate::ApproxKvIndexer::apply_event)) come from the engines, which
/// every replica can subscribe to itself."
#[test]
fn exact_kv_events_are_not_shared() {
    let clock = manual(EPOCH);
    let a = replica_on(1, &clock).build().unwrap();
    let local = compute_block_hash_for_seq(&[1, 2], 1);
    let seq = compute_seq_hashes(&local);
    let blocks = local
        .iter()
        .zip(&seq)
        .map(|(&tokens_hash, &block_hash)| KvCacheStoredBlockData {
            block_hash,
            tokens_hash,
            expires_in: None,
        })
        .collect();
    let events = [
        KvCacheEventData::Stored(KvCacheStoreData {
            parent_hash: None,
            blocks,
        }),
        KvCacheEventData::Removed(KvCacheRemoveData {
            block_hashes: vec![seq[1]],
        }),
        KvCacheEventData::Cleared,
    ];
    for (i, data) in events.into_iter().enumerate() {
        a.apply_event(&RouterEvent {
            worker_id: 9,
            event_id: i as u64,
            data,
        });
        if i == 0 {
            assert_eq!(a.find_matches(&local).scores.get(&9), Some(&2)); // it was applied
        }
    }
    let s = a.replication_stats();
    assert_eq!((s.shared, s.queued, s.dropped), (0, 0, 0));
    // A local decision after them is shared as usual.
    a.process_routing_decision_for_request(&[1, 2], 9);
    assert_eq!(a.replication_stats().shared, 1);
}

#[test]
fn a_full_outbox_drops_and_counts_but_records_locally() {
    let c = clock();
    let a = replica_builder(1, &c).share_decisions(2).build().unwrap();
    for t in 0..5 {
        a.process_routing_decision_for_request(&[t], 0);
    }
    assert!((0..5).all(|t| score(&a, &[t], 0) == Some(1)));
    let s = a.replication_stats();
    assert_eq!((s.shared, s.dropped, s.queued), (5, 3, 2));
}

/// src/sharing/mod.rs, `ReplicationStats::gaps`: "Decisions of other replicas never
/// received: numbers skipped in an origin's sequence (dropped by a full outbox there, or
/// ...)": a dropped decision still takes its number, so receivers count it.
#[test]
fn decisions_dropped_by_a_full_outbox_at_the_origin_count_as_gaps_on_receivers() {
    let clock = manual(EPOCH);
    let a = replica_on(1, &clock).share_decisions(2).build().unwrap();
    let b = replica_on(2, &clock).build().unwrap();
    for t in 0..5 {
        a.process_routing_decision_for_request(&[t], 0); // 2 queued, 3 dropped
    }
    let mut sent = drain(&a);
    a.process_routing_decision_for_request(&[9], 0);
    sent.extend(drain(&a));
    assert_eq!(sent.len(), 3);
    for d in &sent {
        assert_eq!(b.apply_decision(d), Applied::Applied);
    }
    let (origin, receiver) = (a.replication_stats(), b.replication_stats());
    assert_eq!(origin.dropped, 3);
    assert_eq!((receiver.applied, receiver.gaps), (3, origin.dropped));
}

#[test]
fn any_outbox_capacity_builds_and_bounds_the_queue() {
    for capacity in [0, 1, usize::MAX] {
        let index = ApproxKvIndexer::builder()
            .share_decisions(capacity)
            .build()
            .unwrap();
        index.process_routing_decision_for_request(&[1; 64], 1);
        index.process_routing_decision_for_request(&[2; 64], 1);
        let outbox = index.outbox().unwrap();
        assert_eq!(outbox.capacity(), capacity.max(1));
        assert_eq!(outbox.len(), 2.min(capacity.max(1)));
        assert_eq!(outbox.dropped(), if capacity == usize::MAX { 0 } else { 1 });
    }
}

#[test]
fn an_index_that_does_not_share_queues_nothing() {
    let index = ApproxKvIndexer::new(1, TTL).unwrap();
    index.process_routing_decision_for_request(&[1], 0);
    assert!(index.outbox().is_none());
    assert_eq!(index.replication_stats().shared, 0);
}

/// src/sharing/queue.rs, `Outbox::wait`: "Waits until a decision is queued or `timeout`
/// passes; returns whether one is queued." With one already queued there is nothing to
/// wait for: it returns at once, whatever the timeout.
#[test]
fn wait_returns_at_once_when_a_decision_is_already_queued() {
    let index = Arc::new(
        ApproxKvIndexer::builder()
            .block_size(1)
            .background_sweeper(false)
            .share_decisions(4)
            .build()
            .unwrap(),
    );
    index.remove_worker(1);
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = {
        let index = index.clone();
        std::thread::spawn(move || {
            let ready = index.outbox().unwrap().wait(Duration::from_secs(3600));
            let _ = tx.send(ready);
        })
    };
    // A generous bound for a thread to run, far below the hour a timeout would take.
    assert_eq!(rx.recv_timeout(Duration::from_secs(60)), Ok(true));
    waiter.join().unwrap();
    assert_eq!(index.outbox().unwrap().len(), 1); // waiting takes nothing
}

/// src/sharing/mod.rs, `ReplicationStats::applied`: "Other replicas' decisions applied";
/// `Applied::Applied`: "Applied to the index." Removals are decisions too: applied, counted,
/// and numbered like routes (a replayed removal is a duplicate).
#[test]
fn applied_removals_are_counted_and_deduplicated_like_routes() {
    let clock = manual(EPOCH);
    let a = replica_on(1, &clock).build().unwrap();
    let b = replica_on(2, &clock).build().unwrap();
    a.process_routing_decision_for_request(&[1], 5);
    a.remove_worker(5);
    let sent = drain(&a);
    for d in &sent {
        assert_eq!(b.apply_decision(d), Applied::Applied);
    }
    assert!(b.find_matches_for_request(&[1]).scores.is_empty());
    b.process_routing_decision_for_request(&[1], 5); // b routes there again
    assert_eq!(b.apply_decision(&sent[1]), Applied::Duplicate); // the replay removes nothing
    assert_eq!(b.find_matches_for_request(&[1]).scores.get(&5), Some(&1));
    let s = b.replication_stats();
    assert_eq!((s.applied, s.duplicates), (2, 1));
}
