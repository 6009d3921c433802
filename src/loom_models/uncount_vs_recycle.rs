//! A walk uncounting a dead slot's last entry *before* removing it, racing the slot's
//! recycling.
//!
//! Walks (expiry and eviction) uncount each entry just before removing it, so that a
//! slot's count never overstates what it holds (`Tree::walk`). For a dead slot, the count
//! can then reach zero while its last entry is still in the tree, and `adjust_entries`
//! schedules the slot's reclaim right then. One thread walks the dead slot's entry;
//! another runs collections and registers worker 8, which may reuse the freed slot.
//!
//! Proves: a slot is never handed to worker 8 while an entry carrying it remains (worker
//! 7's entry is never reported as worker 8's), because the reclaim is deferred on the
//! epoch and the walker stays pinned from the uncount to the removal.
//!
//! Can fail: with `--cfg loom_break="uncount_unpinned"` (the walker uncounts under a pin
//! of its own, dropped before it pins again to remove the entry) loom finds "worker 7's
//! entry is reported as worker 8's".

use crossbeam_epoch as epoch;
use loom::sync::Arc;
use loom::thread;

use super::{claim_of, reclaim, shard_with, walk};
use crate::workers::Workers;

const EXPIRY: u64 = 100;
const NOW: u64 = 20;

#[test]
fn uncount_before_removal_races_recycling() {
    super::model(|| {
        let workers = Workers::new(Default::default());
        let slot = workers.resolve(7u64).unwrap();
        let shard = Arc::new(shard_with(slot, EXPIRY));
        workers.adjust_entries(slot, 1);
        // Dead, with one entry left: not recycled yet.
        assert!(workers.remove(7));
        // The recycler is the spawned thread, so that the broken ordering needs one
        // preemption only (the walker stopped between its uncount and its removal).
        let recycler = {
            let (workers, shard) = (workers.clone(), Arc::clone(&shard));
            thread::spawn(move || {
                reclaim(2);
                let eight = workers.resolve(8u64).unwrap();
                if eight == slot {
                    let guard = epoch::pin();
                    assert_eq!(
                        claim_of(&shard, slot, &guard),
                        None,
                        "worker 7's entry is reported as worker 8's"
                    );
                }
            })
        };
        if cfg!(loom_break = "uncount_unpinned") {
            drop(epoch::pin());
            workers.adjust_entries(slot, -1);
            walk(&shard, slot, NOW, false, || {}, &epoch::pin());
        } else {
            let guard = epoch::pin();
            walk(
                &shard,
                slot,
                NOW,
                false,
                || workers.adjust_entries(slot, -1),
                &guard,
            );
        }
        recycler.join().unwrap();
        assert_eq!(workers.entries(slot), 0);
    });
}
