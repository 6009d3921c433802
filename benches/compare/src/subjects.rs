//! The four indexers under test behind one interface: this crate, Dynamo's
//! `ThreadPoolIndexer<ConcurrentRadixTreeCompressed>` with TTL pruning, Dynamo's actor
//! `KvIndexer` with TTL pruning, and SMG's `ChainIndex` (crate `kv-index` 2.0.0, the SGLang
//! model gateway's event-driven index: no TTL, no approximate mode, so a routing decision is
//! applied as the store event an engine would publish for the whole prompt). Every method is
//! `async` so one driver loop serves all four; this crate's and SMG's methods never await.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use approx_kv_index::{ApproxKvIndexer, LocalBlockHash, SequenceHash};
use dynamo_kv_router::approx::PruneConfig;
use dynamo_kv_router::indexer::{KvIndexer, KvIndexerInterface, KvIndexerMetrics};
use dynamo_kv_router::protocols::{
    compute_block_hash_for_seq as dyn_hash, compute_seq_hash_for_block, BlockHashOptions,
    LocalBlockHash as DynLocal, WorkerWithDpRank,
};
use dynamo_kv_router::{ConcurrentRadixTreeCompressed, ThreadPoolIndexer};
use kv_index::{ChainBlockMap, ChainIndex, StoredBlock};
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
    /// Whether entries expire (a TTL): the expiry-lag workload applies only then.
    const EXPIRES: bool = true;
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
        // The callback form, as SMG's `score_into`: nothing allocated, no answer built;
        // from the sequence hashes the router computed once (hashing counts them), which
        // the record takes too.
        self.0.find_matches_by_sequence_with(&h.1, |w, s| {
            overlap[w as usize % WORKERS] = s;
        });
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

/// Workers SMG's index is built for: the gateway's setting (1,024 per model, the most a
/// `ChainIndex` takes), and what the shared-prefix workload needs.
pub const SMG_MAX_WORKERS: usize = 1024;

/// One worker as SMG's index knows it: its interned id and its lane map (engine hash to
/// place, what the index needs to apply the worker's events; one writer at a time).
struct SmgLane {
    id: u32,
    map: Mutex<ChainBlockMap>,
}

/// SMG's `ChainIndex` (kv-index 2.0.0), exact and event-driven: no TTL and no approximate
/// mode, so a routing decision is applied as the store event an engine would publish for the
/// whole prompt, `apply_stored(worker, blocks, None, lane map)` from the root. Workers are
/// interned (`intern_worker`) at their first store, each with its own lane map behind a
/// mutex; finds are `score_into` over the content hashes, written straight into the caller's
/// overlap array (nothing allocated). Records apply synchronously on the caller.
pub struct Smg {
    index: ChainIndex,
    /// Per worker of ours: its lane, made at its first store.
    lanes: Box<[OnceLock<SmgLane>]>,
    /// Per interned id: the worker of ours it stands for.
    workers: Box<[AtomicU32]>,
}

impl Default for Smg {
    /// An empty index for [`SMG_MAX_WORKERS`] workers.
    fn default() -> Self {
        Self {
            index: ChainIndex::with_max_workers(SMG_MAX_WORKERS),
            lanes: (0..SMG_MAX_WORKERS).map(|_| OnceLock::new()).collect(),
            workers: (0..SMG_MAX_WORKERS).map(|_| AtomicU32::new(0)).collect(),
        }
    }
}

impl Smg {
    fn lane(&self, worker: u64) -> &SmgLane {
        self.lanes[worker as usize].get_or_init(|| {
            let id = self
                .index
                .intern_worker(&format!("worker-{worker}"))
                .expect("at most SMG_MAX_WORKERS workers");
            self.workers[id as usize].store(worker as u32, Ordering::Release);
            SmgLane {
                id,
                map: Mutex::new(ChainBlockMap::new()),
            }
        })
    }
}

/// SMG's hashing of a prompt at block size 64, as one pass: per full block the crate's
/// content hash (`compute_content_hash`, XXH3 of the tokens, which is what
/// `compute_request_content_hashes` maps over the blocks) and the crate's prefix chain over
/// them (position 0 the bare content hash, then `chain_prefix_hash`, as
/// `request_prefix_hashes` computes it): the engine hashes of the synthesized store event.
pub fn smg_hash(tokens: &[u32]) -> Vec<StoredBlock> {
    let mut out = Vec::with_capacity(tokens.len() / BLOCK as usize);
    let mut prev = None;
    for block in tokens.chunks_exact(BLOCK as usize) {
        let content = kv_index::compute_content_hash(block);
        let seq = match prev {
            None => kv_index::SequenceHash(content.0),
            Some(p) => kv_index::chain_prefix_hash(p, content),
        };
        prev = Some(seq);
        out.push(StoredBlock {
            seq_hash: seq,
            content_hash: content,
        });
    }
    out
}

impl Subject for Smg {
    type Hashes = Vec<StoredBlock>;
    const EXPIRES: bool = false;

