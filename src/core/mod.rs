//! The core behind [`ApproxKvIndexer`](crate::ApproxKvIndexer): the state that callers
//! and the sweeper thread share, and every change of it. The public type only adds
//! queries (hashing), the worker-key type, sharing decisions and the sweeper thread's life.
//!
//! - `mod.rs`: the state, time, find, record, caps, stats;
//! - `bound.rs`: a decision's log entry and the evictions the caps call for;
//! - `evict.rs`: the evictor, which enforces the caps;
//! - `events.rs`: exact (and replayed) KV events;
//! - `export.rs`: dump, snapshot and restore;
//! - `pins.rs`: running requests' blocks, pinned until they finish;
//! - `pin_paths.rs`: the paths of a slot's running requests, which count the pins;
//! - `reports.rs`: what engines report of each request's cached prompt tokens;
//! - `learn.rs`: the capacities reports teach, and the ghosts of evicted blocks;
//! - `purge.rs`: freeing removed workers' entries, a few shards a tick;
//! - `sweep.rs`: reclamation, by the sweeper and by callers helping it.

mod bound;
mod events;
mod evict;
mod export;
mod learn;
mod pin_paths;
mod pins;
mod purge;
mod reports;
mod sweep;
#[cfg(test)]
mod testing;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crossbeam_epoch as epoch;

use crate::capacity::{Among, Caps, DecisionLog, LoggedDecision};
use crate::clock::{nanos, Clock};
use crate::config::Builder;
use crate::scores::ScoreSink;
use crate::slot::Slot;
use crate::stats::{IndexStats, StripedCounter};
use crate::timers::{Timer, Timers};
use crate::tree::claim::{expiry_after, Claim, LAST_INSTANT};
use crate::tree::{Block, HashedQuery, LiveEntry, ReadAt, Span, Tree, Writing};
use crate::workers::{Book, Keeping, Workers, WriteKind};
use crate::{LocalBlockHash, SequenceHash, WorkerKey};

use bound::Written;
pub(crate) use pins::{Begun, PIN};
pub(crate) use reports::Reported;

/// The most nanoseconds past the TTL that a restored or replayed claim keeps
/// (`Core::ttl_left_kept`): a million decisions of one worker at one clock reading.
const ORDER_STRETCH: u64 = 1_000_000;

/// TTLs at or beyond this (about 146 years) mean "never": approximate claims then never
/// expire and no timers are kept. Their expiries are still `now + NEVER`, which orders
/// decisions for eviction and gives snapshots a TTL left to restore from.
pub(crate) const NEVER: u64 = 1 << 62;

/// State shared by the callers and the sweeper thread.
pub(crate) struct Core {
    pub(crate) block_size: u32,
    ttl_nanos: u64,
    /// The TTL means "never": approximate claims are read at time 0 (always live), and
    /// decisions push no timer.
    never: bool,
    tick_nanos: u64,
    pub(crate) caps: Caps,
    clock: Arc<dyn Clock>,
    tree: Tree,
    workers: Arc<Workers>,
    timers: Timers,
    /// Every decision, oldest first, under a global cap.
    global_log: Option<DecisionLog>,
    /// Held by whoever sweeps (the sweeper, `sweep_expired`) for its purges: the purge
    /// under way (`purge.rs`).
    sweeping: parking_lot::Mutex<purge::PurgePass>,
    /// Whether callers help reclaim when the sweeper falls behind (a background sweeper
    /// runs and timers are kept); cleared for good by [`Core::stop_helping`].
    help: std::sync::atomic::AtomicBool,
    /// The clock reading of the last sweep that left nothing due.
    swept_until: AtomicU64,
    records: StripedCounter,
    finds: StripedCounter,
    expirations: StripedCounter,
    caller_expirations: StripedCounter,
    evictions: StripedCounter,
    rejected_events: StripedCounter,
    dropped_by_reports: StripedCounter,
    capacities_learned: StripedCounter,
    /// Blocks the caps evicted lately, per slot.
    ghosts: learn::GhostTable,
    /// Running requests' pinned blocks, per slot.
    pins: pins::PinTable,
    /// Engines' reports of cached prompt tokens, per slot.
    reports: reports::ReportTable,
}

