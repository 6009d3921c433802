//! Replicas that exchange decisions late, and in any order, end alike: one replica's
//! recording threads number its decisions in the order they are queued; a removal, or a
//! newer capacity, supersedes another replica's older decisions about the worker that
//! arrive after it; a restarted origin is told from decisions lost; numbers never wrap.

use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::replication::{Action, Applied, Decision};
use approx_kv_index::*;

use super::apply::drain;
use super::{clock, manual, replica};
use crate::support::index::score;

/// src/indexer/replicas.rs, `apply_decision`: "a decision whose sequence number is not above every
/// one applied from its origin is skipped". Several threads recording on one replica used
/// to number their decisions before queueing them, so the outbox could hold a higher
/// number before a lower one, which receivers then skipped as a duplicate (found by an
/// audit: up to 1,805 of 20,000 lost).
#[test]
fn decisions_of_concurrent_recorders_are_queued_in_number_order() {
    let c = clock();
    let sharing = |id| {
        super::replica_builder(id, &c)
            .share_decisions(1 << 16)
            .build()
            .unwrap()
    };
    let (a, b) = (sharing(1), sharing(2));
    const THREADS: u32 = 4;
    const EACH: u32 = 3_000;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let a = &a;
            s.spawn(move || {
                for n in 0..EACH {
                    let base = (t << 24) | (n << 5);
                    let tokens: Vec<u32> = (base..base + 32).collect();
                    a.record(7, Query::tokens(&tokens)).unwrap();
                }
            });
        }
    });
    let decisions = drain(&a);
    assert_eq!(decisions.len(), (THREADS * EACH) as usize);
    assert!(decisions.windows(2).all(|w| w[0].seq < w[1].seq));
    let outcomes = b.apply_decisions(&decisions);
    assert!(outcomes.iter().all(|&o| o == Applied::Applied));
    let stats = b.replication_stats();
    assert_eq!(
        (stats.applied, stats.duplicates, stats.gaps),
        (12_000, 0, 0)
    );
}

/// Each replica applies the other's decisions after taking its own.
fn exchange(a: &ApproxKvIndexer, b: &ApproxKvIndexer) {
    let (from_a, from_b) = (drain(a), drain(b));
    a.apply_decisions(&from_b);
    b.apply_decisions(&from_a);
}

/// src/indexer/replicas.rs, `apply_decision`: "as if this index had taken it when it was taken".
/// B routes to worker 5 at 1 s, A removes it at 2 s: fed in time order, one index forgets
/// the worker, and so must A, which receives B's route after its removal.
#[test]
fn a_route_taken_before_a_removal_elsewhere_does_not_bring_the_worker_back() {
    let c = clock();
    let (a, b) = (replica(1, &c), replica(2, &c));
    c.advance(Duration::from_secs(1));
    b.record(5, Query::tokens(&[3])).unwrap();
    b.record(6, Query::tokens(&[3])).unwrap();
    c.advance(Duration::from_secs(1));
    a.remove_worker(5);
    exchange(&a, &b);
    for index in [&a, &b] {
        assert_eq!(score(index, &[3], 5), None);
        assert_eq!(
            score(index, &[3], 6),
            Some(1),
            "another worker's route stays"
        );
    }
    assert_eq!(a.replication_stats().superseded, 1);
    // A route taken after the removal is applied.
    c.advance(Duration::from_secs(1));
    b.record(5, Query::tokens(&[4])).unwrap();
    exchange(&a, &b);
    assert_eq!(score(&a, &[4], 5), Some(1));
}

