//! [`ApproxKvIndexer`]: the public face. It wires the tree, the worker registry and the
//! expiry together; every method runs on the caller's thread.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_epoch as epoch;

use crate::clock::{nanos, Clock};
use crate::config::Builder;
use crate::error::RecordError;
use crate::events::RouterEvent;
use crate::expiry::sweeper::Sweeper;
use crate::expiry::{Expiry, Timer};
use crate::hash::{compute_block_hash_for_seq, compute_seq_hashes};
use crate::scores::OverlapScores;
use crate::stats::{IndexStats, StripedCounter};
use crate::tree::Tree;
use crate::workers::Workers;
use crate::{LocalBlockHash, SequenceHash, WorkerId};

/// Expiry values are clamped below this, so `u64::MAX` stays free as a sentinel-free
/// "never" and `expiry > now` cannot overflow.
const MAX_EXPIRY: u64 = u64::MAX - 1;

/// State shared by the callers and the sweeper thread.
struct Inner {
    block_size: u32,
    ttl_nanos: u64,
    clock: Arc<dyn Clock>,
    tree: Tree,
    workers: Arc<Workers>,
    expiry: Expiry,
    records: StripedCounter,
    finds: StripedCounter,
    expirations: StripedCounter,
}

impl Inner {
    #[inline]
    fn now(&self) -> u64 {
        nanos(self.clock.now())
    }

    /// Reclaims every entry whose timer is due at the clock's current time.
    fn sweep(&self) -> usize {
        let now = self.now();
        let mut removed_total = 0;
        self.expiry.take_due(now, |Timer { leaf, slot }| {
            let guard = epoch::pin();
            let alive = self.workers.alive(slot).is_some();
            let removed = self.tree.sweep_path(leaf, slot, now, alive, &guard);
            drop(guard);
            if removed > 0 {
                self.workers.adjust_entries(slot, -(removed as i64));
                removed_total += removed;
            }
        });
        self.expirations.add(removed_total as u64);
        removed_total
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
pub struct ApproxKvIndexer {
    inner: Arc<Inner>,
    sweeper: Sweeper,
}

impl std::fmt::Debug for ApproxKvIndexer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApproxKvIndexer")
            .field("block_size", &self.inner.block_size)
            .field("ttl", &Duration::from_nanos(self.inner.ttl_nanos))
            .field("sweeper_running", &self.sweeper.is_running())
            .finish_non_exhaustive()
    }
}

impl ApproxKvIndexer {
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

    pub(crate) fn from_builder(b: Builder) -> Self {
        let tick_nanos = nanos(b.tick).max(1);
        let ttl_nanos = nanos(b.ttl).clamp(1, MAX_EXPIRY);
        let inner = Arc::new(Inner {
            block_size: b.block_size,
            ttl_nanos,
            clock: b.clock,
            tree: Tree::new(),
            workers: Workers::new(),
            expiry: Expiry::new(tick_nanos, ttl_nanos),
            records: StripedCounter::default(),
            finds: StripedCounter::default(),
            expirations: StripedCounter::default(),
        });
        let sweeper = if b.background_sweeper {
            let shared = Arc::clone(&inner);
            Sweeper::spawn(b.tick, move || {
                shared.sweep();
            })
        } else {
            Sweeper::none()
        };
        Self { inner, sweeper }
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
    pub fn process_routing_decision_for_request(&self, tokens: &[u32], worker: WorkerId) {
        let local = compute_block_hash_for_seq(tokens, self.inner.block_size);
        let seq = compute_seq_hashes(&local);
        self.record(worker, &local, &seq);
    }

    /// Records a decision from precomputed hashes (as [`compute_block_hash_for_seq`] and
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
        worker: WorkerId,
        local: &[LocalBlockHash],
        seq: &[SequenceHash],
    ) -> Result<(), RecordError> {
        if local.len() != seq.len() {
            return Err(RecordError::LengthMismatch {
                local: local.len(),
                seq: seq.len(),
            });
        }
        self.record(worker, local, seq);
        Ok(())
    }

    fn record(&self, worker: WorkerId, local: &[LocalBlockHash], seq: &[SequenceHash]) {
        let Some(&leaf) = seq.last() else {
            return;
        };
        let inner = &*self.inner;
        inner.records.add(1);
        let guard = epoch::pin();
        let Some(slot) = inner.workers.resolve(worker) else {
            return; // 2^32 live registrations: nothing sensible to store
        };
        let expiry = inner.now().saturating_add(inner.ttl_nanos).min(MAX_EXPIRY);
        let added = inner.tree.record(slot, local, seq, expiry, &guard);
        inner.workers.adjust_entries(slot, added as i64);
        inner.expiry.schedule(expiry, Timer { leaf, slot });
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
    pub fn find_matches_for_request(&self, tokens: &[u32]) -> OverlapScores {
        self.find_matches(&compute_block_hash_for_seq(tokens, self.inner.block_size))
    }

    /// For each worker, how many leading blocks of `local` it probably holds.
    ///
    /// ```
    /// # use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// assert!(index.find_matches(&[LocalBlockHash(1)]).scores.is_empty());
    /// ```
    pub fn find_matches(&self, local: &[LocalBlockHash]) -> OverlapScores {
        let inner = &*self.inner;
        inner.finds.add(1);
        let guard = epoch::pin();
        inner.tree.find(local, inner.now(), &inner.workers, &guard)
    }

    /// Forgets `worker`: no find reports it until it is recorded again. O(1); the
    /// sweeper frees its entries within about one TTL. Unknown ids are ignored.
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
    pub fn dump_events(&self) -> Vec<RouterEvent> {
        let inner = &*self.inner;
        let guard = epoch::pin();
        inner.tree.dump(inner.now(), &inner.workers, &guard)
    }

    /// Sizes and counters. Taken without stopping callers, so approximate while they run.
    pub fn stats(&self) -> IndexStats {
        let inner = &*self.inner;
        IndexStats {
            entries: inner.workers.total_entries(),
            nodes: inner.tree.len(),
            workers: inner.workers.len(),
            records: inner.records.sum(),
            finds: inner.finds.sum(),
            expirations: inner.expirations.sum(),
            pending_timers: inner.expiry.pending(),
        }
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

impl Drop for ApproxKvIndexer {
    fn drop(&mut self) {
        self.shutdown();
    }
}
