//! Sharing decisions between replicas (issue 11's targets), printed rather than criterion
//! (the Redis part needs a server and threads):
//!
//! 1. **Router thread vs apply**, at block sizes 16 (the crate's default, Dynamo's) and 64
//!    (the side-by-side comparison's). One thread routes the bundled trace's 2,000 requests
//!    as a router does: hash the tokens, find, pick the best-scoring
//!    worker of 8, record (sharing on, so each decision is also queued), through the
//!    tokens API of the README's first example (`find_matches_for_request`, then
//!    `process_routing_decision_for_request`: the tokens are hashed twice); and again
//!    hashing each prompt once (`find_matches_by_sequence`, `process_routing_decision`),
//!    the faster router thread and the harder target for apply. Then one thread
//!    decodes and applies those decisions (their encodings) to a fresh index, as a
//!    replica's subscriber does: in batches of [`BATCH`] (one `XREAD`'s worth) through
//!    `apply_decisions`. Each is timed 7 times; the medians and the apply's ratios to both
//!    router threads are printed (target: apply >= 8x the router thread's decision
//!    rate), and the apply's parts per decision: decoding, chaining the sequence hashes one prompt at a time, applying
//!    decoded decisions one at a time (`apply_decision`, which chains each) and in batches
//!    (`apply_decisions`, which chains four at a time). Then the same decisions as if 2
//!    (4, 8: up to the machine's cores) routers had taken them in turn, each origin's
//!    applied on a thread of its own into one index, as a transport with a thread per
//!    origin would (one origin's decisions are applied in order, different origins' at once);
//!    beside it, the machine's ceiling for as many threads: chaining the same blocks'
//!    sequence hashes, which shares nothing, on them against one.
//! 2. **End-to-end lag through Redis** (with `--features redis` and `redis-server` on the
//!    PATH): 8 replicas, each an index with its own `RedisSync`, on a private server on a
//!    loopback port; each records its share of the trace at a paced rate
//!    (`APPROX_KV_BENCH_RATE` decisions/s per replica, default 2,000) for about 3 s; then
//!    every replica's lag p50/p99 (decision time to apply) is printed (target: p99 <= 50 ms).
//!
//! `cargo bench --bench replication` (add `--features redis` for part 2).

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use approx_kv_index::replication::{Action, Decision};
use approx_kv_index::{ApproxKvIndexer, Query};

const RUNS: usize = 7;
/// Decisions applied together, as the Redis subscriber applies one `XREAD` (its default
/// `COUNT`).
const BATCH: usize = 512;
const WORKERS: u64 = 8;
/// Apply threads of part 1's second form (as many as the machine has cores, at most).
const APPLY_THREADS: [usize; 3] = [2, 4, 8];
/// Rounds of the threaded apply, each beside a one-thread apply (short, so more of them).
const THREADED_ROUNDS: usize = 21;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Block sizes of part 1: the crate's default (16 tokens) and the comparison's (64).
const BLOCK_SIZES: [u32; 2] = [16, 64];

fn index(replica: u64, block_size: u32) -> ApproxKvIndexer {
    ApproxKvIndexer::builder()
        .block_size(block_size)
        .ttl(Duration::from_secs(3600))
        .replica_id(replica)
        .share_decisions(1 << 20)
        .build()
        .expect("valid settings")
}

/// Routes every prompt on one thread; returns decisions/s and the shared decisions.
fn route(prompts: &[Vec<u32>], block_size: u32) -> (f64, Vec<Vec<u8>>) {
    let index = index(0, block_size);
    let start = Instant::now();
    for (i, tokens) in prompts.iter().enumerate() {
        let found = index.find(Query::tokens(tokens));
        let worker = found.best().map_or(i as u64 % WORKERS, |(w, _)| w);
        index.record(worker, Query::tokens(tokens)).unwrap();
    }
    let rate = prompts.len() as f64 / start.elapsed().as_secs_f64();
    let outbox = index.outbox().expect("sharing");
    let decisions = std::iter::from_fn(|| outbox.pop())
        .map(|d| d.encode())
        .collect();
    (rate, decisions)
}

