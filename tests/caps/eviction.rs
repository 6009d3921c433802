//! Eviction under the caps: the least recently recorded decisions go first, deepest blocks
//! first; refreshed prompts survive; caps are per worker; zero is an error; capacity-only
//! mode keeps no timers; the global cap holds under a flood from many threads and keeps the
//! newest prompts; same-instant decisions are ordered; the per-worker cap holds with a
//! clock at the end of time.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use approx_kv_index::*;

use crate::support::index::tokens;

/// A block-size-1 index with the given caps on a manual clock of its own, which stands
/// still unless a test moves it (decisions at one clock reading are still ordered: see
/// `same_instant_decisions_are_ordered`).
fn capped(per_worker: Option<usize>, total: Option<usize>, ttl: Duration) -> ApproxKvIndexer {
    capped_on(per_worker, total, ttl, Arc::new(ManualClock::new()))
}

/// As `capped`, on `clock`.
fn capped_on(
    per_worker: Option<usize>,
    total: Option<usize>,
    ttl: Duration,
    clock: Arc<ManualClock>,
) -> ApproxKvIndexer {
    crate::support::index::capped_on(&clock, ttl, per_worker, total)
}

#[test]
fn per_worker_cap_evicts_least_recently_recorded_deepest_first() {
    let clock = Arc::new(ManualClock::new());
    let index = capped_on(Some(4), None, Duration::MAX, clock.clone());
    let (a, b) = (tokens(0, 3), tokens(100, 3));
    index.process_routing_decision_for_request(&a, 1);
    clock.advance(Duration::from_micros(1));
    index.process_routing_decision_for_request(&b, 1);
    // 6 blocks, cap 4: A is older, so its two deepest blocks go.
    assert_eq!(index.find_matches_for_request(&a).scores[&1], 1);
    assert_eq!(index.find_matches_for_request(&b).scores[&1], 3);
    assert_eq!(index.stats().entries, 4);
    assert_eq!(index.stats().evictions, 2);
    // Refreshing B's prefix makes it newer than B's leaf.
    clock.advance(Duration::from_micros(1));
    index.process_routing_decision_for_request(&b[..1], 1);
    clock.advance(Duration::from_micros(1));
    index.process_routing_decision_for_request(&tokens(200, 2), 1); // 2 more blocks

    // Over by 2: A's last block (oldest), then B's deepest block.
    let found_b = index.find_matches_for_request(&b).scores[&1];
    assert!(!index.find_matches_for_request(&a).scores.contains_key(&1));
    assert_eq!(found_b, 2);
    assert_eq!(index.stats().entries, 4);
}

#[test]
fn refreshed_prompts_survive_eviction() {
    let clock = Arc::new(ManualClock::new());
    let index = capped_on(Some(6), None, Duration::MAX, clock.clone());
    let hot = tokens(0, 3);
    for i in 0..100u32 {
        clock.advance(Duration::from_micros(1));
        index.process_routing_decision_for_request(&hot, 9);
        clock.advance(Duration::from_micros(1));
        index.process_routing_decision_for_request(&tokens(1_000 + i * 10, 3), 9);
        assert_eq!(
            index.find_matches_for_request(&hot).scores[&9],
            3,
            "round {i}"
        );
        assert!(index.stats().entries <= 6);
    }
}

#[test]
fn caps_apply_per_worker() {
    let index = capped(Some(3), None, Duration::from_secs(60));
    for w in 0..5 {
        index.process_routing_decision_for_request(&tokens(0, 10), w);
    }
    assert_eq!(index.stats().entries, 15);
    let found = index.find_matches_for_request(&tokens(0, 10));
    assert!(found.scores.values().all(|&s| s == 3));
    assert!(found.tree_sizes.values().all(|&s| s == 3));
}

#[test]
fn zero_capacity_is_an_error() {
    let b = ApproxKvIndexer::builder;
    assert_eq!(
        b().max_blocks_per_worker(0).build().unwrap_err(),
        ConfigError::ZeroCapacity
    );
    assert_eq!(
        b().max_entries(0).build().unwrap_err(),
        ConfigError::ZeroCapacity
    );
}

