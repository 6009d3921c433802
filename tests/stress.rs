//! Stress: many threads (4x the cores, at least 8) doing random operations on one index
//! with a short TTL on a shared `ManualClock`, checking invariants while they run, then
//! checking that everything is reclaimed and that no thread outlives the index.
//!
//! Runs for `APPROX_KV_STRESS_MS` milliseconds of real time (default 2500).
//!
//! Invariants checked while running:
//! - read your writes: a thread's own worker (recorded and removed only by that thread)
//!   scores the full prompt right after the thread recorded it, unless the shared clock
//!   passed the TTL in between (checked from clock readings taken around the calls);
//! - remove is linearizable: right after a thread removes its own worker, no find
//!   reports it;
//! - no score exceeds the query's block count; `tree_sizes` has exactly the scored workers;
//! - dumps (not snapshots) have the documented shape.
//!
//! After the threads stop: the clock passes the TTL, one sweep empties the index
//! (entries, nodes, pending timers all 0), and dropping it leaves no sweeper thread.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use approx_kv_index::{ApproxKvIndexer, Clock, KvCacheEventData, ManualClock, WorkerId};

const BLOCK: u32 = 4;
/// TTL in nanoseconds of the manual clock.
const TTL: u64 = 2_000_000;
/// Largest single clock step: a hundredth of the TTL.
const MAX_STEP: u64 = TTL / 100;
/// Shared workers, recorded and removed by every thread.
const SHARED: u64 = 4;
/// Private workers per thread: ids `1000 + 8 * thread + k`.
const PRIVATE: u64 = 3;

/// The two tests of this file both count sweeper threads: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// xorshift64*: a tiny deterministic generator (seeded per thread).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Threads of this process named like the sweeper (`comm` is cut to 15 bytes).
fn sweeper_threads() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "approx-kv-sweep")
        .count()
}

/// Waits until exactly `n` sweeper threads are listed, or 5 s pass. A joined thread may
/// stay listed for a moment while the kernel reaps it, and a new one names itself after
/// it starts; this is not synchronisation with the index, which has already joined (or
/// spawned) it.
fn settle_sweepers(n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = sweeper_threads();
        if now == n || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A prompt: one of four shared "system prompts" and a random tail, so threads meet
/// on the same nodes.
fn prompt(rng: &mut Rng) -> Vec<u32> {
    let system = rng.below(4) as u32;
    let mut tokens: Vec<u32> = (0..8).map(|i| system * 100 + i).collect();
    let tail = rng.below(13);
    tokens.extend((0..tail).map(|_| rng.below(4) as u32));
    tokens
}

#[derive(Default)]
struct Counts {
    own_checks: AtomicU64,
    remove_checks: AtomicU64,
    ops: AtomicU64,
}

fn worker_thread(
    t: u64,
    index: &ApproxKvIndexer,
    clock: &ManualClock,
    until: Instant,
    counts: &Counts,
) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t + 1).wrapping_mul(0x1234_5678_9abc_def1));
    let now = || u64::try_from(clock.now().as_nanos()).unwrap();
    let mut ops = 0u64;
    while Instant::now() < until {
        ops += 1;
        let tokens = prompt(&mut rng);
        let blocks = (tokens.len() / BLOCK as usize) as u32;
        match rng.below(16) {
            0..=4 => {
                let own: WorkerId = 1000 + 8 * t + rng.below(PRIVATE);
                let before = now();
                index.process_routing_decision_for_request(&tokens, own);
                let found = index.find_matches_for_request(&tokens);
                let after = now();
                check_scores(&found, blocks);
                if after < before + TTL {
                    let got = found.scores.get(&own).copied();
                    assert_eq!(got, Some(blocks), "own worker {own}, t {before}..{after}");
                    counts.own_checks.fetch_add(1, Ordering::Relaxed);
                }
            }
            5..=6 => {
                index.process_routing_decision_for_request(&tokens, rng.below(SHARED));
            }
            7..=9 => check_scores(&index.find_matches_for_request(&tokens), blocks),
            10 => {
                let own = 1000 + 8 * t + rng.below(PRIVATE);
                index.remove_worker(own);
                let found = index.find_matches_for_request(&tokens);
                assert!(!found.scores.contains_key(&own), "removed {own} reported");
                counts.remove_checks.fetch_add(1, Ordering::Relaxed);
            }
            11 => index.remove_worker(rng.below(SHARED)),
            12 => {
                index.sweep_expired();
            }
            13..=14 => clock.advance(Duration::from_nanos(1 + rng.below(MAX_STEP))),
            _ => {
                if rng.below(64) == 0 {
                    check_dump(index);
                } else {
                    let _ = index.stats();
                }
            }
        }
    }
    counts.ops.fetch_add(ops, Ordering::Relaxed);
}

