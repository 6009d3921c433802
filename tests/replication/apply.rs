//! Applying other replicas' decisions: replicas converge and apply each decision once (no
//! echo); an applied decision expires a TTL after it was taken (aged by the wall clock,
//! expiring on the index clock), never shortens a later local one, is skipped a TTL old and
//! counted as now from the future; own decisions and gaps; age kept and caps held under
//! caps, same-instant decisions evicted in the order they were taken; never-TTLs;
//! removals per worker and per rank; a restarted replica's old decisions;
//! jumps of nearly 2^64; a batch applies as its decisions one by one.

use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::replication::{Action, Applied, Decision};
use approx_kv_index::*;
use proptest::prelude::*;

use super::{clock, manual, replica, replica_builder, route, EPOCH, NS, TTL};
use crate::support::index::{score, sharing_replica, tokens};

/// Every decision queued by `from`, through the wire format.
pub(super) fn drain<W: WorkerKey>(from: &ApproxKvIndexer<W>) -> Vec<Decision> {
    let outbox = from.outbox().unwrap();
    std::iter::from_fn(|| outbox.pop())
        .map(|d| Decision::decode(&d.encode()).unwrap())
        .collect()
}

#[test]
fn three_replicas_converge_and_apply_each_decision_once() {
    let c = clock();
    let replicas: Vec<_> = (0..3).map(|id| replica(id, &c)).collect();
    for (i, r) in replicas.iter().enumerate() {
        r.process_routing_decision_for_request(&[i as u32, 1, 2], i as u64);
    }
    let all: Vec<Decision> = replicas.iter().flat_map(drain).collect();
    assert_eq!(all.len(), 3);
    for r in &replicas {
        for d in &all {
            r.apply_decision(d);
        }
        for d in &all {
            let again = r.apply_decision(d);
            assert!(matches!(again, Applied::Duplicate | Applied::OwnOrigin));
        }
        for i in 0..3u32 {
            assert_eq!(score(r, &[i, 1, 2], u64::from(i)), Some(3));
        }
        let s = r.replication_stats();
        assert_eq!((s.applied, s.duplicates, s.gaps), (2, 2, 0));
        assert_eq!(s.lag_p99, Duration::ZERO);
    }
    // Receiving decisions records nothing to share: no echo.
    assert!(replicas.iter().all(|r| r.outbox().unwrap().is_empty()));
}

#[test]
fn applied_decisions_expire_from_when_they_were_taken() {
    let c = clock();
    let (a, b) = (replica(1, &c), replica(2, &c));
    a.process_routing_decision_for_request(&[1, 2], 7);
    c.advance(Duration::from_secs(3));
    for d in drain(&a) {
        assert_eq!(b.apply_decision(&d), Applied::Applied);
    }
    b.process_routing_decision_for_request(&[5, 6], 8); // taken now, on b
    c.advance(Duration::from_secs(6)); // 9 s after a's decision
    assert_eq!(score(&b, &[1, 2], 7), Some(2));
    c.advance(Duration::from_secs(1)); // 10 s: a TTL after a's decision
    assert_eq!(score(&b, &[1, 2], 7), None);
    assert_eq!(score(&a, &[1, 2], 7), None); // as on its origin
    assert_eq!(score(&b, &[5, 6], 8), Some(2)); // 7 s after b's own
    assert_eq!(b.replication_stats().lag_p50.as_secs(), 3);
}

