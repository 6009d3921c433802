//! Workers' capacities set at run time (`set_worker_capacity`): each key's own bound,
//! least recently recorded decisions evicted first, deepest blocks first; a lower capacity
//! evicts at once; `None` falls back to the index-wide cap; exact entries count and stay.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use approx_kv_index::*;

use crate::support::events::stored_event;
use crate::support::index::{capped_on, tokens};
use crate::support::traffic::{left_broken, record_prompts};

const TTL: Duration = Duration::from_secs(60);

/// A block-size-1 index with no cap on a manual clock that ticks 1 µs between decisions.
fn index() -> (ApproxKvIndexer, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    (capped_on(&clock, TTL, None, None), clock)
}

fn score(index: &ApproxKvIndexer, prompt: &[u32], worker: u64) -> u32 {
    let found = index.find(Query::tokens(prompt));
    found.scores.get(&worker).copied().unwrap_or(0)
}

#[test]
fn each_key_is_bounded_by_its_own_capacity() {
    let (index, clock) = index();
    index.set_worker_capacity(1, Some(3));
    index.set_worker_capacity(2, Some(5));
    for start in [0, 100, 200] {
        for w in [1, 2, 3] {
            index.record(w, Query::tokens(&tokens(start, 4))).unwrap();
            clock.advance(Duration::from_micros(1));
        }
    }
    assert_eq!(index.worker_entries(1), 3);
    assert_eq!(index.worker_entries(2), 5);
    assert_eq!(index.worker_entries(3), 12, "no capacity: no bound");
    // The newest decision's leading blocks stay; older ones go, deepest first.
    assert_eq!(score(&index, &tokens(200, 4), 1), 3);
    assert_eq!(score(&index, &tokens(200, 4), 2), 4);
    assert_eq!(score(&index, &tokens(100, 4), 2), 1);
    assert_eq!(score(&index, &tokens(0, 4), 2), 0);
    assert_eq!(index.stats().evictions, (12 - 3) + (12 - 5));
    assert_eq!(
        (index.worker_capacity(1), index.worker_capacity(3)),
        (Some(3), None)
    );
}

#[test]
fn a_lower_capacity_evicts_at_once_and_a_higher_one_brings_nothing_back() {
    let (index, clock) = index();
    index.set_worker_capacity(7, Some(100));
    for start in [0, 100] {
        index.record(7, Query::tokens(&tokens(start, 4))).unwrap();
        clock.advance(Duration::from_micros(1));
    }
    assert_eq!(index.worker_entries(7), 8);
    index.set_worker_capacity(7, Some(3));
    assert_eq!(index.worker_entries(7), 3);
    assert_eq!(
        score(&index, &tokens(0, 4), 7),
        0,
        "the older decision went first"
    );
    assert_eq!(
        score(&index, &tokens(100, 4), 7),
        3,
        "then the newer one's deepest block"
    );
    index.set_worker_capacity(7, Some(100));
    assert_eq!(index.worker_entries(7), 3);
    index.record(7, Query::tokens(&tokens(100, 4))).unwrap();
    assert_eq!(score(&index, &tokens(100, 4), 7), 4, "a record refills it");
    // Zero blocks: nothing approximate stays, not even the decision just recorded.
    index.set_worker_capacity(7, Some(0));
    assert_eq!(index.worker_entries(7), 0);
    index.record(7, Query::tokens(&tokens(300, 2))).unwrap();
    assert_eq!(index.worker_entries(7), 0);
    assert!(index.find(Query::tokens(&tokens(300, 2))).scores.is_empty());
}

#[test]
fn a_capacity_replaces_the_per_worker_cap_and_none_brings_the_cap_back() {
    let clock = Arc::new(ManualClock::new());
    let index = capped_on(&clock, TTL, Some(4), None);
    index.set_worker_capacity(1, Some(8));
    index.record(1, Query::tokens(&tokens(0, 8))).unwrap();
    index.record(2, Query::tokens(&tokens(0, 8))).unwrap();
    assert_eq!((index.worker_entries(1), index.worker_entries(2)), (8, 4));
    index.set_worker_capacity(1, None);
    assert_eq!(index.worker_capacity(1), None);
    assert_eq!(
        index.worker_entries(1),
        4,
        "back under the per-worker cap at once"
    );
    assert_eq!(score(&index, &tokens(0, 8), 1), 4);
}

