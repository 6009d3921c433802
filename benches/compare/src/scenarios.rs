//! The measured workloads, each generic over the [`Subject`] under test. Index building is
//! never part of a timing unless the workload *is* building (route, record). Every workload
//! but the shared-prefix one spreads its requests over a fleet of `workers` workers (ids
//! `0..workers`); a find's overlap buffer is allocated once per thread, sized to the fleet,
//! and zeroed per request.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;

use crate::subjects::Subject;

/// In-flight requests whose blocks count as a worker's load (over all router threads).
const WINDOW: usize = 32;

/// Blocks of in-flight requests per worker, shared by the router threads.
pub struct Loads(Box<[AtomicU64]>);

impl Loads {
    /// No load on any of `workers` workers.
    pub fn new(workers: usize) -> Self {
        Self((0..workers).map(|_| AtomicU64::new(0)).collect())
    }
}

/// Load-aware choice, Dynamo's default cost shape with weight 1: the worker minimising
/// `blocks to prefill + blocks in flight`; ties go to the lowest worker. `overlap` has one
/// entry per worker, as `loads`.
#[inline]
pub fn choose(blocks: u64, overlap: &[u32], loads: &Loads) -> usize {
    let mut best = (u64::MAX, 0);
    for (w, &o) in overlap.iter().enumerate() {
        let cost = blocks.saturating_sub(u64::from(o)) + loads.0[w].load(Ordering::Relaxed);
        if cost < best.0 {
            best = (cost, w);
        }
    }
    best.1
}

/// One router thread: hash, find, choose, record, for requests `t, t + threads, ...`,
/// over the workers of `loads`. Pushes `(request, worker)` to `decisions` (reserve it
/// beforehand).
async fn route_part<S: Subject>(
    s: &S,
    reqs: &[Vec<u32>],
    t: usize,
    threads: usize,
    loads: &Loads,
    decisions: &mut Vec<(u32, u32)>,
) {
    let cap = (WINDOW / threads).max(1);
    let mut ring = std::collections::VecDeque::with_capacity(cap + 1);
    let mut overlap = vec![0u32; loads.0.len()];
    for i in (t..reqs.len()).step_by(threads) {
        let h = s.hash(&reqs[i]);
        let n = S::blocks(&h) as u64;
        overlap.fill(0);
        s.find(&h, &mut overlap).await;
        let w = choose(n, &overlap, loads);
        s.record(&h, w as u64).await;
        loads.0[w].fetch_add(n, Ordering::Relaxed);
        ring.push_back((w, n));
        if ring.len() > cap {
            if let Some((ow, on)) = ring.pop_front() {
                loads.0[ow].fetch_sub(on, Ordering::Relaxed);
            }
        }
        decisions.push((i as u32, w as u32));
    }
}

/// Routes every request over `workers` workers on `threads` threads; returns the wall time
/// until all records are applied. `decisions` gets one vector per thread.
pub fn route<S: Subject>(
    h: &Handle,
    s: &S,
    reqs: &[Vec<u32>],
    workers: usize,
    threads: usize,
    decisions: &mut [Vec<(u32, u32)>],
) -> Duration {
    let loads = Loads::new(workers);
    let start = Instant::now();
    std::thread::scope(|sc| {
        for (t, d) in decisions.iter_mut().enumerate().take(threads) {
            let loads = &loads;
            sc.spawn(move || h.block_on(route_part(s, reqs, t, threads, loads, d)));
        }
    });
    h.block_on(s.flush());
    start.elapsed()
}

/// Records request `i` for worker `i % workers` (hashing included) on `threads` threads.
pub fn record<S: Subject>(
    h: &Handle,
    s: &S,
    reqs: &[Vec<u32>],
    workers: usize,
    threads: usize,
) -> Duration {
    let start = Instant::now();
    std::thread::scope(|sc| {
        for t in 0..threads {
            sc.spawn(move || {
                h.block_on(async {
                    for i in (t..reqs.len()).step_by(threads) {
                        s.record_tokens(&reqs[i], (i % workers) as u64).await;
                    }
                })
            });
        }
    });
    h.block_on(s.flush());
    start.elapsed()
}

/// Hashes every request (local and sequence hashes) on this thread.
pub fn hash<S: Subject>(s: &S, reqs: &[Vec<u32>]) -> Duration {
    let start = Instant::now();
    for r in reqs {
        black_box(s.hash(black_box(r)));
    }
    start.elapsed()
}

