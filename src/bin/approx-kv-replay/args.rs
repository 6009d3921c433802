//! Command-line options, parsed by hand (`--name value` or `--name=value`).

use std::path::PathBuf;
use std::time::Duration;

/// The bundled default trace, relative to the crate root.
pub const DEFAULT_TRACE: &str = "data/conversation_head2000.jsonl";

/// Usage text printed by `--help`.
pub const HELP: &str = "\
approx-kv-replay: replays a Mooncake-style JSONL trace against a simulated cluster of
LRU KV caches and compares routing policies (approx index at several TTLs, oracle,
round-robin, random) by real prefix-hit rate, load balance and router cost.

USAGE:
    approx-kv-replay [TRACE.jsonl] [OPTIONS]

TRACE defaults to the bundled data/conversation_head2000.jsonl. Each line is
{\"timestamp\": ms, \"input_length\": tokens, \"output_length\": tokens, \"hash_ids\": [..]}
with one hash id per trace block (512 tokens), chained.

CLUSTER:
    --workers N          simulated workers [default: 8]
    --cache-blocks N     LRU capacity of each worker, in index blocks [default: 16384]
    --block-size N       tokens per index (KV) block [default: 64]
    --trace-block N      tokens per trace hash id [default: 512]
    --prefill-tps X      prefill speed of a worker, uncached tokens/s [default: 20000]
    --decode-tps X       decode speed of one request, tokens/s [default: 25]

ROUTING:
    --ttls LIST          approx TTLs in seconds, comma-separated [default: 60,120,300,600,1800]
    --threshold N        load slack: candidates have load <= min load + N [default: 2]
    --overlap-weight X   score = X * overlap blocks - load [default: 1]
    --seed N             seed of the random policy [default: 42]

REPLAY:
    --max-rate           replay as fast as possible [default]
    --speedup X          pace approx runs at X times trace time (simulated time stays trace time)
    --threads N          route from N threads sharing one index [default: 1]
    --limit N            replay only the first N requests
    --skip-bad-lines     skip malformed lines (reported on stderr) instead of stopping

OUTPUT:
    --plot PATH          write the SVG plot there [default: target/approx-kv-replay/hit-rates.svg]
    --no-plot            write no plot
    --progress           always show the progress bar (default: only if stderr is a terminal)
    --no-progress        never show it
    -h, --help           print this help
";

/// How wall-clock time is paced during approx runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// No pacing.
    MaxRate,
    /// One trace second takes `1 / x` wall seconds.
    Speedup(f64),
}

/// Whether to draw the progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// When stderr is a terminal.
    Auto,
    /// Always.
    On,
    /// Never.
    Off,
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
    /// TTLs of the approx runs.
    pub ttls: Vec<Duration>,
    /// Load slack of the balance rule, in outstanding requests.
    pub threshold: u32,
    /// Weight of one overlap block against one outstanding request.
    pub overlap_weight: f64,
    /// Seed of the random policy.
    pub seed: u64,
    /// Wall pacing.
    pub pace: Pace,
    /// Routing threads.
    pub threads: usize,
    /// Replay only this many requests.
    pub limit: Option<usize>,
    /// Skip malformed lines instead of stopping.
    pub skip_bad_lines: bool,
    /// Where to write the SVG, if anywhere.
    pub plot: Option<PathBuf>,
    /// Progress bar mode.
    pub progress: Progress,
}

impl Default for Options {
    fn default() -> Self {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        Self {
            trace: root.join(DEFAULT_TRACE),
            workers: 8,
            cache_blocks: 16384,
            block_size: 64,
            trace_block: 512,
            prefill_tps: 20_000.0,
            decode_tps: 25.0,
            ttls: [60, 120, 300, 600, 1800].map(Duration::from_secs).to_vec(),
            threshold: 2,
            overlap_weight: 1.0,
            seed: 42,
            pace: Pace::MaxRate,
            threads: 1,
            limit: None,
            skip_bad_lines: false,
            plot: Some(root.join("target/approx-kv-replay/hit-rates.svg")),
            progress: Progress::Auto,
        }
    }
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    /// Print the help.
    Help,
    /// Replay with these options.
    Run(Options),
}