/// src/replication/apply.rs, `apply_decision`: "a route's blocks expire a TTL after the
/// decision's time (by this index's wall clock: a decision taken 3 s ago expires 3 s
/// before one taken now ...)"; src/config.rs, `Builder::wall_clock`: "The wall clock ...
/// that dates shared decisions and ages received ones". The index's own clock (monotonic,
/// any origin) is not the wall clock: the age is measured on the wall clock and the expiry
/// runs on the index's clock.
#[test]
fn an_applied_decision_is_aged_by_the_wall_clock_and_expires_on_the_index_clock() {
    let mono = manual(Duration::from_secs(5)); // an unrelated origin
    let wall = manual(EPOCH);
    let b = ApproxKvIndexer::builder()
        .block_size(1)
        .ttl(TTL)
        .clock(mono.clone())
        .wall_clock(wall.clone())
        .background_sweeper(false)
        .replica_id(2)
        .build()
        .unwrap();
    let three_s_ago = route(1, EPOCH - Duration::from_secs(3));
    assert_eq!(b.apply_decision(&three_s_ago), Applied::Applied);
    b.process_routing_decision_for_request(&[77], 4); // taken now, on b
    mono.advance(TTL - Duration::from_secs(3) - NS);
    assert_eq!(
        b.find_matches(&[LocalBlockHash(1)]).scores.get(&4),
        Some(&1)
    );
    mono.advance(NS);
    assert!(b.find_matches(&[LocalBlockHash(1)]).scores.is_empty());
    assert_eq!(b.find_matches_for_request(&[77]).scores.get(&4), Some(&1));
    assert_eq!(b.replication_stats().lag_p50.as_secs(), 3);
}

/// src/indexer.rs, `process_routing_decision_for_request`: blocks become probably cached
/// "for one TTL (refreshing any it already held)"; design.md, record: a refresh "raise[s]
/// its expiry with an atomic max". A decision applied from another replica, dated 5 s
/// earlier, refreshes nothing backwards: the local, later decision keeps its full TTL.
#[test]
fn an_older_shared_decision_never_shortens_a_later_local_one() {
    let clock = Arc::new(ManualClock::new());
    clock.set(EPOCH);
    let replica = |id: u64| sharing_replica(id, &clock, TTL).build().unwrap();
    let (a, b) = (replica(1), replica(2));
    a.process_routing_decision_for_request(&[1, 2], 7);
    clock.advance(Duration::from_secs(5));
    b.process_routing_decision_for_request(&[1, 2], 7); // the same route, 5 s later
    let decision = a.outbox().unwrap().pop().unwrap();
    assert_eq!(b.apply_decision(&decision), Applied::Applied);
    clock.set(EPOCH + Duration::from_secs(5) + TTL - NS);
    assert_eq!(
        score(&b, &[1, 2], 7),
        Some(2),
        "a TTL from b's own decision"
    );
    clock.advance(NS);
    assert_eq!(score(&b, &[1, 2], 7), None);
}

#[test]
fn decisions_a_ttl_old_are_skipped_and_future_ones_count_as_now() {
    let c = clock();
    let b = replica(2, &c);
    let route = |seq, decided_at| Decision {
        origin: 1,
        seq,
        decided_at,
        action: Action::Route {
            worker_id: 4,
            dp_rank: 0,
            blocks: vec![LocalBlockHash(seq)],
        },
    };
    assert_eq!(b.apply_decision(&route(1, EPOCH - TTL)), Applied::Expired);
    assert_eq!(b.find_matches(&[LocalBlockHash(1)]).scores.len(), 0);
    // An hour in b's future (skewed clocks): dated now, so it lives one TTL from now.
    let future = EPOCH + Duration::from_secs(3600);
    assert_eq!(b.apply_decision(&route(2, future)), Applied::Applied);
    c.advance(TTL - Duration::from_nanos(1));
    assert_eq!(b.find_matches(&[LocalBlockHash(2)]).scores[&4], 1);
    c.advance(Duration::from_nanos(1));
    assert!(b.find_matches(&[LocalBlockHash(2)]).scores.is_empty());
    assert_eq!(b.replication_stats().expired, 1);
}

#[test]
fn own_decisions_and_gaps() {
    let c = clock();
    let a = replica(1, &c);
    for t in 0..5 {
        a.process_routing_decision_for_request(&[t], 0);
    }
    let sent = drain(&a);
    assert_eq!(a.apply_decision(&sent[0]), Applied::OwnOrigin);
    let b = replica(2, &c);
    b.apply_decision(&sent[0]);
    b.apply_decision(&sent[3]); // 1 and 2 never arrived
    assert_eq!(b.apply_decision(&sent[2]), Applied::Duplicate); // late: out of order
    b.apply_decision(&sent[4]);
    let s = b.replication_stats();
    assert_eq!((s.applied, s.gaps, s.duplicates), (3, 2, 1));
}

