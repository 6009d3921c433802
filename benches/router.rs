//! The router loop (hash, find, choose, record) over the first 500 requests of the
//! bundled Mooncake conversation trace (block size 64, 16 workers, load-aware choice),
//! on 1, 2 and `available_parallelism()` threads sharing one index. One iteration routes
//! one request; the time is the wall time of all threads, so the throughput is requests
//! per second for the whole pool. The index is warmed by one pass first (untimed).

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use approx_kv_index::ApproxKvIndexer;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

/// Requests in flight (their blocks count as load) per thread.
const WINDOW: usize = 16;

fn run(
    index: &ApproxKvIndexer,
    reqs: &[Vec<u32>],
    loads: &common::Loads,
    threads: u64,
    iters: u64,
) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut ring = std::collections::VecDeque::with_capacity(WINDOW + 1);
                let share = iters / threads + u64::from(t < iters % threads);
                for k in 0..share {
                    let i = ((t + k * threads) as usize) % reqs.len();
                    let (w, n) = common::route(index, &reqs[i], loads);
                    loads.0[w].fetch_add(n, Ordering::Relaxed);
                    ring.push_back((w, n));
                    if ring.len() > WINDOW {
                        if let Some((ow, on)) = ring.pop_front() {
                            loads.0[ow].fetch_sub(on, Ordering::Relaxed);
                        }
                    }
                }
                for (w, n) in ring {
                    loads.0[w].fetch_sub(n, Ordering::Relaxed);
                }
            });
        }
    });
    start.elapsed()
}

fn router(c: &mut Criterion) {
    let reqs = common::bundled_trace(500);
    let mut counts = vec![1u64, 2];
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    if !counts.contains(&cores) {
        counts.push(cores);
    }
    let mut group = c.benchmark_group("router");
    group.throughput(Throughput::Elements(1));
    for threads in counts {
        let index = ApproxKvIndexer::new(64, Duration::from_secs(3600)).expect("valid settings");
        let loads = common::Loads::default();
        run(&index, &reqs, &loads, 1, reqs.len() as u64);
        group.bench_with_input(BenchmarkId::new("route", threads), &threads, |b, &t| {
            b.iter_custom(|iters| run(&index, &reqs, &loads, t, iters))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = router
}
criterion_main!(benches);
