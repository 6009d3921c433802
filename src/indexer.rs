//! [`ApproxKvIndexer`]: the public face. It wires the tree, the worker registry, the caps
//! and the expiry together; every method runs on the caller's thread.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Builder;
use crate::core::Core;
use crate::error::{ConfigError, RecordError};
use crate::events::RouterEvent;
use crate::query::Query;
use crate::replication::{Action, Replication};
use crate::scores::{OverlapScores, ScoreSink};
use crate::stats::IndexStats;
use crate::timers::sweeper::Sweeper;
use crate::{LocalBlockHash, SequenceHash, WorkerId, WorkerKey};

mod replicas;
mod workers;

/// An approximate index of which worker probably caches which prompt prefix, learned from
/// the router's own decisions.
///
/// All methods take `&self` and run on the calling thread: share the index with an
/// [`Arc`] and call it from as many threads as you like. A background thread (the
/// sweeper) reclaims expired entries every tick; no call ever waits for it.
///
/// # Guarantees
/// - **Read your writes.** A decision recorded by a call that has returned is seen by
///   every find that starts afterwards, on any thread.
/// - **TTL.** An entry recorded or refreshed at time `t` is reported by finds before
///   `t + ttl` and never from `t + ttl` on: reads check expiry themselves. The sweeper only
///   reclaims memory, within about `ttl + 2 * tick`.
/// - **Approximate under races.** A find that runs while a record of the same prompt is in
///   progress may see any prefix of that record's blocks; a find never sees a block the
///   index did not hold at some instant during the find.
///
/// # Locking
/// Nodes live in a sharded map. `find*` takes no lock and writes no shared memory but a
/// striped counter of finds (and the thread's epoch pin): each
/// probe copies a node and checks the shard's version, reading again if a writer changed
/// the shard meanwhile (after a few tries, under the shard's read lock for that probe). The
/// refresh of an existing entry holds one shard *read* lock for one probe at a time; adding
/// or removing a holder holds one shard *write* lock for one probe. No call holds a lock
/// across blocks, and none waits on another thread beyond a writer's hold of one shard. [`shutdown`](Self::shutdown) joins the sweeper.
///
/// # Unwind safety
/// Locks are taken only around non-panicking code, so a panic in a caller's thread (a
/// [`ScoreSink`](crate::ScoreSink) or callback, a thread killed while it calls) cannot
/// leave the index inconsistent; a [`Clock`](crate::Clock) is read before a call changes
/// anything, so a clock that panics leaves the index as it was, but for a request's
/// release (`finish_request`, a dropped handle), which needs the time and then never
/// happens: its blocks stay pinned until the worker is removed. The type holds locks and
/// cells, so it is not `RefUnwindSafe`: wrap a call in `AssertUnwindSafe` to catch its
/// panic.
///
/// ```
/// use std::{sync::Arc, thread, time::Duration};
/// use approx_kv_index::{ApproxKvIndexer, Query};
///
/// let index = Arc::new(ApproxKvIndexer::new(4, Duration::from_secs(60)).unwrap());
/// let prompt: Vec<u32> = (0..16).collect(); // 4 blocks
/// let writer = {
///     let index = Arc::clone(&index);
///     let prompt = prompt.clone();
///     thread::spawn(move || index.record(7, Query::tokens(&prompt)).unwrap())
/// };
/// writer.join().unwrap();
/// assert_eq!(index.find(Query::tokens(&prompt)).scores[&7], 4);
/// index.remove_worker(7);
/// assert!(index.find(Query::tokens(&prompt)).scores.is_empty());
/// ```
pub struct ApproxKvIndexer<W: WorkerKey = WorkerId> {
    pub(crate) core: Arc<Core>,
    sweeper: Sweeper,
    pub(crate) replication: Box<Replication>,
    key: std::marker::PhantomData<fn(W) -> W>,
}

impl<W: WorkerKey> std::fmt::Debug for ApproxKvIndexer<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApproxKvIndexer")
            .field("block_size", &self.core.block_size)
            .field("ttl", &Duration::from_nanos(self.core.ttl_nanos()))
            .field("caps", &self.core.caps)
            .field("sweeper_running", &self.sweeper.is_running())
            .finish_non_exhaustive()
    }
}