impl Core {
    pub(crate) fn new(b: &Builder) -> Self {
        let tick_nanos = nanos(b.tick).max(1);
        let ttl_nanos = nanos(b.ttl).clamp(1, NEVER);
        let never = ttl_nanos >= NEVER;
        let caps = Caps {
            per_worker: b.max_blocks_per_worker,
            total: b.max_entries,
        };
        let workers = Workers::new(Keeping {
            total: caps.total.is_some(),
            slot_logs: caps.per_worker.is_some(),
        });
        Self {
            block_size: b.block_size,
            ttl_nanos,
            never,
            tick_nanos,
            caps,
            clock: Arc::clone(&b.clock),
            // Under a global cap, removed workers' entries count toward it until the
            // sweep frees them, so what the cap evicts does not depend on when holder
            // arrays happen to be copied: copies drop them only without one.
            tree: Tree::new(Arc::new(Book(workers.clone())), caps.total.is_none()),
            workers,
            timers: Timers::new(tick_nanos, if never { 0 } else { ttl_nanos }),
            global_log: caps.total.map(|_| DecisionLog::default()),
            sweeping: parking_lot::Mutex::new(purge::PurgePass::default()),
            help: std::sync::atomic::AtomicBool::new(b.background_sweeper && !never),
            swept_until: AtomicU64::new(0),
            records: StripedCounter::default(),
            finds: StripedCounter::default(),
            expirations: StripedCounter::default(),
            caller_expirations: StripedCounter::default(),
            evictions: StripedCounter::default(),
            rejected_events: StripedCounter::default(),
            dropped_by_reports: StripedCounter::default(),
            capacities_learned: StripedCounter::default(),
            ghosts: learn::GhostTable::default(),
            pins: pins::PinTable::default(),
            reports: reports::ReportTable::default(),
        }
    }

    /// The clock, in the index's nanoseconds: readings past [`LAST_INSTANT`] (2^64 - 2 ns)
    /// stop there, so that a pin ([`PIN`], one later) is live at every reading.
    #[inline]
    fn now(&self) -> u64 {
        nanos(self.clock.now()).min(LAST_INSTANT)
    }

    /// The TTL left that a restored or replayed claim keeps of `left`, the TTL it had left:
    /// at most the index's TTL, except by up to [`ORDER_STRETCH`] ns (the stretch by which
    /// caps order a worker's decisions taken at one clock reading: a snapshot taken at that
    /// reading gives them TTLs a nanosecond apart above the TTL, and clamping them all to
    /// the TTL would lose their order).
    fn ttl_left_kept(&self, left: u64) -> u64 {
        if left > self.ttl_nanos.saturating_add(ORDER_STRETCH) {
            self.ttl_nanos
        } else {
            left
        }
    }

    /// The time claims are read at: `now`, or 0 when the TTL means never (every
    /// approximate claim is then after it, so live).
    #[inline]
    fn read_time(&self, now: u64) -> u64 {
        if self.never {
            0
        } else {
            now
        }
    }

    fn read_at(&self) -> ReadAt {
        let now = self.now();
        ReadAt {
            live: self.read_time(now),
            clock: now,
        }
    }

    /// Whether decisions push timers.
    #[inline]
    fn timers_kept(&self) -> Option<&Timers> {
        (!self.never).then_some(&self.timers)
    }

    pub(crate) fn find_into<W: WorkerKey>(
        &self,
        query: HashedQuery<'_>,
        out: &mut impl ScoreSink<W>,
    ) {
        query.preload();
        self.finds.add(1);
        let guard = epoch::pin();
        let now = self.read_time(self.now());
        self.tree.find_into(query, now, &*self.workers, &guard, out);
    }

    /// An approximate claim of `ttl` nanoseconds from `now` for `slot`: with caps, made
    /// later than any the slot was given before, so eviction tells decisions apart by age.
    fn expiry_for(&self, slot: Slot, now: u64, ttl: u64) -> u64 {
        let expiry = expiry_after(now, ttl);
        if self.capped() {
            self.workers.unique_expiry(slot, expiry)
        } else {
            expiry
        }
    }

    pub(crate) fn record(
        &self,
        worker: impl WorkerKey,
        local: &[LocalBlockHash],
        seq: &[SequenceHash],
    ) {
        self.record_dated(worker, local, seq, None);
    }

