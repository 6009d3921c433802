//! Churn: what removed workers cost the live calls (issue 29, item 2). Not criterion: it
//! prints rates and memory.
//!
//! Block size 4, TTL 60 s, tick 100 ms. Three *churn* threads record prompts that share a
//! 2- to 9-block prefix (one of 8 system prompts, then 2 fresh blocks) for 48 worker ids (16
//! each) and remove each id after every 5th record of it; the *stable* thread records the
//! same kind of prompt for 4 stable workers and finds each decision right after it returns
//! (the stable pair, in one thread). Each round runs the same threads twice, with and
//! without the removals (interleaved), and prints the stable pair's decisions/s and the
//! index's bytes per decision recorded at the end of each run (the two runs record
//! different numbers of decisions in the same time), and their ratios.
//!
//! `APPROX_KV_CHURN=soak` runs the churn threads throttled to `APPROX_KV_CHURN_REMOVALS`
//! removals/s (default 10,000) for `APPROX_KV_CHURN_SECS` (default 600) and prints, every
//! 10 s, the removals/s reached, entries, bytes, workers and resident memory: memory must
//! level off.
//!
//! ```sh
//! cargo bench --bench churn                                   # 3 rounds of 2 x 10 s
//! APPROX_KV_CHURN_ROUNDS=5 APPROX_KV_CHURN_SECS=20 cargo bench --bench churn
//! APPROX_KV_CHURN=soak cargo bench --bench churn              # 10 min, 10,000 removals/s
//! ```

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use approx_kv_index::{ApproxKvIndexer, Query};

const BLOCK: u32 = 4;
const CHURN_THREADS: u64 = 3;
const IDS_PER_THREAD: u64 = 16;
const REMOVE_EVERY: u64 = 5;
const STABLE_WORKERS: u64 = 4;

/// A prompt: system prompt `n % 8`'s first 2 to 9 blocks, then 2 blocks unique to `n`.
fn prompt(n: u64) -> Vec<u32> {
    let r = common::mix(n);
    let (system, shared) = (r % 8, 2 + (r >> 8) % 8);
    let mut tokens: Vec<u32> = (0..shared as u32 * BLOCK)
        .map(|i| (system as u32) << 24 | i)
        .collect();
    tokens.extend((0..2 * BLOCK as u64).map(|i| common::mix(r ^ i) as u32));
    tokens
}

fn index() -> ApproxKvIndexer {
    ApproxKvIndexer::builder()
        .block_size(BLOCK)
        .ttl(Duration::from_secs(60))
        .build()
        .expect("valid config")
}

