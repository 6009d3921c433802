//! Drives an index and the reference [`Model`](super::model::Model) with the same
//! operations on the same [`ManualClock`], checking after every step that they agree.
//!
//! Shared by the property tests and the differential fuzz target (`#[path]`); failures
//! are panics, which both proptest and libFuzzer report with the failing input.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::{
    compute_block_hash_for_seq_salted, compute_seq_hashes, ApproxKvIndexer, Clock, HashSalt,
    KvCacheEventData, KvCacheRemoveData, KvCacheStoreData, KvCacheStoredBlockData, LocalBlockHash,
    ManualClock, RecordError, RouterEvent, SequenceHash, Snapshot, WorkerId, XXH3_SEED,
};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::model::{nanos, Model, SnapshotRows, NEVER};

/// The clock is kept below this (~73 years), under the TTL the index takes as "never".
pub const CLOCK_CAP: u64 = 1 << 61;

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
    /// not chained from `local`.
    RecordHashes {
        worker: WorkerId,
        local: Vec<LocalBlockHash>,
        seq: Vec<SequenceHash>,
    },
    /// A `Stored` KV event for blocks `(local[i], seq[i])` chained from `parent`.
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
    /// Moves the clock forward (nanoseconds; capped at [`CLOCK_CAP`]).
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
    let mut prev = parent;
    local
        .iter()
        .map(|l| {
            let next = match prev {
                None => l.0,
                Some(p) => {
                    let bytes = [p.0.to_le_bytes(), l.0.to_le_bytes()].concat();
                    xxh3_64_with_seed(&bytes, XXH3_SEED)
                }
            };
            prev = Some(SequenceHash(next));
            SequenceHash(next)
        })
        .collect()
}

fn build(
    block_size: u32,
    ttl: Duration,
    tick: Duration,
    clock: &Arc<ManualClock>,
    background: bool,
) -> ApproxKvIndexer {
    ApproxKvIndexer::builder()
        .block_size(block_size)
        .ttl(ttl)
        .tick(tick)
        .clock(clock.clone())
        .background_sweeper(background)
        .build()
        .expect("valid settings")
}

/// An index, its model, and the clock they share.
pub struct Harness {
    /// The clock of the index; the model is given its readings.
    pub clock: Arc<ManualClock>,
    /// The index under test.
    pub index: ApproxKvIndexer,
    /// The reference.
    pub model: Model,
    ttl: u64,
    tick: Duration,
    background: bool,
    records: u64,
    finds: u64,
    events: u64,
    saved: Option<(Snapshot, SnapshotRows)>,
    /// False once hashes were recorded or stored that do not chain (sequence from local
    /// and parent): the sweeper's walks then follow other prompts' parents and may miss
    /// entries (see docs/testing.md), so only reads are compared from then on.
    pub consistent: bool,
}

impl Harness {
    /// An index with the sweeper thread disabled (all reclamation is explicit), or
    /// enabled (it then sweeps at real-time ticks of `tick` on the manual clock).
    pub fn new(block_size: u32, ttl: Duration, tick: Duration, background: bool) -> Self {
        let clock = Arc::new(ManualClock::new());
        let index = build(block_size, ttl, tick, &clock, background);
        Self {
            clock,
            index,
            model: Model::new(ttl),
            ttl: nanos(ttl),
            tick,
            background,
            records: 0,
            finds: 0,
            events: 0,
            saved: None,
            consistent: true,
        }
    }