/// The same for one rank of a worker, and for a capacity and a loss's drop of that rank.
#[test]
fn a_rank_removed_supersedes_its_older_routes_capacities_and_drops() {
    let c = clock();
    let build = |id| {
        super::replica_builder(id, &c)
            .build_for::<WorkerWithDpRank>()
            .unwrap()
    };
    let (a, b) = (build(1), build(2));
    let (rank0, rank1) = (WorkerWithDpRank::new(5, 0), WorkerWithDpRank::new(5, 1));
    b.record(rank1, Query::tokens(&[3])).unwrap();
    b.record(rank0, Query::tokens(&[3])).unwrap();
    b.set_worker_capacity(rank1, Some(8));
    c.advance(Duration::from_secs(1));
    a.remove_worker_key(rank1);
    let from_b: Vec<Decision> = drain(&b);
    let outcomes = a.apply_decisions(&from_b);
    assert_eq!(outcomes, [Applied::Applied; 3]);
    let found = a.find(Query::tokens(&[3]));
    assert_eq!(found.scores.get(&rank1), None);
    assert_eq!(
        found.scores.get(&rank0),
        Some(&1),
        "the other rank's route stays"
    );
    assert_eq!(a.worker_capacity(rank1), None);
    assert_eq!(a.replication_stats().superseded, 2);
    // A drop dated before the removal changes nothing either (nothing to check but that it
    // is counted).
    let drop = Decision {
        origin: 2,
        seq: u64::MAX - 1,
        decided_at: super::EPOCH,
        action: Action::DropOlder {
            worker_id: 5,
            dp_rank: 1,
            used_before: Duration::ZERO,
        },
    };
    assert_eq!(a.apply_decision(&drop), Applied::Applied);
    assert_eq!(a.replication_stats().superseded, 3);
}

/// src/indexer/workers.rs, `set_worker_capacity`, shared as a decision: two replicas that set a
/// worker's capacity at different times end with the later one, whatever the order they
/// receive each other's in.
#[test]
fn capacities_set_on_two_replicas_converge_on_the_later() {
    let c = clock();
    let (a, b) = (replica(1, &c), replica(2, &c));
    b.set_worker_capacity(5, Some(20));
    c.advance(Duration::from_secs(1));
    a.set_worker_capacity(5, Some(10));
    exchange(&a, &b);
    assert_eq!(
        (a.worker_capacity(5), b.worker_capacity(5)),
        (Some(10), Some(10))
    );
    // Removed and set again: the new capacity is the latest.
    c.advance(Duration::from_secs(1));
    b.remove_worker(5);
    c.advance(Duration::from_secs(1));
    b.set_worker_capacity(5, Some(30));
    exchange(&a, &b);
    assert_eq!(
        (a.worker_capacity(5), b.worker_capacity(5)),
        (Some(30), Some(30))
    );
}

/// src/replication/state.rs, `ReplicationStats::gaps` and `restarts`: an origin restarted
/// with its id, 3 s later, is a restart, not 3 billion decisions lost; decisions dropped
/// by its full outbox are gaps.
#[test]
fn a_restarted_origin_counts_as_a_restart_and_dropped_decisions_as_gaps() {
    let c = clock();
    let receiver = replica(2, &c);
    let before = replica(1, &c);
    before.record(5, Query::tokens(&[1])).unwrap();
    receiver.apply_decisions(&drain(&before));
    drop(before);
    c.advance(Duration::from_secs(3));
    let after = super::replica_builder(1, &c)
        .share_decisions(1)
        .build()
        .unwrap();
    for t in 3..6 {
        after.record(5, Query::tokens(&[t])).unwrap(); // the last two: outbox full
    }
    receiver.apply_decisions(&drain(&after));
    c.advance(Duration::from_millis(1));
    after.record(5, Query::tokens(&[9])).unwrap();
    receiver.apply_decisions(&drain(&after));
    let s = receiver.replication_stats();
    assert_eq!((s.applied, s.restarts, s.gaps), (3, 1, 2), "{s:?}");
}

