//! Command-line options (clap), validated into [`Options`].

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use approx_kv_tools::cli::positive_f64;
use approx_kv_tools::progress::When;
use clap::{Parser, ValueEnum};

use crate::fleet::Sharing;
use crate::realism::{CapacityStart, Perturbation, Realism};

/// The bundled default trace, relative to the repository root.
pub const DEFAULT_TRACE: &str = "data/conversation_head2000.jsonl";
/// The default plot, relative to the repository root.
pub const DEFAULT_PLOT: &str = "target/approx-kv-replay/hit-rates.svg";

/// The repository root (this tool lives in `tools/replay`).
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .and_then(Path::parent)
        .unwrap_or(manifest)
        .to_path_buf()
}

/// The command line, as clap reads it.
#[derive(Debug, Parser)]
#[command(
    name = "approx-kv-replay",
    version,
    allow_negative_numbers = true,
    about = "Replays a Mooncake-style JSONL trace against a simulated cluster of LRU KV caches \
             and compares routing policies by real prefix-hit rate, load balance and router cost.",
    long_about = None,
    after_help = "Each trace line is {\"timestamp\": ms, \"input_length\": tokens, \
                  \"output_length\": tokens, \"hash_ids\": [..]}, one hash id per trace block, \
                  chained. See docs/replay.md for the model and the figures.\n\
                  Exit status: 0 done, 1 bad input (trace, plot), 2 bad usage."
)]
pub struct Cli {
    /// The trace (JSONL) [default: the bundled data/conversation_head2000.jsonl]
    #[arg(value_name = "TRACE.jsonl")]
    trace: Option<PathBuf>,

