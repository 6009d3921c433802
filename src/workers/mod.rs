//! The worker registry: each worker id gets a dense *slot*, which is what the tree stores.
//!
//! `remove_worker` is O(1): it unmaps the id and marks the slot dead, so every entry
//! carrying that slot reads as absent at once; the sweeper frees those entries as its walks
//! meet them. A slot is reused only after its last entry is gone *and* every thread that
//! could still hold the old slot number (pinned before it died) has unpinned, which the
//! epoch collector tells us by running a deferred closure.

use std::sync::Arc;

use crossbeam_epoch as epoch;
use crossbeam_utils::CachePadded;

use crate::capacity::DecisionLog;
use crate::id_hasher::IdBuildHasher;
use crate::sync::{
    AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, DashMap, Mutex, Ordering,
};
use crate::{SequenceHash, WorkerId, WorkerKey, WorkerWithDpRank};

/// A dense index standing for one registration of one worker.
pub(crate) type Slot = u32;

const ALIVE: u64 = 1;
const DEAD: u64 = 2;
const FREE: u64 = 3;
const STATE_BITS: u64 = 2;
const STATE_MASK: u64 = (1 << STATE_BITS) - 1;

#[inline]
fn pack(generation: u64, state: u64) -> u64 {
    (generation << STATE_BITS) | state
}

/// One slot's shared state, padded so counters of different workers never share a line.
#[derive(Debug, Default)]
struct SlotInfo {
    /// `generation << 2 | state`; the generation grows each time the slot is freed.
    state: AtomicU64,
    /// The worker id this slot stands for while alive.
    worker: AtomicU64,
    /// Its data-parallel rank.
    rank: AtomicU32,
    /// Entries in the tree carrying this slot (may dip below zero for a moment, because a
    /// recorder adds its count after inserting while the sweeper may already subtract).
    entries: AtomicI64,
    /// Whether an exact KV event ever stored an entry for this registration: such entries
    /// have no timer, so a dead slot with them needs a purge.
    had_exact: AtomicBool,
    /// Queued for a purge: the slot must not be recycled until the purge has run, or the
    /// purge would delete the entries of the slot's next owner.
    purge_pending: AtomicBool,
    /// Writers that a purge must wait for, storing entries for this slot right now: exact
    /// KV events always, decisions too when no timer will ever walk them (see
    /// [`Workers::begin_write`]).
    writers: AtomicU32,
    /// Recorded decisions, oldest first, kept only under a per-worker cap.
    log: DecisionLog,
    /// The latest expiry handed out by [`Workers::unique_expiry`].
    last_expiry: AtomicU64,
    /// The engine's own block hashes of the blocks it stored through KV events, where they
    /// differ from this index's sequence hashes: engine hash -> sequence hash. Only used
    /// to resolve this worker's `Stored` parents and `Removed` blocks.
    engine_hashes: Mutex<std::collections::HashMap<u64, u64, IdBuildHasher>>,
}

/// What a writer is about to store (see [`Workers::begin_write`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Write {
    /// Entries with an exact claim (no timer leads a walk to them).
    Exact,
    /// Approximate claims only.
    Approx,
}

/// First segment length; segment `k` holds `SEGMENT_BASE << k` slots.
const SEGMENT_BASE: u64 = 64;
/// Enough segments for every `u32` slot.
const SEGMENTS: usize = 27;

/// A lock-free, append-only array of slots, grown by whole segments that never move.
struct SlotTable {
    segments: [AtomicPtr<CachePadded<SlotInfo>>; SEGMENTS],
}

#[inline]
fn locate(slot: Slot) -> (usize, usize) {
    let q = u64::from(slot) / SEGMENT_BASE + 1;
    let seg = 63 - q.leading_zeros() as usize;
    let offset = u64::from(slot) - SEGMENT_BASE * ((1u64 << seg) - 1);
    (seg, offset as usize)
}

impl SlotTable {
    fn new() -> Self {
        Self {
            segments: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
        }
    }

    /// The slot's info, if its segment exists.
    #[inline]
    fn get(&self, slot: Slot) -> Option<&SlotInfo> {
        let (seg, offset) = locate(slot);
        let base = self.segments[seg].load(Ordering::Acquire);
        if base.is_null() {
            return None;
        }
        // SAFETY: a non-null segment pointer was published (Release) by `ensure` from a
        // boxed slice of exactly `SEGMENT_BASE << seg` elements, which is freed only in
        // `Drop` (when no `&self` exists), and `offset < SEGMENT_BASE << seg` by `locate`.
        Some(unsafe { &*base.add(offset) })
    }

