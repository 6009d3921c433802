//! Drives an index and the reference [`Model`](super::model::Model) with the same
//! operations on the same [`ManualClock`], checking after every step that they agree.
//!
//! Shared by the property tests and the differential fuzz target (`#[path]`); failures
//! are panics, which both proptest and libFuzzer report with the failing input.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::{
    compute_block_hash_for_seq, compute_block_hash_for_seq_salted, compute_seq_hashes,
    ApproxKvIndexer, Clock, HashSalt, KvCacheEventData, KvCacheRemoveData, KvCacheStoreData,
    KvCacheStoredBlockData, LocalBlockHash, ManualClock, RecordError, RequestHandle, RouterEvent,
    SequenceHash, Snapshot, WorkerId,
};

use super::model::{chain_next, clock_time, nanos, Model, ModelRequest, SnapshotRows, NEVER};

/// The clock stops here: past 2^63 ns (a range once found broken), short of the end of
/// time by more than the offset by which capacity-only indexes order decisions (2^62 ns):
/// the documented boundary past which decisions recorded under caps are no longer ordered.
pub const CLOCK_CAP: u64 = u64::MAX - NEVER - (1 << 40);

/// One step of a test run.
#[derive(Debug, Clone)]
pub enum Op {
    /// `process_routing_decision_for_request_salted(tokens, worker, salt(salt))`.
    Record {
        worker: WorkerId,
        tokens: Vec<u32>,
        salt: u8,
    },
    /// `process_routing_decision(worker, local, seq)`; `seq` may be of another length or
    /// not chained from `local` (the index then places the blocks by the chain of `local`).
    RecordHashes {
        worker: WorkerId,
        local: Vec<LocalBlockHash>,
        seq: Vec<SequenceHash>,
    },
    /// A `Stored` KV event for blocks with tokens hashes `local[i]` and engine hashes
    /// `seq[i]` (this index's sequence hashes, or anything else), after `parent`.
    Stored {
        worker: WorkerId,
        parent: Option<SequenceHash>,
        local: Vec<LocalBlockHash>,
        seq: Vec<SequenceHash>,
    },
    /// A `Removed` KV event.
    Removed {
        worker: WorkerId,
        seq: Vec<SequenceHash>,
    },
    /// A `Cleared` KV event.
    Cleared(WorkerId),
    /// `find_matches_for_request_salted(tokens, salt(salt))`.
    Find { tokens: Vec<u32>, salt: u8 },
    /// `find_matches(local)`.
    FindHashes { local: Vec<LocalBlockHash> },
    /// `remove_worker(worker)`.
    RemoveWorker(WorkerId),
    /// `set_worker_capacity(worker, capacity)`.
    SetCapacity {
        worker: WorkerId,
        capacity: Option<usize>,
    },
    /// Moves the clock forward (nanoseconds, up to [`CLOCK_CAP`]).
    Advance(u64),
    /// `sweep_expired()`.
    Sweep,
    /// `shutdown()`: the index must keep working.
    Shutdown,
    /// `snapshot()`, through bytes and back, `restore`d into a fresh index on the same
    /// clock, which replaces the old one.
    SnapshotRestore,
    /// Takes a `snapshot()` and keeps it (with the model's) for [`Op::RestoreSaved`].
    SaveSnapshot,
    /// `restore`s the kept snapshot into the index as it is now (a merge).
    RestoreSaved,
    /// `dump_events()` applied in order to a fresh index on the same clock, which replaces
    /// the old one.
    ReplayDump,
    /// `begin_request(worker, &tokens)`: the handle is kept.
    Begin { worker: WorkerId, tokens: Vec<u32> },
    /// `request_output` of the kept request `request` (modulo their count) with its tokens
    /// so far and `more` after them.
    Output { request: usize, more: Vec<u32> },
    /// `observe_cached` of a kept request, `cached` tokens.
    Observe { request: usize, cached: usize },
    /// `observe_cached` of a kept request, its whole prompt cached.
    ObserveAll { request: usize },
    /// `finish_request` of a kept request.
    Finish { request: usize },
}

/// Salt 0 is none; 1 a LoRA adapter; others a cache namespace.
pub fn salt(n: u8) -> HashSalt {
    match n {
        0 => HashSalt::NONE,
        1 => HashSalt::new(Some("adapter"), None),
        _ => HashSalt::new(None, Some("tenant")),
    }
}

