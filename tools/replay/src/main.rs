//! `approx-kv-replay`: replays a Mooncake-style trace against a simulated cluster of LRU
//! KV caches and reports, per routing policy, the real prefix-hit rate, how far the
//! approximate index is from an oracle, load balance and the router's cost.
//!
//! Run `cargo run --release --bin approx-kv-replay -- --help`; see `docs/replay.md`.

mod args;
mod chart;
mod cluster;
mod feed;
mod fleet;
mod lru;
mod policy;
mod progress;
mod realism;
#[cfg(feature = "redis")]
mod redis_sync;
mod replay;
mod report;
mod scaling;
mod trace;
mod workload;

use std::collections::HashSet;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use approx_kv_tools::{out, outln};
use rustc_hash::FxBuildHasher;

use args::{Options, Pace, PolicyKind};
use cluster::Speeds;
use fleet::{Fleet, Sharing};
use policy::{Balance, Policy};

/// TTL of the capacity-bounded index: none (the index treats `Duration::MAX` as never
/// and keeps no timers), so the capacity bound alone decides what it forgets.
const CAPACITY_TTL: Duration = Duration::MAX;

fn main() -> ExitCode {
    let cli = match approx_kv_tools::cli::parse::<args::Cli>().check() {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(approx_kv_tools::cli::USAGE as u8);
        }
    };
    let opts = Options::from(cli);
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The runs asked for, in the order of the table: baselines, the TTL sweep, capacity,
/// oracle.
fn policies(o: &Options) -> Vec<Policy> {
    let asked = |kind| o.policies.contains(&kind);
    let mut out = Vec::new();
    if asked(PolicyKind::RoundRobin) {
        out.push(Policy::RoundRobin);
    }
    if asked(PolicyKind::Random) {
        out.push(Policy::Random);
    }
    for fleet in fleets(o) {
        if asked(PolicyKind::Approx) {
            out.extend(o.ttls.iter().map(|&ttl| Policy::Approx {
                ttl,
                fleet: fleet.clone(),
            }));
        }
        if asked(PolicyKind::ApproxCapacity) {
            // One cap for all: the mean of the workers' caches.
            let capacities = o.realism.capacities(o.workers, o.cache_blocks);
            out.push(Policy::ApproxCapacity {
                ttl: CAPACITY_TTL,
                blocks: capacities.iter().sum::<usize>() / capacities.len().max(1),
                fleet: fleet.clone(),
            });
        }
        for (kind, lease, feedback, events) in [
            (PolicyKind::ApproxLease, true, false, false),
            (PolicyKind::ApproxFeedback, false, true, false),
            (PolicyKind::ApproxLearning, true, true, false),
            (PolicyKind::ApproxHybrid, true, true, true),
        ] {
            if asked(kind) {
                out.push(Policy::Requests {
                    calls: policy::Calls {
                        lease,
                        feedback,
                        events,
                    },
                    start: o.capacity_start,
                    fleet: fleet.clone(),
                });
            }
        }
        if asked(PolicyKind::EventsOnly) {
            out.push(Policy::EventsOnly {
                fleet: fleet.clone(),
            });
        }
    }
    if asked(PolicyKind::Bound) {
        out.push(Policy::Bound);
    }
    if asked(PolicyKind::Oracle) {
        out.push(Policy::Oracle);
    }
    out
}

/// The replica counts of the index runs: 1, 2, 4, ... below `--replicas`, then
/// `--replicas`; each unsynced, and synced too (above 1) when `--sync` shares.
fn fleets(o: &Options) -> Vec<Fleet> {
    let mut counts: Vec<usize> = std::iter::successors(Some(1), |n| Some(n * 2))
        .take_while(|&n| n < o.replicas)
        .collect();
    counts.push(o.replicas);
    let mut out = Vec::new();
    for replicas in counts {
        out.push(Fleet {
            replicas,
            sharing: Sharing::None,
        });
        if replicas > 1 && o.sharing != Sharing::None {
            out.push(Fleet {
                replicas,
                sharing: o.sharing.clone(),
            });
        }
    }
    out
}