/// The same routes as [`route`], hashing each prompt once: its local and sequence hashes,
/// the find from the sequence hashes, the record from both (the README's "hash once per
/// request"), where `route` uses the tokens API for both, which hashes the tokens twice.
/// The faster router thread, so the harder target for apply; returns decisions/s.
fn route_hashing_once(prompts: &[Vec<u32>], block_size: u32) -> f64 {
    let index = index(0, block_size);
    let start = Instant::now();
    for (i, tokens) in prompts.iter().enumerate() {
        let local = approx_kv_index::compute_block_hash_for_seq(tokens, block_size);
        let seq = approx_kv_index::compute_seq_hashes(&local);
        let found = index.find(Query::sequence(&seq));
        let worker = found.best().map_or(i as u64 % WORKERS, |(w, _)| w);
        let _ = index.record(worker, Query::hashes(&local, &seq));
    }
    prompts.len() as f64 / start.elapsed().as_secs_f64()
}

/// Decodes and applies every decision on one thread; returns decisions/s.
fn apply(decisions: &[Vec<u8>], block_size: u32) -> f64 {
    let index = index(1, block_size);
    let start = Instant::now();
    decode_and_apply(&index, decisions);
    decisions.len() as f64 / start.elapsed().as_secs_f64()
}

/// What a subscriber does with what it reads: decode, then apply in batches.
fn decode_and_apply(index: &ApproxKvIndexer, decisions: &[Vec<u8>]) {
    for batch in decisions.chunks(BATCH) {
        let decoded: Vec<Decision> = batch
            .iter()
            .map(|bytes| Decision::decode(bytes).expect("valid"))
            .collect();
        index.apply_decisions(&decoded);
    }
}

/// The decisions as if `origins` routers had taken them in turn (origin `k`, numbered from
/// 1, takes decisions `k`, `k + origins`, ...): one list of encodings per origin.
fn split_by_origin(decisions: &[Vec<u8>], origins: usize) -> Vec<Vec<Vec<u8>>> {
    let mut split = vec![Vec::new(); origins];
    for (i, bytes) in decisions.iter().enumerate() {
        let mut d = Decision::decode(bytes).expect("valid");
        d.origin = 100 + (i % origins) as u64;
        d.seq = (i / origins + 1) as u64;
        split[i % origins].push(d.encode());
    }
    split
}

/// Runs `work` on each of `shares`, one thread each, and returns how long they took
/// together. The clock starts once every thread is running and stops when the last is
/// done, both seen by spinning: a round lasts milliseconds, and waking a parked thread on
/// an idle virtual CPU can take a good part of one.
fn on_threads<T: Sync>(shares: &[T], work: impl Fn(&T) + Sync) -> Duration {
    let (ready, go, done) = (
        AtomicUsize::new(0),
        AtomicBool::new(false),
        AtomicUsize::new(0),
    );
    let mut elapsed = Duration::ZERO;
    std::thread::scope(|s| {
        let (mine, others) = shares.split_first().expect("one share or more");
        for share in others {
            let (work, ready, go, done) = (&work, &ready, &go, &done);
            s.spawn(move || {
                ready.fetch_add(1, SeqCst);
                while !go.load(SeqCst) {
                    std::hint::spin_loop();
                }
                work(share);
                done.fetch_add(1, SeqCst);
            });
        }
        while ready.load(SeqCst) < others.len() {
            std::hint::spin_loop();
        }
        let start = Instant::now();
        go.store(true, SeqCst);
        work(mine);
        while done.load(SeqCst) < others.len() {
            std::hint::spin_loop();
        }
        elapsed = start.elapsed();
    });
    elapsed
}

/// Decodes and applies every origin's decisions, one thread per origin, all into one
/// index; returns decisions/s.
fn apply_threads(split: &[Vec<Vec<u8>>], block_size: u32) -> f64 {
    let index = index(1, block_size);
    let elapsed = on_threads(split, |decisions| decode_and_apply(&index, decisions));
    let total: usize = split.iter().map(Vec::len).sum();
    total as f64 / elapsed.as_secs_f64()
}