/// README, "any clock": a wall clock anywhere in 0 to 2^64 - 1 ns. A replica built with its
/// wall clock at the end numbers its decisions without wrapping, so none is skipped.
#[test]
fn a_replica_built_at_the_end_of_the_wall_clock_numbers_its_decisions_in_order() {
    let wall = manual(Duration::from_nanos(u64::MAX - 1));
    let (origin, receiver) = (replica(1, &wall), replica(2, &wall));
    for w in 0..3 {
        origin.record(w, Query::tokens(&[7])).unwrap();
    }
    let sent = drain(&origin);
    assert!(sent.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(receiver.apply_decisions(&sent), [Applied::Applied; 3]);
    assert_eq!(origin.apply_decisions(&sent), [Applied::OwnOrigin; 3]);
    let _ = Arc::clone(&wall);
}

/// src/indexer/replicas.rs, `reshare_capacities`: every capacity known of a change is queued again,
/// dated from the change; a late joiner learns it, the latest change of a key wins
/// whatever the order, a removed key's is not shared again, and reshared capacities do
/// not count in the lag.
#[test]
fn reshared_capacities_reach_a_late_joiner_and_never_undo_a_later_change() {
    let c = clock();
    let (a, b) = (replica(1, &c), replica(2, &c));
    a.set_worker_capacity(5, Some(4));
    a.set_worker_capacity(7, Some(9));
    a.remove_worker(7);
    exchange(&a, &b);
    c.advance(Duration::from_secs(3_600)); // long past any window
    b.set_worker_capacity(5, Some(6)); // B's later change, not yet at A
    a.reshare_capacities();
    let reshared = drain(&a);
    assert_eq!(reshared.len(), 1, "worker 7 was removed: {reshared:?}");
    assert_eq!(reshared[0].decided_at, super::EPOCH);
    let late = replica(3, &c);
    late.apply_decisions(&reshared);
    assert_eq!(late.worker_capacity(5), Some(4));
    assert_eq!(late.worker_capacity(7), None);
    assert_eq!(
        late.replication_stats().lag_p99,
        Duration::ZERO,
        "not in the lag"
    );
    b.apply_decisions(&reshared);
    assert_eq!(
        b.worker_capacity(5),
        Some(6),
        "the older change is superseded"
    );
    exchange(&a, &b);
    assert_eq!(
        (a.worker_capacity(5), b.worker_capacity(5)),
        (Some(6), Some(6))
    );
    // B shares the latest change again, with its time, and the late joiner takes it.
    b.reshare_capacities();
    late.apply_decisions(&drain(&b));
    assert_eq!(late.worker_capacity(5), Some(6));
}

/// Decisions are ordered by (wall-clock time, replica id): two replicas setting one
/// capacity at one reading end with the same one, the higher id's (found by an audit:
/// each kept the other's, and every reshare swapped them).
#[test]
fn capacities_set_at_one_reading_converge_on_the_higher_id() {
    let c = clock();
    let (a, b) = (replica(1, &c), replica(2, &c));
    a.set_worker_capacity(5, Some(10));
    b.set_worker_capacity(5, Some(20));
    exchange(&a, &b);
    assert_eq!(
        (a.worker_capacity(5), b.worker_capacity(5)),
        (Some(20), Some(20))
    );
    a.reshare_capacities();
    b.reshare_capacities();
    exchange(&a, &b);
    assert_eq!(
        (a.worker_capacity(5), b.worker_capacity(5)),
        (Some(20), Some(20))
    );
}

/// A removal that arrives after a later capacity of the worker keeps that capacity, and
/// an older one that arrives next changes nothing (found by an audit: the removal erased
/// the later one, which the older one then replaced).
#[test]
fn a_capacity_changed_after_a_removal_outlives_the_removal_arriving_late() {
    let c = clock();
    let (a, b) = (replica(1, &c), replica(2, &c));
    c.advance(Duration::from_secs(1));
    b.remove_worker(5);
    c.advance(Duration::from_secs(1));
    b.set_worker_capacity(5, Some(3));
    c.advance(Duration::from_secs(1));
    a.set_worker_capacity(5, Some(8));
    exchange(&a, &b);
    assert_eq!(
        (a.worker_capacity(5), b.worker_capacity(5)),
        (Some(8), Some(8))
    );
}

/// A replica restarted with its id past 2^63 ns of wall clock numbers its decisions above
/// its old ones (found by an audit: numbering capped at 2^63 started again there).
#[test]
fn a_replica_restarted_past_2_pow_63_ns_continues_above_its_old_numbers() {
    let c = manual(Duration::from_nanos(1 << 63) + Duration::from_secs(10));
    let receiver = replica(2, &c);
    let before = replica(1, &c);
    for t in 0..3 {
        before.record(5, Query::tokens(&[t])).unwrap();
    }
    receiver.apply_decisions(&drain(&before));
    drop(before);
    c.advance(Duration::from_secs(1));
    let after = replica(1, &c);
    after.record(6, Query::tokens(&[9])).unwrap();
    assert_eq!(receiver.apply_decisions(&drain(&after)), [Applied::Applied]);
    assert_eq!(score(&receiver, &[9], 6), Some(1));
}

/// src/indexer/replicas.rs, `apply_decision`: a decision taken before its worker's removal changes
/// nothing, also when another thread applies the removal (another origin's) at the same
/// time: the check and the apply are one step (found by an audit: 15 to 177 of 200,000
/// routes taken before their worker's removal were kept).
#[test]
fn a_removal_applied_beside_an_older_route_on_another_thread_still_supersedes_it() {
    const WORKERS: u64 = 20_000;
    let c = manual(super::EPOCH + Duration::from_secs(100));
    let index = replica(1, &c);
    let barrier = std::sync::Barrier::new(2);
    let decision = |origin, i: u64, action| Decision {
        origin,
        seq: 1 + i,
        decided_at: super::EPOCH + Duration::from_nanos(2 * i + (origin == 7) as u64),
        action,
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..WORKERS {
                barrier.wait();
                index.apply_decision(&decision(7, i, Action::RemoveWorker { worker_id: i }));
            }
        });
        s.spawn(|| {
            for i in 0..WORKERS {
                let route = Action::Route {
                    worker_id: i,
                    dp_rank: 0,
                    blocks: vec![LocalBlockHash(i)],
                };
                barrier.wait();
                index.apply_decision(&decision(8, i, route));
            }
        });
    });
    let kept: Vec<u64> = (0..WORKERS)
        .filter(|&w| index.worker_entries(w) > 0)
        .collect();
    assert!(
        kept.is_empty(),
        "routes older than their worker's removal kept: {kept:?}"
    );
}