/// Under caps a worker's decisions get distinct expiries to order evictions; a decision
/// taken on another replica 3 s ago still expires 3 s earlier than one taken now, and is
/// evicted as the older one.
#[test]
fn applied_decisions_keep_their_age_under_caps() {
    let c = clock();
    let a = replica(1, &c);
    let b = replica_builder(2, &c)
        .max_blocks_per_worker(4)
        .build()
        .unwrap();
    a.process_routing_decision_for_request(&[1, 2], 0);
    c.advance(Duration::from_secs(3));
    b.process_routing_decision_for_request(&[5, 6], 0); // taken now, on b
    for d in drain(&a) {
        assert_eq!(b.apply_decision(&d), Applied::Applied);
    }
    c.advance(Duration::from_secs(6)); // 9 s after a's decision
    assert_eq!(score(&b, &[1, 2], 0), Some(2));
    b.process_routing_decision_for_request(&[7], 0); // 5 blocks: the oldest block goes
    assert_eq!(score(&b, &[1, 2], 0), Some(1), "a's decision is the older");
    assert_eq!(score(&b, &[5, 6], 0), Some(2));
    c.advance(Duration::from_secs(1)); // 10 s: a TTL after a's decision
    assert_eq!(score(&b, &[1, 2], 0), None);
    assert_eq!(score(&b, &[5, 6], 0), Some(2)); // 7 s after b's own
}

#[test]
fn caps_hold_for_applied_decisions() {
    let c = clock();
    let a = replica(1, &c);
    let b = replica_builder(2, &c)
        .max_blocks_per_worker(3)
        .build()
        .unwrap();
    a.process_routing_decision_for_request(&[1, 2], 0);
    c.advance(Duration::from_secs(1));
    a.process_routing_decision_for_request(&[3, 4], 0);
    for d in drain(&a) {
        b.apply_decision(&d);
    }
    assert_eq!(b.stats().entries, 3);
    assert_eq!(score(&b, &[3, 4], 0), Some(2)); // the newer decision whole
    assert_eq!(score(&b, &[1, 2], 0), Some(1)); // the older lost its deepest block
}

/// Found by an audit: decisions one origin took at one wall-clock reading all asked the
/// receiver for the same expiry, and were logged each before the others, so the receiver
/// evicted them newest first; and the later of two nested ones lost the prefix it shares
/// with the earlier one to that one's walk (equal claims), leaving its deeper blocks above
/// a gap. The receiver now evicts as the origin does.
#[test]
fn same_instant_decisions_are_evicted_in_the_order_they_were_taken() {
    let prompts: [&[u32]; 3] = [&[1, 3], &[1, 3, 2, 3], &[1, 3, 1, 1]];
    // Under a per-worker cap, one worker: a prefix, then a prompt that continues it.
    let c = clock();
    let capped = |id| {
        replica_builder(id, &c)
            .max_blocks_per_worker(3)
            .build()
            .unwrap()
    };
    let (a, b) = (capped(1), capped(2));
    a.process_routing_decision_for_request(prompts[0], 0);
    a.process_routing_decision_for_request(prompts[1], 0);
    c.advance(Duration::from_secs(2));
    for d in drain(&a) {
        assert_eq!(b.apply_decision(&d), Applied::Applied);
    }
    assert_eq!(
        score(&a, prompts[1], 0),
        Some(3),
        "the origin keeps a cap of it"
    );
    for prompt in prompts {
        assert_eq!(score(&b, prompt, 0), score(&a, prompt, 0), "{prompt:?}");
    }
    assert_eq!(b.stats().entries, 3);
    // Under a global cap, three workers: the oldest decision loses its deepest block.
    let (a, b) = (
        replica_builder(1, &c).max_entries(5).build().unwrap(),
        replica_builder(2, &c).max_entries(5).build().unwrap(),
    );
    for (worker, prompt) in [(0, [1, 2]), (1, [3, 4]), (2, [5, 6])] {
        a.process_routing_decision_for_request(&prompt, worker);
    }
    c.advance(Duration::from_secs(2));
    let decisions = drain(&a);
    b.apply_decisions(&decisions[..1]);
    for d in &decisions[1..] {
        b.apply_decision(d);
    }
    for (worker, prompt) in [(0, [1, 2]), (1, [3, 4]), (2, [5, 6])] {
        assert_eq!(
            score(&b, &prompt, worker),
            score(&a, &prompt, worker),
            "{worker}"
        );
    }
    assert_eq!(score(&b, &[1, 2], 0), Some(1));
}