/// Whether the `--sync` server can be reached (and verified), as the synced runs will need.
#[cfg(feature = "redis")]
fn check_redis(url: &str, tls_ca: Option<&Path>) -> Result<(), String> {
    redis_sync::check(url, tls_ca)
}

/// Without Redis support, `--sync redis://...` is an error that says how to get it.
#[cfg(not(feature = "redis"))]
fn check_redis(_url: &str, _tls_ca: Option<&Path>) -> Result<(), String> {
    Err("--sync redis://...: this build has no Redis support; build with `--features redis`".into())
}

fn run(o: &Options) -> Result<(), String> {
    let started = Instant::now();
    if let fleet::Sharing::Redis { url, tls_ca } = &o.sharing {
        // Before any run: a server that cannot be reached stops the tool at once.
        check_redis(url, tls_ca.as_deref())?;
    }
    let trace = trace::read(&o.trace, o.trace_block, o.skip_bad_lines, o.limit)?;
    if !trace.skipped.is_empty() {
        eprintln!("warning: skipped {} malformed lines:", trace.skipped.len());
        for (line, why) in trace.skipped.iter().take(5) {
            eprintln!("  line {line}: {why}");
        }
        if trace.skipped.len() > 5 {
            eprintln!("  ...");
        }
    }
    let t_hash = Instant::now();
    let requests = workload::prepare(&trace.requests, o.trace_block, o.block_size);
    let hash_time = t_hash.elapsed();
    drop(trace);

    let prompt_blocks: usize = requests.iter().map(|r| r.seq.len()).sum();
    if prompt_blocks == 0 {
        // Nothing to find or record: every hit rate would be 0 of 0.
        let longest = requests.iter().map(|r| r.input_length).max().unwrap_or(0);
        return Err(format!(
            "trace '{}': no request has a full block of {} tokens (--block-size; the longest \
             prompt has {longest}), so there is no prefix to route by",
            o.trace.display(),
            o.block_size,
        ));
    }
    let distinct: HashSet<u64, FxBuildHasher> = requests
        .iter()
        .flat_map(|r| r.seq.iter().map(|s| s.0))
        .collect();
    let span = requests.last().map_or(Duration::ZERO, |r| r.at)
        - requests.first().map_or(Duration::ZERO, |r| r.at);
    let policies = policies(o);
    let trace_span = (
        requests.first().map_or(Duration::ZERO, |r| r.at),
        requests.last().map_or(Duration::ZERO, |r| r.at),
    );
    let setup = replay::Setup {
        requests: &requests,
        workers: o.workers,
        capacities: o.realism.capacities(o.workers, o.cache_blocks),
        restarts: o.realism.restarts(o.workers, trace_span, o.seed),
        realism: o.realism,
        announce_restarts: o.announce_restarts,
        events: o.events,
        block_size: o.block_size,
        speeds: Speeds {
            prefill_tps: o.prefill_tps,
            decode_tps: o.decode_tps,
        },
        balance: Balance {
            threshold: o.threshold,
            overlap_weight: o.overlap_weight,
        },
        seed: o.seed,
        pace: o.pace,
        threads: o.threads,
    };

    let mut out = String::new();
    out.push_str(&format!(
        "trace    {}: {} requests over {:.0} s, {} prompt blocks of {} tokens ({} distinct)\n",
        o.trace.display(),
        requests.len(),
        span.as_secs_f64(),
        prompt_blocks,
        o.block_size,
        distinct.len(),
    ));
    out.push_str(&format!(
        "cluster  {} workers, each an LRU of {} blocks ({} tokens); service = uncached prompt / {} tok/s + output / {} tok/s\n",
        o.workers,
        o.cache_blocks,
        o.cache_blocks as u64 * u64::from(o.block_size),
        o.prefill_tps,
        o.decode_tps,
    ));
    let r = o.realism;
    if r != realism::Realism::default() {
        let on: Vec<&str> = [
            (r.sizes, "sizes (odd workers twice the blocks)"),
            (
                r.pins,
                "pins (running requests' blocks kept until they end)",
            ),
            (r.restarts, "restarts (each worker once)"),
            (
                r.foreign,
                "foreign (a quarter of the requests routed by another router)",
            ),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, what)| *what)
        .collect();
        out.push_str(&format!(
            "realistic  {}{}; capacities known at start: {}\n",
            on.join(", "),
            if o.announce_restarts {
                "; restarts announced to the index rows"
            } else {
                ""
            },
            o.capacity_start.name()
        ));
    }
    if let Some(lag) = o.events {
        out.push_str(&format!(
            "events   the engines' KV events reach the router {} s late\n",
            lag.as_secs_f64()
        ));
    }
    out.push_str(&format!(
        "routing  candidates: load <= min load + {}; pick max {} * overlap - load; {} thread(s), {}\n",
        o.threshold,
        o.overlap_weight,
        o.threads,
        match o.pace {
            Pace::MaxRate => "as fast as possible".to_string(),
            Pace::Speedup(x) => format!("approx runs paced at {x}x trace time"),
        },
    ));
    out!("{out}");

    let bar = progress::Bar::new(o.progress, policies.len(), requests.len());
    let mut results = Vec::with_capacity(policies.len());
    for (i, p) in policies.iter().enumerate() {
        results.push(replay::run(&setup, p, &bar, i)?);
    }
    bar.finish();

    let notes: Vec<String> = results
        .iter()
        .filter_map(|r| Some(format!("{}: {}", r.policy.name(), r.note.as_ref()?)))
        .collect();
    let retention = report::Retention::of(&mut results);
    let rows = report::rows(&mut results, o.threads);
    outln!();
    out!("{}", report::table(&rows));
    outln!();
    if let Some(r) = &retention {
        outln!("{}", r.line());
    }
    for note in &notes {
        outln!("{note}");
    }
    let scaling = scaling::Scaling::of(&rows);
    if let Some(s) = &scaling {
        outln!();
        out!("{}", s.table());
    }
    outln!(
        "hit rate = prompt blocks found in the chosen worker's LRU / prompt blocks; req/s = \
         find + choose + record only ({} thread(s)); hashing, done once: {:.1} µs/request",
        o.threads,
        hash_time.as_secs_f64() * 1e6 / requests.len() as f64,
    );
    if o.threads > 1 {
        outln!("note: with several threads, requests interleave, so figures vary slightly between runs");
    }
    if let Some(path) = &o.plot {
        write_plot(path, o, &rows, retention.as_ref(), requests.len())?;
        outln!("plot     {}", path.display());
        if let Some(s) = &scaling {
            let path = path.with_file_name(format!(
                "{}-replicas.svg",
                path.file_stem()
                    .map_or("hit-rates".into(), |s| s.to_string_lossy())
            ));
            let name = o
                .trace
                .file_name()
                .map(|f| f.to_string_lossy().into_owned());
            write_svg(&path, &s.svg(&name.unwrap_or_default())?)?;
            outln!("plot     {}", path.display());
        }
    }
    outln!("done in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Draws the chart into `path`, creating its folder.
fn write_plot(
    path: &Path,
    o: &Options,
    rows: &[report::Row],
    retention: Option<&report::Retention>,
    requests: usize,
) -> Result<(), String> {
    let name = o.trace.file_name().map_or_else(
        || o.trace.display().to_string(),
        |f| f.to_string_lossy().into_owned(),
    );
    let mut subtitle = vec![format!(
        "{name}: {requests} requests; {} workers, each an LRU of {} blocks of {} tokens",
        o.workers, o.cache_blocks, o.block_size
    )];
    if let Some(r) = retention.filter(|r| r.evictions > 0) {
        subtitle.push(format!(
            "oracle's caches: an evicted block had gone unused for {:.0} s (median)",
            r.unused_s.1
        ));
    }
    write_svg(path, &chart::svg(rows, &subtitle)?)
}

/// Writes an SVG into `path`, creating its folder.
fn write_svg(path: &Path, chart: &str) -> Result<(), String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create '{}' for the plot: {e}", dir.display()))?;
    }
    std::fs::write(path, chart)
        .map_err(|e| format!("cannot write the plot '{}': {e}", path.display()))
}
