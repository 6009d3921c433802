//! Stress: many threads (4x the cores, at least 8) doing random operations on one index
//! with a short TTL on a shared `ManualClock`, checking invariants while they run, then
//! checking that everything is reclaimed and that no thread outlives the index.
//!
//! Operations: decisions, finds, `remove_worker`, KV events (`Stored`, `Removed`,
//! `Cleared`) on shared workers, snapshots and restores, sweeps, clock steps, stats and
//! dumps; `shutdown` three quarters in. Runs for `APPROX_KV_STRESS_MS` milliseconds of
//! real time (default 2000), then twice for a quarter of that with caps.
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
//! After the threads stop: the shared workers are removed, the clock passes the TTL, and
//! one sweep empties the index (entries, nodes, pending timers all 0, with or without caps);
//! dropping it leaves no sweeper thread.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use approx_kv_index::{
    compute_block_hash_for_seq, compute_seq_hashes, ApproxKvIndexer, Clock, KvCacheEventData,
    KvCacheRemoveData, KvCacheStoreData, KvCacheStoredBlockData, LocalBlockHash, ManualClock,
    RouterEvent, SequenceHash, WorkerId,
};

const BLOCK: u32 = 4;
/// TTL in nanoseconds of the manual clock.
const TTL: u64 = 2_000_000;
/// Largest single clock step: a hundredth of the TTL.
const MAX_STEP: u64 = TTL / 100;
/// Shared workers, recorded and removed by every thread.
const SHARED: u64 = 4;
/// Workers that get KV events (and decisions) from every thread: `EXACT + k`.
const EXACT: u64 = 100;
/// Private workers per thread: ids `1000 + 8 * thread + k`.
const PRIVATE: u64 = 3;

/// The tests of this file count sweeper threads: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

// The workspace's deterministic generator (seeded per thread: `Rng(seed)`).
use approx_kv_rng::SplitMix64 as Rng;

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

/// What one stress run exercises and checks.
#[derive(Clone, Copy)]
struct Config {
    per_worker_cap: Option<usize>,
    total_cap: Option<usize>,
    /// Read-your-writes checks for the thread's own workers (not with a global cap,
    /// which may evict any worker's decisions).
    own_checks: bool,
    /// Capacity-only mode: a TTL of `Duration::MAX` (no timers; caps alone bound memory).
    never: bool,
}

