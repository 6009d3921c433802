//! [`ApproxKvIndexer`]: the public face. It wires the tree, the worker registry, the caps
//! and the expiry together; every method runs on the caller's thread.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_epoch as epoch;

use crate::capacity::{self, Caps, GlobalEviction};
use crate::clock::{nanos, Clock};
use crate::config::Builder;
use crate::error::RecordError;
use crate::events::{KvCacheEventData, RouterEvent};
use crate::expiry::sweeper::Sweeper;
use crate::expiry::{Expiry, Timer};
use crate::hash::{compute_block_hash_for_seq_salted, compute_seq_hashes, HashSalt};
use crate::scores::OverlapScores;
use crate::stats::{IndexStats, StripedCounter};
use crate::tree::claim::{EXACT, MAX_EXPIRY};
use crate::tree::Tree;
use crate::workers::{Slot, Workers};
use crate::{LocalBlockHash, SequenceHash, WorkerId, WorkerKey};

/// TTLs at or beyond this (about 146 years) mean "never": no timers are kept.
const NEVER: u64 = 1 << 62;

/// State shared by the callers and the sweeper thread.
struct Inner {
    block_size: u32,
    ttl_nanos: u64,
    /// False when the TTL means "never": decisions then push no timer.
    timers: bool,
    caps: Caps,
    clock: Arc<dyn Clock>,
    tree: Tree,
    workers: Arc<Workers>,
    expiry: Expiry,
    global_eviction: GlobalEviction,
    records: StripedCounter,
    finds: StripedCounter,
    expirations: StripedCounter,
    evictions: StripedCounter,
}

impl Inner {
    /// The index's internal time: clock nanoseconds plus one, so it is never 0 and the
    /// claim values 0 and 1 are never live (see `tree::claim`).
    #[inline]
    fn now(&self) -> u64 {
        nanos(self.clock.now())
            .saturating_add(1)
            .min(MAX_EXPIRY - 1)
    }

    fn record(&self, worker: impl WorkerKey, local: &[LocalBlockHash], seq: &[SequenceHash]) {
        let Some(&leaf) = seq.last() else {
            return;
        };
        self.records.add(1);
        let guard = epoch::pin();
        let Some(slot) = self.workers.resolve(worker) else {
            return; // 2^32 live registrations: nothing sensible to store
        };
        let mut expiry = self.now().saturating_add(self.ttl_nanos).min(MAX_EXPIRY);
        if self.caps.any() {
            expiry = self.workers.unique_expiry(slot, expiry).min(MAX_EXPIRY);
        }
        let added = self.tree.record(slot, local, seq, expiry, &guard);
        self.workers.adjust_entries(slot, added as i64);
        if self.timers {
            self.expiry.schedule(expiry, Timer { leaf, slot });
        }
        if self.caps.any() {
            self.log_and_enforce(slot, expiry, leaf, added, &guard);
        }
    }

    /// Logs a decision for eviction and, while over a cap, evicts up to twice as many
    /// entries as the decision `added`: enough to drain leftovers of races, while
    /// concurrent recorders cannot strip a worker by all evicting the same excess.
    fn log_and_enforce(
        &self,
        slot: Slot,
        expiry: u64,
        leaf: SequenceHash,
        added: usize,
        guard: &epoch::Guard,
    ) {
        let Some(log) = self.workers.log(slot) else {
            return;
        };
        let stamp = if self.caps.total.is_some() {
            self.global_eviction.stamp()
        } else {
            0
        };
        let len = log.push(stamp, expiry, leaf);
        capacity::compact_if_long(&self.tree, &self.workers, slot, len, guard);
        let mut evicted = 0;
        let (tree, workers) = (&self.tree, &self.workers);
        let timers = self.timers.then_some(&self.expiry);
        if let Some(cap) = self.caps.per_worker {
            let quota = 2 * added;
            evicted += capacity::evict_worker(tree, workers, timers, slot, cap, quota, guard);
        }
        if let Some(cap) = self.caps.total {
            let global = &self.global_eviction;
            let quota = (2 * added).saturating_sub(evicted);
            evicted += capacity::evict_total(tree, workers, timers, global, cap, quota, guard);
        }
        self.evictions.add(evicted as u64);
    }