#[test]
fn a_key_never_recorded_is_bounded_from_its_first_decision() {
    let (index, _) = index();
    index.set_worker_capacity(42, Some(2));
    assert_eq!(index.worker_capacity(42), Some(2));
    index.set_worker_capacity(43, Some(usize::MAX));
    assert_eq!(index.worker_capacity(43), Some(usize::MAX));
    assert_eq!(index.worker_entries(42), 0);
    index.record(42, Query::tokens(&tokens(0, 5))).unwrap();
    assert_eq!(index.worker_entries(42), 2);
    assert_eq!(score(&index, &tokens(0, 5), 42), 2);
}

#[test]
fn removing_a_worker_forgets_its_capacity() {
    let (index, _) = index();
    index.set_worker_capacity(5, Some(1));
    index.record(5, Query::tokens(&tokens(0, 3))).unwrap();
    assert_eq!(index.worker_entries(5), 1);
    index.remove_worker(5);
    assert_eq!(index.worker_capacity(5), None);
    index.record(5, Query::tokens(&tokens(0, 3))).unwrap();
    assert_eq!(
        index.worker_entries(5),
        3,
        "a new registration has no capacity"
    );
}

#[test]
fn exact_entries_count_and_are_never_evicted() {
    let (index, clock) = index();
    index.set_worker_capacity(9, Some(100));
    let stored = tokens(500, 3);
    let local = compute_block_hash_for_seq(&stored, 1);
    let seq = compute_seq_hashes(&local);
    let blocks: Vec<(u64, u64)> = local.iter().zip(&seq).map(|(l, s)| (l.0, s.0)).collect();
    index.apply_event(&stored_event(9, None, &blocks));
    index.record(9, Query::tokens(&tokens(0, 2))).unwrap();
    clock.advance(Duration::from_micros(1));
    assert_eq!(index.worker_entries(9), 5);
    index.set_worker_capacity(9, Some(2));
    assert_eq!(
        index.worker_entries(9),
        3,
        "the decision went; the exact entries stay"
    );
    assert_eq!(score(&index, &stored, 9), 3);
    assert_eq!(score(&index, &tokens(0, 2), 9), 0);
}

#[test]
fn ranks_have_capacities_of_their_own() {
    let index = ApproxKvIndexer::builder()
        .block_size(1)
        .background_sweeper(false)
        .build_for::<WorkerWithDpRank>()
        .unwrap();
    let (r0, r1) = (WorkerWithDpRank::new(3, 0), WorkerWithDpRank::new(3, 1));
    index.set_worker_capacity(r1, Some(1));
    index.record(r0, Query::tokens(&tokens(0, 4))).unwrap();
    index.record(r1, Query::tokens(&tokens(0, 4))).unwrap();
    assert_eq!(index.worker_entries(3), 5);
    assert_eq!(
        (index.worker_capacity(r0), index.worker_capacity(r1)),
        (None, Some(1))
    );
}

