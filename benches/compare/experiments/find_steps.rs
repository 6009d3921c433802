//! A find's cost split into its work and its misses (not built by any crate here): routes a
//! Mooncake trace as `approx-kv-compare` does (hash, find, load-aware choice, record; one
//! thread), then, every round, times each request's find from its precomputed hashes
//! twice in a row: the first read cold, as the "find" rows of `approx-kv-compare` read
//! it, the second right after it, with the query, the buckets and the runs it reads in the
//! cache (the find's own work). Prints each round's p50 and p99 of both. Used in
//! `docs/benchmarks.md` ("Targets and where they are missed"). To run it, make a binary
//! crate with this file as `src/main.rs` and the dependencies
//! `approx-kv-index = { path = "<repo>" }`, `approx-kv-rng = { path = "<repo>/tools/rng" }`,
//! `serde_json = "1"`, then `cargo build --release` and
//! `W=16 R=5 target/release/find_steps <repo>/../shared/data/mooncake/conversation_trace.jsonl`
//! (`W` workers, `R` rounds; the trace defaults to the bundled slice, relative to the
//! working directory).

use approx_kv_index::{ApproxKvIndexer, PromptHashes, Query};
use std::time::{Duration, Instant};
const TB: usize = 512;
fn load(path: &str) -> Vec<Vec<u32>> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let ids: Vec<u64> = v["hash_ids"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|x| x.as_u64())
                .collect();
            let len = (v["input_length"].as_u64().unwrap() as usize).min(ids.len() * TB);
            (0..len)
                .map(|t| {
                    approx_kv_rng::splitmix64(ids[t / TB].wrapping_mul(TB as u64) + (t % TB) as u64)
                        as u32
                })
                .collect()
        })
        .collect()
}
fn percentile(sorted: &[u64], p: usize) -> u64 {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}
fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "data/conversation_head2000.jsonl".into());
    let reqs = load(&path);
    let var = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .map_or(default, |s| s.parse().unwrap())
    };
    let (workers, rounds) = (var("W", 16), var("R", 5));
    let index = ApproxKvIndexer::builder()
        .block_size(64)
        .ttl(Duration::from_secs(3600))
        .tick(Duration::from_millis(100))
        .build()
        .unwrap();
    let mut loads = vec![0u64; workers];
    let mut ring = std::collections::VecDeque::new();
    let mut overlap = vec![0u32; workers];
    for r in &reqs {
        let ph = PromptHashes::new(r, 64);
        overlap.fill(0);
        index.find_into(Query::prompt(&ph), &mut |w: u64, s: u32| {
            overlap[w as usize] = s
        });
        let n = ph.len() as u64;
        let mut best = (u64::MAX, 0);
        for (w, &o) in overlap.iter().enumerate() {
            let cost = n.saturating_sub(o as u64) + loads[w];
            if cost < best.0 {
                best = (cost, w);
            }
        }
        let _ = index.record(best.1 as u64, Query::prompt(&ph));
        loads[best.1] += n;
        ring.push_back((best.1, n));
        if ring.len() > 32 {
            let (ow, on) = ring.pop_front().unwrap();
            loads[ow] -= on;
        }
    }
    let hashes: Vec<PromptHashes> = reqs.iter().map(|r| PromptHashes::new(r, 64)).collect();
    drop(reqs);
    for round in 0..rounds {
        let (mut cold, mut hot) = (Vec::new(), Vec::new());
        for h in &hashes {
            for lat in [&mut cold, &mut hot] {
                overlap.fill(0);
                let t = Instant::now();
                index.find_into(Query::prompt(h), &mut |w: u64, s: u32| {
                    overlap[w as usize] = s
                });
                lat.push(t.elapsed().as_nanos() as u64);
                std::hint::black_box(&overlap);
            }
        }
        cold.sort_unstable();
        hot.sort_unstable();
        println!(
            "round {round}: cold p50 {} p99 {} ns, hot p50 {} p99 {} ns",
            percentile(&cold, 50),
            percentile(&cold, 99),
            percentile(&hot, 50),
            percentile(&hot, 99)
        );
    }
}