    fn apply_event<W: WorkerKey>(&self, event: &RouterEvent<W>) {
        let guard = epoch::pin();
        match &event.data {
            KvCacheEventData::Stored(data) => {
                let Some(slot) = self.workers.resolve(event.worker_id) else {
                    return;
                };
                if !self.workers.begin_exact(slot) {
                    return; // removed meanwhile: the event comes before the removal
                }
                let blocks = data.blocks.iter().map(|b| (b.tokens_hash, b.block_hash));
                let added = self
                    .tree
                    .store_exact(slot, data.parent_hash, blocks, &guard);
                self.workers.adjust_entries(slot, added as i64);
                self.workers.end_exact(slot);
            }
            KvCacheEventData::Removed(data) => {
                let Some(slot) = self.workers.lookup(event.worker_id) else {
                    return; // unknown worker: it holds nothing
                };
                let blocks = data.block_hashes.iter().copied();
                let removed = self.tree.remove_exact(slot, blocks, &guard);
                self.workers.adjust_entries(slot, -(removed as i64));
            }
            KvCacheEventData::Cleared => {
                self.workers.remove_rank(event.worker_id);
            }
        }
    }

    /// Reclaims what is due at the clock's current time: dead slots to purge, due timers,
    /// and (with caps) expired decisions in the logs. Returns the entries freed.
    fn sweep(&self) -> usize {
        let now = self.now();
        let mut freed = self.purge_dead();
        self.expiry.take_due(now, |Timer { leaf, slot }| {
            let guard = epoch::pin();
            let alive = self.workers.is_alive(slot);
            let walked = self.tree.walk(leaf, slot, now, alive, usize::MAX, &guard);
            drop(guard);
            if walked.removed > 0 {
                self.workers.adjust_entries(slot, -(walked.removed as i64));
                freed += walked.removed;
            }
        });
        if self.caps.any() && self.timers {
            for slot in 0..self.workers.slot_count() {
                if let Some(log) = self.workers.log(slot) {
                    log.prune_expired(now);
                }
            }
        }
        self.expirations.add(freed as u64);
        freed
    }

    fn stats(&self) -> IndexStats {
        let (entries, nodes) = (self.workers.total_entries(), self.tree.len());
        let pending_timers = self.expiry.pending();
        IndexStats {
            entries,
            nodes,
            workers: self.workers.len(),
            records: self.records.sum(),
            finds: self.finds.sum(),
            expirations: self.expirations.sum(),
            evictions: self.evictions.sum(),
            pending_timers,
            estimated_bytes: self.tree.estimated_bytes(nodes, entries)
                + pending_timers * crate::expiry::Expiry::BYTES_PER_TIMER,
        }
    }

    /// Removes every entry of dead slots that no timer will lead a walk to.
    fn purge_dead(&self) -> usize {
        let (slots, busy): (Vec<Slot>, Vec<Slot>) = self
            .workers
            .take_purges()
            .into_iter()
            .partition(|&slot| !self.workers.exact_in_flight(slot));
        self.workers.requeue_purges(busy); // an event is still storing: next sweep
        if slots.is_empty() {
            return 0;
        }
        let guard = epoch::pin();
        let removed = self.tree.purge(&slots, &guard);
        for (&slot, &n) in slots.iter().zip(&removed) {
            if let Some(log) = self.workers.log(slot) {
                log.clear();
            }
            self.workers.adjust_entries(slot, -(n as i64));
            self.workers.purge_done(slot);
        }
        removed.iter().sum()
    }
}

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
/// Nodes live in a sharded map. `find*` and the refresh of an existing entry hold one
/// shard *read* lock for one probe at a time; adding or removing a holder holds one
/// shard *write* lock for one probe. No call holds a lock across blocks, and none waits on
/// another thread. [`shutdown`](Self::shutdown) joins the sweeper.
///
/// # Unwind safety
/// Locks are taken only around non-panicking code, so a panic in a caller's thread cannot
/// leave the index inconsistent.
///
/// ```
/// use std::{sync::Arc, thread, time::Duration};
/// use approx_kv_index::ApproxKvIndexer;
///
/// let index = Arc::new(ApproxKvIndexer::new(4, Duration::from_secs(60)).unwrap());
/// let prompt: Vec<u32> = (0..16).collect(); // 4 blocks
/// let writer = {
///     let index = Arc::clone(&index);
///     let prompt = prompt.clone();
///     thread::spawn(move || index.process_routing_decision_for_request(&prompt, 7))
/// };
/// writer.join().unwrap();
/// assert_eq!(index.find_matches_for_request(&prompt).scores[&7], 4);
/// index.remove_worker(7);
/// assert!(index.find_matches_for_request(&prompt).scores.is_empty());
/// ```
pub struct ApproxKvIndexer<W: WorkerKey = WorkerId> {
    inner: Arc<Inner>,
    sweeper: Sweeper,
    key: std::marker::PhantomData<fn(W) -> W>,
}