/// The sequence hashes of blocks `local` chained after `parent`.
pub fn chain_from(parent: Option<SequenceHash>, local: &[LocalBlockHash]) -> Vec<SequenceHash> {
    let mut prev = parent.map(|p| p.0);
    local
        .iter()
        .map(|&l| {
            let next = chain_next(prev, l);
            prev = Some(next);
            SequenceHash(next)
        })
        .collect()
}

/// A saved snapshot, with the model's rows and capacities for it.
type Saved = (Snapshot, SnapshotRows, Vec<(WorkerId, usize)>);

/// The settings of an index under test.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub block_size: u32,
    pub ttl: Duration,
    pub tick: Duration,
    /// Run the background sweeper (reclamation then happens at real-time ticks, so
    /// stored counts are only bounded by the model).
    pub background: bool,
    pub max_blocks_per_worker: Option<usize>,
    pub max_entries: Option<usize>,
}

fn build(s: &Settings, clock: &Arc<ManualClock>) -> ApproxKvIndexer {
    let mut b = ApproxKvIndexer::builder()
        .block_size(s.block_size)
        .ttl(s.ttl)
        .tick(s.tick)
        .clock(clock.clone())
        .background_sweeper(s.background);
    if let Some(cap) = s.max_blocks_per_worker {
        b = b.max_blocks_per_worker(cap);
    }
    if let Some(cap) = s.max_entries {
        b = b.max_entries(cap);
    }
    b.build().expect("valid settings")
}

/// An index, its model, and the clock they share.
pub struct Harness {
    /// The clock of the index; the model is given its readings.
    pub clock: Arc<ManualClock>,
    /// The index under test.
    pub index: ApproxKvIndexer,
    /// The reference.
    pub model: Model,
    settings: Settings,
    ttl: u64,
    records: u64,
    finds: u64,
    events: u64,
    saved: Option<Saved>,
    /// Running requests: the index's handle, the model's, the tokens so far, and the
    /// prompt's length in tokens.
    requests: Vec<(RequestHandle, ModelRequest, Vec<u32>, usize)>,
}

impl Harness {
    /// An uncapped index with the sweeper thread disabled (all reclamation is explicit),
    /// or enabled (it then sweeps at real-time ticks of `tick` on the manual clock).
    pub fn new(block_size: u32, ttl: Duration, tick: Duration, background: bool) -> Self {
        Self::with(Settings {
            block_size,
            ttl,
            tick,
            background,
            max_blocks_per_worker: None,
            max_entries: None,
        })
    }

    /// An index with any settings.
    pub fn with(settings: Settings) -> Self {
        let clock = Arc::new(ManualClock::new());
        let index = build(&settings, &clock);
        let s = settings;
        Self {
            clock,
            index,
            model: Model::with_caps(s.ttl, s.max_blocks_per_worker, s.max_entries),
            settings,
            ttl: nanos(s.ttl),
            records: 0,
            finds: 0,
            events: 0,
            saved: None,
            requests: Vec::new(),
        }
    }

    fn now(&self) -> u64 {
        clock_time(self.clock.now())
    }

    fn event(&mut self, worker: WorkerId, data: KvCacheEventData) {
        self.events += 1;
        let event = RouterEvent {
            worker_id: worker,
            event_id: self.events,
            data,
        };
        self.index.apply_event(&event);
    }

    /// Applies `op` to both and checks that they agree: the op's own answers, then the
    /// whole state ([`Harness::check_state`]).
    pub fn apply(&mut self, op: &Op) {
        self.step(op);
        self.check_state();
    }

