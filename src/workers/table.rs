//! The slot table: each slot's state and key ([`SlotKey`], dense, what finds read) and its
//! other shared state ([`SlotInfo`], padded, what recorders write) in lock-free,
//! append-only arrays grown by whole segments that never move, so a slot's state is found
//! without a lock and stays put while any thread may read it.

use crossbeam_utils::CachePadded;

use crate::capacity::DecisionLog;
use crate::id_hasher::IdBuildHasher;
use crate::slot::Slot;
use crate::sync::{
    AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Mutex, Ordering,
};
use crate::WorkerKey;

pub(super) const ALIVE: u64 = 1;
pub(super) const DEAD: u64 = 2;
pub(super) const FREE: u64 = 3;
pub(super) const STATE_BITS: u64 = 2;
pub(super) const STATE_MASK: u64 = (1 << STATE_BITS) - 1;

#[inline]
pub(super) fn pack(generation: u64, state: u64) -> u64 {
    (generation << STATE_BITS) | state
}

/// What a find reads of a slot: its state and the worker key it stands for. Kept apart
/// from [`SlotInfo`], densely (24 bytes a slot, no padding): a find that reports a
/// thousand workers reads a thousand of these, in slot order, from a few contiguous
/// pages. They change only when the slot is registered, killed or freed, so the lines
/// readers share are never written by recorders.
#[derive(Debug, Default)]
pub(super) struct SlotKey {
    /// `generation << 2 | state`; the generation grows each time the slot is freed.
    pub(super) state: AtomicU64,
    /// The worker id this slot stands for while alive.
    pub(super) worker: AtomicU64,
    /// Its data-parallel rank.
    pub(super) rank: AtomicU32,
}

impl SlotKey {
    /// The worker key this slot stands for, if it is alive (registered and not removed).
    #[inline]
    pub(super) fn alive<W: WorkerKey>(&self) -> Option<W> {
        if self.state.load(Ordering::Acquire) & STATE_MASK != ALIVE {
            return None;
        }
        let id = self.worker.load(Ordering::Relaxed);
        Some(W::from_parts(id, self.rank.load(Ordering::Relaxed)))
    }
}

/// One slot's shared state, padded so counters of different workers never share a line.
#[derive(Debug, Default)]
pub(super) struct SlotInfo {
    /// Entries in the tree carrying this slot (may dip below zero for a moment, because a
    /// recorder adds its count after inserting while the sweeper may already subtract).
    pub(super) entries: AtomicI64,
    /// Whether an exact KV event (or a restore) ever stored an entry for this
    /// registration: a per-worker cap then gives its freshest decision no protection.
    pub(super) had_exact: AtomicBool,
    /// Queued for a purge: the slot must not be recycled until the purge has run, or the
    /// purge would delete the entries of the slot's next owner.
    pub(super) purge_pending: AtomicBool,
    /// Writers that a purge must wait for, storing entries for this slot right now: every
    /// record, KV event, request pin and restored entry (see
    /// [`Workers::begin_write`](super::Workers::begin_write)).
    pub(super) writers: AtomicU32,
    /// Recorded decisions, oldest first, kept only under a per-worker cap or once a
    /// capacity was set.
    pub(super) log: DecisionLog,
    /// The worker's capacity in blocks, plus one (0: not set).
    pub(super) capacity: AtomicUsize,
    /// Whether a report taught the capacity since a caller last set it
    /// ([`Workers::mark_capacity_taught`](super::Workers::mark_capacity_taught)).
    pub(super) capacity_taught: AtomicBool,
    /// The latest expiry handed out by
    /// [`Workers::unique_expiry`](super::Workers::unique_expiry).
    pub(super) last_expiry: AtomicU64,
    /// The latest expiry of a decision of this slot taken to be evicted, from the slot's
    /// log and from the index-wide log
    /// ([`Workers::note_eviction`](super::Workers::note_eviction)).
    pub(super) evicted_until: [AtomicU64; 2],
    /// The latest decision from the past (another replica's) that
    /// [`Workers::dated_expiry`](super::Workers::dated_expiry) saw: the expiry it asked
    /// for and the one it got.
    pub(super) last_dated: Mutex<(u64, u64)>,
    /// The engine's own block hashes of the blocks it stored through KV events, where they
    /// differ from this index's sequence hashes: engine hash -> sequence hash. Only used
    /// to resolve this worker's `Stored` parents and `Removed` blocks.
    pub(super) engine_hashes: Mutex<std::collections::HashMap<u64, u64, IdBuildHasher>>,
    /// The blocks KV events stored exactly, while finds gallop (`exact_chains.rs`).
    pub(super) exact_chains: Mutex<super::ExactChains>,
}

/// First segment length; segment `k` holds `SEGMENT_BASE << k` slots.
const SEGMENT_BASE: u64 = 64;
/// Enough segments for every `u32` slot.
const SEGMENTS: usize = 27;

