//! The sequential reference model: the obvious, slow implementation of the index's contract.
//!
//! Shared by the property tests (`mod support;`) and the differential fuzz target
//! (`#[path]`). Time is the index clock in nanoseconds, passed in by the caller.
//!
//! # Contract modelled
//! - State: for each (worker registration, sequence hash) an *entry*: an *exact* flag and
//!   an *approximate* expiry (0: none). A TTL of [`NEVER`] or more means never: approximate
//!   claims are then always live.
//! - Time stops at [`LAST_INSTANT`] (2^64 - 2 ns): callers pass clock readings at most
//!   that ([`clock_time`]).
//! - `record(now, w, seq)`: each block's expiry becomes `max(old, e)` with `e = now + ttl`
//!   (saturating at [`LAST_INSTANT`]); with a cap, `e` is also made later than any expiry the
//!   registration got before (decisions are ordered by age even on a still clock). An
//!   empty prompt records nothing and does not register the worker.
//! - `stored(w, parent, blocks)` (a KV `Stored` event): the parent, if any, is resolved for
//!   the worker: the block its engine called so in an earlier event, else the block with
//!   that sequence hash if the worker holds it live or if the event speaks this index's
//!   hashes (its first block's hash is the chain of the parent and its tokens hash); an
//!   unresolvable parent drops the event, and so do block names that repeat or name the
//!   parent.
//!   Blocks are placed at the sequence hashes chained from the resolved parent by their
//!   tokens hashes, whatever the engine's hashes are. A block with no `expires_in` is held
//!   exactly; one with `expires_in` gets an approximate claim that long (at most the TTL, or up to 1 ms more: [`kept_left`]).
//! - `removed(w, hashes)` (a KV `Removed` event): each hash is translated as above (the
//!   engine's name forgotten), and the worker's entry there is removed, both claims.
//! - An entry is *live* at `now` if exact or `now < expiry` (always, for never-TTLs).
//!   Dumps and snapshots give it `expiry - now` left, at least 1 ns while its approximate
//!   claim is live (a never-TTL claim stays live past its expiry), 0 once it is not.
//! - `scores(now, local)`: for each registered worker, the length of the leading run of
//!   the query's sequence hashes it holds live; workers with a run of 0 are absent.
//! - `remove_worker(w)` (and a `Cleared` event): the worker's entries read as absent;
//!   recording it again starts a new registration.
//! - Requests (`requests.rs`): `begin` records the prompt with the claim [`PIN`] (no timer,
//!   no log) and counts a pin per block; a release lowers the counts, lowers the claims
//!   of the blocks whose count reached zero from `PIN` to the release's expiry, and
//!   records the path as a decision taken then; dumps and snapshots give pinned entries
//!   the TTL. A report of fewer blocks than predicted pops and walks every logged
//!   decision of the registration expiring at or before the claim the worker had on its
//!   deepest predicted block before the request (`PIN - 1` if that was pinned).
//!
//! # Reclamation and caps, exactly
//! Entries stay stored until a sweep or an eviction frees them, and the caps count stored
//! entries, so the model keeps what the index keeps:
//! - each node (sequence hash held by anyone) knows the parent it was created with, and
//!   the deepest position a writer below that parent gave it; a *walk* of a registration from a block at a threshold goes up parent links and
//!   removes the registration's entries whose approximate expiry is at or before the
//!   threshold (an exact entry only loses its approximate claim; a removed registration's
//!   entry goes whole, exact or not); it stops at a block where the registration holds
//!   nothing, or a later expiry, or (registered) nothing approximate, and at the root;
//! - every approximate claim schedules a walk (a *timer*) at its expiry: a decision from its
//!   leaf; a restored or replayed claim from its block; a claim removed by an event from the
//!   removed block's parent (the walks of the decisions behind it stop at the gap);
//! - a sweep at `now` first purges every removed registration's entries, then runs every timer due by `now` (at threshold `now`), then drops
//!   logged decisions whose expiry passed;
//! - caps: every decision (and every scheduled walk from the past) is logged per
//!   registration (per-worker cap) and index-wide (global cap) in expiry order: decisions
//!   just recorded after equal expiries, others before. After a write that added `n`
//!   entries, while the worker (then the index) is over its cap and fewer than `2n` entries
//!   were evicted, the oldest logged decision is walked at its own expiry with a budget of
//!   the excess; what a budget cut off is logged again from where the walk stopped, in
//!   both logs in expiry order (and gets a timer). The log entry of a restored or replayed
//!   claim evicts that block only (its ancestors have entries of their own, and may carry
//!   an equal expiry while other children still need them); once it removed the block,
//!   the registration's claim on the block's parent, if it ends no later, gets its path
//!   logged at its expiry (after equal expiries) and a timer.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::Duration;