    #[inline]
    fn hash(&self, tokens: &[u32]) -> Self::Hashes {
        smg_hash(tokens)
    }
    fn blocks(h: &Self::Hashes) -> usize {
        h.len()
    }
    async fn find(&self, h: &Self::Hashes, overlap: &mut [u32; WORKERS]) {
        self.index.score_into(
            h,
            |b| b.content_hash.0,
            false,
            |id, score| {
                let w = self.workers[id as usize].load(Ordering::Acquire);
                overlap[w as usize % WORKERS] = score;
            },
        );
    }
    async fn record(&self, h: &Self::Hashes, worker: u64) {
        let lane = self.lane(worker);
        let mut map = lane.map.lock().unwrap_or_else(|e| e.into_inner());
        self.index
            .apply_stored(lane.id, h, None, &mut map)
            .expect("a store from the root has no parent to miss");
    }
    async fn find_tokens(&self, tokens: &[u32]) -> usize {
        let content = kv_index::compute_request_content_hashes(tokens, BLOCK as usize);
        let mut found = 0;
        self.index
            .score_into(&content, |c| c.0, false, |_, _| found += 1);
        found
    }
    async fn record_tokens(&self, tokens: &[u32], worker: u64) {
        let h = smg_hash(tokens);
        self.record(&h, worker).await;
    }
    async fn flush(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a subject's future; this crate's and SMG's never await.
    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    /// Per-worker overlaps of `tokens` (hashing excluded) and the workers `find_tokens` counts.
    fn overlaps<S: Subject>(s: &S, tokens: &[u32]) -> ([u32; WORKERS], usize) {
        let h = s.hash(tokens);
        let mut overlap = [0; WORKERS];
        run(s.find(&h, &mut overlap));
        (overlap, run(s.find_tokens(tokens)))
    }

    fn tokens(blocks: u32, seed: u32) -> Vec<u32> {
        (0..blocks * BLOCK)
            .map(|t| (t ^ seed.wrapping_mul(0x9E37_79B9)).wrapping_mul(2_654_435_761))
            .collect()
    }

    #[test]
    fn smg_hash_is_the_crates_content_hashes_and_prefix_chain() {
        let mut prompt = tokens(9, 1);
        prompt.extend([1, 2, 3]); // a partial last block is not a block
        let content = kv_index::compute_request_content_hashes(&prompt, BLOCK as usize);
        let chain = kv_index::request_prefix_hashes(&content);
        let ours = smg_hash(&prompt);
        assert_eq!(ours.len(), 9);
        for (i, b) in ours.iter().enumerate() {
            assert_eq!(b.content_hash, content[i], "block {i}");
            assert_eq!(b.seq_hash, chain[i], "block {i}");
        }
    }

    /// Worker 3 holds a prompt, worker 5 a prefix of it, worker 7 a prompt that diverges
    /// after two blocks: both indexes must score each worker by the prefix it holds.
    #[test]
    fn smg_and_ours_agree_on_a_small_exact_case() {
        let prompt = tokens(8, 1);
        let mut diverging = prompt[..2 * BLOCK as usize].to_vec();
        diverging.extend(tokens(3, 2));
        let ours = Ours::new(Duration::from_secs(600), Duration::from_millis(100));
        let smg = Smg::default();
        for (tokens, worker) in [
            (&prompt[..], 3),
            (&prompt[..5 * BLOCK as usize + 7], 5),
            (&diverging[..], 7),
        ] {
            run(ours.record(&ours.hash(tokens), worker));
            run(smg.record(&smg.hash(tokens), worker));
        }
        let mut want = [0; WORKERS];
        (want[3], want[5], want[7]) = (8, 5, 2);
        assert_eq!(overlaps(&ours, &prompt), (want, 3));
        assert_eq!(overlaps(&smg, &prompt), (want, 3));
        let mut want = [0; WORKERS];
        (want[3], want[5], want[7]) = (2, 2, 5);
        assert_eq!(overlaps(&ours, &diverging), (want, 3));
        assert_eq!(overlaps(&smg, &diverging), (want, 3));
        assert_eq!(overlaps(&smg, &tokens(4, 3)), ([0; WORKERS], 0));
    }

    /// The head of the bundled trace, request `i` recorded for worker `i % 16`: every find
    /// scores every worker the same in both indexes.
    #[test]
    fn smg_and_ours_agree_on_the_trace_head() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../data/conversation_head2000.jsonl"
        );
        let reqs = crate::trace::load(std::path::Path::new(path), 2000).expect("bundled trace");
        let ours = Ours::new(Duration::from_secs(600), Duration::from_millis(100));
        let smg = Smg::default();
        for (i, r) in reqs.iter().enumerate() {
            let w = (i % WORKERS) as u64;
            run(ours.record_tokens(r, w));
            run(smg.record_tokens(r, w));
        }
        let mut matched = 0;
        for (i, r) in reqs.iter().enumerate() {
            let (o, s) = (overlaps(&ours, r), overlaps(&smg, r));
            assert_eq!(o, s, "request {i}");
            matched += o.1;
        }
        assert!(matched > reqs.len(), "the head shares prefixes: {matched}");
    }
}