#[test]
fn capacity_only_mode_keeps_no_timers_and_reclaims_removed_workers() {
    let index = capped(Some(100), None, Duration::MAX);
    for i in 0..50 {
        index.process_routing_decision_for_request(&tokens(i * 10, 5), 1);
    }
    assert_eq!(index.stats().pending_timers, 0);
    assert_eq!(index.stats().entries, 100);
    index.remove_worker(1);
    index.sweep_expired();
    assert_eq!(index.stats().entries, 0);
    assert_eq!(index.stats().nodes, 0);
}

/// Floods an index capped at N entries with 100 x N unique blocks from 8 threads; a
/// watcher checks the cap while they run. Documented slack: each in-flight record may
/// add its prompt's blocks before it evicts, so THREADS * PROMPT. The prompts recorded
/// last match fully (eviction takes the least recently recorded first). (A thread's own
/// prompt may legitimately be gone by the time it looks: on 2 cores, 7 other threads can
/// record past the cap while it is preempted between its record and its find.)
#[test]
fn global_cap_holds_under_a_flood_from_many_threads() {
    const N: usize = 2_000;
    const THREADS: u64 = 8;
    const PROMPT: u32 = 10;
    let index = Arc::new(capped(None, Some(N), Duration::from_secs(3_600)));
    let stop = Arc::new(AtomicBool::new(false));
    let worst = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (index, stop, worst) = (index.clone(), stop.clone(), worst.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                worst.fetch_max(index.stats().entries, Ordering::Relaxed);
            }
        })
    };
    let barrier = Arc::new(Barrier::new(THREADS as usize));
    let per_thread = (100 * N as u32) / (PROMPT * THREADS as u32);
    let writers: Vec<_> = (0..THREADS)
        .map(|w| {
            let (index, barrier) = (index.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                for i in 0..per_thread {
                    let prompt = tokens((w as u32 * per_thread + i) * PROMPT + 1_000_000, PROMPT);
                    index.process_routing_decision_for_request(&prompt, w);
                    let found = index.find_matches_for_request(&prompt);
                    assert!(found.scores.values().all(|&s| s <= PROMPT));
                }
            })
        })
        .collect();
    for h in writers {
        h.join().unwrap();
    }
    let lasts: Vec<_> = (0..20u32).map(|i| tokens(i * PROMPT, PROMPT)).collect();
    for (w, prompt) in lasts.iter().enumerate() {
        index.process_routing_decision_for_request(prompt, w as u64 % THREADS);
    }
    stop.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    let slack = THREADS as usize * PROMPT as usize;
    let stats = index.stats();
    assert!(stats.entries <= N, "after the flood: {stats:?}");
    assert!(
        worst.load(Ordering::Relaxed) <= N + slack,
        "worst {}",
        worst.load(Ordering::Relaxed)
    );
    assert!(stats.evictions as usize >= 99 * N);
    for (w, last) in lasts.iter().enumerate() {
        let found = index.find_matches_for_request(last);
        assert_eq!(found.scores.get(&(w as u64 % THREADS)), Some(&PROMPT));
    }
}

#[test]
fn global_cap_single_thread_keeps_the_newest() {
    let index = capped(None, Some(40), Duration::from_secs(3_600));
    for i in 0..200u32 {
        let w = u64::from(i % 3);
        let prompt = tokens(i * 10 + 1_000_000, 10);
        index.process_routing_decision_for_request(&prompt, w);
        let found = index.find_matches_for_request(&prompt);
        assert_eq!(
            found.scores.get(&w),
            Some(&10),
            "prompt {i}: {:?}",
            index.stats()
        );
        assert!(index.stats().entries <= 40);
        if i >= 3 {
            let prev = tokens((i - 3) * 10 + 1_000_000, 10);
            let w = u64::from((i - 3) % 3);
            assert_eq!(
                index.find_matches_for_request(&prev).scores.get(&w),
                Some(&10),
                "prompt {i}-3"
            );
        }
    }
}

/// Decisions of one worker at the same clock reading are still ordered (each gets an
/// expiry a nanosecond later than the last): the older one is evicted first.
#[test]
fn same_instant_decisions_are_ordered() {
    let index = capped(Some(3), None, Duration::MAX);
    index.process_routing_decision_for_request(&tokens(0, 2), 1);
    index.process_routing_decision_for_request(&tokens(10, 2), 1);
    assert_eq!(index.stats().entries, 3);
    assert_eq!(index.find_matches_for_request(&tokens(10, 2)).scores[&1], 2);
    assert_eq!(index.find_matches_for_request(&tokens(0, 2)).scores[&1], 1);
}