    /// Simulated workers (at most 4096)
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = workers, help_heading = "Cluster")]
    workers: usize,
    /// LRU capacity of each worker, in index blocks
    #[arg(long, value_name = "N", default_value_t = 16384, value_parser = positive::<usize>, help_heading = "Cluster")]
    cache_blocks: usize,
    /// Tokens per index (KV) block
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = positive::<u32>, help_heading = "Cluster")]
    block_size: u32,
    /// Tokens per trace hash id
    #[arg(long, value_name = "N", default_value_t = 512, value_parser = positive::<u32>, help_heading = "Cluster")]
    trace_block: u32,
    /// Prefill speed of a worker, uncached tokens/s
    #[arg(long, value_name = "X", default_value_t = 20_000.0, value_parser = positive_f64, help_heading = "Cluster")]
    prefill_tps: f64,
    /// Decode speed of one request, tokens/s
    #[arg(long, value_name = "X", default_value_t = 25.0, value_parser = positive_f64, help_heading = "Cluster")]
    decode_tps: f64,
    /// The cluster: simple (equal LRUs, every request routed by this router), or realistic
    /// (the --perturbations on; see docs/replay.md)
    #[arg(
        long,
        value_name = "KIND",
        default_value = "simple",
        help_heading = "Cluster"
    )]
    cluster: ClusterKind,
    /// With --cluster realistic: which perturbations, comma-separated (sizes, pins,
    /// restarts, foreign) [default: sizes,pins,restarts,foreign]
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        help_heading = "Cluster"
    )]
    perturbations: Option<Vec<Perturbation>>,
    /// What the request-aware runs (approx-lease, approx-feedback, approx-learning,
    /// approx-hybrid) know of capacities at start: true, unknown, low4 (a quarter of the
    /// mean for all), high4 (four times) [default: true]
    #[arg(long, value_name = "KIND", help_heading = "Cluster")]
    capacity_start: Option<CapacityStart>,
    /// With the restarts perturbation: the router learns of each restart as it happens
    /// (the worker leaves and joins again), and every index row removes the worker and
    /// sets its capacity again
    #[arg(long, help_heading = "Cluster")]
    announce_restarts: bool,

    /// The engines publish KV events, delivered to the router SECS seconds after they
    /// happen (approx-hybrid and events-only rows)
    #[arg(long, value_name = "SECS", value_parser = lag, help_heading = "Cluster")]
    events: Option<Duration>,

    /// Routing policies to run, comma-separated (`approx` runs once per TTL of --ttls)
    /// [default: round-robin,random,approx,approx-capacity,oracle; with --cluster
    /// realistic: round-robin,approx,approx-capacity,approx-lease,approx-feedback,
    /// approx-learning,bound,oracle, and with --events approx-hybrid,events-only before
    /// bound]
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        help_heading = "Routing"
    )]
    policies: Option<Vec<PolicyKind>>,
    /// TTLs of the approx runs, in seconds, comma-separated
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "60,120,300,600,1800", value_parser = ttl, help_heading = "Routing")]
    ttls: Vec<Duration>,
    /// Load slack: candidates have load <= min load + N
    #[arg(long, value_name = "N", default_value_t = 2, help_heading = "Routing")]
    threshold: u32,
    /// Score = X * overlap blocks - load
    #[arg(long, value_name = "X", default_value_t = 1.0, value_parser = weight, help_heading = "Routing")]
    overlap_weight: f64,
    /// Seed of the random policy, of the replicas' load balancer (--replicas) and, with
    /// --cluster realistic, of the foreign requests and the restart times
    #[arg(long, value_name = "N", default_value_t = 42, help_heading = "Routing")]
    seed: u64,

    /// Replay as fast as possible (the default)
    #[arg(long, conflicts_with = "speedup", help_heading = "Replay")]
    max_rate: bool,
    /// Pace approx runs at X times trace time (simulated time stays trace time)
    #[arg(long, value_name = "X", value_parser = speedup, help_heading = "Replay")]
    speedup: Option<f64>,
    /// Route from N threads sharing one index
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = positive::<usize>, help_heading = "Replay")]
    threads: usize,
    /// Router replicas behind a uniform load balancer, each with its own index: index
    /// policies run with 1, 2, 4, ... up to N replicas, unsynced and (with --sync) synced
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = replicas, help_heading = "Replicas")]
    replicas: usize,
    /// How replicas share decisions: none, memory (in process, --sync-delay late) or
    /// redis://HOST:PORT (a real server; build with --features redis); all but none need
    /// --replicas 2 or more
    #[arg(long, value_name = "MODE", default_value = "none", value_parser = sync_mode, help_heading = "Replicas")]
    sync: SyncMode,
    /// Trace time from a decision to the other replicas, in ms (needs --sync memory)
    /// [default: 0]
    #[arg(long, value_name = "MS", help_heading = "Replicas")]
    sync_delay: Option<u64>,
    /// PEM file of the root certificate(s) that a rediss:// server is verified against (a
    /// private CA; default: the system's roots). Needs --sync rediss://... and a build
    /// with --features redis-tls
    #[arg(long, value_name = "PEM", help_heading = "Replicas")]
    sync_tls_ca: Option<PathBuf>,

    /// Replay only the first N requests
    #[arg(long, value_name = "N", value_parser = positive::<usize>, help_heading = "Replay")]
    limit: Option<usize>,
    /// Skip malformed lines instead of stopping (counted on stderr, the first five listed)
    #[arg(long, help_heading = "Replay")]
    skip_bad_lines: bool,

    /// Write the SVG chart there [default: target/approx-kv-replay/hit-rates.svg in the repository]
    #[arg(
        long,
        value_name = "PATH",
        conflicts_with = "no_plot",
        help_heading = "Output"
    )]
    plot: Option<PathBuf>,
    /// Write no chart
    #[arg(long, help_heading = "Output")]
    no_plot: bool,
    /// Always draw the progress bar on stderr (by default only when stderr is a terminal)
    #[arg(long, conflicts_with = "no_progress", help_heading = "Output")]
    progress: bool,
    /// Never draw the progress bar
    #[arg(long, help_heading = "Output")]
    no_progress: bool,
}

/// A family of routing policies, as `--policies` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PolicyKind {
    /// Request i goes to worker i mod W
    RoundRobin,
    /// A seeded random worker
    Random,
    /// This crate's index, once per TTL of --ttls
    Approx,
    /// This crate's index capped at each worker's cache size, no TTL
    ApproxCapacity,
    /// Requests begun and finished (pinned while they run), capacities per --capacity-start
    ApproxLease,
    /// Decisions and the engines' cached-token reports, capacities per --capacity-start
    ApproxFeedback,
    /// Both: requests begun, reported on and finished, capacities learned from the reports
    ApproxLearning,
    /// approx-learning fed the engines' KV events too (needs --events)
    ApproxHybrid,
    /// The index fed only the engines' KV events, no decisions (needs --events)
    EventsOnly,
    /// An exact copy of each engine fed only this router's requests
    Bound,
    /// Exact knowledge of the simulated caches
    Oracle,
}

