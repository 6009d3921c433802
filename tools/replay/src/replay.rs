//! One run: a policy routes every request of the trace onto a fresh simulated cluster.
//!
//! Simulated time is trace time: an index runs on a [`ManualClock`] set to each request's
//! arrival, without its background sweeper (swept here once per simulated second), so a
//! run with one thread is deterministic. `--speedup` only paces the wall clock.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use approx_kv_index::{ApproxKvIndexer, ManualClock, Query, RequestHandle, RouterEvent};
use parking_lot::Mutex;

use crate::args::Pace;
use crate::cluster::{Cluster, Speeds};
use crate::feed::EventFeed;
use crate::fleet::{Fleet, Replicas};
use crate::policy::{self, Balance, Calls, Policy};
use crate::progress::Bar;
use crate::realism::Realism;
use crate::workload::Request;

/// Mixed into the seed of the load balancer's choice of replica, so it differs from the
/// random policy's choice of worker.
const LOAD_BALANCER: u64 = 0x10AD_BA1A_0CE5_EED5;

/// What a run needs besides its policy.
#[derive(Debug, Clone)]
pub struct Setup<'a> {
    /// The requests, in arrival order.
    pub requests: &'a [Request],
    /// Simulated workers.
    pub workers: usize,
    /// Each worker's LRU capacity, in blocks.
    pub capacities: Vec<usize>,
    /// When each worker's engine restarts (trace ms), if it does.
    pub restarts: Vec<Option<u64>>,
    /// The realistic cluster's perturbations.
    pub realism: Realism,
    /// Whether index rows are told of each restart when it happens.
    pub announce_restarts: bool,
    /// How late the engines' KV events reach the router, if they publish them.
    pub events: Option<Duration>,
    /// Tokens per block.
    pub block_size: u32,
    /// Service-time model.
    pub speeds: Speeds,
    /// The balance rule.
    pub balance: Balance,
    /// Seed of the random policy.
    pub seed: u64,
    /// Wall pacing of the runs that use the index.
    pub pace: Pace,
    /// Routing threads.
    pub threads: usize,
}

/// The outcome of one run.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The policy.
    pub policy: Policy,
    /// Prompt blocks found in the chosen worker's cache.
    pub hit_blocks: u64,
    /// Prompt blocks routed.
    pub prompt_blocks: u64,
    /// Requests per worker.
    pub served: Vec<u64>,
    /// Duration of each find (ns); empty for policies without an index.
    pub find_ns: Vec<u64>,
    /// Duration of each record (ns).
    pub record_ns: Vec<u64>,
    /// Sum over requests of find + choose + record (ns).
    pub route_ns: u64,
    /// How long evicted blocks had gone unused (ms).
    pub eviction_ages_ms: Vec<u32>,
    /// Largest number of (block, worker) entries held by the index, the largest of the
    /// replicas' (sampled before each once-a-second sweep and at the end).
    pub peak_entries: usize,
    /// A line on decision sharing (runs synced through Redis).
    pub note: Option<String>,
    /// Index runs: the chosen worker's found depth, summed over this router's requests.
    pub predicted_blocks: u64,
}

/// Per-thread tallies, merged at the end.
#[derive(Default)]
struct Tally {
    hit_blocks: u64,
    prompt_blocks: u64,
    predicted_blocks: u64,
    find_ns: Vec<u64>,
    record_ns: Vec<u64>,
    route_ns: u64,
}

/// The router of a run.
enum Router {
    Index {
        replicas: Replicas,
        clock: Arc<ManualClock>,
        next_sweep_ms: AtomicU64,
        peak_entries: AtomicUsize,
        /// A request-aware router's calls and running requests.
        requests: Option<Box<Requests>>,
        /// Whether the router applies the engines' KV events (and, without `requests`,
        /// records nothing: events only); the lock keeps them in order across threads.
        events: Option<Mutex<Vec<RouterEvent>>>,
    },
    /// Each engine's cache as this router's requests alone would have left it.
    Bound(Mutex<Cluster>),
    Oracle,
    RoundRobin,
    Random(u64),
}

