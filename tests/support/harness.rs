//! Drives an index and the reference [`Model`](super::model::Model) with the same
//! operations on the same [`ManualClock`], checking after every step that they agree.
//!
//! Shared by the property tests and the differential fuzz target (`#[path]`); failures
//! are panics, which both proptest and libFuzzer report with the failing input.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::{
    compute_block_hash_for_seq, compute_seq_hashes, ApproxKvIndexer, Clock, KvCacheEventData,
    LocalBlockHash, ManualClock, RecordError, SequenceHash, WorkerId,
};

use super::model::{nanos, Model};

/// The clock is kept below this (~146 years): at `u64::MAX` the timer wheel can no longer
/// advance, a known edge far outside any router's lifetime (see docs/testing.md).
pub const CLOCK_CAP: u64 = 1 << 62;

/// One step of a test run.
#[derive(Debug, Clone)]
pub enum Op {
    /// `process_routing_decision_for_request(tokens, worker)`.
    Record { worker: WorkerId, tokens: Vec<u32> },
    /// `process_routing_decision(worker, local, seq)`; `seq` may be of another length or
    /// inconsistent with `local`.
    RecordHashes {
        worker: WorkerId,
        local: Vec<LocalBlockHash>,
        seq: Vec<SequenceHash>,
    },
    /// `find_matches_for_request(tokens)`.
    Find { tokens: Vec<u32> },
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
    background: bool,
    /// False once precomputed sequence hashes that do not chain from their local hashes
    /// were recorded: the sweeper's walks then follow other prompts' parents and may miss
    /// entries (see docs/testing.md), so only reads are compared from then on.
    pub consistent: bool,
}

impl Harness {
    /// An index with the sweeper thread disabled (all reclamation is explicit), or
    /// enabled (it then sweeps at real-time ticks of `tick` on the manual clock).
    pub fn new(block_size: u32, ttl: Duration, tick: Duration, background: bool) -> Self {
        let clock = Arc::new(ManualClock::new());
        let index = ApproxKvIndexer::builder()
            .block_size(block_size)
            .ttl(ttl)
            .tick(tick)
            .clock(clock.clone())
            .background_sweeper(background)
            .build()
            .expect("valid settings");
        Self {
            clock,
            index,
            model: Model::new(ttl),
            ttl: nanos(ttl),
            background,
            consistent: true,
        }
    }

    fn now(&self) -> u64 {
        nanos(self.clock.now())
    }

    fn local(&self, tokens: &[u32]) -> Vec<LocalBlockHash> {
        compute_block_hash_for_seq(tokens, self.index.block_size())
    }

    /// Applies `op` to both and checks that they agree.
    pub fn apply(&mut self, op: &Op) {
        let now = self.now();
        match op {
            Op::Record { worker, tokens } => {
                self.index
                    .process_routing_decision_for_request(tokens, *worker);
                let seq = compute_seq_hashes(&self.local(tokens));
                self.model.record(now, *worker, &seq);
            }
            Op::RecordHashes { worker, local, seq } => {
                let got = self.index.process_routing_decision(*worker, local, seq);
                if local.len() == seq.len() {
                    assert_eq!(got, Ok(()), "{op:?}");
                    self.model.record(now, *worker, seq);
                    self.consistent &= *seq == compute_seq_hashes(local);
                } else {
                    let want = RecordError::LengthMismatch {
                        local: local.len(),
                        seq: seq.len(),
                    };
                    assert_eq!(got, Err(want), "{op:?}");
                }
            }
            Op::Find { tokens } => self.check_find(&self.local(tokens)),
            Op::FindHashes { local } => self.check_find(local),
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
        }
        self.check_state();
    }

    /// One find on both; scores must be equal, tree sizes within the model's bounds.
    fn check_find(&self, local: &[LocalBlockHash]) {
        let now = self.now();
        let got = self.index.find_matches(local);
        let want = self.model.scores(now, local);
        let got_scores: BTreeMap<_, _> = got.scores.iter().map(|(&w, &s)| (w, s)).collect();
        let want_scores: BTreeMap<_, _> = want.into_iter().collect();
        assert_eq!(got_scores, want_scores, "scores at t={now} for {local:?}");
        let mut sized: Vec<_> = got.tree_sizes.keys().copied().collect();
        sized.sort_unstable();
        assert_eq!(
            sized,
            got_scores.keys().copied().collect::<Vec<_>>(),
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
            // Only routing decisions here: every dumped block has a TTL.
            let left = nanos(block.expires_in.expect("approximate entries have a TTL"));
            assert!(dumped.insert(key, left).is_none(), "duplicate {key:?}");
            if let (true, Some(parent)) = (self.consistent, data.parent_hash) {
                // Parents first: a live child implies a live parent, dumped earlier.
                let earlier = events[..i].iter().any(|e| {
                    let KvCacheEventData::Stored(d) = &e.data else {
                        return false;
                    };
                    e.worker_id == event.worker_id && d.blocks[0].block_hash == parent
                });
                assert!(earlier, "parent of {event:?} not dumped before it");
            }
        }
        assert_eq!(dumped, self.model.live(now), "live entries at t={now}");

        let stats = self.index.stats();
        assert_eq!(stats.workers, self.model.workers(), "registered workers");
        let low = self.model.live_count(now, None);
        assert!(low <= stats.entries, "{stats:?}: fewer than {low} live");
        assert!(stats.nodes <= stats.entries, "{stats:?}: a node without holders");
        if self.consistent {
            let high = self.model.stored_count(None);
            assert!(stats.entries <= high, "{stats:?}: more than {high} stored");
        }
    }

    /// Lets everything expire, sweeps, and checks the index is empty (when consistent).
    pub fn finish(&mut self) {
        self.apply(&Op::Advance(self.ttl));
        self.apply(&Op::Sweep);
        let stats = self.index.stats();
        // The model is empty unless the clock hit its cap before everything expired.
        if self.consistent && self.model.stored_count(None) == 0 {
            assert_eq!(stats.entries, 0, "{stats:?}");
            assert_eq!(stats.nodes, 0, "{stats:?}");
            assert_eq!(stats.pending_timers, 0, "{stats:?}");
        }
    }
}