impl PolicyKind {
    /// Whether the rows of this family start from `--capacity-start`'s capacities.
    pub fn reads_capacity_start(self) -> bool {
        use PolicyKind::*;
        matches!(
            self,
            ApproxLease | ApproxFeedback | ApproxLearning | ApproxHybrid
        )
    }
}

/// `--cluster`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClusterKind {
    /// Equal LRUs; every request routed by this router
    Simple,
    /// The --perturbations on
    Realistic,
}

/// `--sync`, before the delay is known.
#[derive(Debug, Clone, PartialEq)]
pub enum SyncMode {
    /// No sharing.
    None,
    /// In process.
    Memory,
    /// A Redis URL.
    Redis(String),
}

/// How wall-clock time is paced during approx runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// No pacing.
    MaxRate,
    /// One trace second takes `1 / x` wall seconds.
    Speedup(f64),
}

/// Every option of the tool, validated.
#[derive(Debug, Clone)]
pub struct Options {
    /// The trace file.
    pub trace: PathBuf,
    /// Simulated workers.
    pub workers: usize,
    /// LRU capacity per worker, in index blocks.
    pub cache_blocks: usize,
    /// Tokens per index block.
    pub block_size: u32,
    /// Tokens per trace hash id.
    pub trace_block: u32,
    /// Prefill tokens per second per worker.
    pub prefill_tps: f64,
    /// Decode tokens per second per request.
    pub decode_tps: f64,
    /// The realistic cluster's perturbations (none: the simple cluster).
    pub realism: Realism,
    /// What request-aware runs know of capacities at start.
    pub capacity_start: CapacityStart,
    /// Whether index rows are told of each restart when it happens.
    pub announce_restarts: bool,
    /// When the engines publish KV events: how late they reach the router.
    pub events: Option<Duration>,
    /// The policy families to run, without repeats.
    pub policies: Vec<PolicyKind>,
    /// TTLs of the approx runs, sorted, without repeats.
    pub ttls: Vec<Duration>,
    /// Load slack of the balance rule, in outstanding requests.
    pub threshold: u32,
    /// Weight of one overlap block against one outstanding request.
    pub overlap_weight: f64,
    /// Seed of the random policy, the load balancer, the foreign requests and the restarts.
    pub seed: u64,
    /// Wall pacing.
    pub pace: Pace,
    /// Routing threads.
    pub threads: usize,
    /// Router replicas.
    pub replicas: usize,
    /// How they share decisions.
    pub sharing: Sharing,
    /// Replay only this many requests.
    pub limit: Option<usize>,
    /// Skip malformed lines instead of stopping.
    pub skip_bad_lines: bool,
    /// Where to write the SVG, if anywhere.
    pub plot: Option<PathBuf>,
    /// When to draw the progress bar.
    pub progress: When,
}