    /// Applies `op` to both and checks the op's own answers (finds, request outputs,
    /// errors), but not the whole state: for the setup of a larger step (a fleet's records),
    /// whose state is checked once after it. A state check is a dump of the index, so
    /// checking after each of a fleet's records made a fuzz input of one fleet quadratic.
    pub fn step(&mut self, op: &Op) {
        let now = self.now();
        let block_size = self.index.block_size();
        match op {
            Op::Record {
                worker,
                tokens,
                salt: s,
            } => {
                let (w, s) = (*worker, salt(*s));
                self.index
                    .process_routing_decision_for_request_salted(tokens, w, s);
                let local = compute_block_hash_for_seq_salted(tokens, block_size, s);
                self.model
                    .record(now, w, &local, &compute_seq_hashes(&local));
                self.records += u64::from(!local.is_empty());
            }
            Op::RecordHashes { worker, local, seq } => {
                let got = self.index.process_routing_decision(*worker, local, seq);
                if local.len() == seq.len() {
                    assert_eq!(got, Ok(()), "{op:?}");
                    // Placed by the chain of `local`, whatever `seq` says.
                    self.model
                        .record(now, *worker, local, &compute_seq_hashes(local));
                    self.records += u64::from(!seq.is_empty());
                } else {
                    let want = RecordError::LengthMismatch {
                        local: local.len(),
                        seq: seq.len(),
                    };
                    assert_eq!(got, Err(want), "{op:?}");
                }
            }
            Op::Stored {
                worker,
                parent,
                local,
                seq,
            } => {
                let blocks = local.iter().zip(seq).map(|(&tokens_hash, &block_hash)| {
                    KvCacheStoredBlockData {
                        block_hash,
                        tokens_hash,
                        expires_in: None,
                    }
                });
                let data = KvCacheStoreData {
                    parent_hash: *parent,
                    blocks: blocks.collect(),
                };
                let rejected = self.index.stats().rejected_events;
                self.event(*worker, KvCacheEventData::Stored(data));
                let blocks: Vec<_> = local
                    .iter()
                    .zip(seq)
                    .map(|(&l, s)| (l, s.0, None))
                    .collect();
                let accepted = self
                    .model
                    .stored(now, *worker, parent.map(|p| p.0), &blocks);
                let rejected = self.index.stats().rejected_events - rejected;
                assert_eq!(rejected, u64::from(!accepted), "{op:?}: rejected?");
            }
            Op::Removed { worker, seq } => {
                let data = KvCacheRemoveData {
                    block_hashes: seq.clone(),
                };
                self.event(*worker, KvCacheEventData::Removed(data));
                self.model.removed(*worker, seq);
            }
            Op::Cleared(worker) => {
                self.event(*worker, KvCacheEventData::Cleared);
                self.model.remove_worker(*worker);
            }
            Op::Find { tokens, salt: s } => {
                self.finds += 1;
                let local = compute_block_hash_for_seq_salted(tokens, block_size, salt(*s));
                let got = self.index.find_matches_for_request_salted(tokens, salt(*s));
                self.check_find(&local, got);
            }
            Op::FindHashes { local } => {
                // From local hashes and from their sequence hashes, into scores and into a
                // callback: all four equal the model.
                self.finds += 4;
                self.check_find(local, self.index.find_matches(local));
                let seq = compute_seq_hashes(local);
                self.check_find(local, self.index.find_matches_by_sequence(&seq));
                let mut visited = Vec::new();
                self.index
                    .find_matches_with(local, |w, score| visited.push((w, score)));
                self.check_visited(local, visited);
                let mut visited = Vec::new();
                self.index
                    .find_matches_by_sequence_with(&seq, |w, score| visited.push((w, score)));
                self.check_visited(local, visited);
            }
            Op::RemoveWorker(worker) => {
                self.index.remove_worker(*worker);
                self.model.remove_worker(*worker);
            }
            Op::SetCapacity { worker, capacity } => {
                self.index.set_worker_capacity(*worker, *capacity);
                self.model.set_capacity(now, *worker, *capacity);
                assert_eq!(
                    self.index.worker_capacity(*worker),
                    self.model.capacity_of(*worker),
                    "capacity of {worker}"
                );
            }
            Op::Advance(by) => {
                let to = now.saturating_add(*by).min(CLOCK_CAP);
                self.clock.set(Duration::from_nanos(to));
            }
            Op::Sweep => {
                let before = self.index.stats().entries;
                // Removed workers' entries the index dropped already (array copies): the
                // sweep frees the rest, and the model all of them.
                let dropped = self.model.stored_count(None).saturating_sub(before);
                let freed = self.index.sweep_expired();
                let model_freed = self.model.sweep(now);
                let after = self.index.stats().entries;
                if !self.settings.background {
                    assert_eq!(before, after + freed, "sweep_expired() count vs entries");
                    assert_eq!(freed + dropped, model_freed, "sweep_expired() at t={now}");
                }
            }
            Op::Shutdown => self.index.shutdown(),
            Op::SnapshotRestore => {
                let snapshot = self.index.snapshot();
                let bytes = snapshot.to_bytes();
                assert_eq!(Snapshot::from_bytes(&bytes).as_ref(), Ok(&snapshot));
                let fresh = build(&self.settings, &self.clock);
                fresh.restore(&snapshot).expect("same block size");
                self.index = fresh;
                self.model = self.model.restored(now);
                (self.records, self.finds) = (0, 0);
                self.requests.clear(); // handles do not travel with a snapshot
            }
            Op::ReplayDump => {
                let fresh = build(&self.settings, &self.clock);
                for event in self.index.dump_events() {
                    fresh.apply_event(&event);
                }
                {
                    assert_eq!(
                        fresh.stats().rejected_events,
                        0,
                        "a dumped event was rejected"
                    );
                }
                self.index = fresh;
                self.model = self.model.replayed(now);
                (self.records, self.finds) = (0, 0);
                self.requests.clear();
            }
            Op::SaveSnapshot => {
                let snapshot = self.index.snapshot();
                let got: Vec<_> = snapshot
                    .entries
                    .iter()
                    .map(|e| {
                        let parent = if e.depth == 0 { 0 } else { e.parent.0 };
                        let left = nanos(e.ttl_left);
                        (
                            e.worker_id,
                            e.block.0,
                            parent,
                            e.depth,
                            e.local.0,
                            e.exact,
                            left,
                        )
                    })
                    .collect();
                let want = self.model.snapshot(now);
                if self.settings.background {
                    // A block stored below a parent whose node is gone gets depth 1 (its
                    // position is unknown); with the sweeper reclaiming nodes on its own
                    // time, whether the parent's node was still there is not the model's
                    // to say: compare everything but depths.
                    let without_depth = |rows: &[(u64, u64, u64, u32, u64, bool, u64)]| {
                        let mut rows: Vec<_> = rows
                            .iter()
                            .map(|&(w, b, p, _, l, x, t)| (w, b, p, l, x, t))
                            .collect();
                        rows.sort_unstable();
                        rows
                    };
                    assert_eq!(
                        without_depth(&got),
                        without_depth(&want),
                        "snapshot at t={now}"
                    );
                } else {
                    assert_eq!(got, want, "snapshot at t={now}");
                }
                self.saved = Some((snapshot, want, self.model.capacity_rows()));
            }
            Op::Begin { worker, tokens } => {
                let handle = self.index.begin_request(*worker, tokens);
                let local = compute_block_hash_for_seq(tokens, block_size);
                let model = self
                    .model
                    .begin(now, *worker, &local, &compute_seq_hashes(&local));
                assert_eq!(handle.predicted_blocks(), model.predicted, "{op:?}");
                assert_eq!(handle.blocks(), local.len(), "{op:?}");
                self.records += u64::from(!local.is_empty());
                self.requests
                    .push((handle, model, tokens.clone(), tokens.len()));
            }
            Op::Output { request, more } => {
                if let Some(at) = self.kept(*request) {
                    let (handle, model, tokens, _) = &mut self.requests[at];
                    let mut so_far = tokens.clone();
                    so_far.extend(more);
                    let local = compute_block_hash_for_seq(&so_far, block_size);
                    let joined = self.index.request_output(handle, &so_far);
                    let want = self
                        .model
                        .output(model, &local, &compute_seq_hashes(&local));
                    assert_eq!(joined, want, "{op:?}");
                    if joined > 0 {
                        *tokens = so_far;
                    }
                }
            }
            Op::Observe { request, cached } => self.observe(now, *request, Some(*cached), op),
            Op::ObserveAll { request } => self.observe(now, *request, None, op),
            Op::Finish { request } => {
                if let Some(at) = self.kept(*request) {
                    let (handle, model, ..) = self.requests.swap_remove(at);
                    self.index.finish_request(handle);
                    self.model.release(now, model);
                }
            }
            Op::RestoreSaved => {
                if let Some((snapshot, rows, capacities)) = &self.saved {
                    self.index.restore(snapshot).expect("same block size");
                    self.model.restore_capacities(now, capacities);
                    self.model.restore(now, rows);
                }
            }
        }
    }

