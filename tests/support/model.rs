//! The sequential reference model: the obvious, slow implementation of the index's contract.
//!
//! Shared by the property tests (`mod support;`) and the differential fuzz target
//! (`#[path]`). Time is the index clock in nanoseconds, passed in by the caller. Caps
//! (`max_entries`, `max_blocks_per_worker`) are not modelled.
//!
//! # Contract modelled exactly
//! - State: for each (worker registration, sequence hash), an *exact* flag and an
//!   *approximate* expiry.
//! - `record(now, w, seq)`: each block's expiry becomes `max(old, now + ttl)` (saturating).
//!   An empty prompt records nothing and does not register the worker.
//! - `stored(w, seq)` (a KV `Stored` event): the blocks are held exactly, with no TTL; the
//!   worker is registered even if there are no blocks.
//! - `removed(w, seq)` (a KV `Removed` event): the worker's claims on the blocks, exact and
//!   approximate, end.
//! - An entry is *live* at `now` if exact or `now < expiry`.
//! - `scores(now, local)`: for each registered worker, the length of the leading run of
//!   the query's sequence hashes it holds live; workers with a run of 0 are absent.
//! - `remove_worker(w)` (and a `Cleared` event): the worker's entries are gone; recording
//!   it again starts a new registration.
//!
//! # Bounds only: `tree_sizes` and `stats().entries`
//! These count entries *stored and not yet reclaimed*, which depends on where the
//! sweeper's walks stop (a walk for a removed worker also frees its unexpired entries on
//! its path). Reproducing that would copy the implementation, so the model keeps every
//! entry that no sweep has surely reclaimed, and gives bounds:
//! - lower: live entries of registered workers (nothing reclaims those);
//! - upper: the entries kept. A sweep at `now` surely reclaims: every non-exact entry
//!   whose latest expiry is at or before `now` (`sweep_expired`'s contract), and every
//!   entry of a removed registration that had exact entries or whose TTL is "never"
//!   (those are purged, since no timer leads to them).
//!
//! After a sweep with every worker removed and the clock past every expiry, the upper
//! bound is 0, so the index must be empty.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use approx_kv_index::{compute_seq_hashes, LocalBlockHash, SequenceHash, WorkerId};

/// TTLs from here on (about 146 years) mean "never" (the index keeps no timers).
pub const NEVER: u64 = 1 << 62;

/// A duration in the index's clock unit (nanoseconds, saturating).
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A snapshot as the model sees it: (worker, sequence hash, exact, TTL left in ns).
pub type SnapshotRows = Vec<(WorkerId, u64, bool, u64)>;

/// One (registration, block) entry.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    exact: bool,
    /// The approximate claim's expiry; 0 once a `Removed` event ended it.
    expiry: u64,
    /// The latest approximate expiry ever recorded: when a sweep must have freed it.
    until: u64,
}

/// The reference model of one index.
#[derive(Debug, Clone)]
pub struct Model {
    ttl: u64,
    /// Registered workers and their current registration number.
    registration: HashMap<WorkerId, u64>,
    next_registration: u64,
    /// Registrations that ever had an exact entry.
    had_exact: HashSet<u64>,
    /// (registration, sequence hash) -> entry, for entries not surely reclaimed.
    stored: HashMap<(u64, u64), Entry>,
}

