//! The five indexers under test behind one interface: this crate, Dynamo's
//! `ThreadPoolIndexer<ConcurrentRadixTreeCompressed>` with TTL pruning, Dynamo's actor
//! `KvIndexer` with TTL pruning, SMG's `ChainIndex` (crate `kv-index` 2.0.0, the SGLang
//! model gateway's event-driven index: no TTL, no approximate mode, so a routing decision is
//! applied as the store event an engine would publish for the whole prompt) and SMG's
//! `TokenTree` (the same crate's approximate cache-aware radix tree over tokens: a routing
//! decision is inserted for the chosen tenant; no TTL; a find reports the deepest match and
//! its tenants only). Every method is `async` so one driver loop serves all five; this
//! crate's and SMG's methods never await.
//!
//! Worker ids are `0..N` for a fleet of N workers; a find writes worker `w`'s overlap to
//! `overlap[w]`, so the caller sizes the buffer to the fleet (or to the sharers of the
//! shared-prefix workload, whichever is larger).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use approx_kv_index::{ApproxKvIndexer, PromptHashes, Query};
use dynamo_kv_router::approx::PruneConfig;
use dynamo_kv_router::indexer::{KvIndexer, KvIndexerInterface, KvIndexerMetrics};
use dynamo_kv_router::protocols::{
    compute_block_hash_for_seq as dyn_hash, compute_seq_hash_for_block, BlockHashOptions,
    LocalBlockHash as DynLocal, WorkerWithDpRank,
};
use dynamo_kv_router::{ConcurrentRadixTreeCompressed, ThreadPoolIndexer};
use kv_index::{ChainBlockMap, ChainIndex, StoredBlock, TokenTree};
use tokio_util::sync::CancellationToken;

