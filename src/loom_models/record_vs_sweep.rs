//! A record racing the sweeper on the same (block, worker).
//!
//! The worker's entry has expired; a sweeper walk (timer of the old decision) and a new
//! decision for the same worker run at once. Whatever the interleaving, the new decision
//! must survive: either the walk removes the old entry first and the record adds a fresh
//! one, or the record raises the claim first and the walk keeps it. Also, the entry
//! counts the two threads report add up (`1 + added - removed` entries remain).
//!
//! Checked ordering: a refresh updates the claim *under the shard read lock*
//! (`docs/design.md`, "Epoch protocol", rule 4), so a walk's shape change (write lock)
//! cannot copy the array between the refresher's load and its update.
//!
//! Can fail: with `--cfg loom_break="refresh_unlocked"` (the refresh runs after the read
//! lock is dropped) loom finds the lost refresh: "the record's refresh was lost: claim
//! None", both when the walk unlinks the node (its one holder is inline, so the unlocked
//! refresh raises a reader's copy) and when the walk takes the worker out of a two-holder
//! array (the other holder moves inline, and the refresh raises the retired array).

use loom::sync::Arc;
use loom::thread;

use super::{claim_of, record, shard_with, walk};

const WORKER: u32 = 1;
const OTHER: u32 = 2;
const OLD: u64 = 10;
const NOW: u64 = 20;
const NEW: u64 = 100;
const FAR: u64 = 1_000;

fn race(other_holder: bool) {
    super::model(move || {
        let shard = Arc::new(shard_with(WORKER, OLD));
        let guard = crossbeam_epoch::pin(); // the main thread sets up, registered
        if other_holder {
            record(&shard, OTHER, FAR, &guard);
        }
        drop(guard);
        let recorder = {
            let shard = Arc::clone(&shard);
            thread::spawn(move || record(&shard, WORKER, NEW, &crossbeam_epoch::pin()))
        };
        let sweeper = {
            let shard = Arc::clone(&shard);
            thread::spawn(move || walk(&shard, WORKER, NOW, true, || {}, &crossbeam_epoch::pin()))
        };
        let added = recorder.join().unwrap();
        let removed = sweeper.join().unwrap();

        let guard = crossbeam_epoch::pin();
        let claim = claim_of(&shard, WORKER, &guard);
        assert_eq!(
            claim,
            Some(NEW),
            "the record's refresh was lost: claim {claim:?}"
        );
        assert_eq!(1 + added - removed, 1, "added {added}, removed {removed}");
        if other_holder {
            assert_eq!(claim_of(&shard, OTHER, &guard), Some(FAR));
        }
    });
}

/// The walk would remove the last entry and unlink the node.
#[test]
fn record_races_walk_of_last_holder() {
    race(false);
}

/// The walk would remove one of two entries, moving the other inline.
#[test]
fn record_races_walk_of_one_holder() {
    race(true);
}