/// The machine's own ceiling for `split`'s threads: the time to chain the sequence hashes
/// of every decision's blocks on one thread, over the time to chain each origin's on a
/// thread of its own (pure computation, nothing shared).
fn hashing_speedup(decisions: &[Vec<u8>], split: &[Vec<Vec<u8>>]) -> f64 {
    let blocks = |encoded: &[Vec<u8>]| -> Vec<Vec<approx_kv_index::LocalBlockHash>> {
        encoded
            .iter()
            .filter_map(
                |bytes| match Decision::decode(bytes).expect("valid").action {
                    Action::Route { blocks, .. } => Some(blocks),
                    _ => None,
                },
            )
            .collect()
    };
    let chain = |prompts: &Vec<Vec<approx_kv_index::LocalBlockHash>>| {
        for local in prompts {
            std::hint::black_box(approx_kv_index::compute_seq_hashes(local));
        }
    };
    let all = [blocks(decisions)];
    let shares: Vec<_> = split.iter().map(|share| blocks(share)).collect();
    on_threads(&all, chain).as_secs_f64() / on_threads(&shares, chain).as_secs_f64()
}

/// The same apply in its parts: mean microseconds per decision to decode every decision,
/// to chain their blocks' sequence hashes one prompt at a time, and to apply the decoded
/// decisions to a fresh index one at a time and in batches.
fn apply_parts(decisions: &[Vec<u8>], block_size: u32) -> [f64; 4] {
    let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / decisions.len() as f64;
    let start = Instant::now();
    let decoded: Vec<Decision> = decisions
        .iter()
        .map(|bytes| Decision::decode(bytes).expect("valid"))
        .collect();
    let decode = per(start.elapsed());
    let start = Instant::now();
    for d in &decoded {
        if let Action::Route { blocks, .. } = &d.action {
            std::hint::black_box(approx_kv_index::compute_seq_hashes(blocks));
        }
    }
    let chain = per(start.elapsed());
    let singly = index(1, block_size);
    let start = Instant::now();
    for d in &decoded {
        singly.apply_decision(d);
    }
    let one_by_one = per(start.elapsed());
    let batched = index(1, block_size);
    let start = Instant::now();
    for batch in decoded.chunks(BATCH) {
        batched.apply_decisions(batch);
    }
    [decode, chain, one_by_one, per(start.elapsed())]
}

/// Part 1 at one block size.
fn router_vs_apply(prompts: &[Vec<u32>], block_size: u32) {
    let (mut routed, mut routed_once, mut applied) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let (rate, decisions) = route(prompts, block_size);
        routed.push(rate);
        routed_once.push(route_hashing_once(prompts, block_size));
        applied.push(apply(&decisions, block_size));
    }
    let parts: Vec<[f64; 4]> = (0..RUNS)
        .map(|_| apply_parts(&route(prompts, block_size).1, block_size))
        .collect();
    let part = |k: usize| median(parts.iter().map(|p| p[k]).collect());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Interleaved with one-thread applies of the same decisions, round by round: the
    // speedup is the median of the rounds' ratios.
    let threaded: Vec<(usize, f64, f64, f64)> = APPLY_THREADS
        .into_iter()
        .filter(|&t| t <= cores)
        .map(|t| {
            let decisions = route(prompts, block_size).1;
            let split = split_by_origin(&decisions, t);
            let (mut rates, mut speedups, mut ceilings) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..THREADED_ROUNDS {
                let one = apply(&decisions, block_size);
                let many = apply_threads(&split, block_size);
                rates.push(many);
                speedups.push(many / one);
                ceilings.push(hashing_speedup(&decisions, &split));
            }
            (t, median(rates), median(speedups), median(ceilings))
        })
        .collect();
    let (r, a) = (median(routed), median(applied));
    let r1 = median(routed_once);
    println!("block size {block_size}:");
    println!("  router thread (hash, find, choose, record + queue): {r:>9.0} decisions/s (median of {RUNS})");
    println!("  the same, hashing each prompt once:                 {r1:>9.0} decisions/s (median of {RUNS})");
    println!("  apply (decode + apply_decisions), one thread:       {a:>9.0} decisions/s (median of {RUNS})");
    println!(
        "  apply / router thread: {:.1}x; / router thread hashing once: {:.1}x (target >= 8x)",
        a / r,
        a / r1
    );
    for (t, rate, speedup, ceiling) in threaded {
        println!(
            "  apply on {t} threads, one origin each ({t} routers' decisions taken in turn): \
             {rate:.0} decisions/s, {:.1}x the router thread ({:.1}x the one hashing once); \
             {speedup:.2}x one thread, where chaining alone gains {ceiling:.2}x (medians of \
             {THREADED_ROUNDS} interleaved rounds)",
            rate / r,
            rate / r1
        );
    }
    println!(
        "  per decision, us (median of {RUNS}): router thread {:.2}; decode {:.2}; chaining \
         the blocks' sequence hashes one prompt at a time {:.2}; applying decoded ones \
         (chaining included) one by one {:.2}, in batches of {BATCH} {:.2}",
        1e6 / r,
        part(0),
        part(1),
        part(2),
        part(3)
    );
}

