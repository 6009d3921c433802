//! Side-by-side replay of a Mooncake trace through `approx-kv-index`, `dynamo-kv-router` 1.6.1
//! (its `ThreadPoolIndexer<ConcurrentRadixTreeCompressed>` and its actor `KvIndexer`, both in
//! approximate TTL mode) and SMG's `kv-index` 2.0.0: its `ChainIndex` (exact and
//! event-driven: each routing decision is applied as the engine's store event for the whole
//! prompt; at most 1,024 workers) and its `TokenTree` (its approximate cache-aware radix tree
//! over tokens: each routing decision is inserted for the chosen worker's tenant name; a find
//! reports the deepest match and up to 8 of its tenants, not every worker's overlap). Neither
//! SMG index has a TTL, so their expiry figures are n/a. The subjects run interleaved,
//! subject by subject, over several rounds on one machine; every workload routes (or records)
//! over a fleet of `--workers` workers (16 by default). Prints every figure with the median
//! over rounds and the median of the per-round ratios. See `docs/benchmarks.md`.
//!
//! ```text
//! cargo run --release -p approx-kv-compare -- --help
//! ```

mod alloc;
mod report;
mod scenarios;
mod subjects;
mod trace;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use approx_kv_tools::chart::{self, hex, Lines, Series, SeriesLabelPosition};
use approx_kv_tools::outln;
use approx_kv_tools::progress::{self, When};
use clap::{Parser, ValueEnum};

use tokio::runtime::Handle;

use report::Row;
use subjects::{DynActor, DynPool, Ours, Smg, SmgTree, Subject};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

/// TTL for the throughput and memory runs: nothing expires during them.
const LONG_TTL: Duration = Duration::from_secs(600);
/// TTL and sweeper tick for the expiry-lag run.
const SHORT_TTL: Duration = Duration::from_millis(300);
const TICK: Duration = Duration::from_millis(10);
/// Requests recorded in the expiry-lag run.
const EXPIRY_REQUESTS: usize = 64;

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "approx-kv-compare",
    version,
    allow_negative_numbers = true,
    about = "Replays a Mooncake trace through approx-kv-index, dynamo-kv-router 1.6.1 \
             (its thread-pool indexer and its actor) and SMG's kv-index 2.0.0 (its \
             ChainIndex and its TokenTree), routing over a fleet of --workers workers, \
             interleaved subject by subject over several rounds, and prints the median of \
             each figure and of the per-round ratios.",
    after_help = "See docs/benchmarks.md for the workloads and the published figures."
)]
struct Args {
    /// The trace (JSONL) [default: the bundled data/conversation_head2000.jsonl]
    #[arg(long, value_name = "PATH")]
    trace: Option<PathBuf>,
    /// Rounds: every subject runs every workload once a round
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    rounds: u32,
    /// Use only the first N requests of the trace [default: all]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    limit: Option<u64>,
    /// Router threads of the multithreaded routing and recording runs
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=256))]
    threads: u32,
    /// Workers every workload routes (or records) over, but the shared-prefix one (16, 128
    /// and 1024 sharers whatever N); SMG's ChainIndex takes at most 1024: its figures over a
    /// larger fleet are n/a
    #[arg(long, value_name = "N", default_value_t = subjects::DEFAULT_WORKERS as u32, value_parser = clap::value_parser!(u32).range(1..=65536))]
    workers: u32,
    /// Measure one subject alone, for profiling (prints each round, no table)
    #[arg(long, value_name = "SUBJECT")]
    only: Option<Only>,
    /// Also write DIR/bench-threads.svg and DIR/bench-find-workers.svg
    #[arg(long, value_name = "DIR")]
    svg: Option<PathBuf>,
    /// When to draw the progress bar on stderr
    #[arg(long, value_name = "WHEN", default_value = "auto")]
    progress: When,
}

/// The subjects, as `--only` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Only {
    /// approx-kv-index
    Ours,
    /// Dynamo's ThreadPoolIndexer<ConcurrentRadixTreeCompressed>
    Pool,
    /// Dynamo's actor KvIndexer
    Actor,
    /// SMG's ChainIndex (kv-index 2.0.0)
    Smg,
    /// SMG's TokenTree (kv-index 2.0.0)
    TokenTree,
}