/// At a clock near the end of time, expiries saturate at 2^64 - 1 ns and no longer tell a
/// worker's decisions apart; the per-worker cap must hold all the same (a recorder's
/// fresh decision is then not told apart from older ones, and is not protected).
#[test]
fn per_worker_cap_holds_with_a_clock_at_the_end_of_time() {
    for ttl in [Duration::from_secs(60), Duration::MAX] {
        let clock = Arc::new(ManualClock::new());
        clock.set(Duration::from_nanos(u64::MAX - 1_000));
        let index = capped_on(Some(4), None, ttl, clock.clone());
        for n in 0..5 {
            index.process_routing_decision_for_request(&tokens(100 * n, 4), 1);
            assert!(
                index.stats().entries <= 4,
                "{ttl:?} {n}: {:?}",
                index.stats()
            );
        }
        assert_eq!(index.stats().entries, 4);
    }
}

/// After a `Removed` event took a middle block out of a decision, the cap still evicts
/// that decision deepest first: the blocks above the gap (which no find reaches) before
/// the leading ones, per-worker cap, global cap and a capacity alike.
#[test]
fn a_removal_in_the_middle_leaves_eviction_deepest_first() {
    let prompt = tokens(1, 8);
    let (_, seq) = crate::support::index::chain(&prompt, 1);
    let never = Duration::MAX;
    for (per_worker, total, capacity, ttl) in [
        (Some(8), None, None, Duration::from_secs(60)),
        (None, Some(8), None, Duration::from_secs(60)),
        (None, None, Some(8), never),
    ] {
        let clock = Arc::new(ManualClock::new());
        let index = capped_on(per_worker, total, ttl, clock.clone());
        index.set_worker_capacity(0, capacity);
        index.record(0, Query::tokens(&prompt)).unwrap();
        clock.advance(Duration::from_millis(1));
        let removed = crate::support::events::removed_event(0, &[seq[4].0]);
        index.apply_event(&removed); // blocks 0..4 lead, 5..7 above the gap
        clock.advance(Duration::from_millis(1));
        index.record(0, Query::tokens(&[100, 101, 102])).unwrap(); // 10: two go
        assert_eq!(index.worker_entries(0), 8);
        let held = index.find(Query::tokens(&prompt)).scores[&0];
        assert_eq!(
            held, 4,
            "{per_worker:?} {total:?} {capacity:?}: 7 and 6 go first"
        );
    }
}

/// Under `max_entries` alone, the first capacity (of any worker) keeps every decision's
/// expiry and the global order: no older path is raised past the worker's newest decision.
#[test]
fn a_first_capacity_under_the_global_cap_keeps_ttls_and_order() {
    let clock = Arc::new(ManualClock::new());
    let index = capped_on(None, Some(1000), Duration::from_secs(60), clock.clone());
    index.record(1, Query::tokens(&[1, 2])).unwrap(); // at 0 s
    clock.set(Duration::from_secs(59));
    index.record(1, Query::tokens(&[1, 3])).unwrap(); // block 2 not refreshed
    index.set_worker_capacity(9, Some(100));
    clock.set(Duration::from_secs(61));
    assert_eq!(
        index.find(Query::tokens(&[1, 2])).scores[&1],
        1,
        "block 2 expired at 60 s"
    );

    let clock = Arc::new(ManualClock::new());
    let index = capped_on(None, Some(6), Duration::MAX, clock.clone());
    let step = || clock.advance(Duration::from_micros(1));
    index.record(1, Query::tokens(&[1, 2])).unwrap(); // w1 {1, 2}
    step();
    index.record(2, Query::tokens(&[1])).unwrap(); // w2 {1}
    step();
    index.record(1, Query::tokens(&[1, 3, 4])).unwrap(); // w1's block 2 is the oldest
    step();
    index.set_worker_capacity(9, Some(100));
    step();
    index.record(5, Query::tokens(&[100])).unwrap(); // 6 entries
    step();
    index.record(5, Query::tokens(&[101])).unwrap(); // 7: the oldest goes
    assert_eq!(index.stats().entries, 6);
    assert_eq!(index.find(Query::tokens(&[1])).scores.get(&2), Some(&1));
    assert_eq!(
        index.find(Query::tokens(&[1, 2])).scores[&1],
        1,
        "w1's block 2 went"
    );
}
