//! Helpers shared by the criterion benches: deterministic tokens, the bundled trace, and
//! the load-aware worker choice of the router loop.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use approx_kv_index::{
    compute_block_hash_for_seq, compute_seq_hashes, ApproxKvIndexer, KvCacheEventData,
    KvCacheStoreData, KvCacheStoredBlockData, LocalBlockHash, Query, RouterEvent, SequenceHash,
};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion};

/// Short settings so the whole suite runs in a few minutes on a shared 2-core machine.
pub fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
}

/// A well-mixed 64-bit function (splitmix64), the workspace's one generator.
pub use approx_kv_rng::splitmix64 as mix;

/// Times `index.find_into(query, callback)`, the callback writing each worker's score
/// into a score array indexed by worker id (below `workers`): what a router that keeps its
/// own score array does.
pub fn bench_find_with(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: BenchmarkId,
    index: &ApproxKvIndexer,
    query: Query<'_>,
    workers: usize,
) {
    let mut scores = vec![0u32; workers];
    group.bench_function(id, |b| {
        b.iter(|| {
            index.find_into(std::hint::black_box(query), &mut |w, s| {
                scores[w as usize] = s;
            });
            std::hint::black_box(&mut scores);
        })
    });
}

/// `len` tokens determined by `seed`.
pub fn tokens(seed: u64, len: usize) -> Vec<u32> {
    (0..len as u64)
        .map(|i| mix(seed.wrapping_mul(1 << 32) ^ i) as u32)
        .collect()
}

/// Local and sequence hashes of `tokens`.
pub fn hashes(tokens: &[u32], block_size: u32) -> (Vec<LocalBlockHash>, Vec<SequenceHash>) {
    let local = compute_block_hash_for_seq(tokens, block_size);
    let seq = compute_seq_hashes(&local);
    (local, seq)
}

/// Hashes of a prompt of `blocks` random blocks (`seed` picks which).
pub fn random_prompt(seed: u64, blocks: usize) -> (Vec<LocalBlockHash>, Vec<SequenceHash>) {
    let local: Vec<_> = (0..blocks as u64)
        .map(|i| LocalBlockHash(mix(mix(seed) ^ i)))
        .collect();
    let seq = compute_seq_hashes(&local);
    (local, seq)
}

/// An exact `Stored` event of `worker` for a whole prompt, from the root.
pub fn stored(worker: u64, local: &[LocalBlockHash], seq: &[SequenceHash]) -> RouterEvent {
    let blocks = local
        .iter()
        .zip(seq)
        .map(|(&tokens_hash, &block_hash)| KvCacheStoredBlockData {
            block_hash,
            tokens_hash,
            expires_in: None,
        });
    RouterEvent {
        worker_id: worker,
        event_id: 0,
        data: KvCacheEventData::Stored(KvCacheStoreData {
            parent_hash: None,
            blocks: blocks.collect(),
        }),
    }
}

/// The first `limit` requests of the bundled Mooncake conversation trace as tokens: each
/// 512-token trace block id `h` becomes tokens `mix(h * 512 + p)` (as the compare bench).
pub fn bundled_trace(limit: usize) -> Vec<Vec<u32>> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/conversation_head2000.jsonl"
    );
    let text = std::fs::read_to_string(path).expect("bundled trace");
    text.lines()
        .take(limit)
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
            let ids: Vec<u64> = v["hash_ids"]
                .as_array()
                .expect("hash_ids")
                .iter()
                .filter_map(|x| x.as_u64())
                .collect();
            let len =
                (v["input_length"].as_u64().expect("input_length") as usize).min(ids.len() * 512);
            (0..len)
                .map(|t| mix(ids[t / 512].wrapping_mul(512) + (t % 512) as u64) as u32)
                .collect()
        })
        .collect()
}

/// Workers the router chooses among.
pub const WORKERS: usize = 16;

/// Blocks in flight per worker, shared by router threads.
#[derive(Default)]
pub struct Loads(pub [AtomicU64; WORKERS]);

/// One routing step: hash, find, choose (fewest blocks to prefill + blocks in flight),
/// record. Returns the worker and the request's block count (the caller tracks load).
pub fn route(index: &ApproxKvIndexer, tokens: &[u32], loads: &Loads) -> (usize, u64) {
    let (local, seq) = hashes(tokens, index.block_size());
    let found = index.find(Query::blocks(&local));
    let n = local.len() as u64;
    let mut best = (u64::MAX, 0);
    for w in 0..WORKERS {
        let overlap = found.scores.get(&(w as u64)).copied().unwrap_or(0);
        let cost = n.saturating_sub(u64::from(overlap)) + loads.0[w].load(Ordering::Relaxed);
        if cost < best.0 {
            best = (cost, w);
        }
    }
    let w = best.1;
    let _ = index.record(w as u64, Query::hashes(&local, &seq));
    (w, n)
}

/// The number in environment variable `name`, else `default` (the print-out benches'
/// settings).
pub fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Resident set size of this process in MiB (Linux; 0 elsewhere).
pub fn rss_mib() -> f64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
        .unwrap_or(0.0);
    pages * 4096.0 / (1024.0 * 1024.0)
}
