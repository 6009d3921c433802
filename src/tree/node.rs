//! A tree node's payload: which worker slots hold the block, and until when.
//!
//! The holders are an immutable-shape array sorted by slot, published through a
//! `crossbeam_epoch::Atomic`. Its *claim* fields (see `claim.rs`) are atomics that
//! refreshers update in place; its *shape* (which slots are present) changes only by building
//! a new array and swapping it in, which callers do only while holding the node's map-shard
//! write lock.
//!
//! Protocol (see `docs/design.md`, "Epoch protocol"):
//! - readers (find, dump) copy the array pointer under the shard read lock, drop the lock,
//!   and read the array under an epoch guard;
//! - refreshers update a claim atomically while holding the shard *read* lock, so a shape
//!   change or walk (write lock) never runs concurrently and can never lose a refresh;
//! - a shape change copies the current claims into a new array, publishes it, and
//!   `defer_destroy`s the old one, which a pinned reader may still be reading.

use std::mem::MaybeUninit;

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned, Shared};

use super::claim;
use crate::sync::{AtomicU64, Ordering};
use crate::workers::Slot;
use crate::{LocalBlockHash, SequenceHash};

/// One (block, worker) entry: the worker's slot and its [claim](super::claim).
#[derive(Debug)]
pub(crate) struct Holder {
    pub(crate) slot: Slot,
    pub(crate) claim: AtomicU64,
}

impl Holder {
    /// Whether the entry reports the block as held at `now`.
    #[inline]
    pub(crate) fn live_at(&self, now: u64) -> bool {
        claim::live(self.claim(), now)
    }

    /// The current claim.
    #[inline]
    pub(crate) fn claim(&self) -> u64 {
        self.claim.load(Ordering::Acquire)
    }
}

/// The epoch-published array of holders (one allocation, length in its header).
type HolderArray = [MaybeUninit<Holder>];

/// A radix-tree node, stored inline as the value of the node map (keyed by its sequence hash).
#[derive(Debug)]
pub(crate) struct Node {
    /// The parent's sequence hash; meaningless when `depth == 0`.
    pub(crate) parent: SequenceHash,
    /// The hash of this block's tokens alone.
    pub(crate) local: LocalBlockHash,
    /// Position of the block in its prompt (0 for a first block).
    pub(crate) depth: u32,
    holders: Atomic<HolderArray>,
}

/// Builds a published-ready array from `(slot, expiry)` pairs already sorted by slot.
fn new_array(pairs: impl ExactSizeIterator<Item = (Slot, u64)>) -> Owned<HolderArray> {
    let mut array = Owned::<HolderArray>::init(pairs.len());
    for (cell, (slot, claim)) in array.iter_mut().zip(pairs) {
        cell.write(Holder {
            slot,
            claim: AtomicU64::new(claim),
        });
    }
    array
}

/// Views a published array as initialised holders.
#[inline]
fn as_holders<'g>(array: Shared<'g, HolderArray>) -> &'g [Holder] {
    if array.is_null() {
        return &[];
    }
    // SAFETY: a non-null pointer in `Node::holders` was made by `new_array`, which writes
    // every element before the array is published, and `MaybeUninit<Holder>` has the
    // layout of `Holder`. The array is freed only through `defer_destroy` after it has been
    // unlinked, so it outlives the guard `'g` that the caller loaded it under.
    unsafe {
        let cells: &'g HolderArray = array.deref();
        std::slice::from_raw_parts(cells.as_ptr().cast::<Holder>(), cells.len())
    }
}

/// What a walk or an event wants done with one entry, given its current claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settle {
    /// Leave it as it is.
    Keep,
    /// Replace the claim.
    Set(u64),
    /// Remove the entry.
    Remove,
}

