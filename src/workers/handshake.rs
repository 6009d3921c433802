//! Removal and the writers racing it: [`kill`](Workers::kill) marks a slot dead, the
//! handshake ([`begin_write`](Workers::begin_write) / [`end_write`](Workers::end_write))
//! with writers whose entries no timer's walk will ever free, and the queue of dead slots
//! that the sweeper must purge instead.

use std::sync::Arc;

use super::table::{pack, SlotInfo, ALIVE, DEAD, STATE_BITS, STATE_MASK};
use super::Workers;
use crate::slot::Slot;
use crate::sync::Ordering;

/// What a writer is about to store (see [`Workers::begin_write`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteKind {
    /// Entries with an exact claim (never evicted by a cap: see
    /// [`Workers::had_exact`]).
    Exact,
    /// Approximate claims, pinned by a running request or not.
    Approx,
}

impl Workers {
    /// Marks a slot dead: its entries read as absent; they are freed by walks or a purge,
    /// then the slot is recycled.
    ///
    /// Pinned from before the slot is marked dead until the purge is queued: once it is
    /// dead, a walk that uncounts its last entry schedules its reclaim (`adjust_entries`),
    /// which the pin holds off until the purge is queued (and then finds it pending).
    /// Unpinned, the slot could be recycled for another worker in between, whose entries
    /// this kill would then count and queue for the purge, which would remove them
    /// (`loom_models::kill_vs_reclaim`; found by an audit: a worker recorded again after a
    /// removal vanished from finds).
    pub(super) fn kill(self: &Arc<Self>, slot: Slot) {
        let _pinned = (!cfg!(loom_break = "kill_unpinned")).then(crossbeam_epoch::pin);
        // SeqCst: see `begin_write`.
        let info = self.slots.get(slot).expect("a mapped slot has a segment");
        let key = self.slots.key(slot).expect("a mapped slot has a segment");
        let generation = key.state.load(Ordering::Relaxed) >> STATE_BITS;
        key.state.store(pack(generation, DEAD), Ordering::SeqCst);
        self.dead.fetch_add(1, Ordering::Relaxed);
        // Every dead slot that holds entries, or may get some from a writer in flight, is
        // purged (one pass over the map for all the slots queued together,
        // `core/purge.rs`): a removed worker's entries then go within a few ticks instead
        // of a TTL, so dead holders never pile up on shared blocks under churn. Entries
        // stored after this look are covered by the writer handshake: the writers are read
        // before the count, so a writer that saw the slot alive is either still registered,
        // or done, its entries counted before it left.
        if info.writers.load(Ordering::SeqCst) > 0 || info.entries.load(Ordering::SeqCst) > 0 {
            self.queue_purge(slot, info);
        }
        if info.entries.load(Ordering::SeqCst) <= 0 {
            self.schedule_reclaim(slot, generation);
        }
    }

    /// Whether `slot` ever stored an exact entry (from a KV event) in this registration.
    pub(crate) fn had_exact(&self, slot: Slot) -> bool {
        self.slots
            .get(slot)
            .is_some_and(|i| i.had_exact.load(Ordering::Relaxed))
    }

    fn queue_purge(&self, slot: Slot, info: &SlotInfo) {
        if !info.purge_pending.swap(true, Ordering::SeqCst) {
            self.to_purge.lock().push(slot);
        }
    }

    /// The purge of `slot` has run: it may be recycled once its entries are gone.
    pub(crate) fn purge_done(self: &Arc<Self>, slot: Slot) {
        let (Some(info), Some(key)) = (self.slots.get(slot), self.slots.key(slot)) else {
            return;
        };
        info.purge_pending.store(false, Ordering::SeqCst);
        let state = key.state.load(Ordering::SeqCst);
        if state & STATE_MASK == DEAD && info.entries.load(Ordering::SeqCst) <= 0 {
            self.schedule_reclaim(slot, state >> STATE_BITS);
        }
    }