use approx_kv_index::{compute_seq_hashes, LocalBlockHash, SequenceHash, WorkerId, XXH3_SEED};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// TTLs from here on (about 146 years) mean "never".
pub const NEVER: u64 = 1 << 62;

/// A running request's claim: after every instant.
pub const PIN: u64 = u64::MAX;

/// The last instant: the clock stops here, and decisions' expiries saturate here.
pub const LAST_INSTANT: u64 = u64::MAX - 1;

/// The index's time at a clock reading: the reading, stopped at [`LAST_INSTANT`].
pub fn clock_time(d: Duration) -> u64 {
    nanos(d).min(LAST_INSTANT)
}

/// The TTL left a restored or replayed claim keeps: at most the TTL, unless it exceeds it
/// by 1 ms at most (the stretch by which caps order decisions taken at one reading).
fn kept_left(left: u64, ttl: u64) -> u64 {
    if left > ttl.saturating_add(1_000_000) {
        ttl
    } else {
        left
    }
}

/// An expiry `ttl` after `now`, saturating at [`LAST_INSTANT`].
fn expiry_after(now: u64, ttl: u64) -> u64 {
    now.saturating_add(ttl).min(LAST_INSTANT)
}

/// Requests (`model/requests.rs`, included: the fuzz target loads this file by path,
/// where a `mod` declaration would look for it elsewhere).
mod requests {
    include!("model/requests.rs");
}
/// Caps, KV events and snapshots (`model/caps.rs`, `model/events.rs`, `model/export.rs`),
/// included as `requests` is.
mod caps {
    include!("model/caps.rs");
}
mod events {
    include!("model/events.rs");
}
mod export {
    include!("model/export.rs");
}
pub use requests::ModelRequest;

