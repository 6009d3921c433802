//! The figures of one subject in one round, and the table over rounds.

use approx_kv_tools::outln;

/// Subjects per round, in table order: ours, Dynamo's pool, Dynamo's actor, SMG's
/// `ChainIndex`, SMG's `TokenTree`.
pub const SUBJECTS: usize = 5;

/// One subject's figures in one round.
#[derive(Debug, Default, Clone, Copy)]
pub struct Row {
    /// Hashing one prompt (local + sequence hashes), µs.
    pub hash_us: f64,
    /// Routing one prompt on one thread, µs.
    pub route_us: f64,
    /// Route throughput, 1 thread and N threads, requests/s.
    pub route1: f64,
    pub route_n: f64,
    /// Hashing every request on N threads (nothing shared) over on 1 thread: the
    /// machine's ceiling for the route's scaling, measured beside it.
    pub hash_scaling: f64,
    /// Route throughput on 4 threads (oversubscribed on 2 cores), requests/s.
    pub route4: f64,
    /// Median find latency (µs, hashing excluded) of a 256-block prompt shared by
    /// 16, 128 and 1,024 workers.
    pub find_sharers: [f64; 3],
    /// Mean time (µs) of recording that prompt for one more worker, up to 16, 128 and
    /// 1,024 workers.
    pub record_sharers: [f64; 3],
    /// Record-only throughput (hashing included), 1 and N threads, records/s.
    pub record1: f64,
    pub record_n: f64,
    /// Find-only on the loaded index, hashing included: lookups/s, p50, p99 (µs).
    pub find_rate: f64,
    pub find_p50: f64,
    pub find_p99: f64,
    /// The same finds with hashing excluded: p50, p99, p99.9 (µs).
    pub findx_p50: f64,
    pub findx_p99: f64,
    pub findx_p999: f64,
    /// The same finds, each request hashed just before (untimed), as in a route: p50, p99 (µs).
    pub findh_p50: f64,
    pub findh_p99: f64,
    /// Distinct (block, worker) pairs after routing the trace, and heap bytes per pair.
    pub pairs: f64,
    pub bytes_per_pair: f64,
    /// Past the TTL: until finds stop reporting the entries, and until they are freed, ms
    /// (NaN for a subject without a TTL, printed as n/a).
    pub lag_hidden_ms: f64,
    pub lag_freed_ms: f64,
}

impl Row {
    /// Marks every figure measured over the fleet as not measured (NaN, printed as n/a),
    /// for a subject that cannot index that many workers: all but the hashing and the
    /// shared-prefix figures.
    pub fn skip_fleet(&mut self) {
        let nan = f64::NAN;
        self.route_us = nan;
        self.route1 = nan;
        self.route_n = nan;
        self.route4 = nan;
        self.record1 = nan;
        self.record_n = nan;
        self.find_rate = nan;
        self.find_p50 = nan;
        self.find_p99 = nan;
        self.findx_p50 = nan;
        self.findx_p99 = nan;
        self.findx_p999 = nan;
        self.findh_p50 = nan;
        self.findh_p99 = nan;
        self.pairs = nan;
        self.bytes_per_pair = nan;
        self.lag_hidden_ms = nan;
        self.lag_freed_ms = nan;
    }
}

enum Target {
    /// ours / dynamo pool at least this.
    RatioMin(f64),
    /// ours / dynamo pool at most this.
    RatioMax(f64),
    /// ours at most this.
    AbsMax(f64),
    /// ours at least this.
    AbsMin(f64),
    None,
}