/// One churn thread's loop: records for its ids in turn and, with `removals` (at most so
/// many a second, 0: no limit), removes them all once each has had 5 more records, counted
/// in `removed`.
fn churn(
    index: &ApproxKvIndexer,
    t: u64,
    removals: Option<u64>,
    removed: &AtomicU64,
    stop: &AtomicBool,
) {
    let (start, mut n, mut done) = (Instant::now(), 0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        let id = t * IDS_PER_THREAD + n % IDS_PER_THREAD;
        index
            .record(id, Query::tokens(&prompt(n ^ (t << 40))))
            .unwrap();
        n += 1;
        let Some(per_sec) = removals else {
            continue;
        };
        if n % (IDS_PER_THREAD * REMOVE_EVERY) == 0 {
            for i in 0..IDS_PER_THREAD {
                index.remove_worker(t * IDS_PER_THREAD + i);
            }
            done += IDS_PER_THREAD;
            removed.fetch_add(IDS_PER_THREAD, Ordering::Relaxed);
            if per_sec > 0 {
                let due = Duration::from_secs_f64(done as f64 / per_sec as f64);
                if let Some(wait) = due.checked_sub(start.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
        }
    }
}

/// The stable pair: a decision for one of 4 stable workers, then a find of it, counted in
/// `pairs`.
fn stable(index: &ApproxKvIndexer, pairs: &AtomicU64, stop: &AtomicBool) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let tokens = prompt(n ^ (1 << 60));
        let worker = 1_000 + n % STABLE_WORKERS;
        index.record(worker, Query::tokens(&tokens)).unwrap();
        let found = index.find(Query::tokens(&tokens));
        assert_eq!(
            found.scores.get(&worker).copied(),
            Some((tokens.len() / BLOCK as usize) as u32)
        );
        n += 1;
        pairs.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the threads of one run count: workers removed, stable pairs done.
#[derive(Default)]
struct Counts {
    removed: AtomicU64,
    pairs: AtomicU64,
}

/// Runs the churn threads (`removals` as in [`churn`]) and the stable pair on `index`
/// while `watch` runs on this thread, then stops them.
fn under_load(index: &ApproxKvIndexer, removals: Option<u64>, watch: impl FnOnce(&Counts)) {
    let (stop, counts) = (AtomicBool::new(false), Counts::default());
    std::thread::scope(|s| {
        for t in 0..CHURN_THREADS {
            let (stop, counts) = (&stop, &counts);
            let share = removals.map(|r| r / CHURN_THREADS);
            s.spawn(move || churn(index, t, share, &counts.removed, stop));
        }
        s.spawn(|| stable(index, &counts.pairs, &stop));
        watch(&counts);
        stop.store(true, Ordering::Relaxed);
    });
}

/// One run of `secs`: the stable pair's decisions/s, and the index's bytes per decision
/// recorded at the end (the runs record different numbers of decisions in the same time).
fn run(remove: bool, secs: u64) -> (f64, f64) {
    let index = index();
    let mut pairs = 0;
    under_load(&index, remove.then_some(0), |counts| {
        std::thread::sleep(Duration::from_secs(secs));
        pairs = counts.pairs.load(Ordering::Relaxed);
    });
    let stats = index.stats();
    let per_decision = stats.estimated_bytes as f64 / stats.records.max(1) as f64;
    (pairs as f64 / secs as f64, per_decision)
}

fn rounds() {
    let (rounds, secs) = (
        common::env("APPROX_KV_CHURN_ROUNDS", 3),
        common::env("APPROX_KV_CHURN_SECS", 10),
    );
    println!("churn: {rounds} rounds of {secs} s without and with removals");
    println!(
        "round  stable/s plain  stable/s churn  ratio  B/decision plain  B/decision churn  ratio"
    );
    let (mut rate_ratios, mut byte_ratios) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let (plain, churned) = if round % 2 == 0 {
            let plain = run(false, secs);
            (plain, run(true, secs))
        } else {
            let churned = run(true, secs);
            (run(false, secs), churned)
        };
        let rate = churned.0 / plain.0;
        let bytes = churned.1 / plain.1;
        println!(
            "{round:>5}  {:>14.0}  {:>14.0}  {rate:>5.3}  {:>16.0}  {:>16.0}  {bytes:>5.3}",
            plain.0, churned.0, plain.1, churned.1
        );
        rate_ratios.push(rate);
        byte_ratios.push(bytes);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "median: stable pair with removals / without {:.3}; bytes per decision {:.3}",
        median(&mut rate_ratios),
        median(&mut byte_ratios)
    );
}

fn soak() {
    let secs = common::env("APPROX_KV_CHURN_SECS", 600);
    let per_sec = common::env("APPROX_KV_CHURN_REMOVALS", 10_000);
    println!("churn soak: {secs} s, at most {per_sec} removals/s");
    println!("    t  removals/s  stable/s     entries       bytes  workers  rss MiB");
    let index = index();
    under_load(&index, Some(per_sec), |counts| {
        let start = Instant::now();
        let mut last = (0u64, 0u64);
        while start.elapsed() < Duration::from_secs(secs) {
            std::thread::sleep(Duration::from_secs(10));
            let now = (
                counts.removed.load(Ordering::Relaxed),
                counts.pairs.load(Ordering::Relaxed),
            );
            let st = index.stats();
            println!(
                "{:>5.0}  {:>10.0}  {:>8.0}  {:>10}  {:>10}  {:>7}  {:>7.1}",
                start.elapsed().as_secs_f64(),
                (now.0 - last.0) as f64 / 10.0,
                (now.1 - last.1) as f64 / 10.0,
                st.entries,
                st.estimated_bytes,
                st.workers,
                common::rss_mib()
            );
            last = now;
        }
    });
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    if std::env::var("APPROX_KV_CHURN").as_deref() == Ok("soak") {
        soak();
    } else {
        rounds();
    }
}