impl Model {
    /// A model of an index with this TTL. TTLs of [`NEVER`] or more are taken as
    /// `NEVER`: entries then outlive any clock the tests use, and the dump's remaining
    /// times count down from it.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl: nanos(ttl).min(NEVER),
            registration: HashMap::new(),
            next_registration: 0,
            had_exact: HashSet::new(),
            stored: HashMap::new(),
        }
    }

    fn register(&mut self, worker: WorkerId) -> u64 {
        if let Some(&reg) = self.registration.get(&worker) {
            return reg;
        }
        self.next_registration += 1;
        self.registration.insert(worker, self.next_registration);
        self.next_registration
    }

    /// `worker` was chosen at `now` for a prompt with these sequence hashes.
    pub fn record(&mut self, now: u64, worker: WorkerId, seq: &[SequenceHash]) {
        if seq.is_empty() {
            return;
        }
        let reg = self.register(worker);
        let expiry = now + self.ttl; // now < 2^62 in every test
        for s in seq {
            let e = self.stored.entry((reg, s.0)).or_default();
            e.expiry = e.expiry.max(expiry);
            e.until = e.until.max(expiry);
        }
    }

    /// A `Stored` KV event: `worker` holds these blocks exactly.
    pub fn stored(&mut self, worker: WorkerId, seq: &[SequenceHash]) {
        let reg = self.register(worker);
        self.had_exact.insert(reg);
        for s in seq {
            self.stored.entry((reg, s.0)).or_default().exact = true;
        }
    }

    /// A `Removed` KV event: `worker`'s claims on these blocks end.
    pub fn removed(&mut self, worker: WorkerId, seq: &[SequenceHash]) {
        let Some(&reg) = self.registration.get(&worker) else {
            return;
        };
        for s in seq {
            if let Some(e) = self.stored.get_mut(&(reg, s.0)) {
                (e.exact, e.expiry) = (false, 0);
                if e.until == 0 {
                    self.stored.remove(&(reg, s.0));
                }
            }
        }
    }

    /// Forgets `worker` (unknown workers are ignored).
    pub fn remove_worker(&mut self, worker: WorkerId) {
        self.registration.remove(&worker);
    }

    /// A fresh index restored at `now` from a snapshot of this one taken at `now`.
    pub fn restored(&self, now: u64) -> Self {
        let mut out = Model::new(Duration::from_nanos(self.ttl));
        out.restore(now, &self.snapshot(now));
        out
    }

    /// The live entries at `now` as a snapshot holds them: (worker, sequence hash,
    /// exact, TTL left).
    pub fn snapshot(&self, now: u64) -> SnapshotRows {
        self.registered()
            .filter(|(_, e)| e.exact || e.expiry > now)
            .map(|((w, seq), e)| (w, seq, e.exact, e.expiry.saturating_sub(now)))
            .collect()
    }

    /// `restore` at `now` of a snapshot (from [`snapshot`](Self::snapshot)) into this
    /// index: each entry is merged with what is held, its TTL left counted from `now`.
    pub fn restore(&mut self, now: u64, snapshot: &[(WorkerId, u64, bool, u64)]) {
        for &(worker, seq, exact, left) in snapshot {
            let reg = self.register(worker);
            let e = self.stored.entry((reg, seq)).or_default();
            e.exact |= exact;
            if left > 0 {
                e.expiry = e.expiry.max(now + left);
                e.until = e.until.max(now + left);
            }
            if exact {
                self.had_exact.insert(reg);
            }
        }
    }

    /// A sweep at `now`: drops what it surely reclaims (see the module docs).
    pub fn sweep(&mut self, now: u64) {
        let alive: HashSet<u64> = self.registration.values().copied().collect();
        let never = self.ttl >= NEVER;
        let purged = |reg: &u64| !alive.contains(reg) && (never || self.had_exact.contains(reg));
        self.stored
            .retain(|(reg, _), e| !purged(reg) && (e.exact || e.until > now));
    }

    /// The registered workers' entries: (worker, sequence hash) -> entry.
    fn registered(&self) -> impl Iterator<Item = ((WorkerId, u64), Entry)> + '_ {
        let worker_of: HashMap<u64, WorkerId> =
            self.registration.iter().map(|(&w, &r)| (r, w)).collect();
        self.stored
            .iter()
            .filter_map(move |(&(reg, seq), &e)| Some(((*worker_of.get(&reg)?, seq), e)))
    }

    /// For each worker, how many leading blocks of the query it holds live at `now`.
    pub fn scores(&self, now: u64, local: &[LocalBlockHash]) -> BTreeMap<WorkerId, u32> {
        let live = self.live(now);
        let seq = compute_seq_hashes(local);
        let mut out = BTreeMap::new();
        for &worker in self.registration.keys() {
            let run = seq
                .iter()
                .take_while(|s| live.contains_key(&(worker, s.0)))
                .count();
            if run > 0 {
                out.insert(worker, u32::try_from(run).unwrap());
            }
        }
        out
    }

    /// Every live (worker, sequence hash) entry with its remaining time to live (`None`
    /// for exact entries).
    pub fn live(&self, now: u64) -> BTreeMap<(WorkerId, u64), Option<u64>> {
        self.registered()
            .filter(|(_, e)| e.exact || e.expiry > now)
            .map(|(key, e)| (key, (!e.exact).then(|| e.expiry - now)))
            .collect()
    }

    /// Lower bound on the entries stored for `worker` (all workers if `None`).
    pub fn live_count(&self, now: u64, worker: Option<WorkerId>) -> usize {
        self.live(now)
            .keys()
            .filter(|(w, _)| worker.is_none() || worker == Some(*w))
            .count()
    }

    /// Upper bound on the entries stored for `worker`'s registration (all if `None`).
    pub fn stored_count(&self, worker: Option<WorkerId>) -> usize {
        match worker {
            None => self.stored.len(),
            Some(w) => self.registered().filter(|((x, _), _)| *x == w).count(),
        }
    }

    /// Registered workers (recorded with at least one block, or stored by an event, and
    /// not removed since).
    pub fn workers(&self) -> usize {
        self.registration.len()
    }

    /// Every registered worker.
    pub fn worker_ids(&self) -> Vec<WorkerId> {
        self.registration.keys().copied().collect()
    }
}
