//! Worker slots: the dense numbers the tree, the timers and the decision logs store instead
//! of worker keys, and what reads of the tree ask about them. A leaf module: only the
//! worker registry (`workers`) hands slots out and answers for them.

use crate::WorkerKey;

/// A dense index standing for one registration of one worker.
pub(crate) type Slot = u32;

/// What reads of the tree (find, dump, snapshot) ask about the slots their holders carry;
/// the worker registry answers. Taken as a generic parameter, so each call inlines as a
/// direct call to the registry would.
pub(crate) trait SlotOwners {
    /// The worker key of `slot` if it is alive (registered and not removed).
    fn alive<W: WorkerKey>(&self, slot: Slot) -> Option<W>;
    /// [`alive`](Self::alive), with the entries stored for `slot` (clamped at zero), in one
    /// lookup of the slot.
    fn alive_with_entries<W: WorkerKey>(&self, slot: Slot) -> Option<(W, usize)>;
    /// Calls `f(slot, key, entries)` for each slot of `slots` that is alive, with its
    /// entries if `entries` (else 0): [`alive`](Self::alive) or
    /// [`alive_with_entries`](Self::alive_with_entries) for each, which the registry does
    /// faster for slots in ascending order (a holder array's).
    #[inline]
    fn each_alive<W: WorkerKey>(
        &self,
        slots: impl Iterator<Item = Slot>,
        entries: bool,
        mut f: impl FnMut(Slot, W, usize),
    ) {
        for slot in slots {
            let worker = if entries {
                self.alive_with_entries(slot)
            } else {
                self.alive(slot).map(|key| (key, 0))
            };
            if let Some((key, count)) = worker {
                f(slot, key, count);
            }
        }
    }
}

/// What the tree's writers ask the worker registry about slots, and tell it.
///
/// - Whether a slot's worker was removed (its state DEAD), for writers that copy a holder
///   array and leave the removed workers' holders out (`Tree::new` with `drop_dead`). A
///   slot that still has holders in the tree is never recycled, so a holder's slot reads
///   dead only for the registration that holder belongs to.
/// - Entries that left the tree while the slot's count still has them: merged into a
///   block the slot already held by a split of a run, or dropped with a removed worker's
///   holder by an array copy. The tree hands them over when a write's `Writing` pin
///   ends (`tree/writing.rs`), outside every lock.
pub(crate) trait SlotBook: Send + Sync {
    /// Whether any slot may be dead (a hint: a slot killed meanwhile may be missed, and is
    /// left for the purge).
    fn any_dead(&self) -> bool;
    fn is_dead(&self, slot: Slot) -> bool;
    /// `entries` of `slot`'s counted entries are no longer in the tree.
    fn uncount(&self, slot: Slot, entries: usize);
}

/// Every slot is a live worker of its own number, with no entries counted: the slot owners
/// of the tree's own tests and loom models.
#[cfg(test)]
pub(crate) struct AllAlive;

#[cfg(test)]
impl SlotBook for AllAlive {
    fn any_dead(&self) -> bool {
        false
    }
    fn is_dead(&self, _: Slot) -> bool {
        false
    }
    fn uncount(&self, _: Slot, _: usize) {}
}

#[cfg(test)]
impl SlotOwners for AllAlive {
    fn alive<W: WorkerKey>(&self, slot: Slot) -> Option<W> {
        Some(W::from_parts(u64::from(slot), 0))
    }
    fn alive_with_entries<W: WorkerKey>(&self, slot: Slot) -> Option<(W, usize)> {
        Some((W::from_parts(u64::from(slot), 0), 0))
    }
}
