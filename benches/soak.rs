//! Soak: memory under overload, with more runnable threads than cores (issue 9, item 10).
//!
//! Block size 16, TTL 2 s, tick 50 ms, 64 workers. `RECORDERS` threads (default 2) record
//! prompts non-stop: a shared 4-block prefix, one of 50,000 conversation blocks, then 1 to
//! 16 fresh blocks; one more thread finds, and removes a worker every 10,000 finds. With
//! the sweeper thread that is 4 runnable threads on a 2-core machine. Every few seconds it
//! prints entries, pending timers, the process's resident memory, and how much callers
//! reclaimed. Memory must level off near the decision rate times `ttl + 2 * tick`.
//!
//! ```sh
//! cargo bench --bench soak                      # 60 s, 2 recorders
//! APPROX_KV_SOAK_SECS=96 APPROX_KV_SOAK_RECORDERS=1 cargo bench --bench soak
//! ```

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use approx_kv_index::{ApproxKvIndexer, Query};

const BLOCK: u32 = 16;
const WORKERS: u64 = 64;
const CONVERSATIONS: u64 = 50_000;

/// A prompt's tokens: the shared prefix, conversation `c`'s block, `fresh` new blocks.
fn prompt(c: u64, fresh: u64, unique: u64) -> Vec<u32> {
    let mut tokens: Vec<u32> = (0..4 * BLOCK).collect();
    tokens.extend((0..BLOCK).map(|i| 1_000_000 + (c * u64::from(BLOCK)) as u32 + i));
    for b in 0..fresh {
        let seed = common::mix(unique.wrapping_mul(31).wrapping_add(b));
        tokens.extend((0..u64::from(BLOCK)).map(|i| (common::mix(seed ^ i) >> 33) as u32));
    }
    tokens
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let secs = common::env("APPROX_KV_SOAK_SECS", 60);
    let recorders = common::env("APPROX_KV_SOAK_RECORDERS", 2);
    let index = ApproxKvIndexer::builder()
        .block_size(BLOCK)
        .ttl(Duration::from_secs(2))
        .tick(Duration::from_millis(50))
        .build()
        .expect("valid settings");
    let stop = AtomicBool::new(false);
    let recorded = AtomicU64::new(0);
    let start = Instant::now();
    println!(
        "soak: {recorders} recorders + 1 finder + sweeper on {} cores, {secs} s, load {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    println!("  time   decisions/s   entries   timers   RSS MiB   caller-reclaimed");
    std::thread::scope(|s| {
        for r in 0..recorders {
            let (index, stop, recorded) = (&index, &stop, &recorded);
            s.spawn(move || {
                let mut n = r << 40;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let x = common::mix(n);
                    let tokens = prompt(x % CONVERSATIONS, 1 + (x >> 20) % 16, n);
                    index
                        .record((x >> 40) % WORKERS, Query::tokens(&tokens))
                        .unwrap();
                    recorded.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        {
            let (index, stop) = (&index, &stop);
            s.spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let x = common::mix(n ^ 0xF1D);
                    let found = index.find(Query::tokens(&prompt(x % CONVERSATIONS, 0, 0)));
                    std::hint::black_box(found);
                    if n % 10_000 == 0 {
                        index.remove_worker(x % WORKERS);
                    }
                }
            });
        }
        let mut last = (Instant::now(), 0u64);
        while start.elapsed() < Duration::from_secs(secs) {
            std::thread::sleep(Duration::from_secs(4).min(Duration::from_secs(secs)));
            let stats = index.stats();
            let done = recorded.load(Ordering::Relaxed);
            let rate = (done - last.1) as f64 / last.0.elapsed().as_secs_f64();
            last = (Instant::now(), done);
            println!(
                "{:5.0} s {:12.0} {:10} {:8} {:9.0} {:18}",
                start.elapsed().as_secs_f64(),
                rate,
                stats.entries,
                stats.pending_timers,
                common::rss_mib(),
                stats.caller_expirations
            );
        }
        stop.store(true, Ordering::Relaxed);
    });
    let stats = index.stats();
    println!("end: {stats:?}");
}
