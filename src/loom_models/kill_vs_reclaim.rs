//! A removal racing a walk that uncounts the removed worker's last entry, and the slot's
//! recycling for another worker.
//!
//! `kill` marks the slot dead, then reads its writers and entries to decide on a purge. A
//! walk that uncounts the dead slot's last entry in between schedules the slot's reclaim
//! (`adjust_entries`); if that reclaim ran before the purge was queued, the slot could be
//! recycled for worker 8, whose entry the kill would then count, queueing the slot for a
//! purge that removes worker 8's entries (worker 8 vanishes from finds).
//!
//! Proves: the purge queue never names a slot that a live registration holds, because
//! `kill` stays pinned from before it marks the slot dead until it has queued the purge,
//! which holds off every reclaim scheduled meanwhile.
//!
//! Can fail: with `--cfg loom_break="kill_unpinned"` (no pin in `kill`) loom finds "the
//! purge names worker 8's live slot".

use loom::thread;

use super::reclaim;
use crate::workers::Workers;

#[test]
fn a_removal_racing_the_last_uncount_never_purges_a_recycled_slot() {
    super::model(|| {
        let workers = Workers::new(Default::default());
        let slot = {
            let _pinned = crossbeam_epoch::pin();
            workers.resolve(7u64).unwrap()
        };
        workers.adjust_entries(slot, 1); // worker 7's one entry
                                         // The walker and recycler is the spawned thread, so that the broken ordering needs
                                         // one preemption only (the removal stopped after marking the slot dead).
        let walker = {
            let workers = workers.clone();
            thread::spawn(move || {
                workers.adjust_entries(slot, -1); // the walk uncounts it
                reclaim(2);
                let _pinned = crossbeam_epoch::pin();
                let eight = workers.resolve(8u64).unwrap();
                workers.adjust_entries(eight, 1); // worker 8 records an entry
                eight
            })
        };
        assert!(workers.remove(7));
        let eight = walker.join().unwrap();
        let purged = workers.take_purges();
        assert!(
            !(eight == slot && purged.contains(&slot)),
            "the purge names worker 8's live slot"
        );
    });
}
