//! [`ApproxKvIndexer`]: the public face. It wires the tree, the worker registry, the caps
//! and the expiry together; every method runs on the caller's thread.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Builder;
use crate::engine::Engine;
use crate::error::{ConfigError, RecordError};
use crate::events::RouterEvent;
use crate::expiry::sweeper::Sweeper;
use crate::hash::HashSalt;
use crate::scores::{OverlapScores, ScoreVisitor};
use crate::sharing::{Action, Replication};
use crate::stats::IndexStats;
use crate::tree::Query;
use crate::{LocalBlockHash, SequenceHash, WorkerId, WorkerKey};

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
/// Nodes live in a sharded map. `find*` takes no lock and writes no shared memory: each
/// probe copies a node and checks the shard's version, reading again if a writer changed
/// the shard meanwhile (after a few tries, under the shard's read lock for that probe). The
/// refresh of an existing entry holds one shard *read* lock for one probe at a time; adding
/// or removing a holder holds one shard *write* lock for one probe. No call holds a lock
/// across blocks, and none waits on another thread beyond a writer's hold of one shard. [`shutdown`](Self::shutdown) joins the sweeper.
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
    pub(crate) inner: Arc<Engine>,
    sweeper: Sweeper,
    pub(crate) replication: Box<Replication>,
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
        let inner = Arc::new(Engine::new(&b));
        let sweeper = if b.background_sweeper {
            let shared = Arc::clone(&inner);
            Sweeper::spawn(b.tick, move || {
                shared.sweep_in_batches();
                #[cfg(feature = "metrics")]
                crate::stats::publish(&shared.stats());
            })
        } else {
            Sweeper::none()
        };
        Self {
            replication: Box::new(Replication::new(&b)),
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
        let (mut local, mut seq) = (Vec::new(), Vec::new());
        crate::hash::prompt_hashes_into(tokens, self.inner.block_size, salt, &mut local, &mut seq);
        self.record(worker, &local, &seq);
    }

    /// Records a local decision, and shares it when decisions are shared.
    fn record(&self, worker: W, local: &[LocalBlockHash], seq: &[SequenceHash]) {
        self.inner.record(worker, local, seq);
        if !local.is_empty() {
            self.replication.share(|| Action::Route {
                worker_id: worker.worker_id(),
                dp_rank: worker.dp_rank(),
                blocks: local[..local.len().min(crate::sharing::MAX_BLOCKS)].to_vec(),
            });
        }
    }

    /// Records a decision from precomputed hashes (as
    /// [`compute_block_hash_for_seq`](crate::compute_block_hash_for_seq) and
    /// [`compute_seq_hashes`](crate::compute_seq_hashes) make them). Slices of different lengths are an error and
    /// store nothing. The blocks are placed by the chain of `local` (what finds look up,
    /// as Dynamo's radix tree walks local hashes): where `seq` is not that chain (hashes
    /// from another scheme, or wrong), the decision is recorded as if it were, so it is
    /// found by its blocks, expires, and counts toward caps like any other.
    ///
    /// ```
    /// use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(4, std::time::Duration::from_secs(60)).unwrap();
    /// let local = compute_block_hash_for_seq(&[1, 2, 3, 4], 4);
    /// let seq = compute_seq_hashes(&local);
    /// index.process_routing_decision(5, &local, &seq).unwrap();
    /// assert_eq!(index.find_matches(&local).scores[&5], 1);
    /// assert!(index.process_routing_decision(5, &local, &[]).is_err());
    /// // Sequence hashes that are not the chain: placed by the chain all the same.
    /// index.process_routing_decision(6, &local, &[SequenceHash(7)]).unwrap();
    /// assert_eq!(index.find_matches(&local).scores[&6], 1);
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
        // Placed by the chain of its local hashes, which is what finds look up.
        match crate::hash::rechain(local, seq) {
            None => self.record(worker, local, seq),
            Some(chain) => self.record(worker, local, &chain),
        }
        Ok(())
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
    ///   the TTL), as the original would.
    /// - `Removed` ends the worker's claims on those blocks, exact *and* approximate (the
    ///   engine says they are gone), and frees them at once.
    /// - `Cleared` forgets that key: for [`WorkerWithDpRank`](crate::WorkerWithDpRank) one
    ///   rank (like [`remove_worker_key`](Self::remove_worker_key)), for plain ids the
    ///   worker.
    ///
    /// Under caps, exact entries count toward the worker's (and the index's) capacity and
    /// push out least recently recorded approximate decisions; they are never evicted.
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
    /// assert_eq!(index.find_matches(&local).scores[&8], 3);
    /// index.apply_event(&RouterEvent {
    ///     worker_id: 8,
    ///     event_id: 2,
    ///     data: KvCacheEventData::Removed(KvCacheRemoveData { block_hashes: vec![SequenceHash(0xA2)] }),
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
        let mut out = OverlapScores::default();
        self.find_matches_for_request_salted_into(tokens, salt, &mut out);
        out
    }

    /// As [`find_matches_for_request`](Self::find_matches_for_request), into `out`
    /// (cleared first, then filled): with one `OverlapScores` kept per router thread, a
    /// warm find from tokens allocates nothing (the blocks' hashes go to a per-thread
    /// buffer).
    ///
    /// ```
    /// # use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// index.process_routing_decision_for_request(&[1, 2, 3, 4], 7);
    /// let mut found = OverlapScores::default();
    /// index.find_matches_for_request_into(&[1, 2, 3, 4], &mut found);
    /// assert_eq!(found.scores[&7], 2);
    /// index.find_matches_for_request_into(&[9, 9], &mut found); // reused
    /// assert!(found.scores.is_empty());
    /// ```
    pub fn find_matches_for_request_into(&self, tokens: &[u32], out: &mut OverlapScores<W>) {
        self.find_matches_for_request_salted_into(tokens, HashSalt::NONE, out);
    }

    /// As [`find_matches_for_request_into`](Self::find_matches_for_request_into), under a
    /// [`HashSalt`].
    pub fn find_matches_for_request_salted_into(
        &self,
        tokens: &[u32],
        salt: HashSalt,
        out: &mut OverlapScores<W>,
    ) {
        thread_local! {
            static SEQ: std::cell::RefCell<Vec<SequenceHash>> = const {
                std::cell::RefCell::new(Vec::new())
            };
        }
        let block_size = self.inner.block_size;
        let mut find = |seq: &mut Vec<SequenceHash>| {
            crate::hash::seq_hashes_into(tokens, block_size, salt, seq);
            self.inner.find_into(Query::Seq(seq), out);
        };
        let reused = SEQ
            .try_with(|cell| cell.try_borrow_mut().map(|mut seq| find(&mut seq)).is_ok())
            .unwrap_or(false);
        if !reused {
            // This thread's buffer is in use or gone (the thread is being torn down).
            find(&mut Vec::new());
        }
    }

    /// For each worker, how many leading blocks of `local` it probably holds.
    ///
    /// ```
    /// # use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// assert!(index.find_matches(&[LocalBlockHash(1)]).scores.is_empty());
    /// ```
    pub fn find_matches(&self, local: &[LocalBlockHash]) -> OverlapScores<W> {
        let mut out = OverlapScores::default();
        self.inner.find_into(Query::Local(local), &mut out);
        out
    }

    /// As [`find_matches`](Self::find_matches), into `out`: cleared first, then filled.
    /// A router that keeps one `OverlapScores` per thread and passes it to every find
    /// allocates nothing once its maps have grown to the number of workers that match.
    ///
    /// ```
    /// # use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// index.process_routing_decision_for_request(&[1, 2, 3, 4], 7);
    /// let local = compute_block_hash_for_seq(&[1, 2, 3, 4], 2);
    /// let mut found = OverlapScores::default();
    /// index.find_matches_into(&local, &mut found);
    /// assert_eq!(found.scores[&7], 2);
    /// index.find_matches_into(&local[..1], &mut found); // reused: the old answer is gone
    /// assert_eq!(found.scores[&7], 1);
    /// # index.find_matches_into(&[], &mut found);
    /// # assert!(found.scores.is_empty() && found.tree_sizes.is_empty());
    /// ```
    pub fn find_matches_into(&self, local: &[LocalBlockHash], out: &mut OverlapScores<W>) {
        self.inner.find_into(Query::Local(local), out);
    }

    /// As [`find_matches`](Self::find_matches), from the query's *sequence* hashes (what
    /// [`compute_seq_hashes`](crate::compute_seq_hashes) makes of its local hashes): for a
    /// router that hashes a prompt once and passes the same hashes to the find and to
    /// [`process_routing_decision`](Self::process_routing_decision), so the find chains
    /// nothing. Given `compute_seq_hashes(local)`, the answer is `find_matches(local)`'s.
    ///
    /// ```
    /// # use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// let local = compute_block_hash_for_seq(&[1, 2, 3, 4, 5, 6], 2);
    /// let seq = compute_seq_hashes(&local);
    /// index.process_routing_decision(7, &local[..2], &seq[..2]).unwrap();
    /// let found = index.find_matches_by_sequence(&seq);
    /// assert_eq!(found.scores[&7], 2);
    /// assert_eq!(found, index.find_matches(&local));
    /// ```
    pub fn find_matches_by_sequence(&self, seq: &[SequenceHash]) -> OverlapScores<W> {
        let mut out = OverlapScores::default();
        self.inner.find_into(Query::Seq(seq), &mut out);
        out
    }

    /// As [`find_matches_by_sequence`](Self::find_matches_by_sequence), into `out`
    /// (cleared first, then filled; see [`find_matches_into`](Self::find_matches_into)).
    ///
    /// ```
    /// # use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// let seq = compute_seq_hashes(&compute_block_hash_for_seq(&[1, 2, 3, 4], 2));
    /// let mut found = OverlapScores::default();
    /// index.find_matches_by_sequence_into(&seq, &mut found);
    /// assert!(found.scores.is_empty());
    /// ```
    pub fn find_matches_by_sequence_into(&self, seq: &[SequenceHash], out: &mut OverlapScores<W>) {
        self.inner.find_into(Query::Seq(seq), out);
    }

    /// As [`find_matches`](Self::find_matches), handing each worker's score to `visit`
    /// instead of building an [`OverlapScores`]: `visit(worker, score)` is called once for
    /// each worker that probably holds a leading run of the query (the workers and scores
    /// `find_matches` reports, in no particular order; no tree sizes). Allocates nothing
    /// once the thread's scratch has grown. `visit` runs inside the find, holding no lock:
    /// it may call the index, but what such a call changes may or may not show in the rest
    /// of this find's answer.
    ///
    /// ```
    /// # use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// index.process_routing_decision_for_request(&[1, 2, 3, 4], 7);
    /// index.process_routing_decision_for_request(&[1, 2], 8);
    /// let local = compute_block_hash_for_seq(&[1, 2, 3, 4], 2);
    /// let mut best = (0, 0);
    /// index.find_matches_with(&local, |worker, score| best = best.max((score, worker)));
    /// assert_eq!(best, (2, 7));
    /// ```
    pub fn find_matches_with(&self, local: &[LocalBlockHash], visit: impl FnMut(W, u32)) {
        self.inner
            .find_into(Query::Local(local), &mut ScoreVisitor(visit));
    }

    /// As [`find_matches_with`](Self::find_matches_with), from the query's sequence hashes
    /// (see [`find_matches_by_sequence`](Self::find_matches_by_sequence)): the router's
    /// hashes, computed once, and no allocation, the cheapest find.
    ///
    /// ```
    /// # use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// let local = compute_block_hash_for_seq(&[1, 2, 3, 4], 2);
    /// let seq = compute_seq_hashes(&local);
    /// index.process_routing_decision(7, &local, &seq).unwrap();
    /// let mut found = Vec::new();
    /// index.find_matches_by_sequence_with(&seq[..1], |worker, score| found.push((worker, score)));
    /// assert_eq!(found, [(7, 1)]);
    /// ```
    pub fn find_matches_by_sequence_with(&self, seq: &[SequenceHash], visit: impl FnMut(W, u32)) {
        self.inner
            .find_into(Query::Seq(seq), &mut ScoreVisitor(visit));
    }

    /// Forgets `worker`, every data-parallel rank of it: no find reports it until it is
    /// recorded again. O(ranks). Its entries are freed whatever their TTL left, together
    /// with those of every worker removed meanwhile: by the sweeper within two rounds over
    /// the tree, a few shards a tick (16 ticks, 1.6 s at the default tick), or at once by
    /// [`sweep_expired`](Self::sweep_expired); before that, a record that copies a block's holder array leaves the removed workers'
    /// holders out (without [`max_entries`](crate::Builder::max_entries), under which they
    /// count toward the cap until the sweep frees them). So the holders of removed
    /// workers never pile up on shared blocks under churn. Unknown ids are ignored.
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
        let action = || Action::RemoveWorker { worker_id: worker };
        self.replication.share(action);
    }

    /// The (block, worker) entries `worker` holds, all its ranks together (0 for a worker
    /// the index does not know): what [`OverlapScores::tree_sizes`](crate::OverlapScores)
    /// reports for one key, summed over the worker's ranks, including ranks that hold none
    /// of a query. Like `tree_sizes`, it counts entries stored and not yet reclaimed.
    ///
    /// ```
    /// use approx_kv_index::{ApproxKvIndexer, WorkerWithDpRank};
    /// let index = ApproxKvIndexer::builder()
    ///     .block_size(2)
    ///     .build_for::<WorkerWithDpRank>()
    ///     .unwrap();
    /// index.process_routing_decision_for_request(&[1, 2, 3, 4], WorkerWithDpRank::new(7, 0));
    /// index.process_routing_decision_for_request(&[9, 9], WorkerWithDpRank::new(7, 1));
    /// assert_eq!(index.worker_entries(7), 3);
    /// let found = index.find_matches_for_request(&[1, 2]);
    /// assert_eq!(found.tree_sizes[&WorkerWithDpRank::new(7, 0)], 2); // rank 0 only
    /// assert_eq!(index.worker_entries(8), 0);
    /// ```
    pub fn worker_entries(&self, worker: WorkerId) -> usize {
        self.inner.workers.entries_of_worker(worker)
    }

    /// Forgets one key: for [`WorkerWithDpRank`](crate::WorkerWithDpRank), one rank of a
    /// worker (the others stay); for plain ids, the same as
    /// [`remove_worker`](Self::remove_worker).
    pub fn remove_worker_key(&self, worker: W) {
        self.inner.workers.remove_rank(worker);
        self.replication.share(|| Action::RemoveKey {
            worker_id: worker.worker_id(),
            dp_rank: worker.dp_rank(),
        });
    }

    /// Every live (block, worker) pair as a one-block `Stored` event, parents before
    /// children: blocks and parents named by this index's sequence hashes, exact entries
    /// with `expires_in: None`, approximate ones with the TTL they have left. Replaying the
    /// events in order through [`apply_event`](Self::apply_event) into an index with the
    /// same settings and clock rebuilds the state: the same finds, expiring when the
    /// originals would (exact for entries whose sequence hashes are the chain of their
    /// tokens hashes, which all are unless a caller passed other hashes to
    /// [`process_routing_decision`](Self::process_routing_decision)). Engine hashes are not
    /// dumped, nor kept in snapshots.
    ///
    /// ```
    /// # use approx_kv_index::ApproxKvIndexer;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// index.process_routing_decision_for_request(&[1, 2, 3, 4], 4);
    /// assert_eq!(index.dump_events().len(), 2);
    /// ```
    pub fn dump_events(&self) -> Vec<RouterEvent<W>> {
        self.inner.dump()
    }

    /// The live state with each entry's remaining TTL, to [`restore`](Self::restore)
    /// into a fresh index after a restart (see [`Snapshot`](crate::Snapshot)). Read shard
    /// after shard: consistent per entry, not across entries, while callers run.
    pub fn snapshot(&self) -> crate::Snapshot {
        self.inner.snapshot::<W>()
    }

    /// Loads a [`Snapshot`](crate::Snapshot): each entry comes back with the TTL it had
    /// left (at most this index's TTL), counted from now, merged with what the index
    /// already holds. Afterwards the index answers every find as the snapshotted one did
    /// when the snapshot was taken, and expires and (under caps) evicts the restored
    /// entries in the same order: least recently recorded first, deepest blocks first.
    /// Caps are enforced once everything is back. A snapshot of another block size is
    /// refused and changes nothing.
    pub fn restore(&self, snapshot: &crate::Snapshot) -> Result<(), crate::SnapshotError> {
        self.inner.restore::<W>(snapshot)
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
    /// sweeper does this every tick; call it yourself when the sweeper is disabled or with a
    /// manual clock. If the background sweeper is sweeping at that moment, this waits for it
    /// (sweeps take turns, so a sweep that returns has finished its work).
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
        self.inner.stop_helping();
    }
}

impl<W: WorkerKey> Drop for ApproxKvIndexer<W> {
    fn drop(&mut self) {
        self.shutdown();
    }
}
