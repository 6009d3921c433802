//! A find racing the unlink and the epoch reclamation of the node it reads.
//!
//! The finder copies the holder array's pointer under the shard read lock, drops the lock,
//! and reads the array under its epoch guard. Meanwhile the sweeper removes the node's
//! last entry (retiring the array with `defer_destroy`), unlinks the node, and runs
//! collections until anything retired can be freed. The finder must read either the
//! whole live array or no node, and the array must not be freed while it reads it
//! (checked by the allocator watch, `watch.rs`).
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
//! while the find read it". So does the one-line patch in `Node::replace` that frees the
//! old array at once (`drop(old.into_owned())`) instead of `defer_destroy`.

use crossbeam_epoch::{self as epoch, Guard};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

use super::node::{Outcome, Settle};
use super::{reclaim, shard_with, watch, Shard};

const WORKER: u32 = 3;
const CLAIM: u64 = 50;

/// What the finder saw: `None` if the node was gone, else the (slot, claim) it read.
fn find(shard: &Shard, reclaimed: &AtomicBool, guard: &Guard) -> Option<(u32, u64)> {
    let holders = {
        let node = shard.read().unwrap();
        let holders = node.as_ref().map(|n| n.holders(guard))?;
        watch::watch(holders.as_ptr() as usize); // before the lock is released
        holders
    };
    // Stands for the reads below (see the module comment), which are checked before they
    // happen too: reading a freed loom atomic is undefined behaviour.
    let _ = reclaimed.load(Ordering::Relaxed);
    assert!(
        !watch::freed(),
        "the array was freed while the find read it"
    );
    let seen = holders.iter().map(|h| (h.slot(), h.claim().expiry)).next();
    let freed = watch::unwatch();
    assert!(!freed, "the array was freed while the find read it");
    Some(seen.expect("a linked node has a holder"))
}

#[test]
fn find_races_unlink_and_reclamation() {
    super::model(|| {
        let shard = Arc::new(shard_with(WORKER, CLAIM));
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
        assert!(matches!(seen, None | Some((WORKER, CLAIM))), "{seen:?}");
    });
}