#[test]
fn never_means_never_for_applied_decisions() {
    let c = clock();
    let a = replica(1, &c);
    let b = replica_builder(2, &c).ttl(Duration::MAX).build().unwrap();
    a.process_routing_decision_for_request(&[1], 3);
    c.advance(Duration::from_secs(1_000_000));
    for d in drain(&a) {
        assert_eq!(b.apply_decision(&d), Applied::Applied);
    }
    c.advance(Duration::from_secs(1_000_000));
    assert_eq!(score(&b, &[1], 3), Some(1));
}

/// Found by an audit: a receiver whose TTL means never dated every applied decision at
/// its arrival, so under a global cap a late batch was evicted worker by worker, not in
/// the order its decisions were taken.
#[test]
fn a_late_receiver_evicts_in_the_origins_order_when_the_ttl_means_never() {
    let c = clock();
    let never = |id| {
        replica_builder(id, &c)
            .ttl(Duration::MAX)
            .max_entries(4)
            .build()
            .unwrap()
    };
    let (a, b) = (never(1), never(2));
    for (worker, token) in [(0, 1), (0, 2), (0, 3), (1, 4), (1, 5), (1, 6)] {
        a.process_routing_decision_for_request(&[token], worker);
        c.advance(Duration::from_micros(1));
    }
    c.advance(Duration::from_secs(1));
    for d in drain(&a) {
        assert_eq!(b.apply_decision(&d), Applied::Applied);
    }
    for (worker, token) in [(0, 1), (0, 2), (0, 3), (1, 4), (1, 5), (1, 6)] {
        assert_eq!(
            score(&b, &[token], worker),
            score(&a, &[token], worker),
            "{token}"
        );
    }
    assert_eq!(score(&b, &[2], 0), None, "the oldest went first");
    assert_eq!(score(&b, &[4], 1), Some(1));
}

#[test]
fn removals_are_shared_per_worker_and_per_rank() {
    let c = clock();
    let ranked = |id| {
        replica_builder(id, &c)
            .build_for::<WorkerWithDpRank>()
            .unwrap()
    };
    let (a, b) = (ranked(1), ranked(2));
    let (r0, r1, other) = (
        WorkerWithDpRank::new(7, 0),
        WorkerWithDpRank::new(7, 1),
        WorkerWithDpRank::new(8, 0),
    );
    for key in [r0, r1, other] {
        a.process_routing_decision_for_request(&[1, 2], key);
    }
    a.remove_worker_key(r1);
    let sync = |from: &ApproxKvIndexer<WorkerWithDpRank>| {
        let outbox = from.outbox().unwrap();
        while let Some(d) = outbox.pop() {
            b.apply_decision(&d);
        }
    };
    sync(&a);
    let found = b.find_matches_for_request(&[1, 2]).scores;
    assert_eq!((found.get(&r0), found.get(&r1)), (Some(&2), None));
    a.remove_worker(7);
    sync(&a);
    let found = b.find_matches_for_request(&[1, 2]).scores;
    assert_eq!(found.keys().copied().collect::<Vec<_>>(), vec![other]);
}

#[test]
fn a_replica_restarted_with_its_id_gets_its_old_decisions_back() {
    let c = clock();
    let before = replica(1, &c);
    before.process_routing_decision_for_request(&[1, 2], 5);
    let retained = drain(&before); // what a stream would replay
    drop(before);
    c.advance(Duration::from_secs(1));
    let after = replica(1, &c); // same id, numbered from its own start
    after.process_routing_decision_for_request(&[7], 5);
    for d in retained.iter().chain(&drain(&after)) {
        after.apply_decision(d);
    }
    assert_eq!(score(&after, &[1, 2], 5), Some(2));
    let s = after.replication_stats();
    assert_eq!(s.applied, 1); // the old decision; its own new one is skipped
}

