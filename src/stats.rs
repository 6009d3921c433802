//! Counters describing the index.

/// A snapshot of the index's size, taken without stopping callers (so it is approximate
/// while they run).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexStats {
    /// Stored (block, worker) pairs not yet reclaimed, expired ones included until swept.
    pub entries: usize,
    /// Blocks (distinct block prefixes) in the radix tree, each run counted as its blocks.
    /// A block that only removed workers' entries hold, left above a gap and then covered
    /// by a run, counts twice until the sweeper's purge takes those entries
    /// (`docs/design.md`, "One timer per decision, not per block").
    pub nodes: usize,
    /// Worker keys currently registered and not removed: each key (a `WorkerWithDpRank`
    /// counts per rank) that a decision of at least one full block, a
    /// `set_worker_capacity`, a `begin_request` (even of a prompt with no full block) or a
    /// `Stored` KV event registered.
    pub workers: usize,
    /// Routing decisions recorded since creation: those of at least one full block (a
    /// prompt shorter than a block stores nothing and is not counted; a `begin_request`
    /// counts as one decision).
    pub records: u64,
    /// Finds answered since creation.
    pub finds: u64,
    /// (block, worker) pairs reclaimed by the sweeper since creation (expired or removed).
    pub expirations: u64,
    /// Of `expirations`, those that recording callers reclaimed because the sweeper had
    /// fallen behind (more than a few ticks): a sign that the sweeper thread is starved of
    /// CPU. Callers only help when a background sweeper runs.
    pub caller_expirations: u64,
    /// (block, worker) pairs evicted to keep within a cap since creation.
    pub evictions: u64,
    /// `Stored` KV events dropped since creation: those whose parent is a block the worker
    /// does not hold (as Dynamo's indexer drops them), and those that name two of their
    /// blocks alike or a block as its own parent.
    pub rejected_events: u64,
    /// Walks waiting in the timer wheel (one per recorded decision not yet swept, and one
    /// per restored or replayed approximate claim).
    pub pending_timers: usize,
    /// An estimate of the heap bytes the index holds (the node map's tables keep the size
    /// they grew to, so after churn it levels off above a fresh index's): node map, holder arrays, pending
    /// timers, eviction logs, engine block hashes, the exactly stored blocks kept while
    /// finds gallop, the ghosts of blocks capacities evicted
    /// (allocator rounding and per-worker bookkeeping not counted).
    pub estimated_bytes: usize,
    /// Engines' reports of cached prompt tokens
    /// ([`observe_cached`](crate::ApproxKvIndexer::observe_cached)) of the registered
    /// workers, summed (a removed worker's leave the sums): per worker, see
    /// [`cache_reports`](crate::ApproxKvIndexer::cache_reports).
    pub cache: CacheReport,
    /// (block, worker) pairs dropped because a report showed the worker had lost them,
    /// since creation.
    pub dropped_by_reports: u64,
    /// Workers' capacities that reports set, lowered or raised, since creation
    /// (`docs/design.md`, "Running requests and what engines report").
    pub capacities_learned: u64,
    /// Whether finds gallop (probe the query's last block, then bisect to where workers
    /// drop out): true while every worker's live entries along any prompt form a prefix of
    /// it, as decisions, exact KV events of an engine that evicts leaves first, and their
    /// replays keep them. False for good once an event or a restore may have broken that
    /// (a block removed above blocks its worker still holds, an exact block stored below
    /// one its worker holds only by decision): finds then walk each prompt block by block
    /// (`docs/design.md`, "Nested holder sets").
    pub finds_gallop: bool,
}