fn worker_thread(
    t: u64,
    index: &ApproxKvIndexer,
    clock: &ManualClock,
    until: Instant,
    counts: &Counts,
    config: Config,
) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t + 1).wrapping_mul(0x1234_5678_9abc_def1));
    let now = || u64::try_from(clock.now().as_nanos()).unwrap();
    let mut ops = 0u64;
    while Instant::now() < until {
        ops += 1;
        let tokens = prompt(&mut rng);
        let blocks = (tokens.len() / BLOCK as usize) as u32;
        let shared = rng.below(SHARED);
        match rng.below(20) {
            0..=4 => {
                let own: WorkerId = 1000 + 8 * t + rng.below(PRIVATE);
                let before = now();
                index.process_routing_decision_for_request(&tokens, own);
                let found = index.find_matches_for_request(&tokens);
                let after = now();
                check_scores(&found, blocks);
                if config.own_checks && after < before + TTL {
                    let got = found.scores.get(&own).copied();
                    assert_eq!(got, Some(blocks), "own worker {own}, t {before}..{after}");
                    counts.own_checks.fetch_add(1, Ordering::Relaxed);
                }
            }
            5..=6 => index.process_routing_decision_for_request(&tokens, shared),
            7..=9 => check_scores(&index.find_matches_for_request(&tokens), blocks),
            10 => {
                let own = 1000 + 8 * t + rng.below(PRIVATE);
                index.remove_worker(own);
                let found = index.find_matches_for_request(&tokens);
                assert!(!found.scores.contains_key(&own), "removed {own} reported");
                counts.remove_checks.fetch_add(1, Ordering::Relaxed);
            }
            11 if rng.below(2) == 0 => index.remove_worker(shared),
            11 => index.apply_event(&event(shared, KvCacheEventData::Cleared)),
            // KV events go to their own workers, never removed while threads run: see
            // `stored_events_racing_removal_do_not_leak`.
            12 => {
                index.sweep_expired();
            }
            13..=14 => clock.advance(Duration::from_nanos(1 + rng.below(MAX_STEP))),
            15 => {
                let (local, seq, parent) = some_blocks(&tokens, &mut rng);
                let blocks = local.iter().zip(&seq).map(|(&tokens_hash, &block_hash)| {
                    KvCacheStoredBlockData {
                        block_hash,
                        tokens_hash,
                        expires_in: None,
                    }
                });
                let data = KvCacheStoreData {
                    parent_hash: parent,
                    blocks: blocks.collect(),
                };
                index.apply_event(&event(EXACT + shared, KvCacheEventData::Stored(data)));
            }
            16 => {
                let (_, block_hashes, _) = some_blocks(&tokens, &mut rng);
                let data = KvCacheRemoveData { block_hashes };
                index.apply_event(&event(EXACT + shared, KvCacheEventData::Removed(data)));
            }
            17 => {
                // A snapshot while everyone writes (restoring into the live index is
                // left out: see `restore_into_a_live_index_keeps_ttls` in model_props.rs).
                let snapshot = index.snapshot();
                assert_eq!(snapshot.block_size, BLOCK);
            }
            18 => index.process_routing_decision_for_request(&tokens, EXACT + shared),
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

fn event(worker: WorkerId, data: KvCacheEventData) -> RouterEvent {
    RouterEvent {
        worker_id: worker,
        event_id: 0,
        data,
    }
}

/// A random run of a prompt's blocks: local hashes, sequence hashes, and the parent.
fn some_blocks(
    tokens: &[u32],
    rng: &mut Rng,
) -> (Vec<LocalBlockHash>, Vec<SequenceHash>, Option<SequenceHash>) {
    let local = compute_block_hash_for_seq(tokens, BLOCK);
    let seq = compute_seq_hashes(&local);
    let from = rng.below(local.len() as u64 + 1) as usize;
    let to = from + rng.below((local.len() - from) as u64 + 1) as usize;
    let parent = from.checked_sub(1).map(|i| seq[i]);
    (local[from..to].to_vec(), seq[from..to].to_vec(), parent)
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

/// One stress run: `threads` threads for `run_for`, then the end-of-run checks.
fn stress(config: Config, run_for: Duration) {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let threads = (4 * cores).max(8) as u64;
    let sweepers_before = sweeper_threads();

    let clock = Arc::new(ManualClock::new());
    let ttl = if config.never {
        Duration::MAX
    } else {
        Duration::from_nanos(TTL)
    };
    let mut builder = ApproxKvIndexer::builder()
        .block_size(BLOCK)
        .ttl(ttl)
        // The background sweeper runs every 100 µs of real time against the manual clock.
        .tick(Duration::from_micros(100))
        .clock(clock.clone());
    if let Some(cap) = config.per_worker_cap {
        builder = builder.max_blocks_per_worker(cap);
    }
    if let Some(cap) = config.total_cap {
        builder = builder.max_entries(cap);
    }
    let index = builder.build().unwrap();
    let counts = Counts::default();
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (index, clock, counts) = (&index, &*clock, &counts);
            s.spawn(move || worker_thread(t, index, clock, start + run_for, counts, config));
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
    let stats = index.stats();
    eprintln!(
        "stress: {threads} threads, {ops} ops, {own} read-your-writes checks, \
         {removes} remove checks, clock {:?}, {stats:?}",
        clock.now()
    );
    assert!(removes > 10, "too few checks ran: {removes}");
    assert!(!config.own_checks || own > 100, "too few checks ran: {own}");

    // Workers with KV events hold exact entries, which never expire: remove them; then
    // let every approximate entry expire. One sweep must reclaim everything. In
    // capacity-only mode nothing expires: every worker is removed, and the sweep purges.
    for w in 0..SHARED {
        index.remove_worker(EXACT + w);
    }
    if config.never {
        for w in decision_workers(threads) {
            index.remove_worker(w);
        }
    }
    // Under caps, decisions one worker records at the same clock reading get expiries a
    // nanosecond apart (to order evictions): allow one nanosecond per decision recorded.
    let capped = config.per_worker_cap.is_some() || config.total_cap.is_some();
    let stretch = if capped { index.stats().records } else { 0 };
    clock.advance(Duration::from_nanos(TTL + stretch));
    index.sweep_expired();
    let stats = index.stats();
    assert!(index.find_matches_for_request(&[0; 64]).scores.is_empty());
    let left = (stats.entries, stats.nodes, stats.pending_timers);
    if left != (0, 0, 0) {
        // What is left, for the report: whether every worker's removal and purge takes it
        // (a live worker's entries that no timer's walk reaches), or not (a count or a
        // node that nothing in the tree backs).
        for w in decision_workers(threads) {
            index.remove_worker(w);
        }
        index.sweep_expired();
        panic!(
            "left {left:?}: {stats:?}; after removing every worker and sweeping: {:?}",
            index.stats()
        );
    }
    drop(index);
    assert_eq!(settle_sweepers(sweepers_before), sweepers_before);
}

/// The workers only decisions name: the shared ones and every thread's private ones.
fn decision_workers(threads: u64) -> impl Iterator<Item = WorkerId> {
    let private = (0..threads).flat_map(|t| (0..PRIVATE).map(move |k| 1000 + 8 * t + k));
    (0..SHARED).chain(private)
}

/// `APPROX_KV_STRESS_MS` if set, else 2000 ms.
fn run_for() -> Duration {
    std::env::var("APPROX_KV_STRESS_MS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_millis(2000), Duration::from_millis)
}

#[test]
fn stress_random_operations_with_invariants() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let config = Config {
        per_worker_cap: None,
        total_cap: None,
        own_checks: true,
        never: false,
    };
    stress(config, run_for());
}

/// With a per-worker cap (above any prompt's size, so a worker's fresh decision survives
/// its own evictions), then also a global cap (which may evict anyone), then both in
/// capacity-only mode (no timers: removed workers are purged, nothing else reclaims).
#[test]
fn stress_with_caps() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let per_worker = Config {
        per_worker_cap: Some(8),
        total_cap: None,
        own_checks: true,
        never: false,
    };
    stress(per_worker, run_for() / 4);
    let total = Config {
        total_cap: Some(200),
        own_checks: false,
        ..per_worker
    };
    stress(total, run_for() / 4);
    stress(
        Config {
            never: true,
            ..per_worker
        },
        run_for() / 4,
    );
    stress(
        Config {
            never: true,
            ..total
        },
        run_for() / 4,
    );
}

/// Regression: in capacity-only mode, records racing `remove_worker` of their
/// worker. A record that resolved the slot before the removal and inserted after the
/// purge's scan escaped the purge, and with no timers nothing ever freed its entries
/// (~165 entries left with 0 workers). Records now register as writers before checking
/// the slot is alive, as exact events do, and a purge waits for writers.
#[test]
fn capacity_only_records_racing_removal_do_not_leak() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for cap in [None, Some(16)] {
        let mut builder = ApproxKvIndexer::builder()
            .block_size(1)
            .ttl(Duration::MAX)
            .background_sweeper(false);
        if let Some(cap) = cap {
            builder = builder.max_blocks_per_worker(cap);
        }
        let index = builder.build().unwrap();
        let until = Instant::now() + run_for() / 4;
        std::thread::scope(|s| {
            for t in 0..2u32 {
                let index = &index;
                s.spawn(move || {
                    let mut rng = Rng(u64::from(t) + 7);
                    while Instant::now() < until {
                        let worker = rng.below(4);
                        let tokens = [rng.below(3) as u32, rng.below(5) as u32, t, 9];
                        index.process_routing_decision_for_request(&tokens, worker);
                    }
                });
            }
            let index = &index;
            s.spawn(move || {
                while Instant::now() < until {
                    for worker in 0..4 {
                        index.remove_worker(worker);
                    }
                    index.sweep_expired();
                }
            });
        });
        for worker in 0..4 {
            index.remove_worker(worker);
        }
        index.sweep_expired();
        index.sweep_expired();
        let stats = index.stats();
        assert_eq!(
            (stats.entries, stats.nodes, stats.workers),
            (0, 0, 0),
            "{stats:?}"
        );
    }
}

/// Regression: threads recording the same worker under a per-worker cap. `evict_worker`
/// used to read the worker's entry count twice (`entries > cap`, then `entries - cap`), and
/// another thread's eviction in between made the subtraction underflow: a panic with
/// overflow checks (the test profile), an over-eviction without. It now reads it once.
#[test]
fn concurrent_evictions_of_one_worker_do_not_panic() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let index = ApproxKvIndexer::builder()
        .block_size(1)
        .max_blocks_per_worker(4)
        .background_sweeper(false)
        .build()
        .unwrap();
    let until = Instant::now() + run_for() / 2;
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let index = &index;
            s.spawn(move || {
                let mut rng = Rng(t + 1);
                while Instant::now() < until {
                    let len = 1 + rng.below(6) as usize;
                    let tokens: Vec<u32> = (0..len).map(|_| rng.below(1 << 20) as u32).collect();
                    index.process_routing_decision_for_request(&tokens, 0);
                }
            });
        }
    });
}

