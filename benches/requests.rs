//! The request lifecycle's calls, beside the record they replace (hashes precomputed):
//! - `record/16`: a worker re-recording a 16-block prompt it holds (the baseline);
//! - `begin_finish/16`: `begin_request` and `finish_request` of that prompt on that worker
//!   (the begin's find and pin, the release's walk and new decision);
//! - `begin_finish/256`: the same for a 256-block prompt;
//! - `begin_finish_prompt/256`: the same from `PromptHashes` (`Query::prompt`), whose pair
//!   of hash forms the begin need not check;
//! - `begin_finish/next_turn/256`: the same for a conversation's next turn: a 256-block
//!   prompt that leaves the worker's 256-block run 8 blocks before its end, so that the
//!   begin reads the worker's claim deep inside the run (the turn before recorded
//!   untimed, 64 conversations an index);
//! - `observe/16`: `observe_cached` of a request whose prediction held (begin and finish
//!   untimed);
//! - `observe/ghost_raise/1024`: `observe_cached` of a request that hit two ghosts of a
//!   worker at capacity 4, which raises the capacity of all 1,024 workers on it (the
//!   capacities reset and the ghosts made untimed).

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use approx_kv_index::{ApproxKvIndexer, PromptHashes, Query};
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
    group.bench_function("begin_finish/next_turn/256", |b| {
        b.iter_custom(|iters| next_turns(iters, 256));
    });
    let hashes = PromptHashes::new(&common::tokens(8, 256 * 64), 64);
    let by_prompt = index();
    by_prompt.record(3, Query::prompt(&hashes)).ok();
    group.bench_function("begin_finish_prompt/256", |b| {
        b.iter(|| {
            let request = by_prompt.begin_request(3, &hashes);
            by_prompt.finish_request(black_box(request));
        })
    });
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
    let fleet = index();
    let (local, seq) = common::random_prompt(9, 4);
    let (other_local, other_seq) = common::random_prompt(11, 2);
    group.bench_function("observe/ghost_raise/1024", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                for worker in 0..1024 {
                    fleet.set_worker_capacity(worker, Some(4));
                }
                fleet.record(0, Query::hashes(&local, &seq)).ok();
                fleet
                    .record(0, Query::hashes(&other_local, &other_seq))
                    .ok();
                let request = fleet.begin_request(0, Query::hashes(&local, &seq));
                let start = Instant::now();
                black_box(fleet.observe_cached(&request, 4 * 64));
                total += start.elapsed();
                assert_eq!(
                    fleet.worker_capacity(1023),
                    Some(8),
                    "the raise reached the fleet"
                );
                fleet.finish_request(request);
            }
            total
        })
    });
    group.finish();
}

/// Times `iters` begins and finishes of a next turn (`begin_finish/next_turn`), each of
/// a conversation whose turn before was just recorded, as one run of `blocks` blocks.
fn next_turns(iters: u64, blocks: usize) -> Duration {
    const TURNS: u64 = 64;
    let turns: Vec<_> = (0..TURNS)
        .map(|seed| {
            let before = common::tokens(100 + seed, blocks * 64);
            let mut next = before[..(blocks - 8) * 64].to_vec();
            next.extend(common::tokens(200 + seed, 8 * 64));
            (common::hashes(&before, 64), common::hashes(&next, 64))
        })
        .collect();
    let mut total = Duration::ZERO;
    let mut index = index();
    for i in 0..iters {
        let ((before_local, before_seq), (local, seq)) = &turns[(i % TURNS) as usize];
        if i % TURNS == 0 {
            index = self::index();
        }
        index
            .record(3, Query::hashes(before_local, before_seq))
            .ok();
        let start = Instant::now();
        let request = index.begin_request(3, Query::hashes(local, seq));
        index.finish_request(black_box(request));
        total += start.elapsed();
    }
    total
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = requests
}
criterion_main!(benches);