impl Cli {
    /// What clap cannot check alone: options that only some other options' values use
    /// (some `--sync` modes, several replicas, the realistic cluster, some policies). An
    /// option that would be ignored is a usage error rather than silently dropped.
    pub fn check(self) -> Result<Self, String> {
        if self.sync_tls_ca.is_some()
            && !matches!(&self.sync, SyncMode::Redis(url) if url.starts_with("rediss://"))
        {
            return Err("error: --sync-tls-ca needs --sync rediss://HOST:PORT (see --help)".into());
        }
        if self.sync_delay.is_some() && self.sync != SyncMode::Memory {
            return Err("error: --sync-delay needs --sync memory (see --help)".into());
        }
        if self.sync != SyncMode::None && self.replicas < 2 {
            return Err(
                "error: --sync needs --replicas 2 or more (one replica has no one to share \
                 with; see --help)"
                    .into(),
            );
        }
        let realistic = self.cluster == ClusterKind::Realistic;
        if self.perturbations.is_some() && !realistic {
            return Err("error: --perturbations needs --cluster realistic (see --help)".into());
        }
        let restarts = match &self.perturbations {
            Some(list) => list.contains(&Perturbation::Restarts),
            None => realistic,
        };
        if self.announce_restarts && !restarts {
            return Err(
                "error: --announce-restarts needs the restarts perturbation (--cluster \
                 realistic; see --help)"
                    .into(),
            );
        }
        // The rows that read --capacity-start: the request-aware ones, which the realistic
        // cluster runs by default and --policies can ask for in either cluster.
        let reads_capacity_start = match &self.policies {
            Some(list) => list.iter().any(|p| p.reads_capacity_start()),
            None => realistic,
        };
        if self.capacity_start.is_some() && !reads_capacity_start {
            return Err(
                "error: --capacity-start needs a row that reads it: --cluster realistic (its \
                 default policies) or --policies with approx-lease, approx-feedback, \
                 approx-learning or approx-hybrid (see --help)"
                    .into(),
            );
        }
        let wants_events = self
            .policies
            .iter()
            .flatten()
            .any(|p| matches!(p, PolicyKind::ApproxHybrid | PolicyKind::EventsOnly));
        if wants_events && self.events.is_none() {
            return Err(
                "error: approx-hybrid and events-only need --events SECS (see --help)".into(),
            );
        }
        Ok(self)
    }
}

impl From<Cli> for Options {
    fn from(c: Cli) -> Self {
        let root = repo_root();
        let mut ttls = c.ttls;
        ttls.sort();
        ttls.dedup();
        let realistic = c.cluster == ClusterKind::Realistic;
        let asked = c.policies.unwrap_or_else(|| {
            use PolicyKind::*;
            if realistic {
                vec![
                    RoundRobin,
                    Approx,
                    ApproxCapacity,
                    ApproxLease,
                    ApproxFeedback,
                    ApproxLearning,
                ]
                .into_iter()
                .chain(
                    c.events
                        .map(|_| [ApproxHybrid, EventsOnly])
                        .into_iter()
                        .flatten(),
                )
                .chain([Bound, Oracle])
                .collect()
            } else {
                vec![RoundRobin, Random, Approx, ApproxCapacity, Oracle]
            }
        });
        let mut policies = Vec::new();
        for p in asked {
            if !policies.contains(&p) {
                policies.push(p);
            }
        }
        Self {
            trace: c.trace.unwrap_or_else(|| root.join(DEFAULT_TRACE)),
            workers: c.workers,
            cache_blocks: c.cache_blocks,
            block_size: c.block_size,
            trace_block: c.trace_block,
            prefill_tps: c.prefill_tps,
            decode_tps: c.decode_tps,
            realism: if realistic {
                Realism::of(c.perturbations.as_deref().unwrap_or(&Perturbation::ALL))
            } else {
                Realism::default()
            },
            capacity_start: c.capacity_start.unwrap_or(CapacityStart::True),
            announce_restarts: c.announce_restarts,
            events: c.events,
            policies,
            ttls,
            threshold: c.threshold,
            overlap_weight: c.overlap_weight,
            seed: c.seed,
            pace: c.speedup.map_or(Pace::MaxRate, Pace::Speedup),
            threads: c.threads,
            replicas: c.replicas,
            sharing: match c.sync {
                SyncMode::None => Sharing::None,
                SyncMode::Memory => Sharing::Memory {
                    delay: Duration::from_millis(c.sync_delay.unwrap_or(0)),
                },
                SyncMode::Redis(url) => Sharing::Redis {
                    url,
                    tls_ca: c.sync_tls_ca,
                },
            },
            limit: c.limit,
            skip_bad_lines: c.skip_bad_lines,
            plot: match (c.no_plot, c.plot) {
                (true, _) => None,
                (false, Some(p)) => Some(p),
                (false, None) => Some(root.join(DEFAULT_PLOT)),
            },
            progress: match (c.progress, c.no_progress) {
                (true, _) => When::Always,
                (_, true) => When::Never,
                _ => When::Auto,
            },
        }
    }
}