impl<W: WorkerKey> std::fmt::Debug for ApproxKvIndexer<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApproxKvIndexer")
            .field("block_size", &self.inner.block_size)
            .field("ttl", &Duration::from_nanos(self.inner.ttl_nanos))
            .field("caps", &self.inner.caps)
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
    pub fn new(block_size: u32, ttl: Duration) -> Result<Self, crate::ConfigError> {
        Self::builder().block_size(block_size).ttl(ttl).build()
    }
}

impl<W: WorkerKey> ApproxKvIndexer<W> {
    pub(crate) fn from_builder(b: Builder) -> Self {
        let tick_nanos = nanos(b.tick).max(1);
        let ttl_nanos = nanos(b.ttl).clamp(1, NEVER);
        let timers = ttl_nanos < NEVER;
        let caps = Caps {
            per_worker: b.max_blocks_per_worker,
            total: b.max_entries,
        };
        let inner = Arc::new(Inner {
            block_size: b.block_size,
            ttl_nanos,
            timers,
            caps,
            clock: b.clock,
            tree: Tree::new(),
            workers: Workers::new(caps.total.is_some(), !timers),
            expiry: Expiry::new(tick_nanos, if timers { ttl_nanos } else { 0 }),
            global_eviction: GlobalEviction::default(),
            records: StripedCounter::default(),
            finds: StripedCounter::default(),
            expirations: StripedCounter::default(),
            evictions: StripedCounter::default(),
        });
        let sweeper = if b.background_sweeper {
            let shared = Arc::clone(&inner);
            Sweeper::spawn(b.tick, move || {
                shared.sweep();
                #[cfg(feature = "metrics")]
                crate::stats::publish(&shared.stats());
            })
        } else {
            Sweeper::none()
        };
        Self {
            inner,
            sweeper,
            key: std::marker::PhantomData,
        }
    }

    /// Tokens per block.
    pub fn block_size(&self) -> u32 {
        self.inner.block_size
    }

    /// Records that `worker` was chosen for a prompt of `tokens`: its full blocks become
    /// "probably cached on `worker`" for one TTL (refreshing any it already held).
    ///
    /// ```
    /// # use approx_kv_index::ApproxKvIndexer;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// index.process_routing_decision_for_request(&[1, 2, 3, 4, 5], 9); // 2 full blocks
    /// assert_eq!(index.find_matches_for_request(&[1, 2, 3, 4, 5, 6]).scores[&9], 2);
    /// ```
    pub fn process_routing_decision_for_request(&self, tokens: &[u32], worker: W) {
        self.process_routing_decision_for_request_salted(tokens, worker, HashSalt::NONE);
    }

