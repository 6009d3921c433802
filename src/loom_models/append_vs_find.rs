//! A find reading a holder array while a writer appends to it in place, removes the
//! appended holder, and appends another.
//!
//! The node starts with eight holders (slots 1 to 8, each claiming `10 * slot`; the
//! eighth appended in place). The writer, taking the shard write lock for each step,
//! removes slot 8, appends slot 9 (into a new array with room), and appends slot 10 (in
//! place: written into the free cell, then counted in `len`). The finder copies the array and `len` under the read lock, drops the
//! lock, and reads every holder it was given.
//!
//! Checked ordering: a cell is written only while no reader can have been given it (it is
//! past `len` under the lock that readers take), and a removal always builds a new array
//! (`docs/design.md`, "Holder arrays"), so every holder a find reads is one that was
//! published whole: slots ascending, each with its own claim.
//!
//! Loom sees no conflict between the finder's loads and the writer's plain writes into a
//! cell (they touch different loom objects), so it would never run the writer between two
//! loads of one holder. The relaxed `step` counter (no happens-before) makes them
//! conflict: the writer bumps it after each step, the finder reads it between a holder's
//! slot and its claim.
//!
//! Can fail: with `--cfg loom_break="remove_in_place"` (a removal of the last holder only
//! shortens `len`, leaving the cell to the next append), loom reports "Causality
//! violation: Concurrent load and mut accesses": the finder loads a holder of the cell
//! that slot 9 is being written into.

use crossbeam_epoch as epoch;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use super::claim::Claim;
use super::node::{Node, Outcome, Settle};
use super::Shard;
use crate::{LocalBlockHash, SequenceHash};

fn claim_for(slot: u32) -> u64 {
    10 * u64::from(slot)
}

#[test]
fn find_races_appends_in_place() {
    super::model(|| {
        let shard: Arc<Shard> = {
            let guard = epoch::pin();
            let mut node = Node::new(
                SequenceHash(0),
                LocalBlockHash(1),
                0,
                1,
                Claim::approx(claim_for(1)),
            );
            for slot in 2..=8 {
                node.upsert(slot, Claim::approx(claim_for(slot)), &guard);
            }
            Arc::new(loom::sync::RwLock::new(Some(node)))
        };
        let step = Arc::new(AtomicUsize::new(0));
        let writer = {
            let (shard, step) = (Arc::clone(&shard), Arc::clone(&step));
            thread::spawn(move || {
                let guard = epoch::pin();
                let append = |slot: u32| {
                    let mut node = shard.write().unwrap();
                    let n = node.as_mut().unwrap();
                    assert!(n.upsert(slot, Claim::approx(claim_for(slot)), &guard));
                };
                {
                    let mut node = shard.write().unwrap();
                    let outcome = node.as_mut().unwrap().settle(8, |_| Settle::Remove, &guard);
                    assert!(matches!(outcome, Outcome::Removed { last: false, .. }));
                }
                step.store(1, Ordering::Relaxed);
                append(9);
                step.store(2, Ordering::Relaxed);
                append(10);
                step.store(3, Ordering::Relaxed);
            })
        };
        let guard = epoch::pin();
        let holders = {
            let node = shard.read().unwrap();
            node.as_ref().unwrap().holders(&guard)
        };
        let seen: Vec<(u32, u64)> = holders
            .iter()
            .map(|h| {
                let slot = h.slot();
                step.load(Ordering::Relaxed);
                (slot, h.claim().expiry)
            })
            .collect();
        drop(guard);
        writer.join().unwrap();
        // The state before or after one of the writer's steps: nothing else.
        let slots: Vec<u32> = seen.iter().map(|&(slot, _)| slot).collect();
        let published: [Vec<u32>; 4] = [
            (1..=8).collect(),
            (1..=7).collect(),
            (1..=7).chain([9]).collect(),
            (1..=7).chain([9, 10]).collect(),
        ];
        for &(slot, expiry) in &seen {
            assert_eq!(
                expiry,
                claim_for(slot),
                "a holder read half-written: {seen:?}"
            );
        }
        assert!(
            published.contains(&slots),
            "a holder read half-written: {seen:?}"
        );
    });
}