fn check_scores(found: &approx_kv_index::OverlapScores, blocks: u32) {
    assert!(found.scores.values().all(|&s| 0 < s && s <= blocks));
    let mut scored: Vec<_> = found.scores.keys().collect();
    let mut sized: Vec<_> = found.tree_sizes.keys().collect();
    scored.sort_unstable();
    sized.sort_unstable();
    assert_eq!(scored, sized);
}

/// A dump runs without stopping callers; it is not a snapshot (a worker removed and
/// recorded again while it runs may appear under both registrations), so only its shape
/// is checked.
fn check_dump(index: &ApproxKvIndexer) {
    for event in index.dump_events() {
        let KvCacheEventData::Stored(data) = &event.data else {
            panic!("unexpected event {event:?}");
        };
        assert_eq!(data.blocks.len(), 1, "{event:?}");
    }
}

#[test]
fn stress_random_operations_with_invariants() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let run_for = std::env::var("APPROX_KV_STRESS_MS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_millis(2500), Duration::from_millis);
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let threads = (4 * cores).max(8) as u64;
    let sweepers_before = sweeper_threads();

    let clock = Arc::new(ManualClock::new());
    let index = ApproxKvIndexer::builder()
        .block_size(BLOCK)
        .ttl(Duration::from_nanos(TTL))
        // The background sweeper runs every 100 µs of real time against the manual clock.
        .tick(Duration::from_micros(100))
        .clock(clock.clone())
        .build()
        .unwrap();
    let counts = Counts::default();
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (index, clock, counts) = (&index, &*clock, &counts);
            s.spawn(move || worker_thread(t, index, clock, start + run_for, counts));
        }
        // Three quarters in, stop the sweeper: everything must keep working without it.
        let index = &index;
        s.spawn(move || {
            while start.elapsed() < run_for * 3 / 4 {
                std::thread::yield_now();
            }
            index.shutdown();
        });
    });

    let (own, removes, ops) = (
        counts.own_checks.load(Ordering::Relaxed),
        counts.remove_checks.load(Ordering::Relaxed),
        counts.ops.load(Ordering::Relaxed),
    );
    eprintln!("stress: {threads} threads, {ops} ops, {own} read-your-writes checks, {removes} remove checks, clock {:?}", clock.now());
    assert!(
        own > 100 && removes > 10,
        "too few checks ran: {own}, {removes}"
    );

    clock.advance(Duration::from_nanos(TTL));
    index.sweep_expired();
    let stats = index.stats();
    assert_eq!(
        (stats.entries, stats.nodes, stats.pending_timers),
        (0, 0, 0),
        "{stats:?}"
    );
    assert!(index.find_matches_for_request(&[0; 64]).scores.is_empty());
    drop(index);
    assert_eq!(settle_sweepers(sweepers_before), sweepers_before);
}

/// Indexes created and dropped in every way (with or without shutdown, on another
/// thread, with the sweeper disabled) leave no thread behind.
#[test]
fn no_thread_leak_after_drop() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = sweeper_threads();
    let build = |sweeper: bool| {
        ApproxKvIndexer::builder()
            .tick(Duration::from_millis(1))
            .background_sweeper(sweeper)
            .build()
            .unwrap()
    };
    let mut alive = Vec::new();
    for i in 0..24 {
        let index = build(i % 4 != 3);
        index.process_routing_decision_for_request(&[1; 32], i);
        match i % 4 {
            0 => drop(index),
            1 => {
                index.shutdown();
                index.shutdown();
                drop(index);
            }
            2 => std::thread::spawn(move || drop(index)).join().unwrap(),
            _ => alive.push(index),
        }
    }
    assert_eq!(settle_sweepers(before), before, "sweepers left after drops");
    let index = build(true);
    assert_eq!(
        settle_sweepers(before + 1),
        before + 1,
        "one sweeper per index"
    );
    drop(index);
    drop(alive);
    assert_eq!(settle_sweepers(before), before);
}
