//! Shape changes of a node's holder set, under its shard's write lock (`&mut self`): a
//! slot added or its claim raised ([`Node::upsert`]), a walk's or an event's change to one
//! entry ([`Node::settle`]), removed slots taken out ([`Node::remove_slots`]). An append
//! writes the array's first free cell in place and then counts it; every other change
//! builds a new array, publishes it and retires the old one (see the parent module).

use crossbeam_epoch::Guard;

// Paths through `super`: `loom_models` includes the parent module by path, with its own
// `claim` and `holder` beside it.
use super::super::claim::Claim;
use super::super::holder::{as_holders, capacity_for, new_array, retire, snapshot, Holder};
use super::{Node, EMPTY};
use crate::slot::Slot;
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// What a walk or an event wants done with one entry, given its current claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settle {
    /// Leave it as it is.
    Keep,
    /// End the approximate claim, keep the exact one.
    ClearApprox,
    /// Lower the approximate claim to this expiry, still live (a released pin, whose
    /// request's decision expires then).
    Lower(u64),
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
    /// The entry's approximate claim was ended or lowered; the entry stays.
    Cleared,
    /// The entry, whose claim was `was`, was removed. If `last`, the node is now empty and
    /// the caller must unlink it while still holding the write lock.
    Removed { was: Claim, last: bool },
}

impl Node {
    /// Raises `slot`'s claim to include `want`, adding the slot with claim `want` if it is
    /// not a holder. Returns true if an entry was added. `&mut self`: the shard write lock.
    pub(crate) fn upsert(&mut self, slot: Slot, want: Claim, guard: &Guard) -> bool {
        self.upsert_dropping((slot, want), |_| false, |_| {}, guard)
    }

    /// [`upsert`](Self::upsert), and if that copies the holder array (an insert below the
    /// last slot, or an append into a full array), the copy leaves out the holders whose
    /// slot `dead` names, each reported to `dropped` (decided once per holder, so a slot
    /// dying meanwhile is either dropped and reported or kept).
    pub(crate) fn upsert_dropping(
        &mut self,
        (slot, want): (Slot, Claim),
        dead: impl Fn(Slot) -> bool,
        mut dropped: impl FnMut(Slot),
        guard: &Guard,
    ) -> bool {
        let Some(array) = self.array(guard) else {
            return match self.sole() {
                // Emptied by a walk and not yet unlinked (the caller unlinks it under this
                // lock, so this is defensive): the slot becomes the inline holder.
                None => {
                    self.set_sole((slot, want), guard);
                    true
                }
                Some((held, _)) if held == slot => {
                    self.raise_sole(want);
                    false
                }
                // A second holder: an array of two, in slot order.
                Some(sole) => {
                    let new = (slot, want);
                    let pairs = if slot > sole.0 {
                        [sole, new]
                    } else {
                        [new, sole]
                    };
                    let array = new_array(2, capacity_for(2, slot > sole.0), pairs.into_iter());
                    self.set_array(array, 2, guard);
                    true
                }
            };
        };
        let current = as_holders(array, self.slot_or_len());
        // A slot above the last holder (a new worker) needs no search at all.
        let at = match current.last() {
            Some(last) if last.slot() >= slot => {
                match current.binary_search_by_key(&slot, Holder::slot) {
                    Ok(i) => {
                        current[i].raise(want);
                        return false;
                    }
                    Err(i) => i,
                }
            }
            _ => current.len(),
        };
        let appended = at == current.len();
        if appended {
            // SAFETY: `array` is this node's published array, alive for the guard (see
            // `array`).
            let cells = unsafe { array.deref() };
            if current.len() < cells.len() {
                let cell = cells[current.len()].as_ptr().cast_mut();
                // SAFETY: cell `len` is past every holder a reader can see: readers read
                // `len` under the shard lock, which we hold exclusively (`&mut self`), so a
                // reader still holding a slice of this array saw at most `len` cells and
                // never reads this one; removals always build a new array, so no reader of
                // this array ever saw a holder in this cell. Each field is an atomic, so the
                // cell's bytes that we write lie inside `UnsafeCell`s, which a shared view
                // of the array permits writing through a raw pointer; we write field by
                // field, never the padding.
                unsafe {
                    std::ptr::addr_of_mut!((*cell).slot).write(AtomicU32::new(slot));
                    std::ptr::addr_of_mut!((*cell).exact).write(AtomicBool::new(want.exact));
                    std::ptr::addr_of_mut!((*cell).expiry).write(AtomicU64::new(want.expiry));
                }
                self.slot_or_len
                    .store(self.slot_or_len() + 1, Ordering::Relaxed);
                return true;
            }
        }
        if current.iter().any(|h| dead(h.slot())) {
            let mut kept = Vec::with_capacity(current.len() + 1);
            for (i, h) in current.iter().enumerate() {
                if i == at {
                    kept.push((slot, want));
                }
                if dead(h.slot()) {
                    dropped(h.slot());
                } else {
                    kept.push(snapshot(h));
                }
            }
            if at == current.len() {
                kept.push((slot, want));
            }
            let len = kept.len();
            match kept.as_slice() {
                [sole] => self.set_sole(*sole, guard),
                _ => {
                    let array = new_array(len, capacity_for(len, appended), kept.into_iter());
                    self.set_array(array, len, guard);
                }
            }
            return true;
        }
        let len = current.len() + 1;
        let pairs = current[..at]
            .iter()
            .map(snapshot)
            .chain(std::iter::once((slot, want)))
            .chain(current[at..].iter().map(snapshot));
        let array = new_array(len, capacity_for(len, appended), pairs);
        self.set_array(array, len, guard);
        true
    }