/// A duration in the index's clock unit (nanoseconds, saturating).
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The sequence hash of block `local` after `parent` (Dynamo's chain).
pub fn chain_next(parent: Option<u64>, local: LocalBlockHash) -> u64 {
    match parent {
        None => local.0,
        Some(p) => {
            let bytes = [p.to_le_bytes(), local.0.to_le_bytes()].concat();
            xxh3_64_with_seed(&bytes, XXH3_SEED)
        }
    }
}

/// A snapshot row as the model sees it: (worker, sequence hash, parent, depth, tokens
/// hash, exact, TTL left in ns). The parent is 0 at depth 0.
pub type SnapshotRow = (WorkerId, u64, u64, u32, u64, bool, u64);
/// A whole snapshot.
pub type SnapshotRows = Vec<SnapshotRow>;

/// One block of a `Stored` event: tokens hash, the engine's block hash, TTL left (`None`:
/// exact).
pub type StoredBlock = (LocalBlockHash, u64, Option<u64>);

type Reg = u64;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Claim {
    exact: bool,
    expiry: u64,
}

#[derive(Debug, Clone, Copy)]
struct Node {
    parent: Option<u64>,
    depth: u32,
    local: u64,
    holders: usize,
}

#[derive(Debug, Clone, Copy)]
struct Decision {
    reg: Reg,
    expiry: u64,
    leaf: u64,
    /// Evicts the leaf's block only (a restored or replayed claim).
    single: bool,
}

/// The reference model of one index.
#[derive(Debug, Clone)]
pub struct Model {
    ttl: u64,
    never: bool,
    per_worker: Option<usize>,
    total: Option<usize>,
    /// Registered workers and their current registration number.
    registration: HashMap<WorkerId, Reg>,
    next_registration: Reg,
    had_exact: HashSet<Reg>,
    to_purge: Vec<Reg>,
    entries: HashMap<(Reg, u64), Claim>,
    nodes: HashMap<u64, Node>,
    engine: HashMap<(Reg, u64), u64>,
    last_expiry: HashMap<Reg, u64>,
    slot_logs: HashMap<Reg, VecDeque<Decision>>,
    /// Registrations log their decisions: a per-worker cap, or since a capacity was set.
    logs_slots: bool,
    /// Capacities set with `set_worker_capacity`, per registration.
    capacities: HashMap<Reg, usize>,
    global_log: VecDeque<Decision>,
    /// (deadline, registration, leaf).
    timers: Vec<(u64, Reg, u64)>,
    evictions: u64,
    /// Running requests' pins per (registration, block).
    pins: HashMap<(Reg, u64), u32>,
    /// Cached-token reports per registration: (reports, predicted, delivered).
    reports: HashMap<Reg, (u64, u64, u64)>,
    /// Entries dropped by reports.
    dropped_by_reports: u64,
    /// Capacities reports set.
    capacities_learned: u64,
    /// Per registration, the evictions counted so far and its ghosts with the count at
    /// their latest eviction, oldest first.
    ghosts: HashMap<Reg, (u64, VecDeque<(u64, u64)>)>,
    /// Registrations whose capacity a report taught since a caller last set it.
    taught: std::collections::HashSet<Reg>,
    /// The blocks the last walk removed.
    walked: Vec<u64>,
}

impl Model {
    /// A model of an uncapped index with this TTL.
    pub fn new(ttl: Duration) -> Self {
        Self::with_caps(ttl, None, None)
    }

    /// A model of an index with these caps.
    pub fn with_caps(ttl: Duration, per_worker: Option<usize>, total: Option<usize>) -> Self {
        let ttl = nanos(ttl).clamp(1, NEVER);
        Self {
            ttl,
            never: ttl >= NEVER,
            per_worker,
            total,
            registration: HashMap::new(),
            next_registration: 0,
            had_exact: HashSet::new(),
            to_purge: Vec::new(),
            entries: HashMap::new(),
            nodes: HashMap::new(),
            engine: HashMap::new(),
            last_expiry: HashMap::new(),
            slot_logs: HashMap::new(),
            logs_slots: per_worker.is_some(),
            capacities: HashMap::new(),
            global_log: VecDeque::new(),
            timers: Vec::new(),
            evictions: 0,
            pins: HashMap::new(),
            reports: HashMap::new(),
            dropped_by_reports: 0,
            capacities_learned: 0,
            ghosts: HashMap::new(),
            taught: Default::default(),
            walked: Vec::new(),
        }
    }

    /// Whether decisions are logged for eviction (and expiries made unique per worker).
    fn caps(&self) -> bool {
        self.logs_slots || self.total.is_some()
    }

    fn read_time(&self, now: u64) -> u64 {
        if self.never {
            0
        } else {
            now
        }
    }

    fn live(&self, claim: Claim, now: u64) -> bool {
        claim.exact || claim.expiry > self.read_time(now)
    }

    /// What a dump or snapshot at `now` says is left of `claim`'s approximate part: none
    /// if it is not live then, at least 1 ns if it is (a never-TTL claim older than 2^62
    /// ns is live with its expiry before `now`).
    fn ttl_left(&self, claim: Claim, now: u64) -> u64 {
        if claim.expiry == PIN {
            // A running request's block: a decision taken now.
            return self.ttl;
        }
        if claim.expiry > self.read_time(now) {
            claim.expiry.saturating_sub(now).max(1)
        } else {
            0
        }
    }

    fn register(&mut self, worker: WorkerId) -> Reg {
        if let Some(&reg) = self.registration.get(&worker) {
            return reg;
        }
        self.next_registration += 1;
        self.registration.insert(worker, self.next_registration);
        self.next_registration
    }

    /// The registered workers' values in `per_reg` (those that have one), by worker.
    fn by_worker<T: Copy + Ord>(&self, per_reg: &HashMap<Reg, T>) -> Vec<(WorkerId, T)> {
        let mut rows: Vec<_> = self
            .registration
            .iter()
            .filter_map(|(&w, reg)| Some((w, *per_reg.get(reg)?)))
            .collect();
        rows.sort_unstable();
        rows
    }

    fn alive(&self, reg: Reg) -> bool {
        self.registration.values().any(|&r| r == reg)
    }

    fn expiry_for(&mut self, reg: Reg, now: u64, ttl: u64) -> u64 {
        let mut expiry = expiry_after(now, ttl);
        if self.caps() {
            let last = self.last_expiry.entry(reg).or_default();
            expiry = expiry.max(last.saturating_add(1)).min(LAST_INSTANT);
            *last = expiry;
        }
        expiry
    }

    /// Raises or adds `reg`'s claims on a chain continuing `parent`. Returns entries added.
    fn upsert_chain(
        &mut self,
        reg: Reg,
        parent: Option<u64>,
        blocks: &[(u64, u64, Claim)],
    ) -> usize {
        let first = parent.map_or(0, |p| self.nodes.get(&p).map_or(1, |n| n.depth + 1));
        let mut parent = parent;
        let mut added = 0;
        for (depth, &(seq, local, claim)) in (first..).zip(blocks) {
            added += usize::from(self.upsert(reg, seq, local, parent, depth, claim));
            parent = Some(seq);
        }
        added
    }

    /// Raises or adds one entry, creating its node with `parent` and `depth` if missing.
    fn upsert(
        &mut self,
        reg: Reg,
        seq: u64,
        local: u64,
        parent: Option<u64>,
        depth: u32,
        claim: Claim,
    ) -> bool {
        // A writer that knows the block's position raises the node's (positions are only
        // ever too low: a block stored below an unknown parent is placed at depth 1).
        if let Some(node) = self.nodes.get_mut(&seq) {
            if node.depth > 0 && node.parent.is_some() && node.parent == parent {
                node.depth = node.depth.max(depth);
            }
        }
        if let Some(e) = self.entries.get_mut(&(reg, seq)) {
            e.exact |= claim.exact;
            e.expiry = e.expiry.max(claim.expiry);
            return false;
        }
        self.entries.insert((reg, seq), claim);
        self.nodes
            .entry(seq)
            .or_insert(Node {
                parent: if depth == 0 { None } else { parent },
                depth,
                local,
                holders: 0,
            })
            .holders += 1;
        true
    }

    fn remove_entry(&mut self, reg: Reg, seq: u64) -> Option<Claim> {
        let claim = self.entries.remove(&(reg, seq))?;
        let node = self.nodes.get_mut(&seq).expect("an entry's node exists");
        node.holders -= 1;
        if node.holders == 0 {
            self.nodes.remove(&seq);
        }
        Some(claim)
    }

    /// The index's walk (of the leaf's block only if `single`). Returns the entries
    /// removed and where a budget stopped it.
    fn walk(
        &mut self,
        reg: Reg,
        leaf: u64,
        threshold: u64,
        budget: usize,
        single: bool,
    ) -> (usize, Option<u64>) {
        let alive = self.alive(reg);
        let (mut key, mut removed) = (leaf, 0);
        self.walked.clear();
        loop {
            if removed >= budget {
                return (removed, Some(key));
            }
            let Some(&node) = self.nodes.get(&key) else {
                break;
            };
            let Some(claim) = self.entries.get_mut(&(reg, key)) else {
                break;
            };
            // A later claim is a later decision's, whose own walk comes (for a removed
            // registration too: removing it here would leave that decision's deeper blocks
            // above a gap).
            if claim.expiry > threshold || (alive && claim.expiry == 0) {
                break;
            }
            if alive && claim.exact {
                claim.expiry = 0;
            } else {
                self.remove_entry(reg, key);
                self.walked.push(key);
                removed += 1;
            }
            match node.parent {
                Some(p) if node.depth > 0 && !single => key = p,
                _ => break,
            }
        }
        (removed, None)
    }

    /// `worker` was chosen at `now` for a prompt with these local and sequence hashes
    /// (of the same length).
    pub fn record(
        &mut self,
        now: u64,
        worker: WorkerId,
        local: &[LocalBlockHash],
        seq: &[SequenceHash],
    ) {
        if seq.is_empty() {
            return;
        }
        let reg = self.register(worker);
        let expiry = self.expiry_for(reg, now, self.ttl);
        self.store_decision(reg, (local, seq), expiry, 0);
    }

    /// Stores a decision of `reg` expiring at `expiry`: its claims, its timer, and with
    /// caps its log entry and evictions (`unpinned`: entries a release just made
    /// evictable again, evicted for as added ones).
    fn store_decision(
        &mut self,
        reg: Reg,
        (local, seq): (&[LocalBlockHash], &[SequenceHash]),
        expiry: u64,
        unpinned: usize,
    ) {
        let Some(leaf) = seq.last() else {
            return;
        };
        let claim = Claim {
            exact: false,
            expiry,
        };
        let blocks: Vec<_> = seq
            .iter()
            .zip(local)
            .map(|(s, l)| (s.0, l.0, claim))
            .collect();
        let added = self.upsert_chain(reg, None, &blocks);
        if !self.never {
            self.timers.push((expiry, reg, leaf.0));
        }
        if self.caps() {
            let decision = Decision {
                reg,
                expiry,
                leaf: leaf.0,
                single: false,
            };
            self.log(decision, false);
            // Expiries name a worker's decisions, except once saturated at the end of time.
            let fresh = (expiry != LAST_INSTANT).then_some((expiry, seq.len()));
            self.enforce(reg, added + unpinned, fresh);
        }
    }

    /// The capacity set for `worker`'s registration, if any.
    pub fn capacity_of(&self, worker: WorkerId) -> Option<usize> {
        let reg = self.registration.get(&worker)?;
        self.capacities.get(reg).copied()
    }

    /// Forgets `worker` (unknown workers are ignored).
    pub fn remove_worker(&mut self, worker: WorkerId) {
        // The next sweep purges every removed registration's entries.
        if let Some(reg) = self.registration.remove(&worker) {
            self.to_purge.push(reg);
        }
    }

    /// A sweep at `now`. Returns the entries freed.
    pub fn sweep(&mut self, now: u64) -> usize {
        let before = self.entries.len();
        for reg in std::mem::take(&mut self.to_purge) {
            let held: Vec<u64> = self
                .entries
                .keys()
                .filter(|k| k.0 == reg)
                .map(|k| k.1)
                .collect();
            for seq in held {
                self.remove_entry(reg, seq);
            }
            self.slot_logs.remove(&reg);
        }
        let (due, later): (Vec<_>, Vec<_>) = self.timers.iter().partition(|t| t.0 <= now);
        self.timers = later;
        for (_, reg, leaf) in due {
            self.walk(reg, leaf, now, usize::MAX, false);
        }
        if self.caps() && !self.never {
            for log in self.slot_logs.values_mut().chain([&mut self.global_log]) {
                while log.front().is_some_and(|d| d.expiry <= now) {
                    log.pop_front();
                }
            }
        }
        before - self.entries.len()
    }

    /// The registered workers' entries: (worker, sequence hash) -> entry.
    fn registered(&self) -> impl Iterator<Item = ((WorkerId, u64), Claim)> + '_ {
        let worker_of: HashMap<Reg, WorkerId> =
            self.registration.iter().map(|(&w, &r)| (r, w)).collect();
        self.entries
            .iter()
            .filter_map(move |(&(reg, seq), &e)| Some(((*worker_of.get(&reg)?, seq), e)))
    }

    /// For each worker, how many leading blocks of the query it holds live at `now`.
    pub fn scores(&self, now: u64, local: &[LocalBlockHash]) -> BTreeMap<WorkerId, u32> {
        let live = self.live_entries(now);
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
    pub fn live_entries(&self, now: u64) -> BTreeMap<(WorkerId, u64), Option<u64>> {
        let lefts = self.ttls_left(now);
        self.registered()
            .filter(|(_, e)| self.live(*e, now))
            .map(|(key, e)| (key, (!e.exact).then(|| lefts[&key])))
            .collect()
    }

    /// Each live entry's TTL left as dumps and snapshots give it: a pinned block goes out
    /// as a decision taken now, the TTL, or the worker's longest other TTL left if longer
    /// (with caps a decision taken now outlives the worker's others).
    fn ttls_left(&self, now: u64) -> HashMap<(WorkerId, u64), u64> {
        let live: Vec<((WorkerId, u64), Claim)> = self
            .registered()
            .filter(|(_, e)| self.live(*e, now))
            .collect();
        let mut longest: HashMap<WorkerId, u64> = HashMap::new();
        for (key, e) in live.iter().filter(|(_, e)| e.expiry != PIN) {
            let left = longest.entry(key.0).or_default();
            *left = (*left).max(self.ttl_left(*e, now));
        }
        live.iter()
            .map(|&(key, e)| {
                let left = self.ttl_left(e, now);
                let left = if e.expiry == PIN {
                    left.max(longest.get(&key.0).copied().unwrap_or(0))
                } else {
                    left
                };
                (key, left)
            })
            .collect()
    }

    /// Live entries of `worker` (all workers if `None`).
    pub fn live_count(&self, now: u64, worker: Option<WorkerId>) -> usize {
        self.live_entries(now)
            .keys()
            .filter(|(w, _)| worker.is_none() || worker == Some(*w))
            .count()
    }

    /// Entries stored (not yet reclaimed) for `worker`'s registration (all, removed
    /// registrations included, if `None`).
    pub fn stored_count(&self, worker: Option<WorkerId>) -> usize {
        match worker {
            None => self.entries.len(),
            Some(w) => self.registration.get(&w).map_or(0, |&r| self.count(r)),
        }
    }

    /// Entries stored for removed registrations that no sweep has purged yet: the index
    /// may have dropped any of them already (a copy of a holder array leaves removed
    /// workers' holders out, when no global cap is set).
    pub fn removed_stored_count(&self) -> usize {
        self.entries
            .keys()
            .filter(|k| self.to_purge.contains(&k.0))
            .count()
    }

    /// Nodes whose every stored entry belongs to a removed registration not yet purged:
    /// the index may have unlinked them already, once array copies dropped those entries
    /// and the live holders left.
    pub fn removed_only_nodes(&self) -> usize {
        let mut holders: HashMap<u64, bool> = HashMap::new();
        for (reg, seq) in self.entries.keys() {
            let removed = self.to_purge.contains(reg);
            *holders.entry(*seq).or_insert(true) &= removed;
        }
        holders
            .values()
            .filter(|&&only_removed| only_removed)
            .count()
    }

    /// Exact entries stored for `worker` (all if `None`): what no cap can evict.
    pub fn exact_count(&self, worker: Option<WorkerId>) -> usize {
        let reg = worker.and_then(|w| self.registration.get(&w).copied());
        self.entries
            .iter()
            .filter(|((r, _), e)| e.exact && (worker.is_none() || Some(*r) == reg))
            .count()
    }

    /// Nodes (distinct sequence hashes stored).
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Timers scheduled and not yet due at a sweep.
    pub fn pending_timers(&self) -> usize {
        self.timers.len()
    }

    /// Entries evicted to keep within the caps.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// The caps: (per worker, total).
    pub fn caps_of(&self) -> (Option<usize>, Option<usize>) {
        (self.per_worker, self.total)
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
