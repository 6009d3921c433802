//! Side-by-side replay of a Mooncake trace through `approx-kv-index` and
//! `dynamo-kv-router` 1.6.1 (its `ThreadPoolIndexer<ConcurrentRadixTreeCompressed>` and its
//! actor `KvIndexer`, both in approximate TTL mode), interleaved subject by subject over
//! several rounds on one machine. Prints every figure with the median over rounds and the
//! median of the per-round ratios. See `docs/benchmarks.md`.
//!
//! ```text
//! cargo run --release -p approx-kv-compare -- [--trace PATH] [--rounds N] [--limit N] [--threads N]
//! [--only ours|pool|actor]   (one subject alone, for profiling; prints no table)
//! [--svg DIR]                 (also write DIR/bench-threads.svg, DIR/bench-find-workers.svg)
//! ```

mod alloc;
mod report;
mod scenarios;
mod subjects;
mod svg;
mod trace;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use tokio::runtime::Handle;

use report::Row;
use subjects::{DynActor, DynPool, Ours, Subject};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

/// TTL for the throughput and memory runs: nothing expires during them.
const LONG_TTL: Duration = Duration::from_secs(600);
/// TTL and sweeper tick for the expiry-lag run.
const SHORT_TTL: Duration = Duration::from_millis(300);
const TICK: Duration = Duration::from_millis(10);
/// Requests recorded in the expiry-lag run.
const EXPIRY_REQUESTS: usize = 64;

struct Args {
    trace: PathBuf,
    rounds: usize,
    limit: usize,
    threads: usize,
    only: Option<String>,
    svg: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        trace: PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../data/conversation_head2000.jsonl"
        )),
        rounds: 5,
        limit: usize::MAX,
        threads: 2,
        only: None,
        svg: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--trace" => a.trace = PathBuf::from(value()?),
            "--rounds" => a.rounds = value()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            "--limit" => a.limit = value()?.parse().map_err(|e| format!("--limit: {e}"))?,
            "--threads" => a.threads = value()?.parse().map_err(|e| format!("--threads: {e}"))?,
            "--only" => a.only = Some(value()?),
            "--svg" => a.svg = Some(PathBuf::from(value()?)),
            "-h" | "--help" => {
                println!("approx-kv-compare [--trace PATH] [--rounds N] [--limit N] [--threads N] [--only ours|pool|actor] [--svg DIR]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.rounds == 0 || a.threads == 0 {
        return Err("--rounds and --threads must be at least 1".into());
    }
    Ok(a)
}

/// Distinct (block, worker) pairs stored by routing request `i` to worker `w`.
fn count_pairs(seqs: &[Vec<u64>], decisions: &[(u32, u8)]) -> usize {
    let mut set = HashSet::new();
    for &(i, w) in decisions {
        for &h in &seqs[i as usize] {
            set.insert((h, w));
        }
    }
    set.len()
}