    fn now(&self) -> u64 {
        nanos(self.clock.now())
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

    /// Applies `op` to both and checks that they agree.
    pub fn apply(&mut self, op: &Op) {
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
                self.model.record(now, w, &compute_seq_hashes(&local));
                self.records += u64::from(!local.is_empty());
            }
            Op::RecordHashes { worker, local, seq } => {
                let got = self.index.process_routing_decision(*worker, local, seq);
                if local.len() == seq.len() {
                    assert_eq!(got, Ok(()), "{op:?}");
                    self.model.record(now, *worker, seq);
                    self.consistent &= *seq == compute_seq_hashes(local);
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
                self.consistent &= *seq == chain_from(*parent, local);
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
                self.event(*worker, KvCacheEventData::Stored(data));
                self.model.stored(*worker, seq);
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
                self.finds += 1;
                self.check_find(local, self.index.find_matches(local));
            }
            Op::RemoveWorker(worker) => {
                self.index.remove_worker(*worker);
                self.model.remove_worker(*worker);
            }
            Op::Advance(by) => {
                let to = now.saturating_add(*by).min(CLOCK_CAP);
                self.clock.set(Duration::from_nanos(to));
            }
            Op::Sweep => {
                let before = self.index.stats().entries;
                let freed = self.index.sweep_expired();
                self.model.sweep(now);
                let after = self.index.stats().entries;
                if !self.background {
                    assert_eq!(before, after + freed, "sweep_expired() count vs entries");
                }
            }
            Op::Shutdown => self.index.shutdown(),
            Op::SnapshotRestore => {
                let snapshot = self.index.snapshot();
                let bytes = snapshot.to_bytes();
                assert_eq!(Snapshot::from_bytes(&bytes).as_ref(), Ok(&snapshot));
                let ttl = Duration::from_nanos(self.ttl);
                let fresh = build(block_size, ttl, self.tick, &self.clock, self.background);
                fresh.restore(&snapshot).expect("same block size");
                self.index = fresh;
                self.model = self.model.restored(now);
                (self.records, self.finds) = (0, 0);
            }
            Op::SaveSnapshot => {
                let snapshot = self.index.snapshot();
                let mut got: Vec<_> = snapshot
                    .entries
                    .iter()
                    .map(|e| (e.worker_id, e.block.0, e.exact, nanos(e.ttl_left)))
                    .collect();
                let mut want = self.model.snapshot(now);
                got.sort_unstable();
                want.sort_unstable();
                assert_eq!(got, want, "snapshot at t={now}");
                self.saved = Some((snapshot, want));
            }
            Op::RestoreSaved => {
                if let Some((snapshot, rows)) = &self.saved {
                    self.index.restore(snapshot).expect("same block size");
                    self.model.restore(now, rows);
                }
            }
        }
        self.check_state();
    }

    /// Scores must equal the model's, tree sizes lie within its bounds.
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
            let low = self.model.live_count(now, Some(w));
            assert!(low <= size, "tree_sizes[{w}] = {size} < {low} live entries");
            if self.consistent {
                let high = self.model.stored_count(Some(w));
                assert!(size <= high, "tree_sizes[{w}] = {size} > {high} stored");
            }
        }
    }

    /// The whole state: the dump equals the model's live entries; stats within bounds.
    pub fn check_state(&self) {
        let now = self.now();
        let events = self.index.dump_events();
        let mut dumped = BTreeMap::new();
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
            if let (true, 0, Some(parent)) = (self.consistent, self.events, data.parent_hash) {
                // Decisions only: a live child implies a live parent, dumped earlier.
                let earlier = events[..i].iter().any(|e| match &e.data {
                    KvCacheEventData::Stored(d) => {
                        e.worker_id == event.worker_id && d.blocks[0].block_hash == parent
                    }
                    _ => false,
                });
                assert!(earlier, "parent of {event:?} not dumped before it");
            }
        }
        assert_eq!(dumped, self.model.live(now), "live entries at t={now}");

        let stats = self.index.stats();
        assert_eq!(stats.workers, self.model.workers(), "registered workers");
        assert_eq!((stats.records, stats.finds), (self.records, self.finds));
        let low = self.model.live_count(now, None);
        assert!(low <= stats.entries, "{stats:?}: fewer than {low} live");
        assert!(
            stats.nodes <= stats.entries,
            "{stats:?}: a node without holders"
        );
        if self.consistent {
            let high = self.model.stored_count(None);
            assert!(stats.entries <= high, "{stats:?}: more than {high} stored");
        }
    }

    /// Lets everything expire and sweeps; then removes every worker and sweeps again.
    /// Unless inconsistent hashes were recorded, the index must then be empty.
    pub fn finish(&mut self) {
        // Timers are due only if the clock can pass every expiry (it stops at the cap).
        let timers_due = self.ttl >= NEVER || self.now() + self.ttl <= CLOCK_CAP;
        if self.ttl < NEVER {
            self.apply(&Op::Advance(self.ttl));
        }
        self.apply(&Op::Sweep);
        for worker in self.model.worker_ids() {
            self.apply(&Op::RemoveWorker(worker));
        }
        self.apply(&Op::Sweep);
        let stats = self.index.stats();
        // The model is empty unless the clock hit its cap before everything expired (or
        // hashes did not chain).
        if self.consistent && self.model.stored_count(None) == 0 {
            assert_eq!(stats.entries, 0, "{stats:?}");
            assert_eq!(stats.nodes, 0, "{stats:?}");
            if timers_due {
                assert_eq!(stats.pending_timers, 0, "{stats:?}");
            }
        }
    }
}