    /// The slot's info, allocating its segment on first use.
    fn ensure(&self, slot: Slot) -> &SlotInfo {
        if let Some(info) = self.get(slot) {
            return info;
        }
        let (seg, _) = locate(slot);
        let len = (SEGMENT_BASE << seg) as usize;
        let fresh: Box<[CachePadded<SlotInfo>]> = (0..len).map(|_| Default::default()).collect();
        let fresh = Box::into_raw(fresh).cast::<CachePadded<SlotInfo>>();
        if let Err(_winner) = self.segments[seg].compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: `fresh` came from `Box::into_raw` of a slice of `len` elements just
            // above and was never published, so this thread owns it.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(fresh, len)) });
        }
        self.get(slot).expect("segment published above")
    }
}

impl Drop for SlotTable {
    fn drop(&mut self) {
        for (seg, ptr) in self.segments.iter_mut().enumerate() {
            let base = *ptr.get_mut();
            if !base.is_null() {
                let len = (SEGMENT_BASE << seg) as usize;
                // SAFETY: `&mut self` means no reader remains; the pointer was made by
                // `Box::into_raw` of a slice of `len` elements in `ensure` and freed only here.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(base, len)) });
            }
        }
    }
}

/// The slots of one worker id: one per data-parallel rank (usually just one).
type Ranks = Vec<(u32, Slot)>;

#[inline]
fn slot_of_rank(ranks: &Ranks, rank: u32) -> Option<Slot> {
    ranks.iter().find(|r| r.0 == rank).map(|r| r.1)
}

/// Worker keys, their slots, and slot reuse.
pub(crate) struct Workers {
    ids: DashMap<WorkerId, Ranks, IdBuildHasher>,
    slots: SlotTable,
    /// Freed slots, and the next never-used slot. Touched only when a worker is first
    /// recorded or a slot is recycled, never on the find or refresh paths.
    free: Mutex<FreeSlots>,
    /// Dead slots with exact entries, waiting for the sweeper's purge.
    to_purge: Mutex<Vec<Slot>>,
    /// Entries over all slots, maintained only when a global cap needs it.
    total: Option<CachePadded<AtomicI64>>,
    /// Purge every dead slot (when no timer will ever walk its entries).
    purge_all_dead: bool,
    /// Keep per-slot decision logs (a per-worker cap).
    slot_logs: bool,
}

#[derive(Default)]
struct FreeSlots {
    recycled: Vec<Slot>,
    next: u64,
}

impl Workers {
    /// A registry; `track_total` keeps a running total of entries (for a global cap);
    /// `purge_all_dead` queues every removed worker for a purge (when timers are off);
    /// `slot_logs` keeps a decision log per slot (for a per-worker cap).
    pub(crate) fn new(track_total: bool, purge_all_dead: bool, slot_logs: bool) -> Arc<Self> {
        Arc::new(Self {
            ids: DashMap::with_hasher(IdBuildHasher::default()),
            slots: SlotTable::new(),
            free: Mutex::new(FreeSlots::default()),
            to_purge: Mutex::new(Vec::new()),
            total: track_total.then(Default::default),
            purge_all_dead,
            slot_logs,
        })
    }

    /// The slot of `worker`, registering it if needed. `None` only if all 2^32 slots are
    /// in use at once.
    pub(crate) fn resolve(&self, worker: impl WorkerKey) -> Option<Slot> {
        let (id, rank) = (worker.worker_id(), worker.dp_rank());
        if let Some(slot) = self.ids.get(&id).and_then(|r| slot_of_rank(&r, rank)) {
            return Some(slot);
        }
        let mut ranks = self.ids.entry(id).or_default();
        if let Some(slot) = slot_of_rank(&ranks, rank) {
            return Some(slot);
        }
        let slot = self.allocate()?;
        let info = self.slots.ensure(slot);
        info.worker.store(id, Ordering::Relaxed);
        info.rank.store(rank, Ordering::Relaxed);
        let generation = info.state.load(Ordering::Relaxed) >> STATE_BITS;
        info.state.store(pack(generation, ALIVE), Ordering::Release);
        ranks.push((rank, slot));
        Some(slot)
    }

    /// The slot of `worker` if it is registered (never registers).
    #[inline]
    pub(crate) fn lookup(&self, worker: impl WorkerKey) -> Option<Slot> {
        let ranks = self.ids.get(&worker.worker_id())?;
        slot_of_rank(&ranks, worker.dp_rank())
    }