    /// Keeps, changes or removes `slot`'s entry as `decide` says given its current claim.
    /// `&mut self`: the shard write lock. On `Removed { last: true }` the caller must
    /// unlink the node while still holding it.
    pub(crate) fn settle(
        &mut self,
        slot: Slot,
        decide: impl FnOnce(Claim) -> Settle,
        guard: &Guard,
    ) -> Outcome {
        let Some(array) = self.array(guard) else {
            let Some((held, was)) = self.sole().filter(|&(s, _)| s == slot) else {
                return Outcome::Absent;
            };
            debug_assert_eq!(held, slot);
            return match decide(was) {
                Settle::Keep => Outcome::Kept,
                Settle::ClearApprox => {
                    // No refresher runs concurrently: they need the read lock we exclude.
                    self.word.store(0, Ordering::Release);
                    Outcome::Cleared
                }
                Settle::Lower(expiry) => {
                    // As above; a reader sees the pin or the lower claim, live either way.
                    self.word.store(expiry, Ordering::Release);
                    Outcome::Cleared
                }
                Settle::Remove => {
                    self.mark_empty();
                    Outcome::Removed { was, last: true }
                }
            };
        };
        let current = as_holders(array, self.slot_or_len());
        let Ok(at) = current.binary_search_by_key(&slot, |h| h.slot()) else {
            return Outcome::Absent;
        };
        let was = current[at].claim();
        match decide(was) {
            Settle::Keep => Outcome::Kept,
            Settle::ClearApprox => {
                // No refresher runs concurrently: they need the read lock we exclude.
                current[at].expiry.store(0, Ordering::Release);
                Outcome::Cleared
            }
            Settle::Lower(expiry) => {
                // As above; a reader sees the pin or the lower claim, live either way.
                current[at].expiry.store(expiry, Ordering::Release);
                Outcome::Cleared
            }
            Settle::Remove if cfg!(loom_break = "remove_in_place") && at + 1 == current.len() => {
                // Broken (loom model `append_vs_find`): the last cell is dropped from
                // `len` in place, so the next append rewrites a cell readers may hold.
                self.slot_or_len
                    .store(self.slot_or_len() - 1, Ordering::Relaxed);
                Outcome::Removed { was, last: false }
            }
            Settle::Remove => {
                let last =
                    self.keep_holders(current, current.len() - 1, |h| h.slot() != slot, guard);
                Outcome::Removed { was, last }
            }
        }
    }

    /// Removes, in one change, every holder whose slot `gone` names (a purge of removed
    /// workers), calling `removed` for each. Returns whether the node is left empty, which
    /// the caller then unlinks under the same lock. `&mut self`: the shard write lock. One
    /// new array (or the last holder back inline) whatever the number removed, so a purge
    /// costs O(holders) per node, not per removed holder.
    pub(crate) fn remove_slots(
        &mut self,
        gone: impl Fn(Slot) -> bool,
        mut removed: impl FnMut(Slot),
        guard: &Guard,
    ) -> bool {
        let Some(array) = self.array(guard) else {
            let Some((slot, _)) = self.sole().filter(|&(s, _)| gone(s)) else {
                return false;
            };
            removed(slot);
            self.mark_empty();
            return true;
        };
        let current = as_holders(array, self.slot_or_len());
        let kept = current.iter().filter(|h| !gone(h.slot())).count();
        if kept == current.len() {
            return false;
        }
        for h in current.iter().filter(|h| gone(h.slot())) {
            removed(h.slot());
        }
        self.keep_holders(current, kept, |h| !gone(h.slot()), guard)
    }

    /// Replaces the node's array `current` by the `kept` holders (fewer than all) that
    /// `keep` keeps: a new exact-size array, the one left back inline (no reader sees it
    /// there outside the lock we hold exclusively), or none, the node left empty (returns
    /// true: the caller unlinks it under the same lock). Always a new array, never a
    /// shorter `len`: a reader may still be reading a removed cell, which a later append
    /// would then overwrite; the old array is retired, so such a reader reads it whole.
    fn keep_holders(
        &mut self,
        current: &[Holder],
        kept: usize,
        keep: impl Fn(&Holder) -> bool,
        guard: &Guard,
    ) -> bool {
        debug_assert!(kept < current.len());
        let mut pairs = current.iter().filter(|h| keep(h)).map(snapshot);
        match kept {
            0 => {
                let old = self.array(guard);
                self.mark_empty();
                retire(old, guard);
                true
            }
            1 => {
                self.set_sole(pairs.next().expect("one kept"), guard);
                false
            }
            _ => {
                self.set_array(new_array(kept, kept, pairs), kept, guard);
                false
            }
        }
    }

    /// Marks the node empty (`EMPTY`, neither inline holder nor array): between a removal
    /// of its last holder and its unlinking under the same lock.
    fn mark_empty(&mut self) {
        self.meta
            .store(self.depth() | self.run_bits() | EMPTY, Ordering::Release);
    }
}
