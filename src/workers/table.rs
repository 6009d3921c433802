//! The slot table: each slot's shared state ([`SlotInfo`]) in a lock-free, append-only
//! array grown by whole segments that never move, so a slot's state is found without a
//! lock and stays put while any thread may read it.

use crossbeam_utils::CachePadded;

use crate::capacity::DecisionLog;
use crate::id_hasher::IdBuildHasher;
use crate::slot::Slot;
use crate::sync::{AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, Mutex, Ordering};

pub(super) const ALIVE: u64 = 1;
pub(super) const DEAD: u64 = 2;
pub(super) const FREE: u64 = 3;
pub(super) const STATE_BITS: u64 = 2;
pub(super) const STATE_MASK: u64 = (1 << STATE_BITS) - 1;

#[inline]
pub(super) fn pack(generation: u64, state: u64) -> u64 {
    (generation << STATE_BITS) | state
}

/// One slot's shared state, padded so counters of different workers never share a line.
#[derive(Debug, Default)]
pub(super) struct SlotInfo {
    /// `generation << 2 | state`; the generation grows each time the slot is freed.
    pub(super) state: AtomicU64,
    /// The worker id this slot stands for while alive.
    pub(super) worker: AtomicU64,
    /// Its data-parallel rank.
    pub(super) rank: AtomicU32,
    /// Entries in the tree carrying this slot (may dip below zero for a moment, because a
    /// recorder adds its count after inserting while the sweeper may already subtract).
    pub(super) entries: AtomicI64,
    /// Whether an exact KV event ever stored an entry for this registration: such entries
    /// have no timer, so a dead slot with them needs a purge.
    pub(super) had_exact: AtomicBool,
    /// Queued for a purge: the slot must not be recycled until the purge has run, or the
    /// purge would delete the entries of the slot's next owner.
    pub(super) purge_pending: AtomicBool,
    /// Writers that a purge must wait for, storing entries for this slot right now: exact
    /// KV events always, decisions too when no timer will ever walk them (see
    /// [`Workers::begin_write`](super::Workers::begin_write)).
    pub(super) writers: AtomicU32,
    /// Recorded decisions, oldest first, kept only under a per-worker cap.
    pub(super) log: DecisionLog,
    /// The latest expiry handed out by
    /// [`Workers::unique_expiry`](super::Workers::unique_expiry).
    pub(super) last_expiry: AtomicU64,
    /// The engine's own block hashes of the blocks it stored through KV events, where they
    /// differ from this index's sequence hashes: engine hash -> sequence hash. Only used
    /// to resolve this worker's `Stored` parents and `Removed` blocks.
    pub(super) engine_hashes: Mutex<std::collections::HashMap<u64, u64, IdBuildHasher>>,
}

/// First segment length; segment `k` holds `SEGMENT_BASE << k` slots.
const SEGMENT_BASE: u64 = 64;
/// Enough segments for every `u32` slot.
const SEGMENTS: usize = 27;

/// A lock-free, append-only array of slots, grown by whole segments that never move.
pub(super) struct SlotTable {
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
    pub(super) fn new() -> Self {
        Self {
            segments: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
        }
    }

    /// The slot's info, if its segment exists.
    #[inline]
    pub(super) fn get(&self, slot: Slot) -> Option<&SlotInfo> {
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
    pub(super) fn ensure(&self, slot: Slot) -> &SlotInfo {
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
}