    /// Records a decision: this index's, taken now (`age` `None`), or another replica's,
    /// taken `age` nanoseconds ago, whose entries expire `age` earlier than a decision
    /// recorded now (never, if the TTL means never). Returns `false`, storing nothing, when
    /// it has already expired.
    pub(crate) fn record_dated(
        &self,
        worker: impl WorkerKey,
        local: &[LocalBlockHash],
        seq: &[SequenceHash],
        age: Option<u64>,
    ) -> bool {
        let (dated, age) = (age.is_some(), age.unwrap_or(0));
        // A "never" TTL keeps a decision of any age, and the age still orders it among
        // the others for eviction (its claim carries the time it was taken + 2^62 ns).
        let ttl = if self.never {
            self.ttl_nanos.saturating_sub(age).max(1)
        } else {
            self.ttl_nanos.saturating_sub(age)
        };
        if ttl == 0 {
            return false;
        }
        if seq.is_empty() {
            return true;
        }
        self.records.add(1);
        // The clock (a caller's code) is read before anything changes: if it panics, the
        // index is as it was.
        let now = self.now();
        let guard = self.tree.writing();
        let Some(slot) = self.workers.resolve(worker) else {
            return true; // 2^32 live registrations: nothing sensible to store
        };
        if !self.workers.begin_write(slot, WriteKind::Approx) {
            return true; // removed meanwhile: the decision comes before the removal
        }
        // A decision taken now is made later than the worker's previous ones (with caps);
        // another replica's keeps its age and is logged in expiry order among them, after
        // those of equal expiry (with caps, made later than the worker's decisions that
        // asked for no later an expiry, and the fresh decision if it is the newest:
        // `Workers::dated_expiry`).
        let (expiry, past) = if !dated {
            (self.expiry_for(slot, now, ttl), false)
        } else if self.capped() {
            let (expiry, newest) = self.workers.dated_expiry(slot, expiry_after(now, ttl));
            (expiry, !newest)
        } else {
            (expiry_after(now, ttl), true)
        };
        let added = self.store_decision(slot, (local, seq), (expiry, past), 0, &guard);
        self.workers.end_write(slot);
        self.help_sweep(now, added);
        true
    }

    /// Stores a decision of `slot` (its write begun) expiring at `expiry`: its entries,
    /// its timer, and with caps its log entry and the evictions it calls for
    /// ([`bound_decision`](Self::bound_decision); `past`: another replica's decision older
    /// than the worker's newest, which gets no protection as the fresh decision).
    /// `unpinned`: entries a release just made evictable again, which the evictions may
    /// make room for as for added ones. Returns the entries added.
    fn store_decision(
        &self,
        slot: Slot,
        (local, seq): (&[LocalBlockHash], &[SequenceHash]),
        (expiry, past): (u64, bool),
        unpinned: usize,
        guard: &Writing<'_>,
    ) -> usize {
        let Some(&leaf) = seq.last() else {
            return 0;
        };
        let added = self.write_decision(slot, (local, seq), expiry, guard);
        self.schedule_timer(slot, leaf, expiry);
        // Read after the entries are in (not once before): a first capacity set meanwhile
        // logs what it finds in the tree, and a record it did not find logs itself here.
        if self.capped() {
            let written = Written {
                leaf,
                blocks: seq.len(),
                expiry,
                past,
                evictable: added + unpinned,
            };
            self.bound_decision(slot, written, guard);
        }
        added
    }

    /// Writes a decision's entries to the tree and counts them: the first step of
    /// [`store_decision`](Self::store_decision). Returns the entries added.
    fn write_decision(
        &self,
        slot: Slot,
        (local, seq): (&[LocalBlockHash], &[SequenceHash]),
        expiry: u64,
        guard: &Writing<'_>,
    ) -> usize {
        let holds_none = self.workers.entries(slot) == 0;
        let added = self
            .tree
            .record(slot, (local, seq), expiry, holds_none, guard);
        self.workers.adjust_entries(slot, added as i64);
        added
    }