/// Engines' reports of cached prompt tokens for one worker (or summed): how many leading
/// prompt blocks the index predicted the worker held when each request began
/// ([`RequestHandle::predicted_blocks`](crate::RequestHandle::predicted_blocks)), and how
/// many the engine found cached. `delivered_blocks / predicted_blocks` near 1 says the
/// index is calibrated; below 1, it believes in blocks the worker no longer holds.
///
/// ```
/// use approx_kv_index::{ApproxKvIndexer, Query};
/// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
/// index.record(1, Query::tokens(&[1, 2, 3, 4])).unwrap();
/// let request = index.begin_request(1, &[1, 2, 3, 4, 5, 6]);
/// assert_eq!(request.predicted_blocks(), 2);
/// assert!(index.observe_cached(&request, 4)); // the engine found 4 tokens: 2 blocks
/// let (worker, report) = index.cache_reports()[0];
/// assert_eq!((worker, report.predicted_blocks, report.delivered_blocks), (1, 2, 2));
/// assert_eq!(index.stats().cache.reports, 1);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheReport {
    /// Reports taken.
    pub reports: u64,
    /// Blocks the index predicted, summed over the reports.
    pub predicted_blocks: u64,
    /// Blocks the engines reported cached, summed over the reports.
    pub delivered_blocks: u64,
}

/// A counter many threads bump without sharing a cache line: each thread adds to one of
/// a few padded stripes, and reading sums them.
#[derive(Debug, Default)]
pub(crate) struct StripedCounter {
    stripes: [crossbeam_utils::CachePadded<std::sync::atomic::AtomicU64>; STRIPES],
}

const STRIPES: usize = 16;

impl StripedCounter {
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.stripes[stripe_of_this_thread()].fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn sum(&self) -> u64 {
        self.stripes
            .iter()
            .map(|s| s.load(std::sync::atomic::Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }
}

/// A small per-thread number, handed out round-robin on a thread's first use.
#[inline]
fn stripe_of_this_thread() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
}

/// Sets the `metrics` gauges and counters from `s` and each worker's cached-token reports,
/// by (worker id, rank) (see `ApproxKvIndexer::publish_metrics`).
#[cfg(feature = "metrics")]
pub(crate) fn publish(s: &IndexStats, reports: &[((u64, u32), CacheReport)]) {
    metrics::gauge!("approx_kv_index_entries").set(s.entries as f64);
    metrics::gauge!("approx_kv_index_nodes").set(s.nodes as f64);
    metrics::gauge!("approx_kv_index_workers").set(s.workers as f64);
    metrics::gauge!("approx_kv_index_pending_timers").set(s.pending_timers as f64);
    metrics::gauge!("approx_kv_index_estimated_bytes").set(s.estimated_bytes as f64);
    metrics::gauge!("approx_kv_index_finds_gallop").set(f64::from(u8::from(s.finds_gallop)));
    metrics::counter!("approx_kv_index_records_total").absolute(s.records);
    metrics::counter!("approx_kv_index_finds_total").absolute(s.finds);
    metrics::counter!("approx_kv_index_expirations_total").absolute(s.expirations);
    metrics::counter!("approx_kv_index_caller_expirations_total").absolute(s.caller_expirations);
    metrics::counter!("approx_kv_index_evictions_total").absolute(s.evictions);
    metrics::counter!("approx_kv_index_rejected_events_total").absolute(s.rejected_events);
    metrics::counter!("approx_kv_index_cache_reports_total").absolute(s.cache.reports);
    metrics::counter!("approx_kv_index_predicted_blocks_total").absolute(s.cache.predicted_blocks);
    metrics::counter!("approx_kv_index_delivered_blocks_total").absolute(s.cache.delivered_blocks);
    metrics::counter!("approx_kv_index_dropped_by_reports_total").absolute(s.dropped_by_reports);
    metrics::counter!("approx_kv_index_capacities_learned_total").absolute(s.capacities_learned);
    for ((worker, rank), r) in reports {
        let labels = [
            ("worker", worker.to_string()),
            ("dp_rank", rank.to_string()),
        ];
        metrics::counter!("approx_kv_index_worker_predicted_blocks_total", &labels)
            .absolute(r.predicted_blocks);
        metrics::counter!("approx_kv_index_worker_delivered_blocks_total", &labels)
            .absolute(r.delivered_blocks);
    }
}