/// Sequence numbers from an untrusted stream can skip nearly 2^64 at once, twice in one
/// batch: counted alike one by one and in a batch (as restarts: more numbers than the
/// decisions' times allow), and nothing panics (an overflowing sum of gaps did, in debug
/// builds, before).
#[test]
fn jumps_of_nearly_2_pow_64_count_alike_in_a_batch() {
    let (c1, c2) = (clock(), clock());
    let (one_by_one, batched) = (replica(9, &c1), replica(9, &c2));
    let removal = |origin, seq| Decision {
        origin,
        seq,
        decided_at: EPOCH,
        action: Action::RemoveWorker { worker_id: 1 },
    };
    let stream = [
        removal(0, 0),
        removal(1, 0),
        removal(0, u64::MAX - 1),
        removal(1, u64::MAX - 1),
    ];
    for d in &stream {
        assert_eq!(one_by_one.apply_decision(d), Applied::Applied);
    }
    assert_eq!(batched.apply_decisions(&stream), [Applied::Applied; 4]);
    for stats in [one_by_one.replication_stats(), batched.replication_stats()] {
        assert_eq!((stats.gaps, stats.restarts), (0, 2), "{stats:?}");
    }
}

/// Decisions from a few origins (one of them the receiver's own id), about a few workers,
/// over prompts that share prefixes, dated from far in the past to the future.
fn arb_decision_stream() -> impl Strategy<Value = Vec<Decision>> {
    let action = prop_oneof![
        6 => (0..4u64, 0..2u32, prop::collection::vec(0..3u64, 0..12)).prop_map(|(w, r, b)| {
            Action::Route {
                worker_id: w,
                dp_rank: r,
                blocks: b.into_iter().map(LocalBlockHash).collect(),
            }
        }),
        1 => (0..4u64).prop_map(|w| Action::RemoveWorker { worker_id: w }),
        1 => (0..4u64, 0..2u32).prop_map(|(w, r)| Action::RemoveKey { worker_id: w, dp_rank: r }),
    ];
    // Numbers near u64::MAX from origin 2 are the receiver's own (taken since it was
    // built); low ones from origin 2 are those of an earlier run of it.
    let decision = (0..3u64, 0..30u64, any::<bool>(), 0..30u64, action).prop_map(
        |(origin, seq, high, secs, action)| Decision {
            origin,
            seq: if high { u64::MAX - seq } else { seq },
            decided_at: EPOCH + Duration::from_secs(5) - Duration::from_secs(secs / 2),
            action,
        },
    );
    prop::collection::vec(decision, 0..60)
}

proptest! {
    /// `apply_decisions` is `apply_decision` of each, in order: same outcomes, same index.
    #[test]
    fn a_batch_applies_as_its_decisions_one_by_one(
        stream in arb_decision_stream(),
        cuts in prop::collection::vec(0..70usize, 0..6),
    ) {
        let (c1, c2) = (clock(), clock());
        let (one_by_one, batched) = (replica(2, &c1), replica(2, &c2));
        let expected: Vec<Applied> = stream.iter().map(|d| one_by_one.apply_decision(d)).collect();
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(stream.len())).collect();
        cuts.push(stream.len());
        cuts.sort_unstable();
        let (mut outcomes, mut from) = (Vec::new(), 0);
        for to in cuts {
            outcomes.extend(batched.apply_decisions(&stream[from..to]));
            from = to;
        }
        prop_assert_eq!(outcomes, expected);
        prop_assert_eq!(batched.snapshot(), one_by_one.snapshot());
        // Heap estimates differ with each index's random hash keys (its maps' layout).
        let counts = |i: &ApproxKvIndexer| {
            let mut stats = i.stats();
            stats.estimated_bytes = 0;
            stats
        };
        prop_assert_eq!(counts(&batched), counts(&one_by_one));
        let (a, b) = (batched.replication_stats(), one_by_one.replication_stats());
        prop_assert_eq!((a.applied, a.duplicates, a.expired, a.gaps), (b.applied, b.duplicates, b.expired, b.gaps));
        prop_assert_eq!((a.restarts, a.superseded), (b.restarts, b.superseded));
        prop_assert_eq!((a.lag_p50, a.lag_p99), (b.lag_p50, b.lag_p99));
    }
}