/// Distinct (block, worker) pairs stored by routing request `i` to worker `w`.
fn count_pairs(seqs: &[Vec<u64>], decisions: &[(u32, u32)]) -> usize {
    let mut set = HashSet::new();
    for &(i, w) in decisions {
        for &h in &seqs[i as usize] {
            set.insert((h, w));
        }
    }
    set.len()
}

/// Finds of the shared prompt in each shared-prefix run.
const SHARED_FINDS: usize = 2_000;

/// Every workload on one subject over `workers` workers; `make(ttl, tick)` builds a fresh
/// index. A fleet beyond the subject ([`Subject::MAX_WORKERS`]) skips the workloads over it.
fn measure<S: Subject>(
    h: &Handle,
    reqs: &[Vec<u32>],
    seqs: &[Vec<u64>],
    workers: usize,
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
    if workers > S::MAX_WORKERS {
        row.hash_scaling = hash_scaling(&make, reqs, threads);
        shared_prefix(h, &make, &mut row);
        row.skip_fleet();
        return row;
    }

    // Route on one thread from empty; memory is what the loaded index holds on the heap.
    let mut decisions = vec![Vec::with_capacity(n)];
    let mut lat = Vec::with_capacity(n);
    let base = alloc::settled_live_bytes();
    let s = make(LONG_TTL, Duration::from_millis(100));
    let t = scenarios::route(h, &s, reqs, workers, 1, &mut decisions);
    let bytes = alloc::settled_live_bytes() - base;
    row.route1 = rate(t);
    row.route_us = per_req(t);
    row.pairs = count_pairs(seqs, &decisions[0]) as f64;
    row.bytes_per_pair = bytes as f64 / row.pairs.max(1.0);
    row.find_rate = rate(scenarios::find_tokens(h, &s, reqs, &mut lat));
    (row.find_p50, row.find_p99, _) = scenarios::percentiles(&mut lat);
    let hashes: Vec<S::Hashes> = reqs.iter().map(|r| s.hash(r)).collect();
    lat.clear();
    scenarios::find_hashes(h, &s, &hashes, workers, &mut lat);
    (row.findx_p50, row.findx_p99, row.findx_p999) = scenarios::percentiles(&mut lat);
    drop(hashes);
    lat.clear();
    scenarios::find_fresh(h, &s, reqs, workers, &mut lat);
    (row.findh_p50, row.findh_p99, _) = scenarios::percentiles(&mut lat);
    drop(s);

    let s = make(LONG_TTL, Duration::from_millis(100));
    let mut decisions = (0..threads)
        .map(|_| Vec::with_capacity(n / threads + 1))
        .collect::<Vec<_>>();
    row.route_n = rate(scenarios::route(
        h,
        &s,
        reqs,
        workers,
        threads,
        &mut decisions,
    ));
    drop(s);
    row.hash_scaling = hash_scaling(&make, reqs, threads);
    let s = make(LONG_TTL, Duration::from_millis(100));
    let mut decisions = (0..4)
        .map(|_| Vec::with_capacity(n / 4 + 1))
        .collect::<Vec<_>>();
    row.route4 = rate(scenarios::route(h, &s, reqs, workers, 4, &mut decisions));
    drop(s);
    shared_prefix(h, &make, &mut row);

    let s = make(LONG_TTL, Duration::from_millis(100));
    row.record1 = rate(scenarios::record(h, &s, reqs, workers, 1));
    drop(s);
    let s = make(LONG_TTL, Duration::from_millis(100));
    row.record_n = rate(scenarios::record(h, &s, reqs, workers, threads));
    drop(s);

    if S::EXPIRES {
        let s = make(SHORT_TTL, TICK);
        let k = EXPIRY_REQUESTS.min(n);
        (row.lag_hidden_ms, row.lag_freed_ms) =
            scenarios::expiry_lag(h, &s, &reqs[..k], workers, SHORT_TTL);
        drop(s);
    } else {
        // Nothing expires: the cells print as n/a.
        (row.lag_hidden_ms, row.lag_freed_ms) = (f64::NAN, f64::NAN);
    }
    row
}

