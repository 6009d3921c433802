//! Recording routing decisions (hashes precomputed, so hashing is not timed):
//! - `new_prompt/16`: a never-seen 16-block prompt (16 new nodes);
//! - `new_holder/16`: a 16-block prompt that 8 other workers already hold (copy-on-write
//!   of each node's holder array);
//! - `refresh/16` and `refresh/256`: the same worker re-recording a prompt it holds;
//! - `refresh_prompt/256`: the same from `PromptHashes` (`Query::prompt`), whose pair of
//!   hash forms the record need not check (`Query::hashes` chains the local hashes again);
//! - `new_prompt_blocks/256`: a never-seen 256-block prompt in an index that makes no runs
//!   (an engine's exact KV event came first), so 256 new nodes, one map insert each;
//! - `stored/256`: an engine's exact `Stored` event of a never-seen 256-block prompt, one
//!   map insert a block;
//! - `next_turn/256`: a conversation's next turn, from `PromptHashes`: the worker recorded a
//!   256-block prompt; the next keeps its first 252 blocks (the last one changed) and adds
//!   64, so the record refreshes a run, cuts it where the turn leaves it, and stores the new
//!   blocks as a run (what most records of a route on the conversation trace do).
//!
//! Index building is excluded: `iter_custom` times only the recording calls, and builds a
//! fresh index every batch so memory stays bounded.

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use approx_kv_index::{
    ApproxKvIndexer, LocalBlockHash, PromptHashes, Query, RouterEvent, SequenceHash,
};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

/// Blocks recorded into one index before a fresh one is built.
const BATCH_BLOCKS: u64 = 320_000;

type Prompt = (Vec<LocalBlockHash>, Vec<SequenceHash>);

fn index() -> ApproxKvIndexer {
    ApproxKvIndexer::new(64, Duration::from_secs(3600)).expect("valid settings")
}

/// Times `iters` calls `call(index, &prompt(i))` on prompts of `blocks` blocks (a record,
/// or an event made beforehand), each batch into a fresh index prepared by `prepare`
/// (untimed).
fn timed<P>(
    (iters, blocks): (u64, usize),
    prompt: impl Fn(u64) -> P,
    prepare: impl Fn(&ApproxKvIndexer, &[P]),
    call: impl Fn(&ApproxKvIndexer, &P),
) -> Duration {
    let batch = (BATCH_BLOCKS / blocks as u64).max(1);
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let n = (iters - done).min(batch);
        let prompts: Vec<P> = (done..done + n).map(&prompt).collect();
        let index = index();
        prepare(&index, &prompts);
        let start = Instant::now();
        for p in &prompts {
            call(&index, p);
        }
        total += start.elapsed();
        done += n;
    }
    total
}

/// A record of `worker`'s decision on the prompt.
fn record_of(worker: u64) -> impl Fn(&ApproxKvIndexer, &Prompt) {
    move |index, (local, seq)| {
        black_box(index.record(worker, Query::hashes(local, seq))).ok();
    }
}

/// Makes the index stop making runs (and not stop galloping): an exact event from the root.
fn runs_off(index: &ApproxKvIndexer, _: &[Prompt]) {
    let (local, seq) = common::random_prompt(u64::MAX, 1);
    index.apply_event(&common::stored(0, &local, &seq));
}

fn record(c: &mut Criterion) {
    let mut group = c.benchmark_group("record");
    group.throughput(Throughput::Elements(1));
    group.bench_function("new_prompt/16", |b| {
        b.iter_custom(|iters| {
            let prompt = |i| common::random_prompt(i, 16);
            timed((iters, 16), prompt, |_, _| {}, record_of(1))
        })
    });
    group.bench_function("new_holder/16", |b| {
        b.iter_custom(|iters| {
            timed(
                (iters, 16),
                |i| common::random_prompt(i, 16),
                |index, prompts| {
                    for (local, seq) in prompts {
                        for w in 0..8 {
                            index.record(w, Query::hashes(local, seq)).ok();
                        }
                    }
                },
                record_of(100),
            )
        })
    });
    group.bench_function("new_prompt_blocks/256", |b| {
        b.iter_custom(|iters| {
            let prompt = |i| common::random_prompt(i, 256);
            timed((iters, 256), prompt, runs_off, record_of(1))
        })
    });
    group.bench_function("stored/256", |b| {
        b.iter_custom(|iters| {
            let event = |i| {
                let (local, seq) = common::random_prompt(i, 256);
                common::stored(1, &local, &seq)
            };
            let apply = |index: &ApproxKvIndexer, e: &RouterEvent| index.apply_event(e);
            timed((iters, 256), event, |_, _| {}, apply)
        })
    });
    group.bench_function("next_turn/256", |b| {
        b.iter_custom(|iters| {
            let turns = |i: u64| {
                let first = common::tokens(i, 256 * 64);
                let mut next = first[..252 * 64].to_vec();
                next.extend(common::tokens(i ^ (1 << 40), 64 * 64));
                (PromptHashes::new(&first, 64), PromptHashes::new(&next, 64))
            };
            let first_turns = |index: &ApproxKvIndexer, turns: &[(PromptHashes, PromptHashes)]| {
                for (first, _) in turns {
                    index.record(1, Query::prompt(first)).ok();
                }
            };
            let next_turn = |index: &ApproxKvIndexer, (_, next): &(PromptHashes, PromptHashes)| {
                black_box(index.record(1, Query::prompt(next))).ok();
            };
            timed((iters, 316), turns, first_turns, next_turn)
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
    let tokens = common::tokens(6, 256 * 64);
    let hashes = PromptHashes::new(&tokens, 64);
    let index = index();
    index.record(3, Query::prompt(&hashes)).ok();
    group.bench_function("refresh_prompt/256", |b| {
        b.iter(|| black_box(index.record(3, Query::prompt(&hashes))).ok())
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = record
}
criterion_main!(benches);