/// Decisions recorded before the index's first capacity was set are logged when it is
/// (each worker's leaves, in expiry order): a lower capacity evicts them at once, and two
/// prompts recorded at one instant sharing a prefix leave it whole to the one kept.
#[test]
fn decisions_before_the_first_capacity_are_evicted_in_order_too() {
    let (index, clock) = index();
    index.record(1, Query::tokens(&tokens(0, 5))).unwrap();
    clock.advance(Duration::from_micros(1));
    index.record(1, Query::tokens(&tokens(100, 3))).unwrap();
    let mut forked = tokens(200, 4);
    index.record(2, Query::tokens(&forked)).unwrap();
    forked[3] = 999; // the same instant: both leaves expire together
    index.record(2, Query::tokens(&forked)).unwrap();
    index.set_worker_capacity(1, Some(3));
    assert_eq!(index.worker_entries(1), 3, "evicted at once, oldest first");
    assert_eq!(score(&index, &tokens(0, 5), 1), 0);
    assert_eq!(score(&index, &tokens(100, 3), 1), 3);
    index.set_worker_capacity(2, Some(4));
    assert_eq!(index.worker_entries(2), 4);
    // One leaf went, and its prefix stayed with the other: every block kept has its parent.
    let kept: Vec<u32> = [tokens(200, 4), forked.clone()]
        .iter()
        .map(|p| score(&index, p, 2))
        .collect();
    assert!(kept == [4, 3] || kept == [3, 4], "{kept:?}");
    for event in index.dump_events() {
        let KvCacheEventData::Stored(data) = &event.data else {
            continue;
        };
        if let Some(parent) = data.parent_hash {
            let dump = index.dump_events();
            let has_parent = dump.iter().any(|e| {
                e.worker_id == event.worker_id
                    && matches!(&e.data, KvCacheEventData::Stored(d)
                        if d.blocks.iter().any(|b| b.block_hash == parent))
            });
            assert!(has_parent, "a hole below {parent:?}");
        }
    }
}

/// Found by `learning_props`: the first capacity logged only leaves, so a decision that
/// ended above an older, deeper one (a prompt re-recorded one block shorter) was in no log
/// and never evicted; a request's release then evicted its parent and left it above a gap.
#[test]
fn a_decision_that_ended_above_an_older_one_is_evicted_in_its_turn() {
    let (index, clock) = index();
    index.record(1, Query::tokens(&tokens(0, 5))).unwrap();
    clock.advance(Duration::from_micros(1));
    index.record(1, Query::tokens(&tokens(0, 4))).unwrap(); // ends above block 4
    index.set_worker_capacity(1, Some(2));
    assert_eq!(index.worker_entries(1), 2, "block 4, then blocks 3 and 2");
    assert_eq!(score(&index, &tokens(0, 5), 1), 2);

    let (index, clock) = self::index();
    index.record(1, Query::tokens(&tokens(0, 5))).unwrap();
    clock.advance(Duration::from_micros(1));
    index.record(1, Query::tokens(&tokens(0, 4))).unwrap();
    let request = index.begin_request(1, &tokens(0, 3));
    index.set_worker_capacity(1, Some(2)); // blocks 4 and 3 go; 0..3 are pinned
    assert_eq!(index.worker_entries(1), 3);
    index.finish_request(request); // the release evicts block 2: no block 3 above a gap
    assert_eq!(index.worker_entries(1), 2);
    assert_eq!(score(&index, &tokens(0, 4), 1), 2);
}