/// docs/design.md, Sharing decisions, `DropOlder`: "the request's own decision, taken after
/// that use, stays". A report that only a restart explains (the lost block pinned by
/// another running request) is shared as a drop of the claims taken before the request
/// began: receivers keep its own route, which the engine holds again (they dropped it,
/// and every running request's, found by an audit).
#[test]
fn a_restart_report_keeps_the_requests_own_route_on_receivers() {
    let c = clock();
    let (a, b) = (replica(1, &c), replica(2, &c));
    let prompt: Vec<u32> = (0..4).collect();
    a.record(7, Query::tokens(&[100, 101, 102])).unwrap(); // older, unpinned
    c.advance(Duration::from_secs(1));
    let first = a.begin_request(7, &prompt);
    c.advance(Duration::from_secs(1));
    let second = a.begin_request(7, &prompt); // its prior: pinned by `first`
    c.advance(Duration::from_secs(1));
    assert!(a.observe_cached(&second, 0)); // nothing cached: a restart
    let sent = drain(&a);
    let dropped = sent.iter().find_map(|d| match d.action {
        Action::DropOlder { used_before, .. } => Some(used_before),
        _ => None,
    });
    assert_eq!(
        dropped,
        Some(Duration::from_secs(1) + super::NS),
        "since the begin"
    );
    b.apply_decisions(&sent);
    for index in [&a, &b] {
        assert_eq!(score(index, &[100, 101, 102], 7), None);
        assert_eq!(score(index, &prompt, 7), Some(4));
    }
    drop((first, second));
}

/// A capacity learned from a report on a replica whose wall clock is behind another's,
/// stamped before a change of the key applied from that other replica, is superseded there
/// as everywhere: the later capacity is set again and the lesson not shared (found by an
/// audit: the learning replica kept its lesson, the others the later change, for good).
#[test]
fn a_lesson_stamped_before_a_later_capacity_yields_to_it_on_every_replica() {
    let index_clock = clock();
    let (wall_a, wall_b) = (clock(), clock());
    wall_b.advance(Duration::from_secs(1)); // B's wall clock a second ahead
    let build = |id, wall: &Arc<ManualClock>| {
        super::replica_builder(id, &index_clock)
            .wall_clock(wall.clone())
            .build()
            .unwrap()
    };
    let (a, b) = (build(1, &wall_a), build(2, &wall_b));
    b.set_worker_capacity(3, Some(100));
    a.apply_decisions(&drain(&b));
    assert_eq!(a.worker_capacity(3), Some(100));
    // A loss on A teaches worker 3 a capacity, stamped by A's clock: before B's change.
    a.record(3, Query::tokens(&[1, 2])).unwrap();
    index_clock.advance(Duration::from_micros(1));
    a.record(3, Query::tokens(&[500])).unwrap();
    let request = a.begin_request(3, &[500]);
    assert_eq!(request.predicted_blocks(), 1);
    assert!(a.observe_cached(&request, 0));
    let sent = drain(&a);
    assert!(
        !sent
            .iter()
            .any(|d| matches!(d.action, Action::SetCapacity { .. })),
        "the superseded lesson is not shared: {sent:?}"
    );
    b.apply_decisions(&sent);
    assert_eq!(
        (a.worker_capacity(3), b.worker_capacity(3)),
        (Some(100), Some(100))
    );
}