    /// As [`process_routing_decision_for_request`](Self::process_routing_decision_for_request),
    /// for a request under a LoRA adapter or cache namespace: its blocks only ever match
    /// finds with the same [`HashSalt`].
    ///
    /// ```
    /// use approx_kv_index::{ApproxKvIndexer, HashSalt};
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// let tenant_a = HashSalt::new(None, Some("tenant-a"));
    /// index.process_routing_decision_for_request_salted(&[1, 2, 3, 4], 1, tenant_a);
    /// assert_eq!(index.find_matches_for_request_salted(&[1, 2, 3, 4], tenant_a).scores[&1], 2);
    /// assert!(index.find_matches_for_request(&[1, 2, 3, 4]).scores.is_empty());
    /// ```
    pub fn process_routing_decision_for_request_salted(
        &self,
        tokens: &[u32],
        worker: W,
        salt: HashSalt,
    ) {
        let local = compute_block_hash_for_seq_salted(tokens, self.inner.block_size, salt);
        let seq = compute_seq_hashes(&local);
        self.inner.record(worker, &local, &seq);
    }

    /// Records a decision from precomputed hashes (as
    /// [`compute_block_hash_for_seq`](crate::compute_block_hash_for_seq) and
    /// [`compute_seq_hashes`] make them). Slices of different lengths are an error and
    /// store nothing.
    ///
    /// ```
    /// use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(4, std::time::Duration::from_secs(60)).unwrap();
    /// let local = compute_block_hash_for_seq(&[1, 2, 3, 4], 4);
    /// let seq = compute_seq_hashes(&local);
    /// index.process_routing_decision(5, &local, &seq).unwrap();
    /// assert_eq!(index.find_matches(&local).scores[&5], 1);
    /// assert!(index.process_routing_decision(5, &local, &[]).is_err());
    /// ```
    pub fn process_routing_decision(
        &self,
        worker: W,
        local: &[LocalBlockHash],
        seq: &[SequenceHash],
    ) -> Result<(), RecordError> {
        if local.len() != seq.len() {
            return Err(RecordError::LengthMismatch {
                local: local.len(),
                seq: seq.len(),
            });
        }
        self.inner.record(worker, local, seq);
        Ok(())
    }

    /// Applies an exact KV event from an engine that publishes them, alongside the
    /// approximate decisions:
    /// - `Stored` blocks are held exactly (no TTL) until a `Removed` event;
    /// - `Removed` ends the worker's claims on those blocks, exact *and* approximate (the
    ///   engine says they are gone);
    /// - `Cleared` forgets the worker, like [`remove_worker`](Self::remove_worker).
    ///
    /// ```
    /// use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// let local = compute_block_hash_for_seq(&[1, 2, 3, 4], 2);
    /// let seq = compute_seq_hashes(&local);
    /// let blocks = local.iter().zip(&seq).map(|(&tokens_hash, &block_hash)| {
    ///     KvCacheStoredBlockData { block_hash, tokens_hash, expires_in: None }
    /// });
    /// index.apply_event(&RouterEvent {
    ///     worker_id: 8,
    ///     event_id: 1,
    ///     data: KvCacheEventData::Stored(KvCacheStoreData { parent_hash: None, blocks: blocks.collect() }),
    /// });
    /// assert_eq!(index.find_matches(&local).scores[&8], 2);
    /// index.apply_event(&RouterEvent {
    ///     worker_id: 8,
    ///     event_id: 2,
    ///     data: KvCacheEventData::Removed(KvCacheRemoveData { block_hashes: vec![seq[1]] }),
    /// });
    /// assert_eq!(index.find_matches(&local).scores[&8], 1);
    /// ```
    pub fn apply_event(&self, event: &RouterEvent<W>) {
        self.inner.apply_event(event);
    }

    /// For each worker, how many leading blocks of `tokens` it probably holds.
    ///
    /// ```
    /// # use approx_kv_index::ApproxKvIndexer;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// index.process_routing_decision_for_request(&[1, 2, 3, 4], 1);
    /// index.process_routing_decision_for_request(&[1, 2, 9, 9], 2);
    /// let found = index.find_matches_for_request(&[1, 2, 3, 4]);
    /// assert_eq!((found.scores[&1], found.scores[&2]), (2, 1));
    /// ```
    pub fn find_matches_for_request(&self, tokens: &[u32]) -> OverlapScores<W> {
        self.find_matches_for_request_salted(tokens, HashSalt::NONE)
    }