    /// Scores must equal the model's; tree sizes too (within bounds while a background
    /// sweeper reclaims on its own).
    /// A callback find's answer: each worker once, with the model's score.
    fn check_visited(&self, local: &[LocalBlockHash], mut visited: Vec<(WorkerId, u32)>) {
        let now = self.now();
        visited.sort_unstable();
        let want: Vec<_> = self.model.scores(now, local).into_iter().collect();
        assert_eq!(visited, want, "visited at t={now} for {local:?}");
    }

    fn check_find(&self, local: &[LocalBlockHash], got: approx_kv_index::OverlapScores) {
        let now = self.now();
        let want = self.model.scores(now, local);
        let got_scores: BTreeMap<_, _> = got.scores.iter().map(|(&w, &s)| (w, s)).collect();
        assert_eq!(got_scores, want, "scores at t={now} for {local:?}");
        let mut sized: Vec<_> = got.tree_sizes.keys().copied().collect();
        sized.sort_unstable();
        assert_eq!(
            sized,
            want.keys().copied().collect::<Vec<_>>(),
            "tree_sizes keys"
        );
        for (&w, &size) in &got.tree_sizes {
            let (low, high) = (
                self.model.live_count(now, Some(w)),
                self.model.stored_count(Some(w)),
            );
            if self.settings.background {
                // The sweeper takes timers at its own times (a timer it ran before a
                // removal does not free the removed worker's entries): only the live
                // entries bound what is stored.
                assert!(low <= size, "tree_sizes[{w}] = {size} < {low} live entries");
            } else {
                assert_eq!(size, high, "tree_sizes[{w}] at t={now}");
            }
        }
    }