    fn allocate(&self) -> Option<Slot> {
        let mut free = self.free.lock();
        if let Some(slot) = free.recycled.pop() {
            return Some(slot);
        }
        let slot = Slot::try_from(free.next).ok()?;
        free.next += 1;
        Some(slot)
    }

    /// Unregisters every rank of `worker`; their entries read as absent from now on.
    /// Unknown ids are a no-op.
    pub(crate) fn remove(self: &Arc<Self>, worker: WorkerId) -> bool {
        let Some((_, ranks)) = self.ids.remove(&worker) else {
            return false;
        };
        for (_, slot) in ranks {
            self.kill(slot);
        }
        true
    }

    /// Unregisters one rank of a worker.
    pub(crate) fn remove_rank(self: &Arc<Self>, worker: impl WorkerKey) -> bool {
        let (id, rank) = (worker.worker_id(), worker.dp_rank());
        let mut removed = None;
        self.ids.remove_if_mut(&id, |_, ranks| {
            if let Some(at) = ranks.iter().position(|r| r.0 == rank) {
                removed = Some(ranks.swap_remove(at).1);
            }
            ranks.is_empty()
        });
        removed.map(|slot| self.kill(slot)).is_some()
    }

    /// Marks a slot dead: its entries read as absent; they are freed by walks or a purge,
    /// then the slot is recycled.
    fn kill(self: &Arc<Self>, slot: Slot) {
        // SeqCst: see `begin_write`.
        let info = self.slots.get(slot).expect("a mapped slot has a segment");
        let generation = info.state.load(Ordering::Relaxed) >> STATE_BITS;
        info.state.store(pack(generation, DEAD), Ordering::SeqCst);
        if self.purge_all_dead || info.had_exact.load(Ordering::SeqCst) {
            self.queue_purge(slot, info);
        }
        if info.entries.load(Ordering::SeqCst) <= 0 {
            self.schedule_reclaim(slot, generation);
        }
    }

    fn queue_purge(&self, slot: Slot, info: &SlotInfo) {
        if !info.purge_pending.swap(true, Ordering::SeqCst) {
            self.to_purge.lock().push(slot);
        }
    }

    /// The purge of `slot` has run: it may be recycled once its entries are gone.
    pub(crate) fn purge_done(self: &Arc<Self>, slot: Slot) {
        let Some(info) = self.slots.get(slot) else {
            return;
        };
        info.purge_pending.store(false, Ordering::SeqCst);
        let state = info.state.load(Ordering::SeqCst);
        if state & STATE_MASK == DEAD && info.entries.load(Ordering::SeqCst) <= 0 {
            self.schedule_reclaim(slot, state >> STATE_BITS);
        }
    }

