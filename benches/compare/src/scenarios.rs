//! The measured workloads, each generic over the [`Subject`] under test. Index building is
//! never part of a timing unless the workload *is* building (route, record).

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;

use crate::subjects::{Subject, WORKERS};

/// In-flight requests whose blocks count as a worker's load (over all router threads).
const WINDOW: usize = 32;

/// Blocks of in-flight requests per worker, shared by the router threads.
#[derive(Default)]
pub struct Loads([AtomicU64; WORKERS]);

/// Load-aware choice, Dynamo's default cost shape with weight 1: the worker minimising
/// `blocks to prefill + blocks in flight`; ties go to the lowest worker.
#[inline]
pub fn choose(blocks: u64, overlap: &[u32; WORKERS], loads: &Loads) -> usize {
    let mut best = (u64::MAX, 0);
    for (w, &o) in overlap.iter().enumerate() {
        let cost = blocks.saturating_sub(u64::from(o)) + loads.0[w].load(Ordering::Relaxed);
        if cost < best.0 {
            best = (cost, w);
        }
    }
    best.1
}

/// One router thread: hash, find, choose, record, for requests `t, t + threads, ...`.
/// Pushes `(request, worker)` to `decisions` (reserve it beforehand).
async fn route_part<S: Subject>(
    s: &S,
    reqs: &[Vec<u32>],
    t: usize,
    threads: usize,
    loads: &Loads,
    decisions: &mut Vec<(u32, u8)>,
) {
    let cap = (WINDOW / threads).max(1);
    let mut ring = std::collections::VecDeque::with_capacity(cap + 1);
    for i in (t..reqs.len()).step_by(threads) {
        let h = s.hash(&reqs[i]);
        let n = S::blocks(&h) as u64;
        let mut overlap = [0u32; WORKERS];
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
        decisions.push((i as u32, w as u8));
    }
}

/// Routes every request on `threads` threads; returns the wall time until all records
/// are applied. `decisions` gets one vector per thread.
pub fn route<S: Subject>(
    h: &Handle,
    s: &S,
    reqs: &[Vec<u32>],
    threads: usize,
    decisions: &mut [Vec<(u32, u8)>],
) -> Duration {
    let loads = Loads::default();
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

/// Records request `i` for worker `i % 16` (hashing included) on `threads` threads.
pub fn record<S: Subject>(h: &Handle, s: &S, reqs: &[Vec<u32>], threads: usize) -> Duration {
    let start = Instant::now();
    std::thread::scope(|sc| {
        for t in 0..threads {
            sc.spawn(move || {
                h.block_on(async {
                    for i in (t..reqs.len()).step_by(threads) {
                        s.record_tokens(&reqs[i], (i % WORKERS) as u64).await;
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

/// As [`find_tokens`] from precomputed hashes (hashing excluded).
pub fn find_hashes<S: Subject>(
    h: &Handle,
    s: &S,
    hashes: &[S::Hashes],
    lat: &mut Vec<u64>,
) -> Duration {
    h.block_on(async {
        let start = Instant::now();
        for x in hashes {
            let t = Instant::now();
            let mut overlap = [0u32; WORKERS];
            s.find(black_box(x), &mut overlap).await;
            black_box(overlap);
            lat.push(t.elapsed().as_nanos() as u64);
        }
        start.elapsed()
    })
}

/// How long after their TTL the entries of `reqs` stop being found (`.0`) and are freed
/// (`.1`), in milliseconds past the deadline of the last record (taken at its start, so
/// the lag is over- rather than under-stated). Polls every millisecond.
pub fn expiry_lag<S: Subject>(h: &Handle, s: &S, reqs: &[Vec<u32>], ttl: Duration) -> (f64, f64) {
    h.block_on(async {
        let mut last = Instant::now();
        for (i, r) in reqs.iter().enumerate() {
            last = Instant::now();
            s.record_tokens(r, (i % WORKERS) as u64).await;
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

/// `(p50, p99)` of `v` (sorted in place), in microseconds.
pub fn percentiles(v: &mut [u64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    v.sort_unstable();
    let at = |q: usize| v[(v.len() * q / 100).min(v.len() - 1)] as f64 / 1e3;
    (at(50), at(99))
}

/// Workers sharing one 256-block prompt in [`shared_prefix_find`].
pub const SHARERS: [usize; 3] = [16, 128, 1024];

/// A 256-block prompt recorded for `sharers` workers one after another on an empty index:
/// `.0` the mean time of one such record (hashes precomputed; until applied), `.1` the
/// median latency (µs) of finding it afterwards (hashing excluded).
pub fn shared_prefix_find<S: Subject>(h: &Handle, s: &S, sharers: usize) -> (f64, f64) {
    let tokens: Vec<u32> = (0..256 * crate::subjects::BLOCK)
        .map(|t| t.wrapping_mul(2_654_435_761))
        .collect();
    let hashes = s.hash(&tokens);
    let mut lat = Vec::with_capacity(2_000);
    let record_us = h.block_on(async {
        let start = Instant::now();
        for w in 0..sharers {
            s.record(&hashes, w as u64).await;
        }
        s.flush().await;
        let record_us = start.elapsed().as_secs_f64() * 1e6 / sharers as f64;
        for _ in 0..2_000 {
            let t = Instant::now();
            let mut overlap = [0u32; WORKERS];
            s.find(black_box(&hashes), &mut overlap).await;
            black_box(overlap);
            lat.push(t.elapsed().as_nanos() as u64);
        }
        record_us
    });
    (record_us, percentiles(&mut lat).0)
}