    /// A timer for `slot`'s walk from `leaf` at `expiry`, if the index keeps timers.
    fn schedule_timer(&self, slot: Slot, leaf: SequenceHash, expiry: u64) {
        if let Some(timers) = self.timers_kept() {
            let generation = self.workers.generation(slot);
            let timer = Timer {
                leaf,
                slot,
                generation,
            };
            timers.schedule(expiry, timer);
        }
    }

    /// Whether decisions are logged for eviction: a cap, or a worker's capacity, was set.
    #[inline]
    fn capped(&self) -> bool {
        self.caps.any() || self.workers.keeps_slot_logs()
    }

    /// The bound on `slot`'s entries: its capacity if one was set, else the index-wide
    /// per-worker cap.
    fn worker_cap(&self, slot: Slot) -> Option<usize> {
        self.workers.capacity(slot).or(self.caps.per_worker)
    }

    /// Sets `key`'s capacity in blocks (registering it), and evicts its oldest decisions
    /// at once while it holds more (see `ApproxKvIndexer::set_worker_capacity`).
    pub(crate) fn set_capacity(&self, key: impl WorkerKey, capacity: Option<usize>) {
        let _pinned = epoch::pin(); // from the lookup on (see `begin_request`)
        let Some(slot) = self.workers.resolve(key) else {
            return; // 2^32 live registrations: nothing sensible to bound
        };
        self.set_slot_capacity(slot, capacity);
    }

    /// [`set_capacity`](Self::set_capacity) of a registered slot.
    fn set_slot_capacity(&self, slot: Slot, capacity: Option<usize>) {
        let at = self.read_at(); // before anything changes (see `record_dated`)
        if self.workers.start_slot_logs() {
            let _ = self.log_what_is_held(at);
        }
        self.workers.set_capacity(slot, capacity);
        let Some(cap) = self.worker_cap(slot) else {
            return;
        };
        let guard = self.tree.writing();
        guard.uncount_dropped();
        let excess = self.workers.entries(slot).saturating_sub(cap);
        if excess > 0 {
            let evicted = self.evictor(&guard).evict_worker(slot, cap, excess, None);
            self.evictions.add(evicted as u64);
        }
    }

    /// When slot logs start (the first capacity set on an index without a per-worker
    /// cap), logs what every live worker holds, so that it too is evicted in order. Each
    /// leaf (an entry that no deeper live entry of the same worker with a claim as late
    /// continues: where a decision ended) becomes a decision of its own: in order of
    /// (expiry, block, worker), its path up from the leaf is raised to a unique expiry (at
    /// least its own, as a capped record's: a few nanoseconds more at most), timed and
    /// logged. Paths that share a prefix then leave it to the later one, so no eviction
    /// leaves a worker's deeper blocks without their prefix. Records racing this are
    /// logged themselves (the flag is set first).
    ///
    /// Under `max_entries` alone, the index-wide log already holds every decision, in
    /// order, with expiries unique per worker: each goes into its worker's log as it is
    /// (raising paths to unique expiries there would take an older path past the worker's
    /// newest decision, a whole TTL later).
    ///
    /// Returns each raised path's slot, expiry before and expiry after, for a caller that
    /// drops decisions up to an expiry read before (a report's loss).
    fn log_what_is_held(&self, at: ReadAt) -> Vec<(Slot, u64, u64)> {
        if let Some(global) = &self.global_log {
            for decision in global.decisions() {
                if let Some(log) = self.workers.log(decision.slot) {
                    let _ = log.push(decision);
                }
            }
            return Vec::new();
        }
        let mut raised = Vec::new();
        let guard = self.tree.writing();
        // Every entry held through the scan must be in it: one missed is logged nowhere.
        let rows = self.tree.live_entries_unmoved(at, &guard);
        let held: std::collections::HashMap<(Slot, SequenceHash), &LiveEntry> =
            rows.iter().map(|r| ((r.slot, r.seq), r)).collect();
        // Continued by a deeper entry of the same decision: one whose claim is as late (a
        // deeper entry with an earlier claim was left by an earlier decision, and this
        // entry is where a later one ended).
        let continued: std::collections::HashSet<(Slot, SequenceHash)> = rows
            .iter()
            .filter(|r| r.depth > 0)
            .filter(|r| {
                held.get(&(r.slot, r.parent))
                    .is_some_and(|p| r.expiry >= p.expiry)
            })
            .map(|r| (r.slot, r.parent))
            .collect();
        let mut leaves: Vec<(u64, SequenceHash, crate::WorkerWithDpRank, Slot)> = rows
            .iter()
            // Pinned blocks are no decision's: their request's release logs them.
            .filter(|row| row.expiry != 0 && row.expiry != PIN)
            .filter(|row| !continued.contains(&(row.slot, row.seq)))
            .filter_map(|row| {
                let key = self.workers.alive(row.slot)?;
                Some((row.expiry, row.seq, key, row.slot))
            })
            .collect();
        // A fixed order among equal expiries (decisions taken at one clock reading).
        leaves.sort_unstable();
        for (expiry, leaf, _, slot) in leaves {
            let mut path = vec![held[&(slot, leaf)]];
            while let Some(up) = path
                .last()
                .filter(|r| r.depth > 0)
                .and_then(|r| held.get(&(slot, r.parent)))
            {
                path.push(up);
            }
            path.reverse();
            let was = expiry;
            let expiry = self.workers.unique_expiry(slot, expiry);
            raised.push((slot, was, expiry));
            let claim = Claim::approx(expiry);
            let parent = (path[0].depth > 0).then_some(path[0].parent);
            let blocks = path.iter().map(|r| Block {
                local: r.local,
                seq: r.seq,
                claim,
            });
            let added = self.tree.upsert_chain(slot, parent, blocks, &guard);
            self.workers.adjust_entries(slot, added as i64);
            self.schedule_walk(slot, (leaf, expiry, Span::Path), Among::First, &guard);
        }
        raised
    }