/// src/replication/decision.rs, `Action::SetCapacity` and `Action::DropOlder`: capacity
/// changes (set, or learned from a report) and a report's loss are decisions the other
/// replicas apply.
#[test]
fn capacities_and_losses_reach_the_other_replicas() {
    let clock = clock();
    let a = replica(1, &clock);
    let b = replica(2, &clock);
    a.set_worker_capacity(5, Some(40));
    a.record(5, Query::tokens(&tokens(100, 3))).unwrap(); // used first
    clock.advance(Duration::from_secs(1));
    a.record(5, Query::tokens(&tokens(0, 4))).unwrap(); // its last use before
    clock.advance(Duration::from_secs(1));
    let request = a.begin_request(5, &tokens(0, 4));
    clock.advance(Duration::from_secs(1));
    assert!(a.observe_cached(&request, 1)); // lost block 1: [100..103) goes too
    let decisions: Vec<_> = std::iter::from_fn(|| a.outbox().unwrap().pop()).collect();
    let kinds: Vec<_> = decisions
        .iter()
        .map(|d| match &d.action {
            Action::SetCapacity { capacity, .. } => format!("capacity {capacity:?}"),
            Action::DropOlder { used_before, .. } => format!("drop {used_before:?}"),
            Action::Route { .. } => "route".to_owned(),
            other => format!("{other:?}"),
        })
        .collect();
    // The loss was well inside 40: the capacity drops by an eighth.
    assert_eq!(
        kinds,
        [
            "capacity Some(40)",
            "route",
            "route",
            "route",
            "drop 2s",
            "capacity Some(35)"
        ]
    );
    for d in &decisions {
        assert_eq!(b.apply_decision(d), Applied::Applied, "{d:?}");
    }
    assert_eq!(b.worker_capacity(5), Some(35));
    let found =
        |index: &ApproxKvIndexer, t: &[u32]| index.find(Query::tokens(t)).scores.get(&5).copied();
    assert_eq!(
        found(&b, &tokens(100, 3)),
        None,
        "the older claims went on b too"
    );
    assert_eq!(
        found(&b, &tokens(0, 4)),
        Some(4),
        "the request's decision came later"
    );
    assert_eq!(found(&a, &tokens(100, 3)), None);
}

/// A ghost hit's raise of the workers on the same capacity (`src/core/learn.rs`) reaches
/// the other replicas as a capacity change of each.
#[test]
fn a_raise_of_peers_reaches_the_other_replicas() {
    let clock = clock();
    let a = replica(1, &clock);
    let b = replica(2, &clock);
    for worker in [5, 6, 7] {
        a.set_worker_capacity(worker, Some(4));
    }
    a.record(5, Query::tokens(&tokens(0, 4))).unwrap();
    clock.advance(Duration::from_secs(1));
    a.record(5, Query::tokens(&tokens(100, 2))).unwrap(); // evicts 2 of [0..4)
    let request = a.begin_request(5, &tokens(0, 4));
    assert!(a.observe_cached(&request, 4)); // the engine still had them: ghosts
    let decisions: Vec<_> = std::iter::from_fn(|| a.outbox().unwrap().pop()).collect();
    let capacities: Vec<_> = decisions
        .iter()
        .filter_map(|d| match &d.action {
            Action::SetCapacity {
                worker_id,
                capacity,
                ..
            } => Some((*worker_id, *capacity)),
            _ => None,
        })
        .collect();
    assert_eq!(capacities[3..], [(5, Some(8)), (6, Some(8)), (7, Some(8))]);
    for d in &decisions {
        assert_eq!(b.apply_decision(d), Applied::Applied, "{d:?}");
    }
    for worker in [5, 6, 7] {
        assert_eq!(b.worker_capacity(worker), Some(8), "worker {worker}");
    }
}
