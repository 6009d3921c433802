//! The three indexers under test behind one interface: this crate, Dynamo's
//! `ThreadPoolIndexer<ConcurrentRadixTreeCompressed>` with TTL pruning, and Dynamo's actor
//! `KvIndexer` with TTL pruning. Every method is `async` so one driver loop serves all
//! three; this crate's methods never await.

use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::{ApproxKvIndexer, LocalBlockHash, SequenceHash};
use dynamo_kv_router::approx::PruneConfig;
use dynamo_kv_router::indexer::{KvIndexer, KvIndexerInterface, KvIndexerMetrics};
use dynamo_kv_router::protocols::{
    compute_block_hash_for_seq as dyn_hash, compute_seq_hash_for_block, BlockHashOptions,
    LocalBlockHash as DynLocal, WorkerWithDpRank,
};
use dynamo_kv_router::{ConcurrentRadixTreeCompressed, ThreadPoolIndexer};
use tokio_util::sync::CancellationToken;

/// Workers the router chooses among.
pub const WORKERS: usize = 16;
/// Tokens per index block.
pub const BLOCK: u32 = 64;
/// Dynamo's default number of writer threads for the thread-pool indexer.
pub const DYN_WRITERS: usize = 4;

/// One indexer under test.
#[allow(async_fn_in_trait)]
pub trait Subject: Sync {
    /// The hashes a router computes once per request.
    type Hashes: Send + Sync;
    /// Local and sequence hashes of `tokens`.
    fn hash(&self, tokens: &[u32]) -> Self::Hashes;
    /// Number of blocks in `h`.
    fn blocks(h: &Self::Hashes) -> usize;
    /// Overlap per worker for precomputed hashes; `overlap` is zeroed by the caller.
    async fn find(&self, h: &Self::Hashes, overlap: &mut [u32; WORKERS]);
    /// Records that `worker` was chosen for the prompt of `h`.
    async fn record(&self, h: &Self::Hashes, worker: u64);
    /// Find from tokens (hashing included); returns how many workers matched.
    async fn find_tokens(&self, tokens: &[u32]) -> usize;
    /// Record from tokens (hashing included).
    async fn record_tokens(&self, tokens: &[u32], worker: u64);
    /// Waits until every record issued so far is applied.
    async fn flush(&self);
    /// Whether all stored entries have been reclaimed, if the subject can tell apart
    /// "invisible" from "freed" (only this crate can: its reads check expiry themselves).
    fn reclaimed(&self) -> Option<bool> {
        None
    }
}

/// This crate.
pub struct Ours(pub ApproxKvIndexer);

impl Ours {
    /// Block 64, the given TTL and sweeper tick.
    pub fn new(ttl: Duration, tick: Duration) -> Self {
        let index = ApproxKvIndexer::builder()
            .block_size(BLOCK)
            .ttl(ttl)
            .tick(tick)
            .build()
            .expect("valid settings");
        Self(index)
    }
}

impl Subject for Ours {
    type Hashes = (Vec<LocalBlockHash>, Vec<SequenceHash>);

    #[inline]
    fn hash(&self, tokens: &[u32]) -> Self::Hashes {
        let local = approx_kv_index::compute_block_hash_for_seq(tokens, BLOCK);
        let seq = approx_kv_index::compute_seq_hashes(&local);
        (local, seq)
    }
    fn blocks(h: &Self::Hashes) -> usize {
        h.0.len()
    }
    async fn find(&self, h: &Self::Hashes, overlap: &mut [u32; WORKERS]) {
        let found = self.0.find_matches(&h.0);
        for (&w, &s) in &found.scores {
            overlap[w as usize % WORKERS] = s;
        }
    }
    async fn record(&self, h: &Self::Hashes, worker: u64) {
        let _ = self.0.process_routing_decision(worker, &h.0, &h.1);
    }
    async fn find_tokens(&self, tokens: &[u32]) -> usize {
        self.0.find_matches_for_request(tokens).scores.len()
    }
    async fn record_tokens(&self, tokens: &[u32], worker: u64) {
        self.0.process_routing_decision_for_request(tokens, worker);
    }
    async fn flush(&self) {}
    fn reclaimed(&self) -> Option<bool> {
        Some(self.0.stats().entries == 0)
    }
}

type DynHashes = (Vec<DynLocal>, Vec<u64>);

