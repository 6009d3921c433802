//! The request lifecycle's calls, beside the record they replace (hashes precomputed):
//! - `record/16`: a worker re-recording a 16-block prompt it holds (the baseline);
//! - `begin_finish/16`: `begin_request` and `finish_request` of that prompt on that worker
//!   (the begin's find and pin, the release's walk and new decision);
//! - `begin_finish/256`: the same for a 256-block prompt;
//! - `observe/16`: `observe_cached` of a request whose prediction held (begin and finish
//!   untimed).

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use approx_kv_index::{ApproxKvIndexer, Query};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn index() -> ApproxKvIndexer {
    ApproxKvIndexer::new(64, Duration::from_secs(3600)).expect("valid settings")
}

fn requests(c: &mut Criterion) {
    let mut group = c.benchmark_group("request");
    group.throughput(Throughput::Elements(1));
    let (local, seq) = common::random_prompt(5, 16);
    let held = index();
    held.record(3, Query::hashes(&local, &seq)).ok();
    group.bench_function("record/16", |b| {
        b.iter(|| black_box(held.record(3, Query::hashes(&local, &seq))).ok())
    });
    for blocks in [16usize, 256] {
        let (local, seq) = common::random_prompt(7, blocks);
        let index = index();
        index.record(3, Query::hashes(&local, &seq)).ok();
        group.bench_function(format!("begin_finish/{blocks}"), |b| {
            b.iter(|| {
                let request = index.begin_request(3, Query::hashes(&local, &seq));
                index.finish_request(black_box(request));
            })
        });
    }
    group.bench_function("observe/16", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let request = held.begin_request(3, Query::hashes(&local, &seq));
                let start = Instant::now();
                black_box(held.observe_cached(&request, 16 * 64));
                total += start.elapsed();
                held.finish_request(request);
            }
            total
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = requests
}
criterion_main!(benches);