/// Regression: `Stored` events racing `remove_worker` of the same worker and sweeps. An
/// event used to resolve the slot, the worker was removed and its purge ran (finding
/// nothing), then the event inserted exact entries for the dead slot, which nothing ever
/// reclaimed. Now the event registers as a writer before checking the slot is alive, and a
/// purge waits for writers (`Workers::begin_write`): the index must end empty.
#[test]
fn stored_events_racing_removal_do_not_leak() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let index = ApproxKvIndexer::builder()
        .block_size(1)
        .background_sweeper(false)
        .build()
        .unwrap();
    let until = Instant::now() + run_for() / 2;
    std::thread::scope(|s| {
        for t in 0..3u32 {
            let index = &index;
            s.spawn(move || {
                let mut rng = Rng(u64::from(t) + 1);
                while Instant::now() < until {
                    let tokens = [t, rng.below(7) as u32, 1, 2, 3];
                    let local = compute_block_hash_for_seq(&tokens, 1);
                    let seq = compute_seq_hashes(&local);
                    let blocks = local.iter().zip(&seq).map(|(&tokens_hash, &block_hash)| {
                        KvCacheStoredBlockData {
                            block_hash,
                            tokens_hash,
                            expires_in: None,
                        }
                    });
                    let data = KvCacheStoreData {
                        parent_hash: None,
                        blocks: blocks.collect(),
                    };
                    index.apply_event(&event(0, KvCacheEventData::Stored(data)));
                }
            });
        }
        for _ in 0..2 {
            let index = &index;
            s.spawn(move || {
                while Instant::now() < until {
                    index.remove_worker(0);
                    index.sweep_expired();
                }
            });
        }
    });
    index.remove_worker(0);
    index.sweep_expired();
    let stats = index.stats();
    assert_eq!((stats.entries, stats.nodes), (0, 0), "{stats:?}");
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