fn dyn_hashes(tokens: &[u32]) -> DynHashes {
    let local = dyn_hash(tokens, BLOCK, BlockHashOptions::default());
    let seq = compute_seq_hash_for_block(&local);
    (local, seq)
}

fn rank(worker: u64) -> WorkerWithDpRank {
    WorkerWithDpRank::new(worker, 0)
}

/// Dynamo's `ThreadPoolIndexer<ConcurrentRadixTreeCompressed>` in approximate (TTL) mode.
/// Finds run inline on the caller (on the backend, as its async `find_matches` does);
/// records go to a writer thread and wait for its acknowledgement.
pub struct DynPool(pub ThreadPoolIndexer<ConcurrentRadixTreeCompressed>);

impl DynPool {
    /// Must be called inside a tokio runtime context, or its TTL task never starts.
    pub fn new(ttl: Duration) -> Self {
        Self(ThreadPoolIndexer::new_with_pruning(
            ConcurrentRadixTreeCompressed::new(),
            DYN_WRITERS,
            BLOCK,
            PruneConfig { ttl },
        ))
    }
}

impl Subject for DynPool {
    type Hashes = DynHashes;

    #[inline]
    fn hash(&self, tokens: &[u32]) -> Self::Hashes {
        dyn_hashes(tokens)
    }
    fn blocks(h: &Self::Hashes) -> usize {
        h.0.len()
    }
    async fn find(&self, h: &Self::Hashes, overlap: &mut [u32; WORKERS]) {
        use dynamo_kv_router::SyncIndexer;
        let found = self.0.backend().find_matches(&h.0, false);
        for (w, &s) in &found.scores {
            overlap[w.worker_id as usize % WORKERS] = s;
        }
    }
    async fn record(&self, h: &Self::Hashes, worker: u64) {
        let _ = self
            .0
            .process_routing_decision_hash_slices(rank(worker), &h.0, &h.1)
            .await;
    }
    async fn find_tokens(&self, tokens: &[u32]) -> usize {
        use dynamo_kv_router::SyncIndexer;
        let local = dyn_hash(tokens, BLOCK, BlockHashOptions::default());
        self.0.backend().find_matches(&local, false).scores.len()
    }
    async fn record_tokens(&self, tokens: &[u32], worker: u64) {
        let h = dyn_hashes(tokens);
        self.record(&h, worker).await;
    }
    async fn flush(&self) {
        let _ = self.0.flush_and_wait().await;
    }
}

/// Dynamo's actor `KvIndexer` in approximate (TTL) mode: one thread owns the tree; finds
/// are a request/response over a channel, records are sent without waiting.
pub struct DynActor(pub KvIndexer);

impl DynActor {
    /// The actor builds its own runtime on its own thread.
    pub fn new(ttl: Duration) -> Self {
        Self(KvIndexer::new_with_pruning(
            CancellationToken::new(),
            BLOCK,
            Arc::new(KvIndexerMetrics::new_unregistered()),
            Some(PruneConfig { ttl }),
        ))
    }
}

impl Drop for DynActor {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

impl Subject for DynActor {
    type Hashes = DynHashes;

    #[inline]
    fn hash(&self, tokens: &[u32]) -> Self::Hashes {
        dyn_hashes(tokens)
    }
    fn blocks(h: &Self::Hashes) -> usize {
        h.0.len()
    }
    async fn find(&self, h: &Self::Hashes, overlap: &mut [u32; WORKERS]) {
        if let Ok(found) = self.0.find_matches(h.0.clone()).await {
            for (w, &s) in &found.scores {
                overlap[w.worker_id as usize % WORKERS] = s;
            }
        }
    }
    async fn record(&self, h: &Self::Hashes, worker: u64) {
        let _ = self
            .0
            .process_routing_decision_with_hashes(rank(worker), h.0.clone(), h.1.clone())
            .await;
    }
    async fn find_tokens(&self, tokens: &[u32]) -> usize {
        self.0
            .find_matches_for_request(tokens, None, None, None)
            .await
            .map(|s| s.scores.len())
            .unwrap_or(0)
    }
    async fn record_tokens(&self, tokens: &[u32], worker: u64) {
        let (local, seq) = dyn_hashes(tokens);
        let _ = self
            .0
            .process_routing_decision_with_hashes(rank(worker), local, seq)
            .await;
    }
    async fn flush(&self) {
        let _ = self.0.flush_and_wait().await;
    }
}