/// What [`Node::settle`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The slot holds no entry here.
    Absent,
    /// The entry was left as it was.
    Kept,
    /// The entry's claim was replaced.
    Set,
    /// The entry was removed; other holders remain.
    Removed,
    /// The entry was the last one: the node is now empty and must be unlinked.
    RemovedLast,
}

impl Node {
    /// A node held by one slot with the given claim.
    pub(crate) fn new(
        parent: SequenceHash,
        local: LocalBlockHash,
        depth: u32,
        slot: Slot,
        claim: u64,
    ) -> Self {
        Self {
            parent,
            local,
            depth,
            holders: Atomic::from(new_array(std::iter::once((slot, claim)))),
        }
    }

    /// The holders, sorted by slot. The caller may drop the map lock afterwards: the
    /// slice stays valid for `'g`.
    #[inline]
    pub(crate) fn holders<'g>(&self, guard: &'g Guard) -> &'g [Holder] {
        as_holders(self.holders.load(Ordering::Acquire, guard))
    }

    /// Applies `update` to `slot`'s claim in place. Returns false if the slot is not a
    /// holder. Call with the shard lock held (read suffices: only shape changes need the
    /// write lock, and `update` is applied atomically).
    #[inline]
    pub(crate) fn update_claim(
        &self,
        slot: Slot,
        update: impl Fn(u64) -> u64,
        guard: &Guard,
    ) -> bool {
        let Some(holder) = find(self.holders(guard), slot) else {
            return false;
        };
        let mut current = holder.claim.load(Ordering::Acquire);
        loop {
            let next = update(current);
            if next == current {
                return true; // already as wanted: no write, no cache-line transfer
            }
            match holder.claim.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(seen) => current = seen,
            }
        }
    }

    /// Applies `update` to `slot`'s claim, adding the slot with claim `update(0)` if it is
    /// not a holder. Returns true if an entry was added. Call with the shard *write* lock held.
    pub(crate) fn upsert(&self, slot: Slot, update: impl Fn(u64) -> u64, guard: &Guard) -> bool {
        if self.update_claim(slot, &update, guard) {
            return false;
        }
        let old = self.holders.load(Ordering::Acquire, guard);
        let current = as_holders(old);
        let at = current.partition_point(|h| h.slot < slot);
        let pairs = current[..at]
            .iter()
            .map(snapshot)
            .chain(std::iter::once((slot, update(0))))
            .chain(current[at..].iter().map(snapshot));
        self.replace(old, new_array(ExactLen(pairs, current.len() + 1)), guard);
        true
    }

    /// Keeps, changes or removes `slot`'s entry as `decide` says given its current claim.
    /// Call with the shard *write* lock held; on [`Outcome::RemovedLast`] the caller must
    /// unlink the node while still holding it (the node's array is already retired).
    pub(crate) fn settle(
        &self,
        slot: Slot,
        decide: impl FnOnce(u64) -> Settle,
        guard: &Guard,
    ) -> Outcome {
        let old = self.holders.load(Ordering::Acquire, guard);
        let current = as_holders(old);
        let Ok(at) = current.binary_search_by_key(&slot, |h| h.slot) else {
            return Outcome::Absent;
        };
        match decide(current[at].claim()) {
            Settle::Keep => Outcome::Kept,
            Settle::Set(claim) => {
                // No refresher runs concurrently: they need the read lock we exclude.
                current[at].claim.store(claim, Ordering::Release);
                Outcome::Set
            }
            Settle::Remove if current.len() == 1 => {
                self.replace(old, Shared::null(), guard);
                Outcome::RemovedLast
            }
            Settle::Remove => {
                let pairs = current[..at].iter().chain(&current[at + 1..]).map(snapshot);
                self.replace(old, new_array(ExactLen(pairs, current.len() - 1)), guard);
                Outcome::Removed
            }
        }
    }

    /// Publishes `new` in place of `old` and retires `old`. Shard write lock held.
    fn replace<'g>(
        &self,
        old: Shared<'g, HolderArray>,
        new: impl epoch::Pointer<HolderArray>,
        guard: &'g Guard,
    ) {
        self.holders.store(new, Ordering::Release);
        if !old.is_null() {
            // SAFETY: `old` was the published array and has just been replaced under the
            // shard write lock, so no new reader can load it; readers that loaded it before
            // are pinned, and `defer_destroy` frees it only after they unpin.
            unsafe { guard.defer_destroy(old) };
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // SAFETY: dropping a node means it left the map under the shard write lock (after
        // `replace` retired its array, leaving null) or the whole map is being dropped with
        // no reader left; either way no other thread can reach this array any more.
        unsafe {
            let array = self.holders.load(Ordering::Relaxed, epoch::unprotected());
            if !array.is_null() {
                drop(array.into_owned());
            }
        }
    }
}