/// Hashes every request on `threads` threads (request `i` on thread `i % threads`), as
/// [`route`] splits them but with nothing shared: the machine's own ceiling for the route's
/// thread scaling (the route's first step, on the same threads, started the same way).
pub fn hash_threads<S: Subject>(s: &S, reqs: &[Vec<u32>], threads: usize) -> Duration {
    let start = Instant::now();
    std::thread::scope(|sc| {
        for t in 0..threads {
            sc.spawn(move || {
                for r in reqs.iter().skip(t).step_by(threads) {
                    black_box(s.hash(black_box(r)));
                }
            });
        }
    });
    start.elapsed()
}

/// Finds every request from its tokens (hashing included) on this thread, timing each
/// into `lat` (nanoseconds; reserve it beforehand). Returns the wall time.
pub fn find_tokens<S: Subject>(
    h: &Handle,
    s: &S,
    reqs: &[Vec<u32>],
    lat: &mut Vec<u64>,
) -> Duration {
    h.block_on(async {
        let start = Instant::now();
        for r in reqs {
            let t = Instant::now();
            black_box(s.find_tokens(black_box(r)).await);
            lat.push(t.elapsed().as_nanos() as u64);
        }
        start.elapsed()
    })
}

/// As [`find_tokens`] from precomputed hashes (hashing excluded), into an overlap buffer
/// for `workers` workers, zeroed before each find starts its clock. Returns the sum of the
/// finds' latencies.
pub fn find_hashes<S: Subject>(
    h: &Handle,
    s: &S,
    hashes: &[S::Hashes],
    workers: usize,
    lat: &mut Vec<u64>,
) -> Duration {
    time_finds(h, s, hashes.iter(), workers, lat)
}

/// As [`find_hashes`], but each request hashed just before its find (the hashing not
/// timed), as a route does: the query is in the cache, where `find_hashes` reads it cold
/// from a trace's worth of precomputed hashes.
pub fn find_fresh<S: Subject>(
    h: &Handle,
    s: &S,
    reqs: &[Vec<u32>],
    workers: usize,
    lat: &mut Vec<u64>,
) -> Duration {
    time_finds(
        h,
        s,
        reqs.iter().map(|r| s.hash(black_box(r))),
        workers,
        lat,
    )
}

/// Times one find of each query `queries` yields (the yielding, hashing included, happens
/// before the clock starts): the latencies into `lat`, their sum returned.
fn time_finds<S: Subject, Q: std::borrow::Borrow<S::Hashes>>(
    h: &Handle,
    s: &S,
    queries: impl Iterator<Item = Q>,
    workers: usize,
    lat: &mut Vec<u64>,
) -> Duration {
    h.block_on(async {
        let mut overlap = vec![0u32; workers];
        let mut total = Duration::ZERO;
        for x in queries {
            overlap.fill(0);
            let t = Instant::now();
            s.find(black_box(x.borrow()), &mut overlap).await;
            black_box(&mut overlap);
            let d = t.elapsed();
            total += d;
            lat.push(d.as_nanos() as u64);
        }
        total
    })
}