/// The machine's ceiling beside the route's thread scaling: the same split with nothing
/// shared (1, N, N, 1 threads, so that a drift over the four cancels).
fn hash_scaling<S: Subject>(
    make: &impl Fn(Duration, Duration) -> S,
    reqs: &[Vec<u32>],
    threads: usize,
) -> f64 {
    let s = make(LONG_TTL, Duration::from_millis(100));
    let pass = |t: usize| scenarios::hash_threads(&s, reqs, t).as_secs_f64();
    let (one, many) = (pass(1), pass(threads));
    let (many2, one2) = (pass(threads), pass(1));
    (one + one2) / (many + many2)
}

/// The shared-prefix runs, one fresh index per sharers count. Panics if a find does not
/// report every sharer it can ([`Subject::MAX_REPORTED`]) at the prompt's full depth.
fn shared_prefix<S: Subject>(h: &Handle, make: &impl Fn(Duration, Duration) -> S, row: &mut Row) {
    for (k, &sharers) in scenarios::SHARERS.iter().enumerate() {
        let s = make(LONG_TTL, Duration::from_millis(100));
        let got = scenarios::shared_prefix_find(h, &s, sharers, SHARED_FINDS);
        assert_eq!(
            (got.reported, got.short),
            (sharers.min(S::MAX_REPORTED), 0),
            "workers a find of a prompt shared by {sharers} reports in full and in part"
        );
        (row.record_sharers[k], row.find_sharers[k]) = (got.record_us, got.find_p50);
    }
}