/// Workers the router chooses among unless `--workers` says otherwise.
pub const DEFAULT_WORKERS: usize = 16;
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
    /// Overlap per worker for precomputed hashes: worker `w`'s matched full blocks go to
    /// `overlap[w]`. The caller zeroes `overlap` and sizes it past every worker recorded.
    async fn find(&self, h: &Self::Hashes, overlap: &mut [u32]);
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
    /// The most workers the subject can index (ids `0..MAX_WORKERS`): the workloads over a
    /// larger fleet are skipped (their figures print as n/a).
    const MAX_WORKERS: usize = usize::MAX;
    /// The most workers one find reports: every worker holding a prefix of the query for
    /// all but SMG's `TokenTree`, which reports the tenants of its deepest match only.
    const MAX_REPORTED: usize = usize::MAX;
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
    type Hashes = PromptHashes;

    #[inline]
    fn hash(&self, tokens: &[u32]) -> Self::Hashes {
        PromptHashes::new(tokens, BLOCK)
    }
    fn blocks(h: &Self::Hashes) -> usize {
        h.len()
    }
    async fn find(&self, h: &Self::Hashes, overlap: &mut [u32]) {
        // The callback form, as SMG's `score_into`: nothing allocated, no answer built;
        // from the hashes the router computed once (hashing counts them), which the
        // record takes too.
        self.0.find_into(Query::prompt(h), &mut |w, s| {
            overlap[w as usize] = s;
        });
    }
    async fn record(&self, h: &Self::Hashes, worker: u64) {
        let _ = self.0.record(worker, Query::prompt(h));
    }
    async fn find_tokens(&self, tokens: &[u32]) -> usize {
        self.0.find(Query::tokens(tokens)).scores.len()
    }
    async fn record_tokens(&self, tokens: &[u32], worker: u64) {
        let _ = self.0.record(worker, Query::tokens(tokens));
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
    async fn find(&self, h: &Self::Hashes, overlap: &mut [u32]) {
        use dynamo_kv_router::SyncIndexer;
        let found = self.0.backend().find_matches(&h.0, false);
        for (w, &s) in &found.scores {
            overlap[w.worker_id as usize] = s;
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
    async fn find(&self, h: &Self::Hashes, overlap: &mut [u32]) {
        if let Ok(found) = self.0.find_matches(h.0.clone()).await {
            for (w, &s) in &found.scores {
                overlap[w.worker_id as usize] = s;
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
/// `ChainIndex` takes), and what the shared-prefix workload needs. A larger fleet is beyond
/// it: its workloads over the fleet are skipped.
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
    const MAX_WORKERS: usize = SMG_MAX_WORKERS;

    #[inline]
    fn hash(&self, tokens: &[u32]) -> Self::Hashes {
        smg_hash(tokens)
    }
    fn blocks(h: &Self::Hashes) -> usize {
        h.len()
    }
    async fn find(&self, h: &Self::Hashes, overlap: &mut [u32]) {
        self.index.score_into(
            h,
            |b| b.content_hash.0,
            false,
            |id, score| {
                let w = self.workers[id as usize].load(Ordering::Acquire);
                overlap[w as usize] = score;
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

/// What SMG's `TokenTree` reports of one find at most: the tenants of the deepest matched
/// node, capped at `kv_index`'s `MATCHED_TENANTS_CAP` (8 in 2.0.0; the constant is not
/// exported).
pub const TOKEN_TREE_REPORTED: usize = 8;

/// The name of worker `w` as SMG's `TokenTree` knows it (a tenant): `worker-{w}`.
fn tenant_of(w: usize) -> String {
    format!("worker-{w}")
}

/// The worker a tenant name of [`tenant_of`] stands for (the router's tenant → worker
/// lookup; parsing costs less than a map of names).
fn worker_of(tenant: &str) -> usize {
    tenant
        .strip_prefix("worker-")
        .and_then(|n| n.parse().ok())
        .expect("a tenant named by tenant_of")
}

/// The tenant names of workers `0..n`, built once for every round (a record passes the
/// chosen worker's name, never formats one). Building them also interns each in
/// `kv_index`'s process-wide tenant pool (an insert into a throwaway tree; the pool is never
/// freed), as a gateway's first request to each worker would: no round and no memory figure
/// pays for it.
pub fn tenant_names(n: usize) -> Arc<[Box<str>]> {
    let names: Arc<[Box<str>]> = (0..n).map(|w| tenant_of(w).into_boxed_str()).collect();
    let scratch = TokenTree::with_config(1, Default::default());
    for name in names.iter() {
        scratch.insert_tokens(&[0], name);
    }
    names
}

/// SMG's `TokenTree` (kv-index 2.0.0), its approximate cache-aware radix tree over tokens:
/// a routing decision is `insert_tokens(prompt, tenant)` for the chosen worker's name (see
/// [`tenant_names`]), a find is `match_prefix_with_counts(prompt)`. Built by
/// `TokenTree::with_config(BLOCK, policy)`: its pages are our 64-token blocks, and the
/// policy is `EvictionPolicy::Lru`, SGLang's and the tree's default, and the only one
/// reachable here (2.0.0 does not export `EvictionPolicy`, so it is passed as
/// `Default::default()`); nothing is evicted in these workloads (the gateway evicts by size
/// from a timer), so the policy only decides that finds do not count hits (LFU would).
///
/// What a find can report: `matched_token_count` (the deepest page-aligned match over all
/// tenants) and `matched_tenants`, the tenants of the deepest matched node, at most
/// [`TOKEN_TREE_REPORTED`] (8) of them in map order. So this subject fills `overlap[w]` with
/// the matched full blocks for those tenants only: every worker holding the deepest match,
/// up to 8 of them; a worker holding a shorter prefix, or a 9th worker holding the deepest,
/// reads 0. The routing choice then sees only these workers' overlaps. A find also stamps
/// the tenant it walks by on each matched node (the tree's LRU bookkeeping): a write.
///
/// It works on tokens, so its [`Subject::Hashes`] is the prompt itself: "hashing" is
/// copying the tokens, and a find from hashes is the same call as a find from tokens. No
/// TTL: its expiry figures are n/a.
pub struct SmgTree {
    tree: TokenTree,
    names: Arc<[Box<str>]>,
}

impl SmgTree {
    /// An empty tree for the workers `names` names (ids `0..names.len()`).
    pub fn new(names: Arc<[Box<str>]>) -> Self {
        Self {
            tree: TokenTree::with_config(BLOCK as usize, Default::default()),
            names,
        }
    }
}

impl Subject for SmgTree {
    type Hashes = Vec<u32>;
    const EXPIRES: bool = false;
    const MAX_REPORTED: usize = TOKEN_TREE_REPORTED;

    #[inline]
    fn hash(&self, tokens: &[u32]) -> Self::Hashes {
        tokens.to_vec()
    }
    fn blocks(h: &Self::Hashes) -> usize {
        h.len() / BLOCK as usize
    }
    async fn find(&self, h: &Self::Hashes, overlap: &mut [u32]) {
        let found = self.tree.match_prefix_with_counts(h);
        let depth = (found.matched_token_count / BLOCK as usize) as u32;
        if depth > 0 {
            for tenant in &found.matched_tenants {
                overlap[worker_of(tenant)] = depth;
            }
        }
    }
    async fn record(&self, h: &Self::Hashes, worker: u64) {
        self.tree.insert_tokens(h, &self.names[worker as usize]);
    }
    async fn find_tokens(&self, tokens: &[u32]) -> usize {
        self.tree
            .match_prefix_with_counts(tokens)
            .matched_tenants
            .len()
    }
    async fn record_tokens(&self, tokens: &[u32], worker: u64) {
        self.tree
            .insert_tokens(tokens, &self.names[worker as usize]);
    }
    async fn flush(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fleet of these tests.
    const WORKERS: usize = 16;

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

    /// `o` with every entry but the deepest zeroed: what SMG's `TokenTree` can report of
    /// the same index (while at most 8 workers share the deepest match).
    fn deepest(mut o: [u32; WORKERS]) -> [u32; WORKERS] {
        let max = o.iter().copied().max().unwrap_or(0);
        for x in &mut o {
            if *x < max {
                *x = 0;
            }
        }
        o
    }

    #[test]
    fn tenant_names_map_back_to_their_workers() {
        let names = tenant_names(1100);
        assert_eq!(names.len(), 1100);
        for (w, name) in names.iter().enumerate() {
            assert_eq!(worker_of(name), w);
        }
    }

    /// The small case of `smg_and_ours_agree_on_a_small_exact_case`: SMG's `TokenTree` reports
    /// the workers holding the deepest match, at ours' depth, and no other.
    #[test]
    fn token_tree_reports_ours_deepest_workers_on_a_small_case() {
        let prompt = tokens(8, 1);
        let mut diverging = prompt[..2 * BLOCK as usize].to_vec();
        diverging.extend(tokens(3, 2));
        let ours = Ours::new(Duration::from_secs(600), Duration::from_millis(100));
        let tree = SmgTree::new(tenant_names(WORKERS));
        for (tokens, worker) in [
            (&prompt[..], 3),
            (&prompt[..5 * BLOCK as usize + 7], 5),
            (&diverging[..], 7),
        ] {
            run(ours.record(&ours.hash(tokens), worker));
            run(tree.record(&tree.hash(tokens), worker));
        }
        let mut want = [0; WORKERS];
        want[3] = 8;
        assert_eq!(overlaps(&tree, &prompt), (want, 1));
        assert_eq!(deepest(overlaps(&ours, &prompt).0), want);
        // Workers 3 and 5 both hold the first 5 blocks.
        let mut want = [0; WORKERS];
        (want[3], want[5]) = (5, 5);
        assert_eq!(overlaps(&tree, &prompt[..5 * BLOCK as usize]), (want, 2));
        assert_eq!(
            deepest(overlaps(&ours, &prompt[..5 * BLOCK as usize]).0),
            want
        );
        let mut want = [0; WORKERS];
        want[7] = 5;
        assert_eq!(overlaps(&tree, &diverging), (want, 1));
        assert_eq!(deepest(overlaps(&ours, &diverging).0), want);
        assert_eq!(overlaps(&tree, &tokens(4, 3)), ([0; WORKERS], 0));
        // Less than a page matches nothing.
        assert_eq!(overlaps(&tree, &prompt[..63]), ([0; WORKERS], 0));
    }

    /// The head of the bundled trace, request `i` recorded for worker `i % 16`: on every find
    /// SMG's `TokenTree` reports ours' deepest workers (up to 8 of them) at ours' depth.
    #[test]
    fn token_tree_reports_ours_deepest_workers_on_the_trace_head() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../data/conversation_head2000.jsonl"
        );
        let reqs = crate::trace::load(std::path::Path::new(path), 2000).expect("bundled trace");
        let ours = Ours::new(Duration::from_secs(600), Duration::from_millis(100));
        let tree = SmgTree::new(tenant_names(WORKERS));
        for (i, r) in reqs.iter().enumerate() {
            let w = (i % WORKERS) as u64;
            run(ours.record_tokens(r, w));
            run(tree.record_tokens(r, w));
        }
        let (mut several, mut capped) = (0, 0);
        for (i, r) in reqs.iter().enumerate() {
            let want = deepest(overlaps(&ours, r).0);
            let holders = want.iter().filter(|&&x| x > 0).count();
            let (got, found) = overlaps(&tree, r);
            assert_eq!(found, holders.min(TOKEN_TREE_REPORTED), "request {i}");
            if holders <= TOKEN_TREE_REPORTED {
                assert_eq!(got, want, "request {i}");
            } else {
                capped += 1;
                for (w, &x) in got.iter().enumerate() {
                    assert!(x == 0 || x == want[w], "request {i}, worker {w}");
                }
            }
            several += usize::from(holders > 1);
        }
        assert!(several > 0, "the head shares prefixes");
        eprintln!("{several} finds with several deepest workers, {capped} past the cap");
    }
}