/// Many threads recording for one worker with a capacity: once they are done, the worker
/// is within it ("never stays above it").
#[test]
fn a_capacity_holds_once_concurrent_writers_are_done() {
    let index = Arc::new(
        ApproxKvIndexer::builder()
            .block_size(1)
            .ttl(TTL)
            .background_sweeper(false)
            .build()
            .unwrap(),
    );
    index.set_worker_capacity(1, Some(50));
    let threads = 4;
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads as u32)
        .map(|t| {
            let (index, start) = (Arc::clone(&index), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                for i in 0..300 {
                    let prompt = tokens(t * 1_000_000 + i * 10, 1 + i % 7);
                    index.record(1, Query::tokens(&prompt)).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    index
        .record(1, Query::tokens(&tokens(9_999_999, 1)))
        .unwrap();
    assert!(index.worker_entries(1) <= 50, "{}", index.worker_entries(1));
}

/// src/snapshot.rs, `Snapshot::capacities`: "The capacities of registered workers that had
/// one (set, or learned from reports)".
#[test]
fn capacities_travel_with_snapshots() {
    let (index, clock) = index();
    index.set_worker_capacity(1, Some(3));
    index.set_worker_capacity(2, Some(7));
    index.set_worker_capacity(3, None);
    index.record(1, Query::tokens(&tokens(0, 3))).unwrap();
    let snapshot = Snapshot::from_bytes(&index.snapshot().to_bytes()).unwrap();
    let caps: Vec<_> = snapshot
        .capacities
        .iter()
        .map(|c| (c.worker_id, c.blocks))
        .collect();
    assert_eq!(caps, [(1, 3), (2, 7)]);
    let restored = capped_on(&clock, TTL, None, None);
    restored.restore(&snapshot).unwrap();
    assert_eq!(restored.worker_capacity(1), Some(3));
    assert_eq!(restored.worker_capacity(2), Some(7));
    assert_eq!(restored.worker_capacity(3), None);
    // The capacity binds the restored worker.
    restored.record(1, Query::tokens(&tokens(100, 2))).unwrap();
    assert_eq!(restored.worker_entries(1), 3);
}

/// design.md, Bounded memory, "Expired, not yet swept": entries count toward a capacity
/// until the sweeper frees them, and a capacity set after they expired cannot evict them;
/// the excess is expired (no find reports it) and goes at the next sweep. (Found by an
/// audit comparing a replica with its origin.)
#[test]
fn expired_entries_count_until_the_sweep_frees_them() {
    let (index, clock) = index();
    index.record(1, Query::tokens(&tokens(0, 3))).unwrap();
    index.record(1, Query::tokens(&tokens(10, 3))).unwrap();
    clock.advance(TTL + Duration::from_secs(1));
    index.set_worker_capacity(1, Some(5));
    assert_eq!(index.worker_entries(1), 6, "expired, not yet swept");
    assert_eq!(score(&index, &tokens(0, 3), 1), 0);
    index.record(1, Query::tokens(&tokens(20, 2))).unwrap();
    assert_eq!(
        score(&index, &tokens(20, 2), 1),
        2,
        "the fresh decision whole"
    );
    assert_eq!(
        index.worker_entries(1),
        8,
        "above the capacity by expired entries"
    );
    index.sweep_expired();
    assert_eq!(index.worker_entries(1), 2);
}

/// The first capacity set while other threads record (each its own worker) logs every
/// decision held: logging reads the tree with runs' blocks kept in place (cuts and splits
/// wait), so no block of a run being cut is missed, which no log would then name: held
/// above a gap, or past its turn for good. Reading the tree without that turn, 9 to 14 of
/// these 60 runs failed (release and debug builds); with it, 0 or 1 (`docs/design.md`,
/// Bounded memory, the race left), which the bound allows.
#[test]
fn a_first_capacity_set_during_traffic_logs_every_decision_held() {
    const RUNS: u64 = 60;
    let failed: Vec<String> = (0..RUNS).filter_map(first_capacity_race).collect();
    assert!(
        failed.len() <= 3,
        "{} of {RUNS} runs: {failed:?}",
        failed.len()
    );
}

/// One run: 3 threads record their own worker's prompts (2-token blocks from 3 values, so
/// prompts share prefixes and cut each other's runs) on a never-expiring index without
/// caps, while a fourth sets each worker's capacity to 6 at a random moment. `Some(why)`
/// if a worker holds a block above a gap, or does not hold its 6 newest one-block
/// decisions after 100 more.
fn first_capacity_race(seed: u64) -> Option<String> {
    use approx_kv_rng::SplitMix64;
    let clock = Arc::new(ManualClock::new());
    let mut b = ApproxKvIndexer::builder()
        .block_size(2)
        .ttl(Duration::MAX)
        .clock(clock.clone())
        .background_sweeper(false);
    b = b.tick(Duration::from_millis(100));
    let index = Arc::new(b.build().unwrap());
    let start = Arc::new(Barrier::new(4));
    let recorders: Vec<_> = (0..3u64)
        .map(|worker| {
            let (index, start, clock) = (index.clone(), start.clone(), clock.clone());
            thread::spawn(move || {
                let mut rng = SplitMix64::new(seed * 10 + worker);
                start.wait();
                record_prompts(&index, &clock, &mut rng, |_| worker);
            })
        })
        .collect();
    let mut rng = SplitMix64::new(seed);
    start.wait();
    for _ in 0..rng.below(2000) {
        std::hint::spin_loop();
    }
    for worker in 0..3 {
        index.set_worker_capacity(worker, Some(6));
    }
    recorders.into_iter().for_each(|r| r.join().unwrap());
    left_broken(&index, 3, 6).map(|why| format!("seed {seed}: {why}"))
}