    /// `key`'s capacity in blocks, if one was set (and the key is registered).
    pub(crate) fn capacity_of(&self, key: impl WorkerKey) -> Option<usize> {
        let _pinned = epoch::pin(); // from the lookup on (see `begin_request`)
        self.workers.capacity(self.workers.lookup(key)?)
    }

    /// Forgets every rank of `worker` (see `ApproxKvIndexer::remove_worker`).
    pub(crate) fn remove_worker(&self, worker: crate::WorkerId) {
        self.workers.remove(worker);
    }

    /// Forgets one key (see `ApproxKvIndexer::remove_worker_key`).
    pub(crate) fn remove_key(&self, key: impl WorkerKey) {
        self.workers.remove_rank(key);
    }

    /// The entries every rank of `worker` holds.
    pub(crate) fn worker_entries(&self, worker: crate::WorkerId) -> usize {
        self.workers.entries_of_worker(worker)
    }

    /// The TTL in nanoseconds (`NEVER` or more: never).
    pub(crate) fn ttl_nanos(&self) -> u64 {
        self.ttl_nanos
    }

    pub(crate) fn stats(&self) -> IndexStats {
        self.tree.uncount_dropped();
        let (entries, nodes) = (self.workers.total_entries(), self.tree.len());
        let pending_timers = self.timers.pending();
        let logged = self.logged_decisions();
        IndexStats {
            entries,
            nodes,
            workers: self.workers.len(),
            records: self.records.sum(),
            finds: self.finds.sum(),
            expirations: self.expirations.sum(),
            caller_expirations: self.caller_expirations.sum(),
            evictions: self.evictions.sum(),
            rejected_events: self.rejected_events.sum(),
            pending_timers,
            cache: self.cache_report_totals(),
            dropped_by_reports: self.dropped_by_reports.sum(),
            capacities_learned: self.capacities_learned.sum(),
            finds_gallop: self
                .tree
                .holders_nested
                .load(std::sync::atomic::Ordering::Relaxed),
            estimated_bytes: self.tree.estimated_bytes()
                + pending_timers * Timers::BYTES_PER_TIMER
                + logged * std::mem::size_of::<LoggedDecision>()
                + self.workers.engine_hash_count() * 2 * std::mem::size_of::<u64>()
                + self.workers.exact_chain_bytes()
                + self.ghosts.bytes(),
        }
    }

    /// Decisions held in the eviction logs.
    fn logged_decisions(&self) -> usize {
        let per_slot: usize = (0..self.workers.slot_count())
            .filter_map(|slot| self.workers.log(slot))
            .map(DecisionLog::len)
            .sum();
        per_slot + self.global_log.as_ref().map_or(0, DecisionLog::len)
    }
}