    /// As [`find_matches_for_request`](Self::find_matches_for_request), under a
    /// [`HashSalt`] (LoRA adapter, cache namespace).
    pub fn find_matches_for_request_salted(
        &self,
        tokens: &[u32],
        salt: HashSalt,
    ) -> OverlapScores<W> {
        let block_size = self.inner.block_size;
        self.find_matches(&compute_block_hash_for_seq_salted(tokens, block_size, salt))
    }

    /// For each worker, how many leading blocks of `local` it probably holds.
    ///
    /// ```
    /// # use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// assert!(index.find_matches(&[LocalBlockHash(1)]).scores.is_empty());
    /// ```
    pub fn find_matches(&self, local: &[LocalBlockHash]) -> OverlapScores<W> {
        let inner = &*self.inner;
        inner.finds.add(1);
        let guard = epoch::pin();
        inner.tree.find(local, inner.now(), &inner.workers, &guard)
    }

    /// Forgets `worker`, every data-parallel rank of it: no find reports it until it is
    /// recorded again. O(ranks); the sweeper frees its entries within about one TTL.
    /// Unknown ids are ignored.
    ///
    /// ```
    /// # use approx_kv_index::ApproxKvIndexer;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// index.process_routing_decision_for_request(&[1, 2], 4);
    /// index.remove_worker(4);
    /// index.remove_worker(12345); // unknown: nothing happens
    /// assert!(index.find_matches_for_request(&[1, 2]).scores.is_empty());
    /// ```
    pub fn remove_worker(&self, worker: WorkerId) {
        self.inner.workers.remove(worker);
    }

    /// Forgets one key: for [`WorkerWithDpRank`](crate::WorkerWithDpRank), one rank of a
    /// worker (the others stay); for plain ids, the same as
    /// [`remove_worker`](Self::remove_worker).
    pub fn remove_worker_key(&self, worker: W) {
        self.inner.workers.remove_rank(worker);
    }

    /// Every live (block, worker) pair as a one-block `Stored` event with its parent hash
    /// and remaining TTL, parents before children, so replaying the events in order
    /// rebuilds the state.
    ///
    /// ```
    /// # use approx_kv_index::ApproxKvIndexer;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// index.process_routing_decision_for_request(&[1, 2, 3, 4], 4);
    /// assert_eq!(index.dump_events().len(), 2);
    /// ```
    pub fn dump_events(&self) -> Vec<RouterEvent<W>> {
        let inner = &*self.inner;
        let guard = epoch::pin();
        inner.tree.dump(inner.now(), &inner.workers, &guard)
    }

    /// The live state with each entry's remaining TTL, to [`restore`](Self::restore)
    /// into a fresh index after a restart (see [`Snapshot`](crate::Snapshot)). Read shard
    /// after shard: consistent per entry, not across entries, while callers run.
    pub fn snapshot(&self) -> crate::Snapshot {
        let inner = &*self.inner;
        let guard = epoch::pin();
        let rows = inner
            .tree
            .live_entries::<W>(inner.now(), &inner.workers, &guard);
        crate::Snapshot {
            block_size: inner.block_size,
            entries: rows
                .into_iter()
                .map(|r| crate::SnapshotEntry {
                    worker_id: r.worker.worker_id(),
                    dp_rank: r.worker.dp_rank(),
                    block: r.seq,
                    parent: r.parent,
                    local: r.local,
                    depth: r.depth,
                    exact: r.exact,
                    ttl_left: Duration::from_nanos(r.ttl_left),
                })
                .collect(),
        }
    }