    /// Starts storing entries for `slot`. Returns false, and the caller must store
    /// nothing, if the slot died meanwhile (the write is then ordered before the removal).
    /// Otherwise the caller must call [`end_write`](Self::end_write) after its stores; a
    /// purge of the slot waits for that, so that no entry is stored once a purge has
    /// started.
    ///
    /// Why no entry can escape the purge (all SeqCst): the writer registers as a writer,
    /// then reads the state; `kill` writes DEAD, then reads the slot's writers, then its
    /// count. Either the writer reads DEAD and stores nothing, or it registered before the slot
    /// died, and `kill`, which reads the writers before the count, sees it registered or
    /// sees what it counted: either way a purge is queued, and waits for it. So every entry
    /// stored for a removed worker is purged, and none is stored once a purge has started.
    ///
    /// Every kind of write takes part, approximate ones too: their timers' walks cannot be
    /// left to free a dead slot's entries, since another worker's insert that copies a block's holder
    /// array leaves a dead holder out, and a walk stops at the first block its worker no
    /// longer holds (`a_record_in_flight_across_its_workers_removal_is_purged_whole`).
    pub(crate) fn begin_write(&self, slot: Slot, write: WriteKind) -> bool {
        let (Some(info), Some(key)) = (self.slots.get(slot), self.slots.key(slot)) else {
            return false;
        };
        if write == WriteKind::Exact {
            info.had_exact.store(true, Ordering::Relaxed);
        }
        info.writers.fetch_add(1, Ordering::SeqCst);
        if key.state.load(Ordering::SeqCst) & STATE_MASK != ALIVE {
            info.writers.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Ends what [`begin_write`](Self::begin_write) started.
    pub(crate) fn end_write(&self, slot: Slot) {
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

    /// Puts slots whose purge must wait back in the queue.
    pub(crate) fn requeue_purges(&self, slots: impl IntoIterator<Item = Slot>) {
        self.to_purge.lock().extend(slots);
    }

    /// Dead slots with exact entries that the sweeper must purge.
    pub(crate) fn take_purges(&self) -> Vec<Slot> {
        std::mem::take(&mut *self.to_purge.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Registers `worker` (pinned for the lookup only: these tests race nothing).
    fn registered(w: &Workers, worker: u64) -> Slot {
        let _pinned = crossbeam_epoch::pin();
        w.resolve(worker).unwrap()
    }

    /// A removal that lands while a write is in flight, before the write has counted its
    /// entries, still queues the purge, which waits for the writer: pinned and exact
    /// entries have no timer, and approximate ones stored around a removal were not all
    /// reached by their timers' walks. A dead slot takes no more writes. With no writer and
    /// nothing counted, there is nothing to purge.
    #[test]
    fn a_removal_racing_a_write_queues_a_purge() {
        for kind in [WriteKind::Approx, WriteKind::Exact] {
            let w = Workers::new(Default::default());
            let slot = registered(&w, 1);
            assert!(w.begin_write(slot, kind));
            assert_eq!(w.had_exact(slot), kind == WriteKind::Exact);
            assert!(w.remove(1));
            assert!(w.writes_in_flight(slot), "the purge waits for the writer");
            w.end_write(slot);
            assert_eq!(w.take_purges(), vec![slot], "{kind:?}");
            assert!(!w.begin_write(slot, kind), "a dead slot takes no write");
            let idle = registered(&w, 2);
            assert!(w.remove(2));
            assert!(w.take_purges().is_empty(), "{idle}: nothing to purge");
        }
    }

    /// A removal of a worker with entries while an approximate write of it is in flight:
    /// the purge waits for that write (before, it ran at once, and could take the deeper
    /// blocks the write had just stored and miss the ones it stored after, out of the
    /// reach of the write's timer's walk).
    #[test]
    fn a_purge_waits_for_an_approximate_write_in_flight() {
        let w = Workers::new(Default::default());
        let slot = registered(&w, 1);
        w.adjust_entries(slot, 3);
        assert!(w.begin_write(slot, WriteKind::Approx));
        assert!(w.remove(1));
        assert_eq!(w.take_purges(), vec![slot]);
        assert!(w.writes_in_flight(slot), "the purge waits for the writer");
        w.end_write(slot);
        assert!(!w.writes_in_flight(slot));
    }
}