    /// The whole state: the dump equals the model's live entries; stats equal its counts
    /// (within bounds while a background sweeper reclaims on its own); caps hold. Returns
    /// how many (worker, block) entries are live, which is what a check costs.
    pub fn check_state(&self) -> usize {
        let now = self.now();
        let events = self.index.dump_events();
        let mut dumped = BTreeMap::new();
        let snapshot = self.model.snapshot(now);
        let local_of: BTreeMap<u64, u64> = snapshot.iter().map(|r| (r.1, r.4)).collect();
        // (worker, block) of the events before the current one.
        let mut earlier = std::collections::HashSet::new();
        for (i, event) in events.iter().enumerate() {
            assert_eq!(event.event_id, i as u64, "event ids count up");
            let KvCacheEventData::Stored(data) = &event.data else {
                panic!("dump has only Stored events: {event:?}");
            };
            assert_eq!(data.blocks.len(), 1, "one block per dumped event");
            let block = data.blocks[0];
            let key = (event.worker_id, block.block_hash.0);
            let left = block.expires_in.map(nanos);
            assert!(dumped.insert(key, left).is_none(), "duplicate {key:?}");
            if let (0, Some(parent)) = (self.events, data.parent_hash) {
                // Decisions only: a live child implies a live parent, dumped earlier (so
                // caps evict deepest first, and no walk leaves a gap).
                assert!(
                    earlier.contains(&(event.worker_id, parent)),
                    "parent of {event:?} not dumped before it"
                );
            }
            earlier.insert((event.worker_id, block.block_hash));
        }
        assert_eq!(
            dumped,
            self.model.live_entries(now),
            "live entries at t={now}"
        );
        for event in &events {
            if let KvCacheEventData::Stored(data) = &event.data {
                let block = data.blocks[0];
                let want = local_of.get(&block.block_hash.0);
                assert_eq!(want, Some(&block.tokens_hash.0), "tokens hash of {event:?}");
            }
        }

        let stats = self.index.stats();
        assert_eq!(stats.workers, self.model.workers(), "registered workers");
        assert_eq!((stats.records, stats.finds), (self.records, self.finds));
        // Removed workers' entries that array copies dropped already, and the nodes those
        // were the last entries of (none under a global cap, where they count toward it
        // until swept).
        let (removed_entries, removed_nodes) = match self.settings.max_entries {
            None => (
                self.model.removed_stored_count(),
                self.model.removed_only_nodes(),
            ),
            Some(_) => (0, 0),
        };
        // A block a removed worker's entry is left on above a gap, under a run, counts
        // twice in `nodes` until the purge (`IndexStats::nodes`), and array copies may
        // have uncounted that entry already.
        assert!(
            stats.nodes <= stats.entries + removed_entries,
            "{stats:?}: a node without holders"
        );
        let (low, high) = (
            self.model.live_count(now, None),
            self.model.stored_count(None),
        );
        if self.settings.background {
            assert!(low <= stats.entries, "{stats:?}: fewer than {low} live");
        } else {
            let counts = (
                stats.pending_timers,
                stats.evictions,
                stats.dropped_by_reports,
                stats.capacities_learned,
            );
            let model = &self.model;
            let want = (
                model.pending_timers(),
                model.evictions(),
                model.dropped_by_reports(),
                model.capacities_learned(),
            );
            assert_eq!(
                counts, want,
                "(timers, evictions, dropped, learned) at t={now}"
            );
            for w in model.worker_ids() {
                assert_eq!(
                    self.index.worker_capacity(w),
                    model.capacity_of(w),
                    "capacity of {w} at t={now}"
                );
            }
            let reports: Vec<_> = self
                .index
                .cache_reports()
                .into_iter()
                .map(|(w, r)| (w, (r.reports, r.predicted_blocks, r.delivered_blocks)))
                .collect();
            assert_eq!(reports, model.cache_reports(), "cache reports at t={now}");
            // Exact, but for the removed workers' entries and nodes above.
            let within = |got: usize, want: usize, (under, over): (usize, usize), what: &str| {
                assert!(
                    (want - under..=want + over).contains(&got),
                    "{what} at t={now}: {got} not in {}..={}",
                    want - under,
                    want + over
                );
            };
            within(stats.entries, high, (removed_entries, 0), "entries");
            // And one node more per removed worker's entry: a block left above a gap by an
            // array copy that dropped that worker from its parent, which a run then
            // covered, counts twice until the purge (`IndexStats::nodes`).
            within(
                stats.nodes,
                model.nodes(),
                (removed_nodes, removed_entries),
                "nodes",
            );
        }
        self.check_caps();
        events.len()
    }

