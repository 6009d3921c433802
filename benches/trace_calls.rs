//! The calls of the Python binding, timed in Rust on the bundled trace: the baseline that
//! `python/bench/overhead.py` compares its per-call times with (`docs/python.md`). Both run
//! the same passes with the same settings (block size 64, TTL 1 h, keys
//! `WorkerWithDpRank`, hashing included):
//! - `record`: each of the 2,000 requests recorded into a fresh index, to worker `i % 8`;
//! - `find`: each request found in that warm index;
//! - `find+record, N threads`: each request found then recorded, the trace dealt out
//!   round-robin to N threads sharing a fresh index; requests per second.
//!
//! Each figure is the median of `APPROX_KV_ROUNDS` rounds (default 5); the thread counts
//! are `APPROX_KV_THREADS` (default `1,2`).
//!
//! ```sh
//! cargo bench --bench trace_calls
//! APPROX_KV_THREADS=1,2,4 cargo bench --bench trace_calls
//! ```

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use approx_kv_index::{ApproxKvIndexer, HashSalt, Query, WorkerWithDpRank};

type Index = ApproxKvIndexer<WorkerWithDpRank>;

fn index() -> Index {
    ApproxKvIndexer::builder()
        .block_size(64)
        .ttl(Duration::from_secs(3600))
        .build_for()
        .expect("valid settings")
}

fn key(i: usize) -> WorkerWithDpRank {
    WorkerWithDpRank::new((i % 8) as u64, 0)
}

/// Records every request into `index`; returns the time per call.
fn record_pass(index: &Index, reqs: &[Vec<u32>]) -> Duration {
    let start = Instant::now();
    for (i, tokens) in reqs.iter().enumerate() {
        index
            .record(key(i), Query::salted_tokens(tokens, HashSalt::NONE))
            .unwrap();
    }
    start.elapsed() / reqs.len() as u32
}

/// Finds every request in `index`; returns the time per call and the summed best scores
/// (which the Python benchmark prints too: equal sums, equal index).
fn find_pass(index: &Index, reqs: &[Vec<u32>]) -> (Duration, u64) {
    let mut hits = 0;
    let start = Instant::now();
    for tokens in reqs {
        let found = black_box(index.find(Query::salted_tokens(tokens, HashSalt::NONE)));
        hits += u64::from(found.best().map_or(0, |(_, s)| s));
    }
    (start.elapsed() / reqs.len() as u32, hits)
}

/// Finds then records every request, dealt out to `threads` threads; requests per second.
fn threaded_pass(reqs: &[Vec<u32>], threads: usize) -> f64 {
    let index = index();
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let index = &index;
            s.spawn(move || {
                for i in (t..reqs.len()).step_by(threads) {
                    black_box(index.find(Query::salted_tokens(&reqs[i], HashSalt::NONE)));
                    index
                        .record(key(i), Query::salted_tokens(&reqs[i], HashSalt::NONE))
                        .unwrap();
                }
            });
        }
    });
    reqs.len() as f64 / start.elapsed().as_secs_f64()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let rounds: usize = std::env::var("APPROX_KV_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(1);
    let thread_counts: Vec<usize> = std::env::var("APPROX_KV_THREADS")
        .unwrap_or_else(|_| "1,2".to_owned())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .filter(|&n| n > 0)
        .collect();
    let reqs = common::bundled_trace(usize::MAX);
    let (mut record, mut find, mut hits) = (Vec::new(), Vec::new(), 0);
    for _ in 0..rounds {
        let index = index();
        record.push(record_pass(&index, &reqs).as_secs_f64() * 1e6);
        let (per_call, h) = find_pass(&index, &reqs);
        find.push(per_call.as_secs_f64() * 1e6);
        hits = h;
    }
    println!("Rust, {} requests, median of {rounds} rounds:", reqs.len());
    println!("  record: {:8.2} us/call", median(record));
    println!(
        "  find:   {:8.2} us/call  (summed best scores {hits})",
        median(find)
    );
    for threads in thread_counts {
        let rates = (0..rounds).map(|_| threaded_pass(&reqs, threads)).collect();
        println!(
            "  find+record, {threads} thread(s): {:8.0} requests/s",
            median(rates)
        );
    }
}
