//! A find racing the unlink and the epoch reclamation of the node it reads.
//!
//! The node has two holders, so an array. The finder copies the array's pointer under the
//! shard read lock (or, once the node is down to one holder, copies that inline holder),
//! drops the lock, and reads what it got under its epoch guard. Meanwhile the sweeper
//! removes one entry (the other moves inline and the array is retired with
//! `defer_destroy`), then the last (and unlinks the node), and runs collections until
//! anything retired can be freed. The finder must read the whole array, the inline holder
//! or no node, and the array must not be freed while it reads it (checked by the allocator
//! watch, `watch.rs`).
//!
//! Loom cannot see a free, so it would never schedule the sweeper's reclamation between
//! the finder's unlock and its reads (they touch no common loom object). The `reclaimed`
//! flag (relaxed: it adds no happens-before edge) makes them conflict, so loom explores
//! the finder reading after the sweeper has run collections.
//!
//! Checked ordering: the finder is pinned before it loads the pointer and until its last
//! read; the sweeper retires the array only after replacing it, under the write lock
//! (`docs/design.md`, "Epoch protocol", rules 2 and 3).
//!
//! Can fail: with `--cfg loom_break="find_unpinned"` (the finder reads under
//! `epoch::unprotected()` instead of a pinned guard), loom finds "the array was freed
//! while the find read it". So does `--cfg loom_break="free_at_once"`, with which
//! `node::retire` frees a replaced array at once instead of through `defer_destroy`: the
//! array the finder holds is freed when the node goes back inline.

use crossbeam_epoch::{self as epoch, Guard};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

use super::claim::Claim;
use super::holder::Holders;
use super::node::{Outcome, Settle};
use super::{reclaim, shard_with, watch, Shard};

const WORKER: u32 = 3;
const CLAIM: u64 = 50;
const OTHER: u32 = 5;
const OTHER_CLAIM: u64 = 70;

/// What the finder saw: `None` if the node was gone, else the (slot, claim) pairs it read.
fn find(shard: &Shard, reclaimed: &AtomicBool, guard: &Guard) -> Option<Vec<(u32, u64)>> {
    let holders = {
        let node = shard.read().unwrap();
        let holders = node.as_ref().map(|n| n.holders(guard))?;
        if let Holders::Shared(array) = holders {
            watch::watch(array.as_ptr() as usize); // before the lock is released
        }
        holders
    };
    // Stands for the reads below (see the module comment), which are checked before they
    // happen too: reading a freed loom atomic is undefined behaviour.
    let _ = reclaimed.load(Ordering::Relaxed);
    assert!(
        !watch::freed(),
        "the array was freed while the find read it"
    );
    let seen = holders
        .iter()
        .map(|h| (h.slot(), h.claim().expiry))
        .collect();
    let freed = watch::unwatch();
    assert!(!freed, "the array was freed while the find read it");
    Some(seen)
}

#[test]
fn find_races_unlink_and_reclamation() {
    super::model(|| {
        let shard = Arc::new(shard_with(WORKER, CLAIM));
        {
            let guard = epoch::pin(); // the main thread sets up, registered
            let mut node = shard.write().unwrap();
            let n = node.as_mut().expect("just built");
            assert!(n.upsert(OTHER, Claim::approx(OTHER_CLAIM), &guard));
        }
        let reclaimed = Arc::new(AtomicBool::new(false));
        let finder = {
            let (shard, reclaimed) = (Arc::clone(&shard), Arc::clone(&reclaimed));
            thread::spawn(move || {
                if cfg!(loom_break = "find_unpinned") {
                    // SAFETY: none; this is the deliberately broken variant.
                    find(&shard, &reclaimed, unsafe { epoch::unprotected() })
                } else {
                    find(&shard, &reclaimed, &epoch::pin())
                }
            })
        };
        let sweeper = {
            let (shard, reclaimed) = (Arc::clone(&shard), Arc::clone(&reclaimed));
            thread::spawn(move || {
                {
                    let guard = epoch::pin();
                    let mut node = shard.write().unwrap();
                    let n = node.as_mut().expect("only this thread unlinks");
                    let outcome = n.settle(OTHER, |_| Settle::Remove, &guard);
                    assert!(matches!(outcome, Outcome::Removed { last: false, .. }));
                }
                {
                    let guard = epoch::pin();
                    let mut node = shard.write().unwrap();
                    let n = node.as_mut().expect("only this thread unlinks");
                    let outcome = n.settle(WORKER, |_| Settle::Remove, &guard);
                    assert!(matches!(outcome, Outcome::Removed { last: true, .. }));
                    *node = None;
                }
                reclaim(2);
                reclaimed.store(true, Ordering::Relaxed);
            })
        };
        let seen = finder.join().unwrap();
        sweeper.join().unwrap();
        let whole = [(WORKER, CLAIM), (OTHER, OTHER_CLAIM)];
        let published: [Option<&[(u32, u64)]>; 3] = [Some(&whole), Some(&whole[..1]), None];
        assert!(published.contains(&seen.as_deref()), "{seen:?}");
    });
}