/// An integer of at least 1.
fn positive<T: FromStr + PartialOrd + From<u8>>(s: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    let n: T = s
        .trim()
        .parse()
        .map_err(|e| format!("'{s}' is not a whole number ({e})"))?;
    if n < T::from(1) {
        return Err("must be at least 1".into());
    }
    Ok(n)
}

fn workers(s: &str) -> Result<usize, String> {
    let n = positive::<usize>(s)?;
    if n > 4096 {
        return Err(format!("{n} is too many (at most 4096)"));
    }
    Ok(n)
}

fn replicas(s: &str) -> Result<usize, String> {
    let n = positive::<usize>(s)?;
    if n > 64 {
        return Err(format!("{n} is too many (at most 64)"));
    }
    Ok(n)
}

fn sync_mode(s: &str) -> Result<SyncMode, String> {
    match s.trim() {
        "none" => Ok(SyncMode::None),
        "memory" => Ok(SyncMode::Memory),
        url if url.starts_with("redis://") || url.starts_with("rediss://") => {
            Ok(SyncMode::Redis(url.to_string()))
        }
        other => Err(format!(
            "'{other}' is not none, memory or redis://HOST:PORT"
        )),
    }
}

fn weight(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(w) if w.is_finite() && w >= 0.0 => Ok(w),
        Ok(_) => Err(format!("must be a finite number >= 0, got '{s}'")),
        Err(e) => Err(format!("'{s}' is not a number ({e})")),
    }
}

fn speedup(s: &str) -> Result<f64, String> {
    let x = positive_f64(s)?;
    if !(1e-3..=1e9).contains(&x) {
        return Err(format!("must be between 0.001 and 1e9, got '{s}'"));
    }
    Ok(x)
}

/// A delay in seconds, 0 or more.
fn lag(s: &str) -> Result<Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && (0.0..=1e6).contains(&x) => Ok(Duration::from_secs_f64(x)),
        Ok(_) => Err(format!("must be between 0 and 1e6 seconds, got '{s}'")),
        Err(e) => Err(format!("'{s}' is not a number ({e})")),
    }
}

/// The longest TTL `--ttls` takes, in seconds (about 31.7 years).
pub const MAX_TTL_S: f64 = 1e9;