#[inline]
fn snapshot(h: &Holder) -> (Slot, u64) {
    (h.slot, h.claim())
}

/// The holder of `slot` in a slot-sorted array.
#[inline]
pub(crate) fn find(holders: &[Holder], slot: Slot) -> Option<&Holder> {
    if holders.len() <= 8 {
        return holders.iter().find(|h| h.slot == slot);
    }
    holders
        .binary_search_by_key(&slot, |h| h.slot)
        .ok()
        .map(|i| &holders[i])
}

/// An iterator with a known length (chains of slices lose `ExactSizeIterator`).
struct ExactLen<I>(I, usize);

impl<I: Iterator> Iterator for ExactLen<I> {
    type Item = I::Item;
    fn next(&mut self) -> Option<I::Item> {
        self.0.next()
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.1, Some(self.1))
    }
}

impl<I: Iterator> ExactSizeIterator for ExactLen<I> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn raise(expiry: u64) -> impl Fn(u64) -> u64 {
        move |c| claim::refreshed(c, expiry)
    }

    #[test]
    fn holders_stay_sorted_and_unique() {
        let guard = epoch::pin();
        let node = Node::new(SequenceHash(0), LocalBlockHash(1), 0, 5, 100);
        for slot in [9, 1, 5, 3, 7] {
            node.upsert(slot, raise(200), &guard);
        }
        let slots: Vec<_> = node.holders(&guard).iter().map(|h| h.slot).collect();
        assert_eq!(slots, [1, 3, 5, 7, 9]);
        assert_eq!(node.holders(&guard)[2].claim(), 200);
    }

    #[test]
    fn settle_keeps_sets_and_removes() {
        let guard = epoch::pin();
        let node = Node::new(SequenceHash(0), LocalBlockHash(1), 0, 5, 100);
        node.upsert(6, raise(300), &guard);
        assert_eq!(node.settle(5, |_| Settle::Keep, &guard), Outcome::Kept);
        assert_eq!(node.settle(4, |_| Settle::Remove, &guard), Outcome::Absent);
        assert_eq!(node.settle(5, |_| Settle::Set(7), &guard), Outcome::Set);
        assert_eq!(node.holders(&guard)[0].claim(), 7);
        assert_eq!(node.settle(5, |_| Settle::Remove, &guard), Outcome::Removed);
        assert_eq!(
            node.settle(6, |_| Settle::Remove, &guard),
            Outcome::RemovedLast
        );
        assert!(node.holders(&guard).is_empty());
    }

    #[test]
    fn refresh_only_raises_and_keeps_the_exact_bit() {
        let guard = epoch::pin();
        let node = Node::new(SequenceHash(0), LocalBlockHash(1), 0, 2, claim::EXACT | 500);
        assert!(node.update_claim(2, raise(300), &guard));
        assert_eq!(node.holders(&guard)[0].claim(), claim::EXACT | 500);
        assert!(node.update_claim(2, raise(900), &guard));
        assert_eq!(node.holders(&guard)[0].claim(), claim::EXACT | 900);
        assert!(!node.update_claim(3, raise(900), &guard));
    }
}
