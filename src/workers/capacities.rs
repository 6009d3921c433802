//! Workers' capacities in blocks, set at run time (`ApproxKvIndexer::set_worker_capacity`):
//! a worker's own bound, in place of the index-wide per-worker cap.

use super::Workers;
use crate::slot::Slot;
use crate::sync::Ordering;

impl Workers {
    /// Sets `slot`'s capacity in blocks (`None`: unknown, so the index-wide per-worker cap
    /// applies, if any); no report has taught it since.
    pub(crate) fn set_capacity(&self, slot: Slot, capacity: Option<usize>) {
        if let Some(info) = self.slots.get(slot) {
            // A swap, not a store: both this and a raise's compare-and-swap are
            // read-modify-writes, so each reads what the other wrote before it.
            info.capacity.swap(stored(capacity), Ordering::SeqCst);
            info.capacity_taught.store(false, Ordering::SeqCst);
        }
    }

    /// Raises `slot`'s capacity to `capacity` if it is still `from` (so that a caller's
    /// `set_capacity` racing this wins) and no report has taught it. Returns whether it did.
    pub(crate) fn raise_untaught_capacity(
        &self,
        slot: Slot,
        from: Option<usize>,
        capacity: usize,
    ) -> bool {
        let Some(info) = self.slots.get(slot) else {
            return false;
        };
        if info.capacity_taught.load(Ordering::SeqCst) {
            return false;
        }
        if cfg!(loom_break = "raise_unchecked") {
            // A read, then a store: a caller's set between the two is overwritten.
            let unchanged = info.capacity.load(Ordering::SeqCst) == stored(from);
            if unchanged {
                info.capacity
                    .store(stored(Some(capacity)), Ordering::SeqCst);
            }
            return unchanged;
        }
        info.capacity
            .compare_exchange(
                stored(from),
                stored(Some(capacity)),
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok()
    }

    /// Notes that a report taught `slot`'s capacity (`core/learn.rs`): a raise of another
    /// worker's leaves it alone.
    pub(crate) fn mark_capacity_taught(&self, slot: Slot) {
        if let Some(info) = self.slots.get(slot) {
            info.capacity_taught.store(true, Ordering::SeqCst);
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

/// A capacity as stored: plus one, 0 for none (`usize::MAX` saturates: it and the value
/// below it both mean "unbounded").
fn stored(capacity: Option<usize>) -> usize {
    capacity.map_or(0, |c| c.saturating_add(1))
}
