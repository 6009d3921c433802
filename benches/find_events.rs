//! Finds on an index fed only by an engine's exact KV events (`Stored` chains, no
//! decisions), hashes precomputed: every block is a node of its own (exact events make no
//! runs), and while every worker's blocks are prefixes of each prompt finds gallop
//! (`IndexStats::finds_gallop`).
//!
//! The index holds 20,000 unrelated 32-block prompts stored by 16 workers, and one
//! 256-block prompt stored by 16 workers: whole by all of them (`shared`), or, in the
//! other index, the first `16 (w + 1)` blocks by worker `w` (`staircase`: sixteen depths
//! at which workers drop out). Queries: its first 16 blocks and all 256, by their sequence
//! hashes (`Query::sequence`) and by their local hashes (`Query::blocks`, chained by the
//! find as far as it probes: `…/blocks`), each into a callback per worker.

mod common;

use std::time::Duration;

use approx_kv_index::{ApproxKvIndexer, Query};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn index(staircase: bool) -> ApproxKvIndexer {
    let index = ApproxKvIndexer::new(64, Duration::from_secs(3600)).expect("valid settings");
    for p in 0..20_000u64 {
        let (local, seq) = common::random_prompt(1_000_000 + p, 32);
        index.apply_event(&common::stored(p % 16, &local, &seq));
    }
    let (local, seq) = common::random_prompt(7, 256);
    for w in 0..16u64 {
        let len = if staircase {
            16 * (w as usize + 1)
        } else {
            256
        };
        index.apply_event(&common::stored(w, &local[..len], &seq[..len]));
    }
    index
}

fn find_events(c: &mut Criterion) {
    let mut group = c.benchmark_group("find_events");
    group.throughput(Throughput::Elements(1));
    let (local, seq) = common::random_prompt(7, 256);
    for (name, staircase) in [("shared", false), ("staircase", true)] {
        let index = index(staircase);
        assert!(index.stats().finds_gallop);
        for len in [16usize, 256] {
            for (form, query) in [
                (name.to_string(), Query::sequence(&seq[..len])),
                (format!("{name}/blocks"), Query::blocks(&local[..len])),
            ] {
                let id = BenchmarkId::new(form, len);
                common::bench_find_with(&mut group, id, &index, query, 16);
            }
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = find_events
}
criterion_main!(benches);
