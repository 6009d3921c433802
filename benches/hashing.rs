//! Block and sequence hashing of one prompt, at several prompt lengths (block size 64):
//! `local+seq` by Dynamo's two functions (two passes), `prompt` in one pass
//! (`PromptHashes::new`), `local` the tokens hashes alone.

mod common;

use std::hint::black_box;

use approx_kv_index::{compute_block_hash_for_seq, compute_seq_hashes, PromptHashes};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn hashing(c: &mut Criterion) {
    let mut group = c.benchmark_group("hash");
    for len in [256usize, 2_048, 16_384, 131_072] {
        let tokens = common::tokens(len as u64, len);
        group.throughput(Throughput::Elements(len as u64));
        group.bench_with_input(BenchmarkId::new("local+seq", len), &tokens, |b, t| {
            b.iter(|| {
                let local = compute_block_hash_for_seq(black_box(t), 64);
                black_box(compute_seq_hashes(&local))
            })
        });
        group.bench_with_input(BenchmarkId::new("prompt", len), &tokens, |b, t| {
            b.iter(|| black_box(PromptHashes::new(black_box(t), 64)))
        });
        group.bench_with_input(BenchmarkId::new("local", len), &tokens, |b, t| {
            b.iter(|| black_box(compute_block_hash_for_seq(black_box(t), 64)))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = hashing
}
criterion_main!(benches);
