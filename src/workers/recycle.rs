//! Slot reuse: handing out slots (freed ones first), and freeing a dead slot once its
//! last entry is gone *and* every thread that could still hold the old slot number
//! (pinned before it died) has unpinned, which the epoch collector tells us by running a
//! deferred closure.

use std::sync::Arc;

use crossbeam_epoch as epoch;

use super::table::{pack, DEAD, FREE};
use super::Workers;
use crate::slot::Slot;
use crate::sync::Ordering;

/// Freed slots, and the next never-used slot.
#[derive(Default)]
pub(super) struct FreeSlots {
    pub(super) recycled: Vec<Slot>,
    pub(super) next: u64,
}

impl Workers {
    /// A slot for a new registration: a recycled one, else the next never used. `None`
    /// only if all 2^32 slots are in use at once.
    pub(super) fn allocate(&self) -> Option<Slot> {
        let mut free = self.free.lock();
        if let Some(slot) = free.recycled.pop() {
            return Some(slot);
        }
        let slot = Slot::try_from(free.next).ok()?;
        free.next += 1;
        Some(slot)
    }

    /// Frees `slot` once every thread pinned now has unpinned, if by then it is still the
    /// same dead registration with no entries left.
    pub(super) fn schedule_reclaim(self: &Arc<Self>, slot: Slot, generation: u64) {
        let me = Arc::clone(self);
        let guard = epoch::pin();
        guard.defer(move || me.reclaim(slot, generation));
        guard.flush();
    }

    fn reclaim(&self, slot: Slot, generation: u64) {
        let (Some(info), Some(key)) = (self.slots.get(slot), self.slots.key(slot)) else {
            return;
        };
        if info.entries.load(Ordering::SeqCst) > 0 {
            return; // a late recorder added entries: the sweeper will free them, then retry
        }
        if info.purge_pending.load(Ordering::SeqCst) {
            return; // `purge_done` retries
        }
        if key
            .state
            .compare_exchange(
                pack(generation, DEAD),
                pack(generation + 1, FREE),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            self.dead.fetch_sub(1, Ordering::Relaxed);
            info.entries.store(0, Ordering::Relaxed);
            info.had_exact.store(false, Ordering::Relaxed);
            info.log.clear();
            info.engine_hashes.lock().clear();
            info.exact_chains.lock().clear();
            info.last_expiry.store(0, Ordering::Relaxed);
            for until in &info.evicted_until {
                until.store(0, Ordering::Relaxed);
            }
            *info.last_dated.lock() = (0, 0);
            info.capacity.store(0, Ordering::Relaxed);
            info.capacity_taught.store(false, Ordering::Relaxed);
            self.free.lock().recycled.push(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Registers `worker`, pinned for the lookup only (a pin held on would keep the
    /// epoch, and so the recycling this test waits for, back).
    fn registered(w: &Workers, worker: u64) -> Slot {
        let _pinned = epoch::pin();
        w.resolve(worker).unwrap()
    }

    #[test]
    fn removed_slot_is_recycled_only_after_its_entries_are_gone() {
        let w = Workers::new(Default::default());
        let a = registered(&w, 10);
        w.adjust_entries(a, 2);
        assert!(w.remove(10));
        assert_eq!(w.alive::<u64>(a), None);
        let b = registered(&w, 11);
        assert_ne!(a, b, "a slot with entries must not be reused");
        w.adjust_entries(a, -2);
        // A slot removed with entries is queued for the sweeper's purge, and is recycled
        // only once that has run (as `Core::purge_dead` does it).
        assert_eq!(w.take_purges(), vec![a]);
        assert!(!w.free.lock().recycled.contains(&a));
        w.purge_done(a);
        // Drive the epoch collector until the deferred reclaim has run. Other tests'
        // threads, pinned meanwhile, can hold the epoch back for a while (a fixed number
        // of flushes was not always enough): bounded generously instead.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !w.free.lock().recycled.contains(&a) {
            assert!(std::time::Instant::now() < deadline, "never reclaimed");
            epoch::pin().flush();
            std::thread::yield_now();
        }
        let c = registered(&w, 12);
        assert_eq!(c, a, "the emptied dead slot is recycled");
        assert_eq!(w.alive::<u64>(c), Some(12));
    }
}