fn main() {
    let args: Args = approx_kv_tools::cli::parse();
    let trace = args.trace.clone().unwrap_or_else(|| {
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../data/conversation_head2000.jsonl"
        ))
    });
    let limit = args.limit.map_or(usize::MAX, |n| n as usize);
    let reqs = match trace::load(&trace, limit) {
        Ok(r) if !r.is_empty() => r,
        Ok(_) => fail(&format!("{} holds no requests", trace.display())),
        Err(e) => fail(&e),
    };
    let threads = args.threads as usize;
    let workers = args.workers as usize;
    let rounds = args.rounds as usize;
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
    if blocks == 0 {
        // Nothing to find or record: every figure would be of empty prompts.
        let longest = reqs.iter().map(Vec::len).max().unwrap_or(0);
        fail(&format!(
            "trace '{}': no request has a full block of {} tokens (the longest prompt has \
             {longest}), so there is no prefix to index",
            trace.display(),
            subjects::BLOCK,
        ));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let h = runtime.handle().clone();
    outln!(
        "trace {}: {} requests, {} blocks of {} tokens; {} workers; {} rounds; {} router \
         threads; {} CPUs",
        trace.display(),
        reqs.len(),
        blocks,
        subjects::BLOCK,
        workers,
        rounds,
        threads,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let ours = |ttl, tick| Ours::new(ttl, tick);
    let pool = |ttl, _| {
        let _in_runtime = h.enter();
        DynPool::new(ttl)
    };
    let actor = |ttl, _| DynActor::new(ttl);
    // No TTL, no sweeper: the settings are ignored.
    let smg = |_, _| Smg::default();
    // Tenant names for the fleet and for the shared-prefix runs, built (and interned) once.
    let names =
        subjects::tenant_names(workers.max(scenarios::SHARERS[scenarios::SHARERS.len() - 1]));
    let tree = |_, _| SmgTree::new(names.clone());
    let subjects = if args.only.is_some() {
        1
    } else {
        report::SUBJECTS
    };
    let bar = progress::bar(args.progress, (rounds * subjects) as u64);
    if let Some(only) = args.only {
        for round in 0..rounds {
            bar.set_prefix(format!("round {}/{rounds}", round + 1));
            let row = match only {
                Only::Ours => measure(&h, &reqs, &seqs, workers, threads, ours),
                Only::Pool => measure(&h, &reqs, &seqs, workers, threads, pool),
                Only::Actor => measure(&h, &reqs, &seqs, workers, threads, actor),
                Only::Smg => measure(&h, &reqs, &seqs, workers, threads, smg),
                Only::TokenTree => measure(&h, &reqs, &seqs, workers, threads, tree),
            };
            bar.inc(1);
            let name = only.to_possible_value().expect("no skipped variant");
            bar.suspend(|| outln!("round {}: {} {row:?}", round + 1, name.get_name()));
        }
        bar.finish_and_clear();
        return;
    }
    let mut all = Vec::new();
    for round in 0..rounds {
        bar.set_prefix(format!("round {}/{rounds}", round + 1));
        let ours = measure(&h, &reqs, &seqs, workers, threads, ours);
        bar.inc(1);
        let pool = measure(&h, &reqs, &seqs, workers, threads, pool);
        bar.inc(1);
        let actor = measure(&h, &reqs, &seqs, workers, threads, actor);
        bar.inc(1);
        let smg = measure(&h, &reqs, &seqs, workers, threads, smg);
        bar.inc(1);
        let tree = measure(&h, &reqs, &seqs, workers, threads, tree);
        bar.inc(1);
        bar.suspend(|| {
            eprintln!("round {}: ours {ours:?}", round + 1);
            eprintln!("round {}: pool {pool:?}", round + 1);
            eprintln!("round {}: actor {actor:?}", round + 1);
            eprintln!("round {}: smg {smg:?}", round + 1);
            eprintln!("round {}: token-tree {tree:?}", round + 1);
        });
        all.push([ours, pool, actor, smg, tree]);
    }
    bar.finish_and_clear();
    report::print(&all, threads, workers, workers <= Smg::MAX_WORKERS);
    if let Some(dir) = &args.svg {
        if let Err(e) = write_svgs(dir, &all, threads) {
            eprintln!("error: writing plots to {}: {e}", dir.display());
            std::process::exit(1);
        }
    }
}

/// Prints `error: {e}` and exits with 1 (bad input).
fn fail(e: &str) -> ! {
    eprintln!("error: {e}");
    std::process::exit(1)
}

/// The two plots, from the medians over rounds.
fn write_svgs(
    dir: &Path,
    rounds: &[[Row; report::SUBJECTS]],
    threads: usize,
) -> Result<(), String> {
    let names = [
        ("approx-kv-index", "#1f77b4"),
        ("dynamo pool", "#d62728"),
        ("dynamo actor", "#ff7f0e"),
        ("smg chain index", "#2ca02c"),
        ("smg token tree", "#9467bd"),
    ];
    let med = |k: usize, get: &dyn Fn(&Row) -> f64| {
        report::median(rounds.iter().map(|r| get(&r[k])).collect())
    };
    let mut xs = vec![1.0, threads as f64, 4.0];
    xs.dedup();
    let series: Vec<Series<'_>> = names
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
            Series {
                name,
                colour: hex(colour),
                ys,
            }
        })
        .collect();
    let write = |name: &str, svg: String| {
        std::fs::write(dir.join(name), svg).map_err(|e| format!("{name}: {e}"))
    };
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    write(
        "bench-threads.svg",
        chart::lines(&Lines {
            title: "Route throughput (hash, find, choose, record), median of rounds",
            x_desc: "router threads",
            y_desc: "requests / s",
            xs: &xs,
            series: &series,
            legend: SeriesLabelPosition::LowerRight,
        })?,
    )?;
    let xs: Vec<f64> = scenarios::SHARERS.iter().map(|&w| w as f64).collect();
    let series: Vec<Series<'_>> = names
        .iter()
        .enumerate()
        .map(|(k, &(name, colour))| Series {
            name,
            colour: hex(colour),
            ys: (0..xs.len())
                .map(|i| med(k, &|r| r.find_sharers[i]))
                .collect(),
        })
        .collect();
    write(
        "bench-find-workers.svg",
        chart::lines(&Lines {
            title: "Find latency, 256-block prefix, hashing excluded (p50)",
            x_desc: "workers holding the prefix",
            y_desc: "µs per find",
            xs: &xs,
            series: &series,
            legend: SeriesLabelPosition::UpperLeft,
        })?,
    )
}