/// Parses the arguments (without the program name).
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Command, String> {
    let mut o = Options::default();
    let mut trace: Option<PathBuf> = None;
    let (mut max_rate, mut speedup) = (false, None);
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if !arg.starts_with('-') || arg == "-" {
            if trace.is_some() {
                return Err(format!(
                    "unexpected extra argument '{arg}' (one trace only)"
                ));
            }
            trace = Some(PathBuf::from(arg));
            continue;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = || -> Result<String, String> {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("option {name} needs a value"))
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--workers" => o.workers = positive(&name, &value()?)?,
            "--cache-blocks" => o.cache_blocks = positive(&name, &value()?)?,
            "--block-size" => o.block_size = positive(&name, &value()?)?,
            "--trace-block" => o.trace_block = positive(&name, &value()?)?,
            "--prefill-tps" => o.prefill_tps = positive_f64(&name, &value()?)?,
            "--decode-tps" => o.decode_tps = positive_f64(&name, &value()?)?,
            "--ttls" => o.ttls = ttls(&value()?)?,
            "--threshold" => o.threshold = number(&name, &value()?)?,
            "--overlap-weight" => {
                let w: f64 = number(&name, &value()?)?;
                if !w.is_finite() || w < 0.0 {
                    return Err(format!("{name} must be a finite number >= 0, got {w}"));
                }
                o.overlap_weight = w;
            }
            "--seed" => o.seed = number(&name, &value()?)?,
            "--max-rate" => max_rate = no_value(&name, &inline)?,
            "--speedup" => {
                let x = positive_f64(&name, &value()?)?;
                if !(1e-3..=1e9).contains(&x) {
                    return Err(format!("{name} must be between 0.001 and 1e9, got {x}"));
                }
                speedup = Some(x);
            }
            "--threads" => o.threads = positive(&name, &value()?)?,
            "--limit" => o.limit = Some(positive(&name, &value()?)?),
            "--skip-bad-lines" => o.skip_bad_lines = no_value(&name, &inline)?,
            "--plot" => o.plot = Some(PathBuf::from(value()?)),
            "--no-plot" => {
                no_value(&name, &inline)?;
                o.plot = None;
            }
            "--progress" => {
                no_value(&name, &inline)?;
                o.progress = Progress::On;
            }
            "--no-progress" => {
                no_value(&name, &inline)?;
                o.progress = Progress::Off;
            }
            _ => return Err(format!("unknown option '{name}'")),
        }
    }
    match (max_rate, speedup) {
        (true, Some(_)) => return Err("--max-rate and --speedup exclude each other".into()),
        (_, Some(x)) => o.pace = Pace::Speedup(x),
        _ => {}
    }
    if o.workers > 4096 {
        return Err(format!(
            "--workers {} is too many (at most 4096)",
            o.workers
        ));
    }
    if let Some(t) = trace {
        o.trace = t;
    }
    Ok(Command::Run(o))
}

/// A flag: `--name=value` is an error. Returns `true` (the flag is set).
fn no_value(name: &str, inline: &Option<String>) -> Result<bool, String> {
    match inline {
        Some(_) => Err(format!("option {name} takes no value")),
        None => Ok(true),
    }
}

fn number<T: std::str::FromStr>(name: &str, v: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    v.trim()
        .parse()
        .map_err(|e| format!("{name}: cannot read '{v}' as a number ({e})"))
}

fn positive<T: std::str::FromStr + Default + PartialEq>(name: &str, v: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    let n: T = number(name, v)?;
    if n == T::default() {
        return Err(format!("{name} must be at least 1"));
    }
    Ok(n)
}

fn positive_f64(name: &str, v: &str) -> Result<f64, String> {
    let x: f64 = number(name, v)?;
    if !x.is_finite() || x <= 0.0 {
        return Err(format!("{name} must be a finite number > 0, got '{v}'"));
    }
    Ok(x)
}

fn ttls(v: &str) -> Result<Vec<Duration>, String> {
    let mut out = Vec::new();
    for part in v.split(',') {
        let s = positive_f64("--ttls", part)?;
        if s > 1e9 {
            return Err(format!("--ttls: {s} s is too long"));
        }
        let d = Duration::from_secs_f64(s);
        if d < Duration::from_millis(1) {
            return Err(format!("--ttls: {s} s is shorter than 1 ms"));
        }
        out.push(d);
    }
    out.sort();
    out.dedup();
    Ok(out)
}
