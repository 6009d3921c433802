//! The sweeper reclaiming 1,048,576 expired (block, worker) entries, and find latency
//! while it runs.
//!
//! - `sweep/1M_shared`: 4,096 prompts of 16 blocks, each held by 16 workers (65,536
//!   nodes); `sweep/1M_distinct`: 65,536 prompts of 16 blocks held by one worker each
//!   (each prompt one run); `sweep/1M_blocks`: the same in an index that makes no runs (an
//!   engine's exact event came first: 1,048,576 nodes, each walked block by block). A
//!   manual clock jumps past the TTL; only `sweep_expired` is timed.
//! - After criterion, a plain measurement prints p50 / p99 of finds on live prompts,
//!   idle and while another thread sweeps 1M expired entries (criterion reports means,
//!   not tails).

mod common;

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use approx_kv_index::{ApproxKvIndexer, LocalBlockHash, ManualClock, Query};
use criterion::{criterion_group, Criterion, Throughput};

const TTL: Duration = Duration::from_secs(10);
const ENTRIES: u64 = 1 << 20;

/// An index holding 1M entries that expire at `TTL`, with a manual clock at 0; with
/// `runs_off`, an exact entry (which never expires) was stored first, so that decisions
/// make no runs.
fn loaded(workers_per_prompt: u64, runs_off: bool) -> (ApproxKvIndexer, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let index = ApproxKvIndexer::builder()
        .block_size(64)
        .ttl(TTL)
        .clock(clock.clone())
        .background_sweeper(false)
        .build()
        .expect("valid settings");
    if runs_off {
        let (local, seq) = common::random_prompt(u64::MAX, 1);
        index.apply_event(&common::stored(u64::MAX, &local, &seq));
    }
    let prompts = ENTRIES / 16 / workers_per_prompt;
    for p in 0..prompts {
        let (local, seq) = common::random_prompt(p, 16);
        for w in 0..workers_per_prompt {
            index.record(w, Query::hashes(&local, &seq)).ok();
        }
    }
    assert_eq!(index.stats().entries as u64, ENTRIES + u64::from(runs_off));
    (index, clock)
}

fn sweep(c: &mut Criterion) {
    let mut group = c.benchmark_group("sweep");
    group.sample_size(10);
    group.throughput(Throughput::Elements(ENTRIES));
    let cases = [
        ("1M_shared", 16, false),
        ("1M_distinct", 1, false),
        ("1M_blocks", 1, true),
    ];
    for (name, per_prompt, runs_off) in cases {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let (index, clock) = loaded(per_prompt, runs_off);
                    clock.advance(TTL);
                    let start = Instant::now();
                    let freed = black_box(index.sweep_expired());
                    total += start.elapsed();
                    assert_eq!(freed as u64, ENTRIES);
                }
                total
            })
        });
    }
    group.finish();
}

/// p50 and p99 (µs) of finds of `queries` while `busy` is set (or for `min` finds).
fn find_tail(
    index: &ApproxKvIndexer,
    queries: &[Vec<LocalBlockHash>],
    busy: &AtomicBool,
    min: usize,
) -> (f64, f64, usize) {
    let mut lat = Vec::with_capacity(1 << 20);
    let mut i = 0;
    loop {
        if !busy.load(Ordering::Acquire) && lat.len() >= min.max(1) {
            break;
        }
        let q = &queries[i % queries.len()];
        let t = Instant::now();
        black_box(index.find(Query::blocks(black_box(q))));
        lat.push(t.elapsed().as_nanos() as u64);
        i += 1;
    }
    lat.sort_unstable();
    let at = |q: usize| lat[(lat.len() * q / 100).min(lat.len() - 1)] as f64 / 1e3;
    (at(50), at(99), lat.len())
}

fn finds_during_sweep() {
    for (name, per_prompt) in [("1M_shared", 16), ("1M_distinct", 1)] {
        let (index, clock) = loaded(per_prompt, false);
        clock.advance(TTL);
        // Live prompts recorded after the jump: 64 prompts of 32 blocks, 16 workers.
        let queries: Vec<_> = (0..64u64)
            .map(|p| {
                let (local, seq) = common::random_prompt(1 << 40 | p, 32);
                index.record(p % 16, Query::hashes(&local, &seq)).ok();
                local
            })
            .collect();
        let idle = find_tail(&index, &queries, &AtomicBool::new(false), 200_000);
        let busy = AtomicBool::new(true);
        let (during, swept) = std::thread::scope(|s| {
            let sweeper = s.spawn(|| {
                let start = Instant::now();
                let n = index.sweep_expired();
                busy.store(false, Ordering::Release);
                (n, start.elapsed())
            });
            let during = find_tail(&index, &queries, &busy, 0);
            (during, sweeper.join().expect("sweeper thread"))
        });
        println!(
            "find_during_sweep/{name}: idle p50 {:.2} µs p99 {:.2} µs ({} finds); \
             during a sweep of {} entries ({:.1} ms): p50 {:.2} µs p99 {:.2} µs ({} finds)",
            idle.0,
            idle.1,
            idle.2,
            swept.0,
            swept.1.as_secs_f64() * 1e3,
            during.0,
            during.1,
            during.2
        );
    }
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = sweep
}

fn main() {
    benches();
    if std::env::args().all(|a| a != "--list") {
        finds_during_sweep();
    }
    Criterion::default().configure_from_args().final_summary();
}
