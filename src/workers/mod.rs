//! The worker registry: each worker id gets a dense *slot*, which is what the tree stores.
//!
//! `remove_worker` is O(1): it unmaps the id and marks the slot dead, so every entry
//! carrying that slot reads as absent at once; the sweeper frees those entries as its walks
//! meet them. A slot is reused only after its last entry is gone *and* every thread that
//! could still hold the old slot number (pinned before it died) has unpinned, which the
//! epoch collector tells us by running a deferred closure.
//!
//! - `mod.rs`: the [`Workers`] facade: registration, worker key -> slot, removal, liveness;
//! - `table.rs`: the lock-free segmented slot table and each slot's shared state;
//! - `handshake.rs`: killing a slot, the writer handshake, the purge queue;
//! - `counts.rs`: per-slot entry counts (and their total), the last expiry handed out;
//! - `engine_hashes.rs`: the engine's own block hashes per slot;
//! - `exact_chains.rs`: the blocks KV events stored exactly per slot, and their children;
//! - `recycle.rs`: slot allocation and the epoch-deferred recycling of dead slots.

mod capacities;
mod counts;
mod engine_hashes;
mod exact_chains;
mod handshake;
mod recycle;
mod table;

use std::sync::Arc;

use crossbeam_epoch as epoch;
use crossbeam_utils::CachePadded;

use crate::capacity::DecisionLog;
use crate::id_hasher::IdBuildHasher;
use crate::slot::{Slot, SlotBook, SlotOwners};
use crate::sync::{AtomicBool, AtomicI64, AtomicUsize, DashMap, Mutex, Ordering};
use crate::{WorkerId, WorkerKey, WorkerWithDpRank};

pub(crate) use counts::LogKind;
pub(crate) use exact_chains::ExactChains;
pub(crate) use handshake::WriteKind;
use recycle::FreeSlots;
use table::{pack, SlotTable, ALIVE, DEAD, STATE_BITS, STATE_MASK};

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
    /// Dead slots whose entries the sweeper's next purge removes.
    to_purge: Mutex<Vec<Slot>>,
    /// Slots DEAD and not yet recycled: while there are none, a copy of a holder array
    /// has no removed worker's holder to leave out, and asks about no slot.
    dead: CachePadded<AtomicUsize>,
    /// Entries over all slots, maintained only when a global cap needs it.
    total: Option<CachePadded<AtomicI64>>,
    /// Keep per-slot decision logs: a per-worker cap, or (turned on for good) once a
    /// worker's capacity was set.
    slot_logs: AtomicBool,
}

/// What a registry keeps beyond slots and their keys (all off: [`Default`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Keeping {
    /// A running total of entries (for a global cap).
    pub(crate) total: bool,
    /// A decision log per slot (for a per-worker cap).
    pub(crate) slot_logs: bool,
}

impl Workers {
    /// A registry keeping what `keeping` says.
    pub(crate) fn new(keeping: Keeping) -> Arc<Self> {
        let Keeping {
            total: track_total,
            slot_logs,
        } = keeping;
        Arc::new(Self {
            ids: DashMap::with_hasher(IdBuildHasher::default()),
            slots: SlotTable::new(),
            free: Mutex::new(FreeSlots::default()),
            to_purge: Mutex::new(Vec::new()),
            dead: CachePadded::new(AtomicUsize::new(0)),
            total: track_total.then(Default::default),
            slot_logs: AtomicBool::new(slot_logs),
        })
    }

    /// The slot of `worker`, registering it if needed. `None` only if all 2^32 slots are
    /// in use at once.
    ///
    /// The caller must be pinned, and use the slot only under that pin: a removal recycles
    /// a slot only once every thread pinned when it died has unpinned, so the slot stays
    /// `worker`'s registration (or reads as dead) until then (`docs/design.md`, "Epoch
    /// protocol").
    pub(crate) fn resolve(&self, worker: impl WorkerKey) -> Option<Slot> {
        assert_pinned();
        let (id, rank) = (worker.worker_id(), worker.dp_rank());
        if let Some(slot) = self.ids.get(&id).and_then(|r| slot_of_rank(&r, rank)) {
            return Some(slot);
        }
        let mut ranks = self.ids.entry(id).or_default();
        if let Some(slot) = slot_of_rank(&ranks, rank) {
            return Some(slot);
        }
        let slot = self.allocate()?;
        let key = self.slots.ensure(slot);
        key.worker.store(id, Ordering::Relaxed);
        key.rank.store(rank, Ordering::Relaxed);
        let generation = key.state.load(Ordering::Relaxed) >> STATE_BITS;
        key.state.store(pack(generation, ALIVE), Ordering::Release);
        ranks.push((rank, slot));
        Some(slot)
    }