/// A fleet joining one prompt while finds and expiry run: 4 threads register 800 workers in
/// all (ascending within a thread, interleaved across threads: holder arrays grow both by
/// appends in place and by copies) on one 32-block prompt, 2 threads find it, and one
/// removes a quarter of the workers as soon as they joined (half their blocks by a
/// `Removed` event, whose entries leave the holder arrays at once, then the worker) and
/// sweeps. Finds never report more than the query, and the scores of workers never
/// removed only grow. At the end every worker that was not removed holds the whole
/// prompt, and removal and a sweep empty the index.
#[test]
fn a_fleet_joining_one_prompt_while_finds_and_removals_run() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const FLEET: u64 = 800;
    let clock = Arc::new(ManualClock::new());
    let index = ApproxKvIndexer::builder()
        .block_size(BLOCK)
        .ttl(Duration::from_nanos(TTL))
        .clock(clock.clone())
        .background_sweeper(false)
        .build()
        .unwrap();
    let tokens: Vec<u32> = (0..32 * BLOCK).collect();
    let local = compute_block_hash_for_seq(&tokens, BLOCK);
    let seq = compute_seq_hashes(&local);
    let joined = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (index, tokens, joined) = (&index, &tokens, &joined);
            s.spawn(move || {
                for w in (t..FLEET).step_by(4) {
                    index.process_routing_decision_for_request(tokens, w);
                    joined.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        s.spawn(|| {
            let mut removed = 0;
            while joined.load(Ordering::Relaxed) < FLEET {
                // Remove workers 3, 7, 11, ... once they joined (a removal before the
                // join would only be undone by the record).
                let w = 3 + 4 * removed;
                let found = index.find_matches(&local[..1]);
                if w < FLEET && found.scores.contains_key(&w) {
                    // Half its blocks first by a `Removed` event (entries leave holder
                    // arrays at once: copies racing the appends), then the worker.
                    let removed_blocks = KvCacheRemoveData {
                        block_hashes: seq[16..].to_vec(),
                    };
                    index.apply_event(&event(w, KvCacheEventData::Removed(removed_blocks)));
                    index.remove_worker(w);
                    removed += 1;
                }
                index.sweep_expired();
            }
        });
        for _ in 0..2 {
            let (index, local, joined) = (&index, &local, &joined);
            s.spawn(move || {
                let mut best = std::collections::HashMap::new();
                while joined.load(Ordering::Relaxed) < FLEET {
                    let found = index.find_matches(local);
                    check_scores(&found, 32);
                    for (&w, &score) in &found.scores {
                        let seen = best.entry(w).or_insert(0);
                        if w % 4 != 3 {
                            assert!(score >= *seen, "worker {w}: {score} after {seen}");
                        }
                        *seen = score;
                    }
                }
            });
        }
    });
    let found = index.find_matches(&local);
    for w in (0..FLEET).filter(|w| w % 4 != 3) {
        assert_eq!(found.scores.get(&w), Some(&32), "worker {w}");
    }
    for w in 0..FLEET {
        index.remove_worker(w);
    }
    clock.advance(Duration::from_nanos(TTL));
    index.sweep_expired();
    let stats = index.stats();
    assert_eq!((stats.entries, stats.nodes), (0, 0), "{stats:?}");
}
