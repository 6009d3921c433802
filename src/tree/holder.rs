//! The holders of a node: one (block, worker) entry each, and the epoch-published arrays
//! that keep two or more of them (see `node.rs` for how a node holds one inline, and the
//! protocol by which arrays are published, appended to and retired).

use std::mem::MaybeUninit;

use crossbeam_epoch::{Guard, Owned, Shared};

use super::claim::Claim;
use crate::slot::Slot;
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// One (block, worker) entry: the worker's slot and its [claim](super::claim), as two
/// atomics that change in place (see `claim.rs` for why readers may load them apart).
///
/// Every field is an atomic (the slot never changes once written; its loads are plain
/// loads): holders live in `MaybeUninit` cells that an append writes while readers hold a
/// shared view of the array, which is sound only for memory inside `UnsafeCell`s.
#[derive(Debug)]
pub(crate) struct Holder {
    // Visible to the node, whose in-place append writes a cell's fields one by one.
    pub(super) slot: AtomicU32,
    pub(super) exact: AtomicBool,
    pub(super) expiry: AtomicU64,
}

// Arrays of holders are freed by `defer_destroy` on the epoch collector, which drops them
// on whatever thread collects: a holder must own nothing that needs dropping.
const _: () = assert!(!std::mem::needs_drop::<Holder>());

impl Holder {
    pub(super) fn new(slot: Slot, claim: Claim) -> Self {
        Self {
            slot: AtomicU32::new(slot),
            exact: AtomicBool::new(claim.exact),
            expiry: AtomicU64::new(claim.expiry),
        }
    }

    /// The worker slot of this entry.
    #[inline]
    pub(crate) fn slot(&self) -> Slot {
        self.slot.load(Ordering::Relaxed)
    }

    /// Whether the entry reports the block as held at `now` (the expiry first: the exact
    /// flag is read only for entries whose approximate claim has ended).
    #[inline]
    pub(crate) fn live_at(&self, now: u64) -> bool {
        self.expiry.load(Ordering::Acquire) > now || self.exact.load(Ordering::Acquire)
    }

    /// The current claim.
    #[inline]
    pub(crate) fn claim(&self) -> Claim {
        Claim {
            exact: self.exact.load(Ordering::Acquire),
            expiry: self.expiry.load(Ordering::Acquire),
        }
    }

    /// Raises the claim to include `want`: sets the exact bit if wanted, moves the expiry
    /// only later. Writes nothing when the claim already covers `want` (no cache-line
    /// transfer on a refresh that changes nothing). Only [`Node::update_claim`](super::node::Node::update_claim) calls it,
    /// under the shard read lock (the loom models also call it without, to show why not).
    #[inline]
    pub(crate) fn raise(&self, want: Claim) {
        if want.exact && !self.exact.load(Ordering::Acquire) {
            self.exact.store(true, Ordering::Release);
        }
        if want.expiry > self.expiry.load(Ordering::Acquire) {
            self.expiry.fetch_max(want.expiry, Ordering::AcqRel);
        }
    }
}

/// The epoch-published array of holder cells (one allocation, its capacity in a `usize`
/// header); the node's `len` says how many leading cells hold initialised holders.
pub(super) type HolderArray = [MaybeUninit<Holder>];

/// The capacity of an array built for `len` holders: exact, except when the array grows by
/// an append at the end (slots joining in ascending order, as new workers do), which leaves
/// a quarter more room so that the next appends write in place: the n-th sharer of a block
/// then costs O(1) amortised instead of a copy of n holders.
pub(super) fn capacity_for(len: usize, appended: bool) -> usize {
    if appended && len > 4 {
        len + len / 4
    } else {
        len
    }
}

/// A reader's view of a node's holders, valid after the shard lock is dropped: a copy of
/// an inline holder, or the published array's holders (kept alive by the epoch guard).
#[derive(Debug)]
pub(crate) enum Holders<'g> {
    /// The node's one inline holder, copied out under the lock.
    Sole(Holder),
    /// Holders of a published array (or none).
    Shared(&'g [Holder]),
}

impl Holders<'_> {
    /// No holders (a missing node).
    pub(crate) const NONE: Self = Holders::Shared(&[]);
}

impl std::ops::Deref for Holders<'_> {
    type Target = [Holder];

    #[inline]
    fn deref(&self) -> &[Holder] {
        match self {
            Holders::Sole(holder) => std::slice::from_ref(holder),
            Holders::Shared(holders) => holders,
        }
    }
}

/// Builds a published-ready array of `capacity` cells from `(slot, claim)` pairs already
/// sorted by slot, writing exactly `len` leading cells (asserted: a shorter or longer
/// iterator is a bug that would otherwise publish uninitialised holders).
pub(super) fn new_array(
    len: usize,
    capacity: usize,
    pairs: impl Iterator<Item = (Slot, Claim)>,
) -> Owned<HolderArray> {
    assert!(len <= capacity && capacity <= u32::MAX as usize);
    let mut array = Owned::<HolderArray>::init(capacity);
    let mut written = 0;
    for (slot, claim) in pairs {
        assert!(written < len, "holder array overrun");
        array[written].write(Holder::new(slot, claim));
        written += 1;
    }
    assert_eq!(written, len, "holder array not filled");
    array
}

/// Views the first `len` cells of a published array as initialised holders.
#[inline]
pub(super) fn as_holders<'g>(array: Shared<'g, HolderArray>, len: u32) -> &'g [Holder] {
    if array.is_null() {
        return &[];
    }
    // SAFETY: a node's array (`Node::array`) was made by `new_array`, which writes the
    // node's `len` leading cells (it asserts the count) before the array is published;
    // `Node::upsert` writes cell `len` before counting it; `len` and the pointer are read
    // together under the shard lock that every change to them holds, so the first `len`
    // cells are initialised (`len` is clamped to the capacity here as well).
    // `MaybeUninit<Holder>` has the layout of `Holder`. Cells below `len` are never
    // written again except through their atomics. The array is freed only through
    // `defer_destroy` after it has been unlinked, so it outlives the guard `'g` that the
    // caller loaded it under.
    unsafe {
        let cells: &'g HolderArray = array.deref();
        let len = (len as usize).min(cells.len());
        std::slice::from_raw_parts(cells.as_ptr().cast::<Holder>(), len)
    }
}

/// Hands an array that is no longer reachable from its node to the epoch collector.
pub(super) fn retire(old: Option<Shared<'_, HolderArray>>, guard: &Guard) {
    if let Some(old) = old {
        if cfg!(loom_break = "free_at_once") {
            // Broken (loom model `find_vs_unlink`): freed while a reader may still read it.
            // SAFETY: none; this is the deliberately broken variant.
            drop(unsafe { old.into_owned() });
            return;
        }
        // SAFETY: `old` is no longer published (its node now holds another array or an
        // inline holder, or the node itself is gone from the map), so no new reader can
        // load it; readers that loaded it before are pinned, and `defer_destroy` frees it
        // only after they unpin.
        unsafe { guard.defer_destroy(old) };
    }
}

#[inline]
pub(super) fn snapshot(h: &Holder) -> (Slot, Claim) {
    (h.slot(), h.claim())
}

/// The holder of `slot` in a slot-sorted array.
#[inline]
pub(crate) fn find(holders: &[Holder], slot: Slot) -> Option<&Holder> {
    if holders.len() <= 8 {
        return holders.iter().find(|h| h.slot() == slot);
    }
    holders
        .binary_search_by_key(&slot, |h| h.slot())
        .ok()
        .map(|i| &holders[i])
}