fn ttl(s: &str) -> Result<Duration, String> {
    let secs = positive_f64(s)?;
    if secs > MAX_TTL_S {
        return Err(format!("{secs} s is too long"));
    }
    let d = Duration::from_secs_f64(secs);
    if d < Duration::from_millis(1) {
        return Err(format!("{secs} s is shorter than 1 ms"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, String> {
        Cli::try_parse_from(std::iter::once("approx-kv-replay").chain(args.iter().copied()))
            .map_err(|e| approx_kv_tools::cli::one_line(&e))?
            .check()
            .map(Options::from)
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let o = parse(&[]).unwrap();
        assert!(o.trace.ends_with(DEFAULT_TRACE) && o.trace.exists());
        assert_eq!((o.workers, o.cache_blocks, o.block_size), (8, 16384, 64));
        assert_eq!(o.ttls.len(), 5);
        assert_eq!(o.ttls[0], Duration::from_secs(60));
        assert_eq!(o.policies.len(), 5);
        assert_eq!(o.pace, Pace::MaxRate);
        assert_eq!(o.progress, When::Auto);
        assert!(o.plot.unwrap().ends_with(DEFAULT_PLOT));
    }

    #[test]
    fn values_are_read_and_normalised() {
        let o = parse(&[
            "t.jsonl",
            "--ttls=300,60,300",
            "--speedup",
            "10",
            "--policies",
            "oracle,approx,oracle",
            "--no-plot",
            "--progress",
        ])
        .unwrap();
        assert_eq!(o.trace, PathBuf::from("t.jsonl"));
        assert_eq!(o.ttls, [60, 300].map(Duration::from_secs));
        assert_eq!(o.pace, Pace::Speedup(10.0));
        assert_eq!(o.policies, [PolicyKind::Oracle, PolicyKind::Approx]);
        assert_eq!((o.plot, o.progress), (None, When::Always));
        use PolicyKind::*;
        let o = parse(&["--cluster", "realistic", "--events", "0.5"]).unwrap();
        assert_eq!(o.events, Some(Duration::from_millis(500)));
        let tail = &o.policies[o.policies.len() - 4..];
        assert_eq!(tail, [ApproxHybrid, EventsOnly, Bound, Oracle]);
        let o = parse(&["--cluster", "realistic"]).unwrap();
        assert!(!o.policies.contains(&EventsOnly) && o.policies.contains(&Bound));
        assert_eq!(o.realism, Realism::of(&Perturbation::ALL));
        assert_eq!(o.capacity_start, CapacityStart::True);
        let o = parse(&[
            "--cluster",
            "realistic",
            "--perturbations",
            "pins",
            "--capacity-start",
            "low4",
        ])
        .unwrap();
        assert_eq!(o.realism, Realism::of(&[Perturbation::Pins]));
        assert_eq!(o.capacity_start, CapacityStart::Low4);
        // A request-aware row reads --capacity-start in the simple cluster too.
        let o = parse(&["--policies", "approx-lease", "--capacity-start", "unknown"]).unwrap();
        assert_eq!(
            (o.realism, o.capacity_start),
            (Realism::default(), CapacityStart::Unknown)
        );
        let o = parse(&["--replicas", "8", "--sync", "memory", "--sync-delay", "5"]).unwrap();
        let delay = Duration::from_millis(5);
        assert_eq!((o.replicas, o.sharing), (8, Sharing::Memory { delay }));
        let o = parse(&["--replicas", "2", "--sync", "redis://127.0.0.1:6379"]).unwrap();
        assert_eq!(
            o.sharing,
            Sharing::Redis {
                url: "redis://127.0.0.1:6379".into(),
                tls_ca: None,
            }
        );
        let o = parse(&[
            "--replicas",
            "2",
            "--sync",
            "rediss://h:1",
            "--sync-tls-ca",
            "ca.crt",
        ])
        .unwrap();
        assert_eq!(
            o.sharing,
            Sharing::Redis {
                url: "rediss://h:1".into(),
                tls_ca: Some("ca.crt".into()),
            }
        );
    }

    #[test]
    fn bad_values_name_the_option() {
        for (args, why) in [
            (&["--workers", "0"][..], "must be at least 1"),
            (&["--workers", "5000"], "at most 4096"),
            (&["--overlap-weight", "-1"], "finite number >= 0"),
            (&["--ttls", "60,0.0001"], "shorter than 1 ms"),
            (&["--policies", "lru"], "'lru' for '--policies <LIST>'"),
            (&["--replicas", "65"], "at most 64"),
            (
                &["--sync", "tcp://x"],
                "not none, memory or redis://HOST:PORT",
            ),
            (&["--sync-tls-ca", "ca.crt"], "needs --sync rediss://"),
            (&["--policies", "events-only"], "need --events SECS"),
            (&["--events", "-1"], "between 0 and 1e6"),
            (
                &["--sync", "redis://h:1", "--sync-tls-ca", "ca.crt"],
                "needs --sync rediss://",
            ),
            (&["--sync-delay", "5"], "--sync-delay needs --sync memory"),
            (
                &[
                    "--replicas",
                    "2",
                    "--sync",
                    "redis://h:1",
                    "--sync-delay",
                    "5",
                ],
                "--sync-delay needs --sync memory",
            ),
            (&["--sync", "memory"], "--sync needs --replicas 2 or more"),
            (
                &["--replicas", "1", "--sync", "redis://h:1"],
                "--sync needs --replicas 2 or more",
            ),
            (
                &["--perturbations", "pins"],
                "--perturbations needs --cluster realistic",
            ),
            (
                &["--cluster", "simple", "--perturbations", "pins"],
                "--perturbations needs --cluster realistic",
            ),
            (
                &["--capacity-start", "low4"],
                "--capacity-start needs a row that reads it",
            ),
            (
                &[
                    "--cluster",
                    "realistic",
                    "--policies",
                    "approx-capacity,oracle",
                    "--capacity-start",
                    "low4",
                ],
                "--capacity-start needs a row that reads it",
            ),
        ] {
            let e = parse(args).unwrap_err();
            assert!(e.contains(why) && !e.contains('\n'), "{args:?}: {e}");
        }
    }
}