fn main() {
    let prompts = common::bundled_trace(2_000);
    for block_size in BLOCK_SIZES {
        router_vs_apply(&prompts, block_size);
    }
    #[cfg(feature = "redis")]
    redis_lag::run(&prompts);
    #[cfg(not(feature = "redis"))]
    println!("(end-to-end lag through Redis: run with --features redis)");
}

#[cfg(feature = "redis")]
#[path = "../tests/support/redis_server/mod.rs"]
mod redis_server;

#[cfg(feature = "redis")]
mod redis_lag {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use approx_kv_index::replication::redis::{RedisConfig, RedisSync};
    use approx_kv_index::Query;

    use super::{index, median, redis_server::RedisServer, BLOCK_SIZES, WORKERS};

    const REPLICAS: u64 = 8;

    pub fn run(prompts: &[Vec<u32>]) {
        let Some(server) = RedisServer::start(&[]) else {
            return;
        };
        let rate: f64 = std::env::var("APPROX_KV_BENCH_RATE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2_000.0);
        let syncs: Vec<RedisSync> = (0..REPLICAS)
            .map(|r| {
                let config = RedisConfig::new(server.url()).stream("bench");
                RedisSync::start(Arc::new(index(r, BLOCK_SIZES[0])), config).expect("starts")
            })
            .collect();
        let per_replica = ((rate * 3.0) as usize).min(prompts.len() * 4);
        let start = Instant::now();
        std::thread::scope(|s| {
            for (r, sync) in syncs.iter().enumerate() {
                s.spawn(move || {
                    for n in 0..per_replica {
                        let due = Duration::from_secs_f64(n as f64 / rate);
                        if let Some(wait) = due.checked_sub(start.elapsed()) {
                            std::thread::sleep(wait); // pacing the decision rate
                        }
                        let mut tokens = prompts[(n * 7 + r) % prompts.len()].clone();
                        tokens.push(n as u32); // a new last block now and then
                        let worker = (n as u64 + r as u64) % WORKERS;
                        sync.index().record(worker, Query::tokens(&tokens)).unwrap();
                    }
                });
            }
        });
        let recorded = start.elapsed();
        let expected: u64 = syncs.iter().map(|s| s.stats().published).sum();
        let deadline = Instant::now() + Duration::from_secs(60);
        for sync in &syncs {
            let own = sync.stats().published;
            while sync.stats().applied < expected - own && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5)); // waiting for the subscribers
            }
        }
        let stats: Vec<_> = syncs.iter().map(RedisSync::stats).collect();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "redis: {REPLICAS} replicas, {:.0} decisions/s each for {:.1} s ({:.0} decisions/s \
             in all, each replica applying {:.0}/s); published {}, dropped {}, rejected {}",
            rate,
            recorded.as_secs_f64(),
            rate * REPLICAS as f64,
            rate * (REPLICAS - 1) as f64,
            expected,
            stats.iter().map(|s| s.dropped).sum::<u64>(),
            stats.iter().map(|s| s.rejected).sum::<u64>(),
        );
        let p50 = median(stats.iter().map(|s| ms(s.lag_p50)).collect());
        let p99: Vec<f64> = stats.iter().map(|s| ms(s.lag_p99)).collect();
        let worst = p99.iter().copied().fold(0.0, f64::max);
        println!(
            "redis lag: p50 {p50:.2} ms (median replica), p99 {:.2} ms (median replica), \
             {worst:.2} ms (worst replica) (target p99 <= 50 ms)",
            median(p99.clone())
        );
        drop(syncs);
        drop(server);
    }
}