    /// Loads a [`Snapshot`](crate::Snapshot): each entry comes back with the TTL it had
    /// left, counted from now, merged with what the index already holds. Afterwards the
    /// index answers every find as the snapshotted one did when the snapshot was taken.
    /// A snapshot of another block size is refused and changes nothing.
    pub fn restore(&self, snapshot: &crate::Snapshot) -> Result<(), crate::SnapshotError> {
        let inner = &*self.inner;
        if snapshot.block_size != inner.block_size {
            return Err(crate::SnapshotError::BlockSizeMismatch {
                snapshot: snapshot.block_size,
                index: inner.block_size,
            });
        }
        let now = inner.now();
        let guard = epoch::pin();
        for e in &snapshot.entries {
            let worker = W::from_parts(e.worker_id, e.dp_rank);
            let Some(slot) = inner.workers.resolve(worker) else {
                continue;
            };
            let ttl_left = nanos(e.ttl_left).min(inner.ttl_nanos);
            let approx = if ttl_left == 0 {
                0
            } else {
                now.saturating_add(ttl_left).min(MAX_EXPIRY)
            };
            let claim = approx | if e.exact { EXACT } else { 0 };
            if claim == 0 {
                continue; // nothing live to restore
            }
            if e.exact && !inner.workers.begin_exact(slot) {
                continue; // removed while restoring
            }
            let row = crate::tree::LiveEntry {
                depth: e.depth,
                worker: (),
                seq: e.block,
                parent: e.parent,
                local: e.local,
                exact: e.exact,
                ttl_left,
            };
            let added = inner.tree.restore_entry(slot, &row, claim, &guard);
            inner.workers.adjust_entries(slot, i64::from(added));
            if e.exact {
                inner.workers.end_exact(slot);
            }
            if approx != 0 && inner.timers {
                inner.expiry.schedule(
                    approx,
                    Timer {
                        leaf: e.block,
                        slot,
                    },
                );
            }
            if approx != 0 && inner.caps.any() {
                inner.log_and_enforce(slot, approx, e.block, usize::from(added), &guard);
            }
        }
        Ok(())
    }

    /// Sizes and counters. Taken without stopping callers, so approximate while they run.
    pub fn stats(&self) -> IndexStats {
        self.inner.stats()
    }

    /// Publishes [`stats`](Self::stats) as `metrics` gauges (`approx_kv_index_entries`,
    /// `_nodes`, `_workers`, `_pending_timers`, `_estimated_bytes`) and counters
    /// (`_records_total`, `_finds_total`, `_expirations_total`, `_evictions_total`), so
    /// they reach Prometheus or any other exporter the application installed. The
    /// background sweeper also does this every tick.
    #[cfg(feature = "metrics")]
    pub fn publish_metrics(&self) {
        crate::stats::publish(&self.stats());
    }

    /// Reclaims, now and on this thread, every entry whose TTL has passed by the clock's
    /// current time; returns how many (block, worker) entries were freed. The background
    /// sweeper does this every tick; call it yourself when the sweeper is disabled or
    /// with a manual clock.
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use approx_kv_index::{ApproxKvIndexer, ManualClock};
    /// let clock = Arc::new(ManualClock::new());
    /// let index = ApproxKvIndexer::builder()
    ///     .block_size(2)
    ///     .ttl(Duration::from_secs(10))
    ///     .clock(clock.clone())
    ///     .background_sweeper(false)
    ///     .build()
    ///     .unwrap();
    /// index.process_routing_decision_for_request(&[1, 2, 3, 4], 1);
    /// clock.advance(Duration::from_secs(10));
    /// assert!(index.find_matches_for_request(&[1, 2]).scores.is_empty()); // reads are exact
    /// assert_eq!(index.stats().entries, 2); // memory not yet reclaimed
    /// assert_eq!(index.sweep_expired(), 2);
    /// assert_eq!(index.stats().entries, 0);
    /// ```
    pub fn sweep_expired(&self) -> usize {
        self.inner.sweep()
    }

    /// Stops and joins the sweeper thread. Idempotent. The index keeps answering and
    /// recording afterwards; only reclamation stops (call
    /// [`sweep_expired`](Self::sweep_expired) to reclaim by hand).
    pub fn shutdown(&self) {
        self.sweeper.stop();
    }
}

impl<W: WorkerKey> Drop for ApproxKvIndexer<W> {
    fn drop(&mut self) {
        self.shutdown();
    }
}
