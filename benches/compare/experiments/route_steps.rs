//! A route timed step by step (not built by any crate here): for each request of a
//! Mooncake trace, hash (`PromptHashes::new`), find and choose (load-aware, as
//! `approx-kv-compare` does), record; prints each round's per-request means. Used for the
//! profile in `docs/benchmarks.md` ("Targets and where they are missed"). To run it, make
//! a binary crate with this file as `src/main.rs` and the dependencies
//! `approx-kv-index = { path = "<repo>" }`, `approx-kv-rng = { path = "<repo>/tools/rng" }`,
//! `serde_json = "1"` (`[profile.release] debug = 1` for `perf`), then
//! `cargo build --release` and
//! `W=16 R=5 target/release/route_steps <repo>/../shared/data/mooncake/conversation_trace.jsonl`
//! (`W` workers, `R` rounds; the trace defaults to the bundled slice, relative to the
//! working directory).
//!
//! With `FINDS=1`, each round then also times every request's find from its precomputed
//! hashes twice in a row, on the index the round routed: the first read cold, as the
//! "find" rows of `approx-kv-compare` read it, the second right after it, with the query,
//! the buckets and the runs it reads in the cache (the find's own work), and prints the
//! p50 and p99 of both. `REPS=N` with it runs each find N times more before, untimed, for
//! a profile of finds: `REPS=400 FINDS=1 W=16 R=1 perf record -F 4999 target/release/route_steps TRACE`.

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
/// Times each find of `hashes` twice in a row (see the module docs) and prints the p50
/// and p99 of the first (cold) and of the second (hot), in nanoseconds.
fn time_finds(index: &ApproxKvIndexer, hashes: &[PromptHashes], workers: usize) {
    let mut overlap = vec![0u32; workers];
    let (mut cold, mut hot) = (Vec::new(), Vec::new());
    // `REPS=N`: each find first runs N times untimed, so that a profile of the run
    // (`perf record`) is mostly finds, as hot as the second timed one.
    let reps: usize = std::env::var("REPS").map_or(0, |v| v.parse().unwrap());
    for h in hashes {
        for _ in 0..reps {
            index.find_into(Query::prompt(h), &mut |w: u64, s: u32| {
                overlap[w as usize] = s
            });
        }
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
        "  finds: cold p50 {} p99 {} ns, hot p50 {} p99 {} ns",
        percentile(&cold, 50),
        percentile(&cold, 99),
        percentile(&hot, 50),
        percentile(&hot, 99)
    );
}
fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "data/conversation_head2000.jsonl".into());
    let reqs = load(&path);
    let workers: usize = std::env::var("W")
        .ok()
        .map(|s| s.parse().unwrap())
        .unwrap_or(16);
    let rounds: usize = std::env::var("R")
        .ok()
        .map(|s| s.parse().unwrap())
        .unwrap_or(5);
    let finds = std::env::var_os("FINDS").map(|_| {
        reqs.iter()
            .map(|r| PromptHashes::new(r, 64))
            .collect::<Vec<_>>()
    });
    for round in 0..rounds {
        let index = ApproxKvIndexer::builder()
            .block_size(64)
            .ttl(Duration::from_secs(600))
            .tick(Duration::from_millis(100))
            .build()
            .unwrap();
        let mut loads = vec![0u64; workers];
        let mut ring = std::collections::VecDeque::new();
        let mut overlap = vec![0u32; workers];
        let (mut th, mut tf, mut tr) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
        let t0 = Instant::now();
        for r in &reqs {
            let a = Instant::now();
            let ph = approx_kv_index::PromptHashes::new(r, 64);
            let b = Instant::now();
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
            let c = Instant::now();
            let _ = index.record(best.1 as u64, Query::prompt(&ph));
            let d = Instant::now();
            loads[best.1] += n;
            ring.push_back((best.1, n));
            if ring.len() > 32 {
                let (ow, on) = ring.pop_front().unwrap();
                loads[ow] -= on;
            }
            th += b - a;
            tf += c - b;
            tr += d - c;
        }
        let tot = t0.elapsed();
        let k = reqs.len() as f64;
        println!("round {round}: route {:.2} us, hash {:.2}, find+choose {:.2}, record {:.2}, ratio {:.2}", tot.as_secs_f64()*1e6/k, th.as_secs_f64()*1e6/k, tf.as_secs_f64()*1e6/k, tr.as_secs_f64()*1e6/k, tot.as_secs_f64()/th.as_secs_f64());
        if let Some(hashes) = &finds {
            time_finds(&index, hashes, workers);
        }
    }
}