impl ApproxKvIndexer<WorkerId> {
    /// Settings with their defaults (block size 16, TTL 120 s, tick 100 ms).
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// An index with the given block size and TTL and the default tick.
    ///
    /// ```
    /// # use approx_kv_index::ApproxKvIndexer;
    /// let index = ApproxKvIndexer::new(16, std::time::Duration::from_secs(120)).unwrap();
    /// assert!(ApproxKvIndexer::new(0, std::time::Duration::from_secs(1)).is_err());
    /// ```
    pub fn new(block_size: u32, ttl: Duration) -> Result<Self, ConfigError> {
        Self::builder().block_size(block_size).ttl(ttl).build()
    }
}

// Starting an index is the builder's last step; it lives here, next to the index, so that
// `config` (which the index reads) does not depend on the index.
impl Builder {
    /// Validates the settings and starts an index keyed by plain worker ids.
    pub fn build(self) -> Result<ApproxKvIndexer, ConfigError> {
        self.build_for::<WorkerId>()
    }

    /// Validates the settings and starts an index keyed by `W`, e.g.
    /// [`WorkerWithDpRank`](crate::WorkerWithDpRank).
    pub fn build_for<W: WorkerKey>(self) -> Result<ApproxKvIndexer<W>, ConfigError> {
        self.validate()?;
        Ok(ApproxKvIndexer::from_builder(self))
    }
}

impl<W: WorkerKey> ApproxKvIndexer<W> {
    pub(crate) fn from_builder(b: Builder) -> Self {
        let core = Arc::new(Core::new(&b));
        let sweeper = if b.background_sweeper {
            let shared = Arc::clone(&core);
            Sweeper::spawn(b.tick, move || {
                shared.sweep_in_batches();
                #[cfg(feature = "metrics")]
                shared.publish_metrics();
            })
        } else {
            Sweeper::none()
        };
        Self {
            replication: Box::new(Replication::new(
                b.replica_id,
                Arc::clone(&b.wall_clock),
                b.share_decisions,
            )),
            core,
            sweeper,
            key: std::marker::PhantomData,
        }
    }

    /// Tokens per block.
    pub fn block_size(&self) -> u32 {
        self.core.block_size
    }

    /// How long a decision's blocks stay probably cached, or `None` if they never expire (a
    /// TTL of 2^62 ns or more, as [`Builder::ttl`](crate::Builder::ttl) says).
    ///
    /// ```
    /// use std::time::Duration;
    /// use approx_kv_index::ApproxKvIndexer;
    /// let index = ApproxKvIndexer::new(16, Duration::from_secs(120)).unwrap();
    /// assert_eq!(index.ttl(), Some(Duration::from_secs(120)));
    /// let capacity_only = ApproxKvIndexer::builder().ttl(Duration::MAX).build().unwrap();
    /// assert_eq!(capacity_only.ttl(), None);
    /// ```
    pub fn ttl(&self) -> Option<std::time::Duration> {
        let nanos = self.core.ttl_nanos();
        (nanos < crate::core::NEVER).then(|| std::time::Duration::from_nanos(nanos))
    }

