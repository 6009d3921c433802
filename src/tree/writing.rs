//! [`Writing`]: the epoch pin every write of the tree runs under, which settles the
//! tree's entry counts when it ends.
//!
//! A write may take entries out of the tree while their slots' counts still have them: a
//! split of a run merges entries into blocks the slot already held, and a copy of a
//! holder array leaves out removed workers' holders. The tree queues them
//! (`Tree::uncounted`), and a `Writing` hands them to the [`SlotBook`] when it drops
//! (or earlier, at [`Writing::uncount_dropped`]), after the write has released its locks.
//! Every write method of the tree takes a `&Writing`, and the only way to get one is
//! [`Tree::writing`]: no write can forget to settle the counts.

use std::ops::Deref;

use crossbeam_epoch::{self as epoch, Guard};

use super::Tree;
#[cfg(doc)]
use crate::slot::SlotBook;

/// An epoch pin for writing to `tree` (it reads as the [`Guard`] it holds).
pub(crate) struct Writing<'t> {
    guard: Guard,
    tree: &'t Tree,
}

impl Tree {
    /// Pins the epoch for a write to this tree.
    pub(crate) fn writing(&self) -> Writing<'_> {
        Writing {
            guard: epoch::pin(),
            tree: self,
        }
    }
}

impl Writing<'_> {
    /// Uncounts, now, the entries that writes took out of the tree still counted, for a
    /// writer that reads the counts before its pin ends (caps, stats).
    pub(crate) fn uncount_dropped(&self) {
        self.tree.uncount_dropped();
    }
}

impl Tree {
    /// Hands every entry that left the tree still counted to the book.
    pub(crate) fn uncount_dropped(&self) {
        while let Some((slot, entries)) = self.uncounted.pop() {
            self.book.uncount(slot, entries);
        }
    }
}

impl Deref for Writing<'_> {
    type Target = Guard;

    #[inline]
    fn deref(&self) -> &Guard {
        &self.guard
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.uncount_dropped();
    }
}
