//! Recording routing decisions (hashes precomputed, so hashing is not timed):
//! - `new_prompt/16`: a never-seen 16-block prompt (16 new nodes);
//! - `new_holder/16`: a 16-block prompt that 8 other workers already hold (copy-on-write
//!   of each node's holder array);
//! - `refresh/16` and `refresh/256`: the same worker re-recording a prompt it holds.
//!
//! Index building is excluded: `iter_custom` times only the recording calls, and builds a
//! fresh index every batch so memory stays bounded.

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use approx_kv_index::{ApproxKvIndexer, LocalBlockHash, Query, SequenceHash};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const BATCH: u64 = 20_000;

type Prompt = (Vec<LocalBlockHash>, Vec<SequenceHash>);

fn index() -> ApproxKvIndexer {
    ApproxKvIndexer::new(64, Duration::from_secs(3600)).expect("valid settings")
}

/// Times recording `iters` prompts made by `prompt(i)`, each batch into a fresh index
/// prepared by `prepare` (untimed).
fn timed(
    iters: u64,
    prompt: impl Fn(u64) -> Prompt,
    prepare: impl Fn(&ApproxKvIndexer, &[Prompt]),
    worker: u64,
) -> Duration {
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let n = (iters - done).min(BATCH);
        let prompts: Vec<Prompt> = (done..done + n).map(&prompt).collect();
        let index = index();
        prepare(&index, &prompts);
        let start = Instant::now();
        for (local, seq) in &prompts {
            black_box(index.record(worker, Query::hashes(local, seq))).ok();
        }
        total += start.elapsed();
        done += n;
    }
    total
}

fn record(c: &mut Criterion) {
    let mut group = c.benchmark_group("record");
    group.throughput(Throughput::Elements(1));
    group.bench_function("new_prompt/16", |b| {
        b.iter_custom(|iters| timed(iters, |i| common::random_prompt(i, 16), |_, _| {}, 1))
    });
    group.bench_function("new_holder/16", |b| {
        b.iter_custom(|iters| {
            timed(
                iters,
                |i| common::random_prompt(i, 16),
                |index, prompts| {
                    for (local, seq) in prompts {
                        for w in 0..8 {
                            index.record(w, Query::hashes(local, seq)).ok();
                        }
                    }
                },
                100,
            )
        })
    });
    for blocks in [16usize, 256] {
        let (local, seq) = common::random_prompt(5, blocks);
        let index = index();
        index.record(3, Query::hashes(&local, &seq)).ok();
        group.bench_function(format!("refresh/{blocks}"), |b| {
            b.iter(|| black_box(index.record(3, Query::hashes(&local, &seq))).ok())
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = record
}
criterion_main!(benches);
