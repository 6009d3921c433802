//! A find reading a holder's slot and then that slot's key, racing the worker's removal,
//! the purge of its entry and the slot's recycling for another worker.
//!
//! A find reads a block's holders (their slots) from the tree, then each slot's state and
//! key from the registry's dense key table (`Workers::each_alive`). Meanwhile worker 7 is
//! removed, its entry purged (uncounted, then removed, as `core/purge.rs` does), and its
//! slot freed and handed to worker 8.
//!
//! Proves: the find reports worker 7 or nobody for worker 7's entry, never worker 8,
//! because the slot's recycling is deferred on the epoch and the find stays pinned from
//! reading the holder to reading the key (`Core::find_into` pins once for the whole
//! find).
//!
//! Can fail: with `--cfg loom_break="find_key_unpinned"` (the find reads the keys under a
//! pin of its own, after dropping the one it read the holders under) loom finds "worker
//! 7's entry is reported as worker 8's".

use crossbeam_epoch as epoch;
use loom::sync::Arc;
use loom::thread;

use super::{reclaim, shard_with, walk};
use crate::slot::{Slot, SlotOwners};
use crate::workers::Workers;

const EXPIRY: u64 = 100;
const NOW: u64 = 20;

#[test]
fn find_reads_a_key_while_its_slot_is_recycled() {
    super::model(|| {
        let workers = Workers::new(Default::default());
        let slot = workers.resolve(7u64).unwrap();
        let shard = Arc::new(shard_with(slot, EXPIRY));
        workers.adjust_entries(slot, 1);
        let remover = {
            let (workers, shard) = (workers.clone(), Arc::clone(&shard));
            thread::spawn(move || {
                assert!(workers.remove(7));
                walk(
                    &shard,
                    slot,
                    NOW,
                    false,
                    || workers.adjust_entries(slot, -1),
                    &epoch::pin(),
                );
                workers.purge_done(slot);
                reclaim(2);
                workers.resolve(8u64).unwrap()
            })
        };
        let guard = epoch::pin();
        let slots: Vec<Slot> = shard
            .read()
            .unwrap()
            .as_ref()
            .map(|n| n.holders(&guard).iter().map(|h| h.slot()).collect())
            .unwrap_or_default();
        let read_keys = || {
            workers.each_alive::<u64>(slots.iter().copied(), false, |_, key, _| {
                assert_ne!(key, 8, "worker 7's entry is reported as worker 8's");
            });
        };
        if cfg!(loom_break = "find_key_unpinned") {
            drop(guard);
            let _own = epoch::pin();
            read_keys();
        } else {
            read_keys();
            drop(guard);
        }
        let eight = remover.join().unwrap();
        assert_eq!(workers.alive::<u64>(eight), Some(8));
    });
}
