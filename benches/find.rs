//! `find_matches` on a warm index (hashes precomputed, so hashing is not timed).
//!
//! The index holds one 256-block prefix shared by 16, 128 or 1,024 workers, plus 20,000
//! unrelated 32-block prompts spread over 16 workers (640,000 more entries), so probes
//! hit a large map. Queries: a miss at block 0, and hits of the first 16 and all 256
//! blocks of the shared prefix. Each query is timed twice: `find_matches` (Dynamo's
//! `OverlapScores`, two hash maps filled per find) and, as `…/seq_with`,
//! `find_matches_by_sequence_with` (sequence hashes, a callback per worker: what a router
//! that keeps its own score array does).

mod common;

use std::hint::black_box;
use std::time::Duration;

use approx_kv_index::{ApproxKvIndexer, Query};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn warm_index(sharers: u64) -> ApproxKvIndexer {
    let index = ApproxKvIndexer::new(64, Duration::from_secs(3600)).expect("valid settings");
    for p in 0..20_000u64 {
        let (local, seq) = common::random_prompt(1_000_000 + p, 32);
        index
            .record(p % 16, Query::hashes(&local, &seq))
            .expect("same lengths");
    }
    let (local, seq) = common::random_prompt(7, 256);
    for w in 0..sharers {
        index
            .record(10_000 + w, Query::hashes(&local, &seq))
            .expect("same lengths");
    }
    index
}

fn find(c: &mut Criterion) {
    let mut group = c.benchmark_group("find");
    let (shared, shared_seq) = common::random_prompt(7, 256);
    let (miss, miss_seq) = common::random_prompt(99, 256);
    for sharers in [16u64, 128, 1_024] {
        let index = warm_index(sharers);
        let queries = [
            ("miss@0", &miss[..], &miss_seq[..]),
            ("hit16", &shared[..16], &shared_seq[..16]),
            ("hit256", &shared[..], &shared_seq[..]),
        ];
        let workers = 10_000 + sharers as usize;
        for (name, query, seq) in queries {
            let expected = if name == "miss@0" {
                0
            } else {
                sharers as usize
            };
            assert_eq!(index.find(Query::blocks(query)).scores.len(), expected);
            group.throughput(Throughput::Elements(1));
            group.bench_with_input(
                BenchmarkId::new(name, format!("{sharers}w")),
                &query,
                |b, q| b.iter(|| black_box(index.find(Query::blocks(black_box(q))))),
            );
            common::bench_find_with(
                &mut group,
                BenchmarkId::new(format!("{name}/seq_with"), format!("{sharers}w")),
                &index,
                Query::sequence(seq),
                workers,
            );
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = find
}
criterion_main!(benches);