/// How long after their TTL the entries of `reqs` (request `i` recorded for worker
/// `i % workers`) stop being found (`.0`) and are freed (`.1`), in milliseconds past the
/// deadline of the last record (taken at its start, so the lag is over- rather than
/// under-stated). Polls every millisecond.
pub fn expiry_lag<S: Subject>(
    h: &Handle,
    s: &S,
    reqs: &[Vec<u32>],
    workers: usize,
    ttl: Duration,
) -> (f64, f64) {
    h.block_on(async {
        let mut last = Instant::now();
        for (i, r) in reqs.iter().enumerate() {
            last = Instant::now();
            s.record_tokens(r, (i % workers) as u64).await;
        }
        s.flush().await;
        let deadline = last + ttl;
        tokio::time::sleep_until(tokio::time::Instant::from_std(
            deadline - Duration::from_millis(20),
        ))
        .await;
        let (mut hidden, mut freed) = (None, None);
        while deadline.elapsed() < Duration::from_secs(3) {
            let now = Instant::now();
            if hidden.is_none() {
                let mut any = false;
                for r in reqs {
                    if s.find_tokens(r).await > 0 {
                        any = true;
                        break;
                    }
                }
                if !any {
                    hidden = Some(now);
                }
            }
            if hidden.is_some() && freed.is_none() {
                match s.reclaimed() {
                    None => freed = hidden,
                    Some(true) => freed = Some(now),
                    Some(false) => {}
                }
            }
            if freed.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let ms = |t: Option<Instant>| match t {
            Some(t) if t >= deadline => (t - deadline).as_secs_f64() * 1e3,
            Some(t) => -((deadline - t).as_secs_f64() * 1e3),
            None => f64::INFINITY,
        };
        (ms(hidden), ms(freed))
    })
}

/// `(p50, p99, p99.9)` of `v` (sorted in place), in microseconds.
pub fn percentiles(v: &mut [u64]) -> (f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    v.sort_unstable();
    let at = |per_mille: usize| v[(v.len() * per_mille / 1000).min(v.len() - 1)] as f64 / 1e3;
    (at(500), at(990), at(999))
}

/// Workers sharing one 256-block prompt in [`shared_prefix_find`].
pub const SHARERS: [usize; 3] = [16, 128, 1024];

/// Blocks of the prompt in [`shared_prefix_find`].
pub const SHARED_BLOCKS: u32 = 256;

/// What [`shared_prefix_find`] measured.
#[derive(Debug, Clone, Copy)]
pub struct Shared {
    /// The mean time of one record (hashes precomputed; until applied), µs.
    pub record_us: f64,
    /// The median latency of a find (hashing excluded), µs.
    pub find_p50: f64,
    /// Workers the last find reported holding the whole prompt.
    pub reported: usize,
    /// Workers the last find reported holding less than the whole prompt (none should).
    pub short: usize,
}

/// A [`SHARED_BLOCKS`]-block prompt recorded for `sharers` workers (ids `0..sharers`) one
/// after another on an empty index, then found `finds` times into an overlap buffer for
/// the `sharers` workers (zeroed before each find starts its clock).
pub fn shared_prefix_find<S: Subject>(h: &Handle, s: &S, sharers: usize, finds: usize) -> Shared {
    let tokens: Vec<u32> = (0..SHARED_BLOCKS * crate::subjects::BLOCK)
        .map(|t| t.wrapping_mul(2_654_435_761))
        .collect();
    let hashes = s.hash(&tokens);
    let mut lat = Vec::with_capacity(finds);
    let mut overlap = vec![0u32; sharers];
    let record_us = h.block_on(async {
        let start = Instant::now();
        for w in 0..sharers {
            s.record(&hashes, w as u64).await;
        }
        s.flush().await;
        let record_us = start.elapsed().as_secs_f64() * 1e6 / sharers as f64;
        for _ in 0..finds {
            overlap.fill(0);
            let t = Instant::now();
            s.find(black_box(&hashes), &mut overlap).await;
            black_box(&mut overlap);
            lat.push(t.elapsed().as_nanos() as u64);
        }
        record_us
    });
    let reported = overlap.iter().filter(|&&o| o == SHARED_BLOCKS).count();
    let short = overlap
        .iter()
        .filter(|&&o| o != 0 && o != SHARED_BLOCKS)
        .count();
    Shared {
        record_us,
        find_p50: percentiles(&mut lat).0,
        reported,
        short,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::subjects::{tenant_names, DynActor, DynPool, Ours, Smg, SmgTree};

    /// The shared-prefix workload at its largest (1,024 sharers): every subject's find fills
    /// the overlap of every sharer, whatever its id, with the whole prompt (SMG's `TokenTree`
    /// as many as its answer carries, 8), and no other entry.
    #[test]
    fn every_subject_reports_all_1024_sharers() {
        const SHARERS_MAX: usize = 1024;
        assert_eq!(SHARERS.iter().max(), Some(&SHARERS_MAX));
        fn check<S: Subject>(h: &Handle, s: S, name: &str) {
            let got = shared_prefix_find(h, &s, SHARERS_MAX, 1);
            assert_eq!(
                (got.reported, got.short),
                (SHARERS_MAX.min(S::MAX_REPORTED), 0),
                "{name}"
            );
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let h = rt.handle().clone();
        let ttl = Duration::from_secs(600);
        check(&h, Ours::new(ttl, Duration::from_millis(100)), "ours");
        let pool = {
            let _in_runtime = h.enter();
            DynPool::new(ttl)
        };
        check(&h, pool, "dynamo pool");
        check(&h, DynActor::new(ttl), "dynamo actor");
        check(&h, Smg::default(), "smg chain index");
        let tree = SmgTree::new(tenant_names(SHARERS_MAX));
        check(&h, tree, "smg token tree");
    }
}