/// The running requests of a request-aware router: (end, handle), finished once the
/// trace passes their end.
struct Requests {
    calls: Calls,
    running: Mutex<Vec<(u64, RequestHandle)>>,
}

impl Requests {
    /// Finishes every request that ended by `now_ms`, in order of their ends.
    fn finish_due(&self, now_ms: u64) {
        let mut running = self.running.lock();
        if !running.iter().any(|(end, _)| *end <= now_ms) {
            return;
        }
        let (mut done, rest): (Vec<_>, Vec<_>) =
            running.drain(..).partition(|(end, _)| *end <= now_ms);
        *running = rest;
        done.sort_by_key(|(end, _)| *end);
        drop(done); // each handle's drop is its finish
    }
}

/// Runs `policy`; `run` is its position, for the progress bar.
pub fn run(setup: &Setup<'_>, policy: &Policy, bar: &Bar, run: usize) -> Result<RunResult, String> {
    let router = router(setup, policy, run)?;
    let feed = setup.events.filter(|_| policy.uses_events());
    let cluster = Mutex::new(
        Cluster::with(
            &setup.capacities,
            setup.block_size,
            setup.speeds,
            setup.realism.pins,
        )
        .publishing(feed.map(EventFeed::new)),
    );
    let next = AtomicUsize::new(0);
    bar.start(run, &policy.name());
    let start = Instant::now();
    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..setup.threads)
            .map(|_| s.spawn(|| route_all(setup, &router, &cluster, &next, bar, start)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let mut total = Tally::default();
    for t in tallies {
        total.hit_blocks += t.hit_blocks;
        total.prompt_blocks += t.prompt_blocks;
        total.predicted_blocks += t.predicted_blocks;
        total.find_ns.extend(t.find_ns);
        total.record_ns.extend(t.record_ns);
        total.route_ns += t.route_ns;
    }
    let cluster = cluster.into_inner();
    let (peak_entries, note) = match &router {
        Router::Index {
            replicas,
            peak_entries,
            ..
        } => (
            replicas
                .all()
                .map(|index| index.stats().entries)
                .fold(peak_entries.load(Ordering::Relaxed), usize::max),
            replicas.note(),
        ),
        _ => (0, None),
    };
    Ok(RunResult {
        policy: policy.clone(),
        hit_blocks: total.hit_blocks,
        prompt_blocks: total.prompt_blocks,
        served: cluster.served().to_vec(),
        find_ns: total.find_ns,
        record_ns: total.record_ns,
        route_ns: total.route_ns,
        eviction_ages_ms: cluster.eviction_ages_ms,
        peak_entries,
        note,
        predicted_blocks: total.predicted_blocks,
    })
}

fn router(setup: &Setup<'_>, policy: &Policy, run: usize) -> Result<Router, String> {
    let index = |ttl: Duration, capacity: Option<usize>| -> Result<Router, String> {
        let clock = Arc::new(ManualClock::new());
        let mut b = ApproxKvIndexer::builder()
            .block_size(setup.block_size)
            .ttl(ttl)
            .tick(Duration::from_secs(1))
            .clock(clock.clone())
            .background_sweeper(false);
        if let Some(blocks) = capacity {
            b = policy::with_capacity(b, blocks);
        }
        let fleet = policy.fleet().unwrap_or(&Fleet::SINGLE);
        let replicas = Replicas::new(&b, &clock, fleet, setup.workers, &format!("run{run}"))?;
        Ok(Router::Index {
            replicas,
            clock,
            next_sweep_ms: AtomicU64::new(1000),
            peak_entries: AtomicUsize::new(0),
            requests: None,
            events: policy.uses_events().then(|| Mutex::new(Vec::new())),
        })
    };
    match policy {
        Policy::Approx { ttl, .. } => index(*ttl, None),
        Policy::ApproxCapacity { ttl, blocks, .. } => index(*ttl, Some(*blocks)),
        Policy::Requests { calls, start, .. } => {
            let mut router = index(Calls::ttl(*start), None)?;
            if let Router::Index {
                replicas, requests, ..
            } = &mut router
            {
                for index in replicas.all() {
                    for (w, capacity) in start.initial(&setup.capacities).into_iter().enumerate() {
                        index.set_worker_capacity(w as u64, capacity);
                    }
                }
                *requests = Some(Box::new(Requests {
                    calls: *calls,
                    running: Mutex::new(Vec::new()),
                }));
            }
            Ok(router)
        }
        Policy::EventsOnly { .. } => index(Duration::MAX, None),
        Policy::Bound => Ok(Router::Bound(Mutex::new(Cluster::with(
            &setup.capacities,
            setup.block_size,
            setup.speeds,
            setup.realism.pins,
        )))),
        Policy::Oracle => Ok(Router::Oracle),
        Policy::RoundRobin => Ok(Router::RoundRobin),
        Policy::Random => Ok(Router::Random(setup.seed)),
    }
}

/// A router told that worker `w`'s engine restarted: the worker left and joined again
/// (its claims and running requests gone), with the capacity it had.
fn announce_restart(index: &ApproxKvIndexer, w: u64) {
    let capacity = index.worker_capacity(w);
    index.remove_worker(w);
    index.set_worker_capacity(w, capacity);
}

/// A routing thread: takes requests in arrival order until none are left.
fn route_all(
    setup: &Setup<'_>,
    router: &Router,
    cluster: &Mutex<Cluster>,
    next: &AtomicUsize,
    bar: &Bar,
    start: Instant,
) -> Tally {
    let mut t = Tally::default();
    let mut loads = Vec::with_capacity(setup.workers);
    let origin = setup.requests.first().map_or(Duration::ZERO, |r| r.at);
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(req) = setup.requests.get(i) else {
            return t;
        };
        let now_ms = u64::try_from(req.at.as_millis()).unwrap_or(u64::MAX);
        let restarted = cluster.lock().restart_due(&setup.restarts, now_ms);
        if let (true, Router::Index { replicas, .. }) = (setup.announce_restarts, router) {
            for index in replicas.all() {
                restarted
                    .iter()
                    .for_each(|&w| announce_restart(index, w as u64));
            }
        }
        if let Some(w) = setup.realism.foreign(setup.seed, i, setup.workers) {
            // Another router's request: this one never sees it, but the engine serves it.
            cluster.lock().serve(w, i, req, now_ms);
            bar.inc();
            continue;
        }
        // The replica the load balancer hands this request to (uniformly at random).
        let mut replica = None;
        // An index run's prediction for the chosen worker, and its running request.
        let mut predicted = None;
        let mut handle = None;
        let worker = match router {
            Router::Index {
                replicas,
                clock,
                next_sweep_ms,
                peak_entries,
                requests,
                events,
            } => {
                if let Pace::Speedup(x) = setup.pace {
                    let wait = Duration::try_from_secs_f64((req.at - origin).as_secs_f64() / x);
                    let due = wait.ok().and_then(|w| start.checked_add(w));
                    if let Some(sleep) = due.and_then(|d| d.checked_duration_since(Instant::now()))
                    {
                        std::thread::sleep(sleep); // pacing the wall clock, not synchronisation
                    }
                }
                clock.set(req.at);
                let due = next_sweep_ms.load(Ordering::Relaxed);
                if now_ms >= due
                    && next_sweep_ms
                        .compare_exchange(
                            due,
                            (now_ms / 1000 + 1) * 1000,
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        )
                        .is_ok()
                {
                    // Entries held just before a sweep: the memory the TTL costs.
                    for index in replicas.all() {
                        peak_entries.fetch_max(index.stats().entries, Ordering::Relaxed);
                        index.sweep_expired();
                    }
                }
                if let Some(events) = events {
                    // The events published by now, applied by every replica in order.
                    let mut due = events.lock();
                    if let Some(feed) = &mut cluster.lock().feed {
                        feed.due(now_ms, &mut due);
                    }
                    for index in replicas.all() {
                        for event in due.iter() {
                            index.apply_event(event);
                        }
                    }
                    due.clear();
                }
                let r = match replicas.len() {
                    1 => 0,
                    n => policy::random_worker(setup.seed ^ LOAD_BALANCER, i, n),
                };
                replica = Some(r);
                replicas.loads(r, now_ms, &mut loads);
                let index = replicas.index(r);
                let t0 = Instant::now();
                let found = index.find(Query::blocks(&req.local));
                let t1 = Instant::now();
                let overlap = |w: usize| found.scores.get(&(w as u64)).copied().unwrap_or(0);
                let w = setup.balance.choose(&loads, overlap, i);
                predicted = Some(overlap(w));
                if let Some(requests) = requests {
                    requests.finish_due(now_ms);
                }
                let t2 = Instant::now();
                let query = Query::hashes(&req.local, &req.seq);
                match requests {
                    Some(r) => handle = Some((r, index.begin_request(w as u64, query), index)),
                    // Events only: the router records nothing.
                    None if events.is_some() => {}
                    // Equal lengths by construction: the error cannot happen.
                    None => drop(index.record(w as u64, query)),
                }
                let t3 = Instant::now();
                t.find_ns.push((t1 - t0).as_nanos() as u64);
                t.record_ns.push((t3 - t2).as_nanos() as u64);
                t.route_ns += (t3 - t0).as_nanos() as u64;
                w
            }
            Router::Oracle => {
                let mut c = cluster.lock();
                c.loads(now_ms, &mut loads);
                let c = &*c;
                let overlap = |w: usize| c.prefix_hit(w, &req.seq) as u32;
                setup.balance.choose(&loads, overlap, i)
            }
            Router::Bound(shadow) => {
                cluster.lock().loads(now_ms, &mut loads);
                let mut shadow = shadow.lock();
                let mut ignored = Vec::new();
                shadow.loads(now_ms, &mut ignored); // frees the pins of its ended requests
                let c = &*shadow;
                let overlap = |w: usize| c.prefix_hit(w, &req.seq) as u32;
                let w = setup.balance.choose(&loads, overlap, i);
                predicted = Some(overlap(w));
                shadow.serve(w, i, req, now_ms);
                w
            }
            Router::RoundRobin => i % setup.workers,
            Router::Random(seed) => policy::random_worker(*seed, i, setup.workers),
        };
        let (hit, end_ms) = cluster.lock().serve(worker, i, req, now_ms);
        if let (Router::Index { replicas, .. }, Some(r)) = (router, replica) {
            replicas.routed(r, worker, now_ms, end_ms);
        }
        if let Some((requests, handle, index)) = handle {
            if requests.calls.feedback {
                // What the engine reports: the cached prompt tokens of the hit blocks.
                let cached = (hit as u64 * u64::from(setup.block_size)).min(req.input_length);
                index.observe_cached(&handle, cached as usize);
            }
            if requests.calls.lease {
                requests.running.lock().push((end_ms, handle));
            }
        }
        t.predicted_blocks += u64::from(predicted.unwrap_or(0));
        t.hit_blocks += hit as u64;
        t.prompt_blocks += req.seq.len() as u64;
        bar.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announced_restart_forgets_the_worker_and_keeps_its_capacity() {
        let index = ApproxKvIndexer::builder().block_size(4).build().unwrap();
        let prompt: Vec<u32> = (0..16).collect();
        index.set_worker_capacity(3, Some(100));
        index.record(3, Query::tokens(&prompt)).unwrap();
        index.record(5, Query::tokens(&prompt)).unwrap();
        announce_restart(&index, 3);
        let found = index.find(Query::tokens(&prompt));
        assert_eq!(found.scores.get(&3), None, "{found:?}");
        assert_eq!(found.scores.get(&5), Some(&4), "{found:?}");
        assert_eq!(index.worker_capacity(3), Some(100));
        // A worker with no capacity of its own keeps none.
        announce_restart(&index, 5);
        assert_eq!(index.worker_capacity(5), None);
        assert!(index.find(Query::tokens(&prompt)).scores.is_empty());
    }
}