    /// The slot of `worker` if it is registered (never registers). Pinned, as for
    /// [`resolve`](Self::resolve).
    #[inline]
    pub(crate) fn lookup(&self, worker: impl WorkerKey) -> Option<Slot> {
        assert_pinned();
        let ranks = self.ids.get(&worker.worker_id())?;
        slot_of_rank(&ranks, worker.dp_rank())
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

    /// The slot's current generation (truncated): it changes each time the slot is freed,
    /// so a logged decision can tell whether its slot still stands for the same worker.
    #[inline]
    pub(crate) fn generation(&self, slot: Slot) -> u16 {
        self.slots.key(slot).map_or(0, |k| {
            (k.state.load(Ordering::Acquire) >> STATE_BITS) as u16
        })
    }

    /// The decision log of `slot`, if slots keep logs (a per-worker cap).
    #[inline]
    pub(crate) fn log(&self, slot: Slot) -> Option<&DecisionLog> {
        if !self.keeps_slot_logs() {
            return None;
        }
        self.slots.get(slot).map(|i| &i.log)
    }

    /// Slots ever handed out (alive, dead or free): the range to visit for per-slot work.
    pub(crate) fn slot_count(&self) -> Slot {
        Slot::try_from(self.free.lock().next).unwrap_or(Slot::MAX)
    }

    /// `count` summed over every slot ever handed out.
    fn sum_over_slots(&self, count: impl Fn(&table::SlotInfo) -> usize) -> usize {
        let next = self.free.lock().next;
        (0..next)
            .filter_map(|s| self.slots.get(s as Slot))
            .map(count)
            .sum()
    }

    /// The worker key of `slot` if it is alive (registered and not removed).
    #[inline]
    pub(crate) fn alive<W: WorkerKey>(&self, slot: Slot) -> Option<W> {
        self.slots.key(slot)?.alive()
    }

    /// Whether `slot` is alive.
    #[inline]
    pub(crate) fn is_alive(&self, slot: Slot) -> bool {
        self.alive::<WorkerWithDpRank>(slot).is_some()
    }

    /// Entries stored for every rank of `worker` together (0 if it is unknown). The ranks'
    /// slots are copied out before their counts are read (no map guard is held across
    /// another call).
    pub(crate) fn entries_of_worker(&self, worker: WorkerId) -> usize {
        let slots: Vec<Slot> = self
            .ids
            .get(&worker)
            .map(|ranks| ranks.iter().map(|&(_, slot)| slot).collect())
            .unwrap_or_default();
        slots.into_iter().map(|slot| self.entries(slot)).sum()
    }

    /// Registered worker keys (each rank counts).
    pub(crate) fn len(&self) -> usize {
        self.ids.iter().map(|r| r.len()).sum()
    }
}

/// The registry as the tree's [`SlotBook`]: what its writers ask about dead slots, and
/// where the entries that left the tree still counted are uncounted.
pub(crate) struct Book(pub(crate) Arc<Workers>);

impl SlotBook for Book {
    #[inline]
    fn any_dead(&self) -> bool {
        self.0.dead.load(Ordering::Relaxed) > 0
    }

    #[inline]
    fn is_dead(&self, slot: Slot) -> bool {
        self.0
            .slots
            .key(slot)
            .is_some_and(|key| key.state.load(Ordering::Acquire) & STATE_MASK == DEAD)
    }

    fn uncount(&self, slot: Slot, entries: usize) {
        self.0.adjust_entries(slot, -(entries as i64));
    }
}

/// What the tree's reads ask: the same calls as above.
impl SlotOwners for Workers {
    #[inline]
    fn alive<W: WorkerKey>(&self, slot: Slot) -> Option<W> {
        Workers::alive(self, slot)
    }

    #[inline]
    fn alive_with_entries<W: WorkerKey>(&self, slot: Slot) -> Option<(W, usize)> {
        let key = self.alive(slot)?;
        let entries = self.slots.get(slot)?.entries.load(Ordering::Relaxed);
        Some((key, entries.max(0) as usize))
    }

    /// Reads the keys through a cursor over the table's segments.
    #[inline]
    fn each_alive<W: WorkerKey>(
        &self,
        slots: impl Iterator<Item = Slot>,
        entries: bool,
        mut f: impl FnMut(Slot, W, usize),
    ) {
        let mut cursor = self.slots.key_cursor();
        for slot in slots {
            let Some(worker) = cursor.key(slot).and_then(|key| key.alive::<W>()) else {
                continue;
            };
            let count = if entries {
                self.slots
                    .get(slot)
                    .map_or(0, |i| i.entries.load(Ordering::Relaxed).max(0) as usize)
            } else {
                0
            };
            f(slot, worker, count);
        }
    }
}
/// Debug builds check the rule of [`Workers::resolve`] and [`Workers::lookup`]: the caller
/// is pinned. (Loom models pin where the orderings they check need it, and register
/// workers unpinned before their threads race.)
#[inline]
fn assert_pinned() {
    #[cfg(not(loom))]
    debug_assert!(
        epoch::is_pinned(),
        "a worker's slot is looked up under a pin"
    );
}