#[inline]
fn locate(slot: Slot) -> (usize, usize) {
    let q = u64::from(slot) / SEGMENT_BASE + 1;
    let seg = 63 - q.leading_zeros() as usize;
    let offset = u64::from(slot) - SEGMENT_BASE * ((1u64 << seg) - 1);
    (seg, offset as usize)
}

/// A lock-free, append-only array indexed by slot, grown by whole segments that never
/// move.
struct Segments<T> {
    segments: [AtomicPtr<T>; SEGMENTS],
}

impl<T: Default> Segments<T> {
    fn new() -> Self {
        Self {
            segments: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
        }
    }

    /// The slot's element, if its segment exists.
    #[inline]
    fn get(&self, slot: Slot) -> Option<&T> {
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

    /// The published segment that holds `slot`: its first slot and its elements.
    #[inline]
    fn segment(&self, slot: Slot) -> Option<(Slot, &[T])> {
        let (seg, offset) = locate(slot);
        let base = self.segments[seg].load(Ordering::Acquire);
        if base.is_null() {
            return None;
        }
        let len = (SEGMENT_BASE << seg) as usize;
        // SAFETY: as in `get`: a published segment is a boxed slice of exactly `len`
        // elements, freed only in `Drop`.
        let elements = unsafe { std::slice::from_raw_parts(base, len) };
        Some((slot - offset as Slot, elements))
    }

    /// The slot's element, allocating its segment on first use.
    fn ensure(&self, slot: Slot) -> &T {
        if let Some(element) = self.get(slot) {
            return element;
        }
        let (seg, _) = locate(slot);
        let len = (SEGMENT_BASE << seg) as usize;
        let fresh: Box<[T]> = (0..len).map(|_| T::default()).collect();
        let fresh = Box::into_raw(fresh).cast::<T>();
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

impl<T> Drop for Segments<T> {
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

/// Every slot's [`SlotKey`] (dense) and [`SlotInfo`] (padded), in two lock-free
/// segmented arrays that grow together and never move.
pub(super) struct SlotTable {
    keys: Segments<SlotKey>,
    infos: Segments<CachePadded<SlotInfo>>,
}

impl SlotTable {
    pub(super) fn new() -> Self {
        Self {
            keys: Segments::new(),
            infos: Segments::new(),
        }
    }

    /// The slot's shared state, if its segment exists.
    #[inline]
    pub(super) fn get(&self, slot: Slot) -> Option<&SlotInfo> {
        self.infos.get(slot).map(|info| &**info)
    }

    /// The slot's state and key, if its segment exists.
    #[inline]
    pub(super) fn key(&self, slot: Slot) -> Option<&SlotKey> {
        self.keys.get(slot)
    }

    /// A reader of slots' state and key that keeps the segment it read last: slots read in
    /// ascending order (a holder array's) then cost one bounds check each, not a segment
    /// lookup.
    #[inline]
    pub(super) fn key_cursor(&self) -> KeyCursor<'_> {
        KeyCursor {
            table: self,
            first: 0,
            keys: &[],
        }
    }

    /// The slot's state and key, allocating both of its segments on first use (the
    /// info's first: whoever finds the key finds the info).
    pub(super) fn ensure(&self, slot: Slot) -> &SlotKey {
        self.infos.ensure(slot);
        self.keys.ensure(slot)
    }
}

/// See [`SlotTable::key_cursor`].
pub(super) struct KeyCursor<'t> {
    table: &'t SlotTable,
    /// The first slot of `keys`' segment.
    first: Slot,
    keys: &'t [SlotKey],
}

impl<'t> KeyCursor<'t> {
    /// The slot's state and key, if its segment exists.
    #[inline]
    pub(super) fn key(&mut self, slot: Slot) -> Option<&'t SlotKey> {
        let at = slot.wrapping_sub(self.first) as usize;
        if let Some(key) = self.keys.get(at) {
            return Some(key);
        }
        let (first, keys) = self.table.keys.segment(slot)?;
        (self.first, self.keys) = (first, keys);
        keys.get((slot - first) as usize)
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
    fn a_cursor_reads_the_key_of_every_slot_in_any_order() {
        let table = SlotTable::new();
        for slot in [0, 63, 64, 191, 192, 5_000] {
            table
                .ensure(slot)
                .worker
                .store(u64::from(slot) + 1, Ordering::Relaxed);
        }
        let mut cursor = table.key_cursor();
        for slot in [0, 63, 64, 191, 192, 5_000, 64, 0, 5_000] {
            let key = cursor.key(slot).expect("segment allocated");
            assert_eq!(key.worker.load(Ordering::Relaxed), u64::from(slot) + 1);
        }
        assert!(cursor.key(1 << 20).is_none());
        // A slot whose segment exists but was never registered reads as a default key.
        assert_eq!(cursor.key(100).unwrap().worker.load(Ordering::Relaxed), 0);
    }
}