/// Every workload on one subject; `make(ttl, tick)` builds a fresh index.
fn measure<S: Subject>(
    h: &Handle,
    reqs: &[Vec<u32>],
    seqs: &[Vec<u64>],
    threads: usize,
    make: impl Fn(Duration, Duration) -> S,
) -> Row {
    let n = reqs.len();
    let per_req = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    let mut row = Row::default();

    let s = make(LONG_TTL, Duration::from_millis(100));
    row.hash_us = per_req(scenarios::hash(&s, reqs));
    drop(s);

    // Route on one thread from empty; memory is what the loaded index holds on the heap.
    let mut decisions = vec![Vec::with_capacity(n)];
    let mut lat = Vec::with_capacity(n);
    let base = alloc::settled_live_bytes();
    let s = make(LONG_TTL, Duration::from_millis(100));
    let t = scenarios::route(h, &s, reqs, 1, &mut decisions);
    let bytes = alloc::settled_live_bytes() - base;
    row.route1 = rate(t);
    row.route_us = per_req(t);
    row.pairs = count_pairs(seqs, &decisions[0]);
    row.bytes_per_pair = bytes as f64 / row.pairs.max(1) as f64;
    row.find_rate = rate(scenarios::find_tokens(h, &s, reqs, &mut lat));
    (row.find_p50, row.find_p99) = scenarios::percentiles(&mut lat);
    let hashes: Vec<S::Hashes> = reqs.iter().map(|r| s.hash(r)).collect();
    lat.clear();
    scenarios::find_hashes(h, &s, &hashes, &mut lat);
    (row.findx_p50, row.findx_p99) = scenarios::percentiles(&mut lat);
    drop(hashes);
    drop(s);

    let s = make(LONG_TTL, Duration::from_millis(100));
    let mut decisions = (0..threads)
        .map(|_| Vec::with_capacity(n / threads + 1))
        .collect::<Vec<_>>();
    row.route_n = rate(scenarios::route(h, &s, reqs, threads, &mut decisions));
    drop(s);
    let s = make(LONG_TTL, Duration::from_millis(100));
    let mut decisions = (0..4)
        .map(|_| Vec::with_capacity(n / 4 + 1))
        .collect::<Vec<_>>();
    row.route4 = rate(scenarios::route(h, &s, reqs, 4, &mut decisions));
    drop(s);
    for (k, &sharers) in scenarios::SHARERS.iter().enumerate() {
        let s = make(LONG_TTL, Duration::from_millis(100));
        (row.record_sharers[k], row.find_sharers[k]) =
            scenarios::shared_prefix_find(h, &s, sharers);
    }

    let s = make(LONG_TTL, Duration::from_millis(100));
    row.record1 = rate(scenarios::record(h, &s, reqs, 1));
    drop(s);
    let s = make(LONG_TTL, Duration::from_millis(100));
    row.record_n = rate(scenarios::record(h, &s, reqs, threads));
    drop(s);

    let s = make(SHORT_TTL, TICK);
    let k = EXPIRY_REQUESTS.min(n);
    (row.lag_hidden_ms, row.lag_freed_ms) = scenarios::expiry_lag(h, &s, &reqs[..k], SHORT_TTL);
    drop(s);
    row
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let reqs = match trace::load(&args.trace, args.limit) {
        Ok(r) if !r.is_empty() => r,
        Ok(_) => {
            eprintln!("error: {} holds no requests", args.trace.display());
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let seqs: Vec<Vec<u64>> = reqs
        .iter()
        .map(|r| {
            let local = approx_kv_index::compute_block_hash_for_seq(r, subjects::BLOCK);
            approx_kv_index::compute_seq_hashes(&local)
                .iter()
                .map(|s| s.0)
                .collect()
        })
        .collect();
    let blocks: usize = seqs.iter().map(Vec::len).sum();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let h = runtime.handle().clone();
    println!(
        "trace {}: {} requests, {} blocks of {} tokens; {} rounds; {} router threads; {} CPUs",
        args.trace.display(),
        reqs.len(),
        blocks,
        subjects::BLOCK,
        args.rounds,
        args.threads,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    if let Some(only) = &args.only {
        for round in 0..args.rounds {
            let row = match only.as_str() {
                "ours" => measure(&h, &reqs, &seqs, args.threads, |ttl, tick| {
                    Ours::new(ttl, tick)
                }),
                "pool" => measure(&h, &reqs, &seqs, args.threads, |ttl, _| {
                    let _in_runtime = h.enter();
                    DynPool::new(ttl)
                }),
                "actor" => measure(&h, &reqs, &seqs, args.threads, |ttl, _| DynActor::new(ttl)),
                other => {
                    eprintln!("error: --only takes ours, pool or actor, not {other}");
                    std::process::exit(2);
                }
            };
            println!("round {}: {only} {row:?}", round + 1);
        }
        return;
    }
    let mut rounds = Vec::new();
    for round in 0..args.rounds {
        let ours = measure(&h, &reqs, &seqs, args.threads, |ttl, tick| {
            Ours::new(ttl, tick)
        });
        let pool = measure(&h, &reqs, &seqs, args.threads, |ttl, _| {
            let _in_runtime = h.enter();
            DynPool::new(ttl)
        });
        let actor = measure(&h, &reqs, &seqs, args.threads, |ttl, _| DynActor::new(ttl));
        eprintln!("round {}: ours {ours:?}", round + 1);
        eprintln!("round {}: pool {pool:?}", round + 1);
        eprintln!("round {}: actor {actor:?}", round + 1);
        rounds.push([ours, pool, actor]);
    }
    report::print(&rounds, args.threads);
    if let Some(dir) = &args.svg {
        if let Err(e) = write_svgs(dir, &rounds, args.threads) {
            eprintln!("error: writing plots to {}: {e}", dir.display());
            std::process::exit(1);
        }
    }
}

/// The two plots, from the medians over rounds.
fn write_svgs(dir: &std::path::Path, rounds: &[[Row; 3]], threads: usize) -> std::io::Result<()> {
    let names = [
        ("approx-kv-index", "#1f77b4"),
        ("dynamo pool", "#d62728"),
        ("dynamo actor", "#ff7f0e"),
    ];
    let med = |k: usize, get: &dyn Fn(&Row) -> f64| {
        report::median(rounds.iter().map(|r| get(&r[k])).collect())
    };
    let mut xs = vec![1.0, threads as f64, 4.0];
    xs.dedup();
    let series: Vec<svg::Series<'_>> = names
        .iter()
        .enumerate()
        .map(|(k, &(name, colour))| {
            let mut ys = vec![
                med(k, &|r| r.route1),
                med(k, &|r| r.route_n),
                med(k, &|r| r.route4),
            ];
            if threads == 1 || threads == 4 {
                ys.remove(1);
            }
            svg::Series { name, colour, ys }
        })
        .collect();
    std::fs::create_dir_all(dir)?;
    let chart = svg::chart(
        "Route throughput (hash, find, choose, record)",
        "router threads",
        "requests / s",
        &xs,
        &series,
        true,
    );
    std::fs::write(dir.join("bench-threads.svg"), chart)?;
    let xs: Vec<f64> = scenarios::SHARERS.iter().map(|&w| w as f64).collect();
    let series: Vec<svg::Series<'_>> = names
        .iter()
        .enumerate()
        .map(|(k, &(name, colour))| svg::Series {
            name,
            colour,
            ys: (0..xs.len())
                .map(|i| med(k, &|r| r.find_sharers[i]))
                .collect(),
        })
        .collect();
    let chart = svg::chart(
        "Find latency, 256-block prefix, hashing excluded (p50)",
        "workers holding the prefix",
        "µs",
        &xs,
        &series,
        true,
    );
    std::fs::write(dir.join("bench-find-workers.svg"), chart)?;
    Ok(())
}