    /// Starts storing entries for `slot` that no timer's walk will lead to if the slot
    /// dies: exact ones, or any when the registry purges every dead slot (no timers).
    /// Returns false, and the caller must store nothing, if the slot died meanwhile (the
    /// write is then ordered before the removal). Otherwise the caller must call
    /// [`end_write`](Self::end_write) after its stores; a purge of the slot waits for that.
    /// Approximate writes with timers need no handshake (their timers' walks free them)
    /// and return true at no cost.
    ///
    /// Why no such entry can escape the purge (all SeqCst): the writer sets `had_exact`
    /// (exact writes), registers as a writer, then reads the state; `kill` writes DEAD,
    /// then reads `had_exact` (or purges anyway). Either the writer reads DEAD and stores
    /// nothing, or `kill` queues a purge, which then sees the writer and waits for it.
    pub(crate) fn begin_write(&self, slot: Slot, write: Write) -> bool {
        if write == Write::Approx && !self.purge_all_dead {
            return true;
        }
        let Some(info) = self.slots.get(slot) else {
            return false;
        };
        if write == Write::Exact {
            info.had_exact.store(true, Ordering::SeqCst);
        }
        info.writers.fetch_add(1, Ordering::SeqCst);
        if info.state.load(Ordering::SeqCst) & STATE_MASK != ALIVE {
            info.writers.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Ends what [`begin_write`](Self::begin_write) started (with the same `write`).
    pub(crate) fn end_write(&self, slot: Slot, write: Write) {
        if write == Write::Approx && !self.purge_all_dead {
            return;
        }
        if let Some(info) = self.slots.get(slot) {
            info.writers.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Whether a writer is still storing entries for `slot`.
    pub(crate) fn writes_in_flight(&self, slot: Slot) -> bool {
        self.slots
            .get(slot)
            .is_some_and(|i| i.writers.load(Ordering::SeqCst) > 0)
    }

    /// Remembers that the engine behind `slot` calls the block `ours` by `engine`.
    pub(crate) fn map_engine_hash(&self, slot: Slot, engine: SequenceHash, ours: SequenceHash) {
        if let Some(info) = self.slots.get(slot) {
            info.engine_hashes.lock().insert(engine.0, ours.0);
        }
    }

    /// The sequence hash of the block that the engine behind `slot` calls `engine`, if a
    /// KV event told us (and no `Removed` event since).
    pub(crate) fn engine_hash(&self, slot: Slot, engine: SequenceHash) -> Option<SequenceHash> {
        let info = self.slots.get(slot)?;
        let map = info.engine_hashes.lock();
        map.get(&engine.0).copied().map(SequenceHash)
    }

    /// Forgets the engine hash `engine` of `slot`, returning the block it named.
    pub(crate) fn unmap_engine_hash(
        &self,
        slot: Slot,
        engine: SequenceHash,
    ) -> Option<SequenceHash> {
        let info = self.slots.get(slot)?;
        let mut map = info.engine_hashes.lock();
        map.remove(&engine.0).map(SequenceHash)
    }

    /// Engine hashes kept over all slots (for the memory estimate).
    pub(crate) fn engine_hash_count(&self) -> usize {
        let next = self.free.lock().next;
        (0..next)
            .filter_map(|s| self.slots.get(s as Slot))
            .map(|i| i.engine_hashes.lock().len())
            .sum()
    }

    /// The slot's current generation (truncated): it changes each time the slot is freed,
    /// so a logged decision can tell whether its slot still stands for the same worker.
    #[inline]
    pub(crate) fn generation(&self, slot: Slot) -> u16 {
        self.slots.get(slot).map_or(0, |i| {
            (i.state.load(Ordering::Acquire) >> STATE_BITS) as u16
        })
    }

    /// Makes later [`unique_expiry`](Self::unique_expiry) results come after `expiry`
    /// (a restored or replayed claim).
    pub(crate) fn note_expiry(&self, slot: Slot, expiry: u64) {
        if let Some(info) = self.slots.get(slot) {
            info.last_expiry.fetch_max(expiry, Ordering::AcqRel);
        }
    }

    /// Puts slots whose purge must wait back in the queue.
    pub(crate) fn requeue_purges(&self, slots: impl IntoIterator<Item = Slot>) {
        self.to_purge.lock().extend(slots);
    }

    /// Dead slots with exact entries that the sweeper must purge.
    pub(crate) fn take_purges(&self) -> Vec<Slot> {
        std::mem::take(&mut *self.to_purge.lock())
    }

    /// An expiry of at least `wanted` and later than any handed out before for `slot`, so
    /// that eviction tells any two decisions of a worker apart by age even when the clock
    /// did not move between them (a manual clock, or a burst within a nanosecond). Each
    /// such decision stretches the TTL by a nanosecond: reads are exact to within the
    /// number of decisions one worker recorded at the same clock reading, in nanoseconds.
    pub(crate) fn unique_expiry(&self, slot: Slot, wanted: u64) -> u64 {
        let Some(info) = self.slots.get(slot) else {
            return wanted;
        };
        let mut chosen = wanted;
        let _ = info
            .last_expiry
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
                chosen = wanted.max(last.saturating_add(1));
                Some(chosen)
            });
        chosen
    }

    /// The decision log of `slot`, if slots keep logs (a per-worker cap).
    #[inline]
    pub(crate) fn log(&self, slot: Slot) -> Option<&DecisionLog> {
        if !self.slot_logs {
            return None;
        }
        self.slots.get(slot).map(|i| &i.log)
    }

    /// Slots ever handed out (alive, dead or free): the range to visit for per-slot work.
    pub(crate) fn slot_count(&self) -> Slot {
        Slot::try_from(self.free.lock().next).unwrap_or(Slot::MAX)
    }

    /// Entries over all slots, if tracked.
    #[inline]
    pub(crate) fn tracked_total(&self) -> Option<usize> {
        self.total
            .as_ref()
            .map(|t| t.load(Ordering::Relaxed).max(0) as usize)
    }

    /// The worker key of `slot` if it is alive (registered and not removed).
    #[inline]
    pub(crate) fn alive<W: WorkerKey>(&self, slot: Slot) -> Option<W> {
        let info = self.slots.get(slot)?;
        if info.state.load(Ordering::Acquire) & STATE_MASK == ALIVE {
            let id = info.worker.load(Ordering::Relaxed);
            Some(W::from_parts(id, info.rank.load(Ordering::Relaxed)))
        } else {
            None
        }
    }

    /// Whether `slot` is alive.
    #[inline]
    pub(crate) fn is_alive(&self, slot: Slot) -> bool {
        self.alive::<WorkerWithDpRank>(slot).is_some()
    }

    /// Entries stored for `slot` (clamped at zero).
    #[inline]
    pub(crate) fn entries(&self, slot: Slot) -> usize {
        self.slots
            .get(slot)
            .map_or(0, |i| i.entries.load(Ordering::Relaxed).max(0) as usize)
    }

    /// Adds `delta` to the slot's entry count; recycles a dead slot whose count reaches zero.
    pub(crate) fn adjust_entries(self: &Arc<Self>, slot: Slot, delta: i64) {
        if delta == 0 {
            return;
        }
        let Some(info) = self.slots.get(slot) else {
            return;
        };
        if let Some(total) = &self.total {
            total.fetch_add(delta, Ordering::Relaxed);
        }
        let now = info.entries.fetch_add(delta, Ordering::SeqCst) + delta;
        if now <= 0 {
            let state = info.state.load(Ordering::SeqCst);
            if state & STATE_MASK == DEAD {
                self.schedule_reclaim(slot, state >> STATE_BITS);
            }
        }
    }

    /// Frees `slot` once every thread pinned now has unpinned, if by then it is still the
    /// same dead registration with no entries left.
    fn schedule_reclaim(self: &Arc<Self>, slot: Slot, generation: u64) {
        let me = Arc::clone(self);
        let guard = epoch::pin();
        guard.defer(move || me.reclaim(slot, generation));
        guard.flush();
    }

    fn reclaim(&self, slot: Slot, generation: u64) {
        let Some(info) = self.slots.get(slot) else {
            return;
        };
        if info.entries.load(Ordering::SeqCst) > 0 {
            return; // a late recorder added entries: the sweeper will free them, then retry
        }
        if info.purge_pending.load(Ordering::SeqCst) {
            return; // `purge_done` retries
        }
        if info
            .state
            .compare_exchange(
                pack(generation, DEAD),
                pack(generation + 1, FREE),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            info.entries.store(0, Ordering::Relaxed);
            info.had_exact.store(false, Ordering::Relaxed);
            info.log.clear();
            info.engine_hashes.lock().clear();
            info.last_expiry.store(0, Ordering::Relaxed);
            self.free.lock().recycled.push(slot);
        }
    }

    /// Registered worker keys (each rank counts).
    pub(crate) fn len(&self) -> usize {
        self.ids.iter().map(|r| r.len()).sum()
    }

    /// Sum of entries over all slots, including dead ones not yet swept.
    pub(crate) fn total_entries(&self) -> usize {
        let next = self.free.lock().next;
        (0..next)
            .filter_map(|s| self.slots.get(s as Slot))
            .map(|i| i.entries.load(Ordering::Relaxed).max(0) as usize)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_covers_segments_without_gaps() {
        let mut expected = (0usize, 0usize);
        for slot in 0..10_000u32 {
            let got = locate(slot);
            if got.0 != expected.0 {
                assert_eq!(got, (expected.0 + 1, 0), "slot {slot}");
            } else {
                assert_eq!(got, expected, "slot {slot}");
            }
            expected = (got.0, got.1 + 1);
        }
        assert!(locate(u32::MAX).0 < SEGMENTS);
    }

    #[test]
    fn removed_slot_is_recycled_only_after_its_entries_are_gone() {
        let w = Workers::new(false, false, false);
        let a = w.resolve(10u64).unwrap();
        w.adjust_entries(a, 2);
        assert!(w.remove(10));
        assert_eq!(w.alive::<u64>(a), None);
        let b = w.resolve(11u64).unwrap();
        assert_ne!(a, b, "a slot with entries must not be reused");
        w.adjust_entries(a, -2);
        // Drive the epoch collector until the deferred reclaim has run.
        for _ in 0..1_000 {
            epoch::pin().flush();
        }
        let c = w.resolve(12u64).unwrap();
        assert_eq!(c, a, "the emptied dead slot is recycled");
        assert_eq!(w.alive::<u64>(c), Some(12));
    }
}
