//! `remove_worker` racing a record for that worker, with slot recycling.
//!
//! Uses the real `Workers` registry (its dashmap and mutexes replaced by loom-aware
//! stand-ins, `crate::sync`). One thread records worker 7 (resolve its slot, add the entry,
//! count it); another removes worker 7, runs collections until deferred reclaims can run,
//! and registers worker 8, which may reuse a freed slot. Then the sweeper walks the entry.
//!
//! Proves: an entry recorded for worker 7 is never reported as worker 8's (a slot is
//! recycled only once no entry carrying it remains), and entry counts match the tree.
//!
//! Not checked here: that the emptied dead slot is then recycled (no leak). That is a
//! liveness property loom cannot settle: it lets a finished thread's last epoch store
//! (made by its thread-local handle's destructor, after `join` has synchronised) stay
//! invisible to the main thread forever, so the epoch may never advance after the threads
//! end; and it treats SeqCst accesses as AcqRel, so the `kill` / `adjust_entries`
//! handshake (each stores, then loads the other's word) could miss both ways under loom
//! only. The unit test `workers::recycle::tests::removed_slot_is_recycled_only_after_its_entries_are_gone`
//! covers it.
//!
//! Checked ordering: the recorder stays pinned from before `resolve` until after
//! `adjust_entries`, and the reclaim is deferred on the epoch collector and re-checks the
//! count (`docs/design.md`, "Epoch protocol", rule 5).
//!
//! Can fail: with `--cfg loom_break="record_unpinned"` (the recorder unpins between
//! `resolve` and adding its entry) loom finds "worker 7's entry is reported as worker 8's".
//! So does deleting the `entries > 0` early return in `Workers::reclaim`.

use crossbeam_epoch as epoch;
use loom::sync::Arc;
use loom::thread;

use super::{reclaim, record, walk, Shard};
use crate::workers::Workers;

const EXPIRY: u64 = 100;
const NOW: u64 = 20;

#[test]
fn remove_races_record() {
    super::model(|| {
        let workers = Workers::new(Default::default());
        let shard = Arc::new(Shard::new(None));
        workers.resolve(7u64).unwrap(); // registered before the race
        let recorder = {
            let (workers, shard) = (workers.clone(), Arc::clone(&shard));
            thread::spawn(move || {
                let guard = epoch::pin();
                let slot = workers.resolve(7u64).unwrap();
                let guard = if cfg!(loom_break = "record_unpinned") {
                    drop(guard);
                    epoch::pin()
                } else {
                    guard
                };
                let added = record(&shard, slot, EXPIRY, &guard);
                workers.adjust_entries(slot, added as i64);
                slot
            })
        };
        let remover = {
            let workers = workers.clone();
            thread::spawn(move || {
                assert!(workers.remove(7));
                reclaim(1); // with the flush in `schedule_reclaim`, enough to recycle
                workers.resolve(8u64).unwrap()
            })
        };
        let slot = recorder.join().unwrap();
        let eight = remover.join().unwrap();
        assert_ne!(
            workers.alive::<u64>(slot),
            Some(8),
            "worker 7's entry is reported as worker 8's"
        );

        // The sweeper's walk (the slot's timer, or the purge of a dead slot).
        let guard = epoch::pin();
        let alive = workers.is_alive(slot);
        // Uncounted just before the removal, as the engine's walks do: the count of the
        // dead slot may reach zero while the entry is still there, and the reclaim
        // (deferred on the epoch) still must not free the slot before it is gone.
        walk(
            &shard,
            slot,
            NOW,
            alive,
            || workers.adjust_entries(slot, -1),
            &guard,
        );
        drop(guard);
        let left = usize::from(shard.read().unwrap().is_some());
        assert_eq!(workers.entries(slot), left);
        assert_eq!(workers.entries(eight), 0);
    });
}
