//! Promises: Sharing decisions.

use super::*;

/// docs/design.md, Sharing decisions, Producing: "each local route (its tokens hashes, at
/// most `MAX_BLOCKS`), `remove_worker` and `remove_worker_key` becomes a `Decision { origin,
/// seq, decided_at, action }` ... `seq` starts at the wall-clock nanoseconds of the index's
/// creation ... `decided_at` is wall-clock time"; src/sharing/decision.rs, `Decision::seq`:
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
    let first = EPOCH.as_nanos() as u64;
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
