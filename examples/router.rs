//! A small multithreaded router: 4 threads route synthetic chat prompts to 8 workers,
//! each picking the worker with the longest probably-cached prefix (ties and misses go to
//! the least-loaded worker), then recording the decision. Each prompt is hashed once
//! (`PromptHashes`), for its find and its record. Prints what it routed.
//!
//! Run: `cargo run --release --example router`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use approx_kv_index::{ApproxKvIndexer, PromptHashes, Query};

const WORKERS: usize = 8;
const THREADS: usize = 4;
const REQUESTS_PER_THREAD: usize = 2_000;
const BLOCK: u32 = 16;

/// A deterministic synthetic prompt: one of 12 system prompts (256 tokens), one of
/// 200 conversations under it (128 tokens), and a fresh user turn (64 tokens).
fn prompt(thread: usize, i: usize) -> Vec<u32> {
    let mut x = (thread * 1_000_003 + i) as u64;
    let mut next = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) as u32
    };
    let system = next() % 12;
    let conversation = next() % 200;
    let mut tokens: Vec<u32> = (0..256).map(|t| system * 10_000 + t).collect();
    tokens.extend((0..128).map(|t| 1_000_000 + conversation * 1_000 + t));
    tokens.extend((0..64).map(|_| next()));
    tokens
}

fn main() {
    let index = Arc::new(ApproxKvIndexer::new(BLOCK, Duration::from_secs(120)).expect("valid"));
    let load: Arc<Vec<AtomicU64>> = Arc::new((0..WORKERS).map(|_| AtomicU64::new(0)).collect());
    let hit_blocks = Arc::new(AtomicU64::new(0));
    let total_blocks = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (index, load) = (index.clone(), load.clone());
            let (hits, total) = (hit_blocks.clone(), total_blocks.clone());
            thread::spawn(move || {
                for i in 0..REQUESTS_PER_THREAD {
                    let hashes = PromptHashes::new(&prompt(t, i), BLOCK);
                    let found = index.find(Query::prompt(&hashes));
                    // Longest overlap first, then least loaded.
                    let worker = (0..WORKERS)
                        .max_by_key(|&w| {
                            let overlap = found.scores.get(&(w as u64)).copied().unwrap_or(0);
                            (overlap, u64::MAX - load[w].load(Ordering::Relaxed))
                        })
                        .expect("at least one worker");
                    let overlap = found.scores.get(&(worker as u64)).copied().unwrap_or(0);
                    load[worker].fetch_add(1, Ordering::Relaxed);
                    hits.fetch_add(u64::from(overlap), Ordering::Relaxed);
                    total.fetch_add(hashes.len() as u64, Ordering::Relaxed);
                    index.record(worker as u64, Query::prompt(&hashes)).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("router thread");
    }
    let elapsed = start.elapsed();
    let requests = THREADS * REQUESTS_PER_THREAD;
    println!("routed {requests} requests from {THREADS} threads in {elapsed:.2?}");
    println!(
        "  {:.0} requests/s (find + choose + record, hashing included)",
        requests as f64 / elapsed.as_secs_f64()
    );
    for (w, l) in load.iter().enumerate() {
        println!("  worker {w}: {} requests", l.load(Ordering::Relaxed));
    }
    let (hits, total) = (
        hit_blocks.load(Ordering::Relaxed),
        total_blocks.load(Ordering::Relaxed),
    );
    println!(
        "  predicted prefix hits: {hits} of {total} blocks ({:.1}%)",
        100.0 * hits as f64 / total as f64
    );
    let stats = index.stats();
    println!(
        "  index: {} entries, {} nodes, {} workers",
        stats.entries, stats.nodes, stats.workers
    );
    index.shutdown();
}