    /// The TTL in nanoseconds, for transports that keep decisions as long as they live.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn ttl_nanos(&self) -> u64 {
        self.core.ttl_nanos()
    }

    /// Records that `worker` was chosen for the prompt of `query`: its full blocks become
    /// "probably cached on `worker`" for one TTL, refreshing any it already held. A record
    /// needs the prompt's local hashes ([`Query`] says which forms carry them); a rejected
    /// query stores nothing.
    ///
    /// ```
    /// use approx_kv_index::{ApproxKvIndexer, Query, RecordError, SequenceHash};
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// index.record(9, Query::tokens(&[1, 2, 3, 4, 5])).unwrap(); // 2 full blocks
    /// assert_eq!(index.find(Query::tokens(&[1, 2, 3, 4, 5, 6])).scores[&9], 2);
    /// let seq = [SequenceHash(1)];
    /// assert_eq!(index.record(9, Query::sequence(&seq)), Err(RecordError::NoLocalHashes));
    /// ```
    #[inline]
    pub fn record(&self, worker: W, query: Query<'_>) -> Result<(), RecordError> {
        query.with_record_hashes(self.core.block_size, |local, seq| {
            self.record_hashes(worker, local, seq)
        })
    }

    /// Records a local decision from its local hashes and their chain, and shares it when
    /// decisions are shared.
    #[inline]
    fn record_hashes(&self, worker: W, local: &[LocalBlockHash], seq: &[SequenceHash]) {
        self.core.record(worker, local, seq);
        self.share_route(worker, local);
    }

    /// Shares a decision of `worker` for the prompt `local` with the other replicas, when
    /// decisions are shared.
    #[inline]
    pub(crate) fn share_route(&self, worker: W, local: &[LocalBlockHash]) {
        if !local.is_empty() {
            self.replication.share(|| Action::Route {
                worker_id: worker.worker_id(),
                dp_rank: worker.dp_rank(),
                blocks: local[..local.len().min(crate::replication::MAX_BLOCKS)].to_vec(),
            });
        }
    }

    /// For each worker, how many leading blocks of `query` it probably holds, and how
    /// many blocks it holds in all. To reuse the answer's maps, or to take the scores
    /// without storing them, use [`find_into`](Self::find_into).
    ///
    /// ```
    /// use approx_kv_index::{ApproxKvIndexer, Query};
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// index.record(1, Query::tokens(&[1, 2, 3, 4])).unwrap();
    /// index.record(2, Query::tokens(&[1, 2, 9, 9])).unwrap();
    /// let found = index.find(Query::tokens(&[1, 2, 3, 4]));
    /// assert_eq!((found.scores[&1], found.scores[&2]), (2, 1));
    /// assert_eq!(found.tree_sizes[&2], 2);
    /// ```
    #[inline]
    pub fn find(&self, query: Query<'_>) -> OverlapScores<W> {
        let mut out = OverlapScores::default();
        self.find_into(query, &mut out);
        out
    }

    /// [`find`](Self::find), writing the answer into `sink`: an [`OverlapScores`] reused
    /// from find to find (cleared first; once its maps have grown to the workers that
    /// match, a find allocates nothing), a callback `FnMut(W, u32)` called with each
    /// worker and its score (nothing stored: the cheapest find), or a [`ScoreSink`] of
    /// your own. Tokens are hashed into a buffer the calling thread reuses.
    ///
    /// ```
    /// use approx_kv_index::{ApproxKvIndexer, OverlapScores, Query};
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// index.record(7, Query::tokens(&[1, 2, 3, 4])).unwrap();
    /// index.record(8, Query::tokens(&[1, 2])).unwrap();
    ///
    /// let mut found = OverlapScores::default();
    /// index.find_into(Query::tokens(&[1, 2, 3, 4]), &mut found);
    /// assert_eq!(found.best(), Some((7, 2)));
    ///
    /// let mut best = (0, 0);
    /// index.find_into(Query::tokens(&[1, 2, 3, 4]), &mut |worker, score| {
    ///     best = best.max((score, worker))
    /// });
    /// assert_eq!(best, (2, 7));
    /// ```
    #[inline]
    pub fn find_into(&self, query: Query<'_>, sink: &mut impl ScoreSink<W>) {
        query.with_find_hashes(self.core.block_size, |hashed| {
            self.core.find_into(hashed, sink)
        });
    }

    /// Applies a KV event from an engine that publishes them, alongside the approximate
    /// decisions:
    /// - `Stored`: the blocks are held exactly (no TTL) until a `Removed` event. They are
    ///   placed by this index's sequence hashes, chained from the parent by each block's
    ///   `tokens_hash`, so finds reach them whatever hashes the engine uses (vLLM and
    ///   SGLang publish their own, which may even differ between workers). The event's
    ///   `block_hash`es are kept per worker (where they differ from ours) only to resolve
    ///   that worker's later parents and removals. The parent must be a block the worker
    ///   stored (named by its engine hash), or a block it holds live or that the event
    ///   names by this index's sequence hash (its first block's hash is the chain of the
    ///   parent and its tokens hash, as in [`dump_events`](Self::dump_events)); otherwise
    ///   the event is dropped and counted in [`IndexStats::rejected_events`](crate::IndexStats),
    ///   as Dynamo drops it. So is an event that names two of its blocks alike (by
    ///   `block_hash`) or a block as its own parent: it changes nothing. A block with
    ///   `expires_in: Some(ttl_left)` (a dumped
    ///   approximate entry) gets an approximate claim expiring that long from now (at most
    ///   the TTL, give or take the nanoseconds by which caps order decisions taken at one
    ///   clock reading, up to 1 ms), as the original would.
    /// - `Removed` ends the worker's claims on those blocks, exact *and* approximate (the
    ///   engine says they are gone), and frees them at once.
    /// - `Cleared` forgets that key: for [`WorkerWithDpRank`](crate::WorkerWithDpRank) one
    ///   rank (like [`remove_worker_key`](Self::remove_worker_key)), for plain ids the
    ///   worker.
    ///
    /// Under caps, exact entries count toward the worker's (and the index's) capacity and
    /// push out least recently recorded approximate decisions; they are never evicted.
    ///
    /// Finds keep galloping while the events leave each worker's blocks prefixes of its
    /// prompts, as an engine that stores chains below blocks it stored and evicts its least
    /// recently used blocks leaves them: an exact chain from the root or below a block the
    /// worker stored exactly, a removed block below which the worker holds nothing. An
    /// event that may leave a gap (a block removed above blocks the worker still holds, an
    /// exact chain below a block it holds only by a decision) makes every find from then on
    /// walk the query block by block, as [`IndexStats::finds_gallop`](crate::IndexStats)
    /// shows; the answers are the same either way.
    ///
    /// ```
    /// use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// let tokens = [1, 2, 3, 4, 5, 6];
    /// let local = compute_block_hash_for_seq(&tokens, 2); // what a find looks up
    /// // The engine names blocks by hashes of its own: 0xA1, 0xA2, 0xA3.
    /// let block = |i: usize, engine_hash: u64| KvCacheStoredBlockData {
    ///     block_hash: SequenceHash(engine_hash),
    ///     tokens_hash: local[i],
    ///     expires_in: None,
    /// };
    /// let stored = |parent: Option<u64>, blocks| RouterEvent {
    ///     worker_id: 8,
    ///     event_id: 0,
    ///     data: KvCacheEventData::Stored(KvCacheStoreData {
    ///         parent_hash: parent.map(SequenceHash),
    ///         blocks,
    ///     }),
    /// };
    /// index.apply_event(&stored(None, vec![block(0, 0xA1), block(1, 0xA2)]));
    /// index.apply_event(&stored(Some(0xA2), vec![block(2, 0xA3)])); // parent: engine's name
    /// assert_eq!(index.find(Query::blocks(&local)).scores[&8], 3);
    /// assert!(index.stats().finds_gallop); // the worker's blocks: a prefix
    /// index.apply_event(&RouterEvent {
    ///     worker_id: 8,
    ///     event_id: 2,
    ///     data: KvCacheEventData::Removed(KvCacheRemoveData { block_hashes: vec![SequenceHash(0xA2)] }),
    /// });
    /// assert_eq!(index.find(Query::blocks(&local)).scores[&8], 1);
    /// assert!(!index.stats().finds_gallop); // block 2 left below a gap: finds walk
    /// ```
    pub fn apply_event(&self, event: &RouterEvent<W>) {
        self.core.apply_event(event);
    }

    /// Every live (block, worker) pair as a one-block `Stored` event, parents before
    /// children: blocks and parents named by this index's sequence hashes, exact entries
    /// with `expires_in: None`, approximate ones with the TTL they have left. Replaying the
    /// events in order through [`apply_event`](Self::apply_event) into an index with the
    /// same settings and clock rebuilds the state: the same finds, expiring when the
    /// originals would (exact for entries whose sequence hashes are the chain of their
    /// tokens hashes, which all are unless a caller passed other hashes to
    /// [`record`](Self::record) as [`Query::hashes`](crate::Query::hashes)). The engines'
    /// own block hashes (the names their events gave blocks) are not dumped, nor kept in
    /// snapshots.
    ///
    /// ```
    /// # use approx_kv_index::{ApproxKvIndexer, Query};
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// index.record(4, Query::tokens(&[1, 2, 3, 4])).unwrap();
    /// assert_eq!(index.dump_events().len(), 2);
    /// ```
    pub fn dump_events(&self) -> Vec<RouterEvent<W>> {
        self.core.dump()
    }

    /// The live state with each entry's remaining TTL, to [`restore`](Self::restore)
    /// into a fresh index after a restart (see [`Snapshot`](crate::Snapshot)). Read shard
    /// after shard: consistent per entry, not across entries, while callers run.
    pub fn snapshot(&self) -> crate::Snapshot {
        self.core.snapshot::<W>()
    }

    /// Loads a [`Snapshot`](crate::Snapshot): each entry comes back with the TTL it had
    /// left (at most this index's TTL; a TTL left above it by at most 1 ms is kept: caps
    /// order a worker's decisions taken at one clock reading by stretching their TTLs a
    /// nanosecond apart), counted from now, merged with what the index
    /// already holds; in an index whose TTL means never, approximate entries never expire,
    /// restored ones too. Afterwards the index answers every find as the snapshotted one did
    /// when the snapshot was taken, and expires and (under caps) evicts the restored
    /// entries in the same order: least recently recorded first, deepest blocks first.
    /// Caps are enforced once everything is back. Two exceptions, both under caps:
    /// request handles do not travel, so blocks that running requests pinned come back as
    /// decisions taken when the snapshot was (as if the requests had finished then) and a
    /// cap evicts them as it would released ones; and decisions of different workers taken
    /// at one clock reading, which a snapshot cannot tell apart, are evicted by
    /// `max_entries` in an order of their own. A snapshot of another block size is refused
    /// and changes nothing.
    pub fn restore(&self, snapshot: &crate::Snapshot) -> Result<(), crate::SnapshotError> {
        self.core.restore::<W>(snapshot)?;
        // The snapshot does not say when its capacities changed: not shared again.
        for c in &snapshot.capacities {
            self.replication.forget_capacity((c.worker_id, c.dp_rank));
        }
        Ok(())
    }

    /// Sizes and counters. Taken without stopping callers, so approximate while they run.
    pub fn stats(&self) -> IndexStats {
        self.core.stats()
    }

    /// Publishes [`stats`](Self::stats) as `metrics` gauges (`approx_kv_index_entries`,
    /// `_nodes`, `_workers`, `_pending_timers`, `_estimated_bytes`, and `_finds_gallop`, 1 or
    /// 0) and counters (`_records_total`, `_finds_total`, `_expirations_total`,
    /// `_caller_expirations_total`, `_evictions_total`, `_rejected_events_total`,
    /// `_cache_reports_total`, `_predicted_blocks_total`, `_delivered_blocks_total`,
    /// `_dropped_by_reports_total`, `_capacities_learned_total`), and each worker's reports
    /// of cached tokens ([`cache_reports`](Self::cache_reports)) as counters labelled
    /// `worker` and `dp_rank`
    /// (`approx_kv_index_worker_predicted_blocks_total`, `_worker_delivered_blocks_total`),
    /// so they reach Prometheus or any other exporter the application installed. The
    /// background sweeper also does this every tick. Counters are set to the stats'
    /// values (`absolute`); the three sums of reports cover registered workers only, as
    /// [`IndexStats::cache`](crate::IndexStats::cache) does, so they fall when a worker that
    /// reported is removed (an exporter reads that as a counter reset).
    #[cfg(feature = "metrics")]
    pub fn publish_metrics(&self) {
        self.core.publish_metrics();
    }

    /// Reclaims, now and on this thread, every entry whose TTL has passed by the clock's
    /// current time; returns how many (block, worker) entries were freed. The background
    /// sweeper does this every tick; call it yourself when the sweeper is disabled or with a
    /// manual clock. If the background sweeper is sweeping at that moment, this waits for it
    /// (sweeps take turns, so a sweep that returns has finished its work).
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use approx_kv_index::{ApproxKvIndexer, ManualClock, Query};
    /// let clock = Arc::new(ManualClock::new());
    /// let index = ApproxKvIndexer::builder()
    ///     .block_size(2)
    ///     .ttl(Duration::from_secs(10))
    ///     .clock(clock.clone())
    ///     .background_sweeper(false)
    ///     .build()
    ///     .unwrap();
    /// index.record(1, Query::tokens(&[1, 2, 3, 4])).unwrap();
    /// clock.advance(Duration::from_secs(10));
    /// assert!(index.find(Query::tokens(&[1, 2])).scores.is_empty()); // reads are exact
    /// assert_eq!(index.stats().entries, 2); // memory not yet reclaimed
    /// assert_eq!(index.sweep_expired(), 2);
    /// assert_eq!(index.stats().entries, 0);
    /// ```
    pub fn sweep_expired(&self) -> usize {
        self.core.sweep()
    }

    /// Stops and joins the sweeper thread. Idempotent. The index keeps answering and
    /// recording afterwards; only reclamation stops (call
    /// [`sweep_expired`](Self::sweep_expired) to reclaim by hand).
    pub fn shutdown(&self) {
        self.sweeper.stop();
        self.core.stop_helping();
    }
}

impl<W: WorkerKey> Drop for ApproxKvIndexer<W> {
    fn drop(&mut self) {
        self.shutdown();
    }
}