    /// Entries over a cap are only ever exact ones (which no cap evicts) and pinned ones
    /// (which caps evict around: a released decision is then protected up to the cap
    /// beside them): each worker holds at most `max(cap, its exact entries)` plus its
    /// pinned ones, the index `max(cap, all exact)` plus all pinned ones. A
    /// worker's capacity replaces the per-worker cap (under a per-worker cap every
    /// decision is logged, so the bound is exact; without one, decisions recorded before
    /// the first capacity are in no log, and only the model comparison applies).
    fn check_caps(&self) {
        let (per_worker, total) = self.model.caps_of();
        if let Some(cap) = per_worker {
            for (w, [held, exact, pinned]) in self.model.counts_per_worker() {
                let cap = self.model.capacity_of(w).unwrap_or(cap);
                let bound = cap.max(exact) + pinned;
                assert!(held <= bound, "worker {w} holds {held} > {bound}");
            }
        }
        if let Some(cap) = total {
            let held = self.index.stats().entries;
            let bound = cap.max(self.model.exact_count(None)) + self.model.pinned_total();
            assert!(held <= bound, "{held} entries > {bound}");
        }
    }

    /// Where the kept request `n` (modulo their count) is, if any is kept.
    /// `observe_cached` of kept request `request`, `cached` tokens (`None`: its prompt's).
    fn observe(&mut self, now: u64, request: usize, cached: Option<usize>, op: &Op) {
        let block_size = self.settings.block_size as usize;
        if let Some(at) = self.kept(request) {
            let (handle, model, _, prompt_tokens) = &mut self.requests[at];
            let cached = cached.unwrap_or(*prompt_tokens);
            let taken = self.index.observe_cached(handle, cached);
            // Counts beyond the prompt (output tokens do not count) are refused.
            let want =
                cached <= *prompt_tokens && self.model.observe(now, model, cached / block_size);
            assert_eq!(taken, want, "{op:?}");
        }
    }

    fn kept(&self, n: usize) -> Option<usize> {
        (!self.requests.is_empty()).then(|| n % self.requests.len())
    }

    /// Finishes every running request; lets everything expire and sweeps; then removes
    /// every worker and sweeps again. The index must then be empty.
    pub fn finish(&mut self) {
        while !self.requests.is_empty() {
            self.apply(&Op::Finish { request: 0 });
        }
        if self.ttl < NEVER {
            // Past every TTL, and past the nanoseconds by which caps order decisions
            // recorded at one clock reading (beyond the cap if need be: at the end of
            // time, u64::MAX ns, everything with a TTL has expired).
            let to = self.now().saturating_add(self.ttl).saturating_add(1 << 20);
            self.clock.set(Duration::from_nanos(to));
        }
        self.apply(&Op::Sweep);
        for worker in self.model.worker_ids() {
            self.step(&Op::RemoveWorker(worker));
        }
        self.check_state();
        self.apply(&Op::Sweep);
        // Everything is reclaimed.
        {
            let stats = self.index.stats();
            assert_eq!(self.model.stored_count(None), 0, "the model keeps entries");
            assert_eq!(
                (stats.entries, stats.nodes, stats.pending_timers),
                (0, 0, 0),
                "{stats:?}"
            );
        }
    }
}
