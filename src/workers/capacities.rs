//! Workers' capacities in blocks, set at run time (`ApproxKvIndexer::set_worker_capacity`):
//! a worker's own bound, in place of the index-wide per-worker cap.

use super::Workers;
use crate::slot::Slot;
use crate::sync::Ordering;

impl Workers {
    /// Sets `slot`'s capacity in blocks (`None`: unknown, so the index-wide per-worker cap
    /// applies, if any).
    pub(crate) fn set_capacity(&self, slot: Slot, capacity: Option<usize>) {
        if let Some(info) = self.slots.get(slot) {
            let stored = capacity.map_or(0, |c| c.saturating_add(1));
            info.capacity.store(stored, Ordering::SeqCst);
        }
    }

    /// `slot`'s capacity in blocks, if one was set.
    #[inline]
    pub(crate) fn capacity(&self, slot: Slot) -> Option<usize> {
        // Stored plus one (0: not set); `usize::MAX` reads back as itself (it and the
        // value below it both mean "unbounded").
        match self.slots.get(slot)?.capacity.load(Ordering::Relaxed) {
            usize::MAX => Some(usize::MAX),
            stored => stored.checked_sub(1),
        }
    }

    /// Turns slot logs on for good; returns whether they were off.
    pub(crate) fn start_slot_logs(&self) -> bool {
        !self.slot_logs.swap(true, Ordering::SeqCst)
    }

    /// Whether slots keep decision logs (a per-worker cap, or a capacity was set).
    #[inline]
    pub(crate) fn keeps_slot_logs(&self) -> bool {
        self.slot_logs.load(Ordering::Relaxed)
    }
}