/// A figure: its name, how to read it from a row, and its target.
type Figure = (String, fn(&Row) -> f64, Target);

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn fmt(v: f64) -> String {
    let a = v.abs();
    if v.is_nan() {
        "n/a".into()
    } else if !v.is_finite() {
        format!("{v}")
    } else if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Prints the table: medians over rounds, the median of per-round ratios, the target; then
/// what the SMG columns stand for. `smg_fits`: whether SMG's `ChainIndex` took the fleet.
pub fn print(rounds: &[[Row; SUBJECTS]], threads: usize, workers: usize, smg_fits: bool) {
    let n = threads;
    let figures: Vec<Figure> = vec![
        (
            "route, 1 thread (req/s)".into(),
            |r| r.route1,
            Target::RatioMin(10.0),
        ),
        (
            format!("route, {n} threads (req/s)"),
            |r| r.route_n,
            Target::RatioMin(8.0),
        ),
        (
            "route, 4 threads (req/s)".into(),
            |r| r.route4,
            Target::None,
        ),
        (
            "record only, 1 thread (rec/s)".into(),
            |r| r.record1,
            Target::RatioMin(20.0),
        ),
        (
            format!("record only, {n} threads (rec/s)"),
            |r| r.record_n,
            Target::RatioMin(15.0),
        ),
        (
            "find, hashing incl. (lookups/s)".into(),
            |r| r.find_rate,
            Target::RatioMin(2.0),
        ),
        (
            "find, hashing incl., p50 (µs)".into(),
            |r| r.find_p50,
            Target::None,
        ),
        (
            "find, hashing incl., p99 (µs)".into(),
            |r| r.find_p99,
            Target::RatioMax(0.5),
        ),
        (
            "find, hashing excl., p50 (µs)".into(),
            |r| r.findx_p50,
            Target::None,
        ),
        (
            "find, hashing excl., p99 (µs)".into(),
            |r| r.findx_p99,
            Target::None,
        ),
        (
            "find, hashing excl., p99.9 (µs)".into(),
            |r| r.findx_p999,
            Target::None,
        ),
        (
            "find, query just hashed, p50 (µs)".into(),
            |r| r.findh_p50,
            Target::None,
        ),
        (
            "find, query just hashed, p99 (µs)".into(),
            |r| r.findh_p99,
            Target::None,
        ),
        (
            "find 256 blocks, 16 sharers, p50 (µs)".into(),
            |r| r.find_sharers[0],
            Target::None,
        ),
        (
            "find 256 blocks, 128 sharers, p50 (µs)".into(),
            |r| r.find_sharers[1],
            Target::None,
        ),
        (
            "find 256 blocks, 1024 sharers, p50 (µs)".into(),
            |r| r.find_sharers[2],
            Target::None,
        ),
        (
            "record 256 blocks, up to 16 sharers (µs)".into(),
            |r| r.record_sharers[0],
            Target::None,
        ),
        (
            "record 256 blocks, up to 128 sharers (µs)".into(),
            |r| r.record_sharers[1],
            Target::None,
        ),
        (
            "record 256 blocks, up to 1024 sharers (µs)".into(),
            |r| r.record_sharers[2],
            Target::None,
        ),
        (
            "heap bytes per (block, worker) pair".into(),
            |r| r.bytes_per_pair,
            Target::RatioMax(0.45),
        ),
        (
            "(block, worker) pairs stored".into(),
            |r| r.pairs,
            Target::None,
        ),
        (
            "expiry: hidden from finds, ms past TTL".into(),
            |r| r.lag_hidden_ms,
            Target::AbsMax(20.0),
        ),
        (
            "expiry: memory freed, ms past TTL".into(),
            |r| r.lag_freed_ms,
            Target::AbsMax(20.0),
        ),
        ("hash one prompt (µs)".into(), |r| r.hash_us, Target::None),
        (
            "route cost / hash cost".into(),
            |r| r.route_us / r.hash_us,
            Target::AbsMax(3.0),
        ),
        (
            format!("route scaling {n} threads / 1"),
            |r| r.route_n / r.route1,
            Target::AbsMin(1.7),
        ),
        (
            format!("hashing scaling {n} threads / 1, nothing shared (the machine's ceiling)"),
            |r| r.hash_scaling,
            Target::None,
        ),
        (
            "route scaling / hashing scaling".into(),
            |r| r.route_n / r.route1 / r.hash_scaling,
            Target::None,
        ),
    ];
    outln!();
    outln!(
        "| figure | ours | dynamo pool | ours / pool | target | met | dynamo actor | ours / actor \
         | smg | ours / smg | smg token tree | ours / token tree |"
    );
    outln!("|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|");
    for (name, get, target) in figures {
        let med = |k: usize| median(rounds.iter().map(|r| get(&r[k])).collect());
        let ratio = |k: usize| median(rounds.iter().map(|r| get(&r[0]) / get(&r[k])).collect());
        let (ours, pool, actor, smg, tree) = (med(0), med(1), med(2), med(3), med(4));
        let (vs_pool, vs_actor, vs_smg, vs_tree) = (ratio(1), ratio(2), ratio(3), ratio(4));
        let (text, met) = match target {
            Target::RatioMin(x) => (format!("≥ {x}x"), Some(vs_pool >= x)),
            Target::RatioMax(x) => (format!("≤ {x}x"), Some(vs_pool <= x)),
            Target::AbsMax(x) => (format!("≤ {x}"), Some(ours <= x)),
            Target::AbsMin(x) => (format!("≥ {x}"), Some(ours >= x)),
            Target::None => (String::new(), None),
        };
        let met = match met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "",
        };
        outln!(
            "| {name} | {} | {} | {} | {text} | {met} | {} | {} | {} | {} | {} | {} |",
            fmt(ours),
            fmt(pool),
            fmt(vs_pool),
            fmt(actor),
            fmt(vs_actor),
            fmt(smg),
            fmt(vs_smg),
            fmt(tree),
            fmt(vs_tree)
        );
    }
    outln!();
    outln!(
        "smg: SMG's ChainIndex, exact and event-driven (a routing decision is applied as the \
         engine's store event), no TTL (expiry n/a)."
    );
    if !smg_fits {
        outln!(
            "smg: a ChainIndex takes at most {} workers: its figures over {workers} workers \
             are n/a (the shared-prefix ones stand).",
            crate::subjects::SMG_MAX_WORKERS
        );
    }
    outln!(
        "smg token tree: SMG's TokenTree (page = {} tokens, LRU), no TTL (expiry n/a); a find \
         reports the deepest match and up to {} of its tenants, not every worker's overlap, so \
         its routing sees those workers only and its find at 128 and 1024 sharers reports 8; \
         its \"hashing\" is copying the tokens.",
        crate::subjects::BLOCK,
        crate::subjects::TOKEN_TREE_REPORTED
    );
}
