//! Each slot's exactly stored blocks and, per block, how many of them are its children, so
//! that a `Removed` event can tell whether it leaves a gap below which the slot still
//! holds blocks (finds may gallop only while no slot has such a gap: `tree/nesting.rs`).
//!
//! Kept only while finds gallop: once they walk, nothing reads it again, and the slot's
//! next event empties it.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use super::Workers;
use crate::id_hasher::IdBuildHasher;
use crate::slot::Slot;
use crate::sync::MutexGuard;
use crate::SequenceHash;

/// One slot's exact blocks, each with its parent (`None`: a root block) and the number of
/// its exact children: one map, so that a chain's block costs one insert, and its
/// parent's count (mostly the block just before it) a lookup of a line still in cache.
#[derive(Debug, Default)]
pub(crate) struct ExactChains {
    blocks: HashMap<u64, Exact, IdBuildHasher>,
}

/// An exact block's parent and exact children; or, not `stored`, a parent that is not
/// stored exactly, kept for its children's count.
#[derive(Debug, Clone, Copy, Default)]
struct Exact {
    parent: Option<u64>,
    children: u32,
    stored: bool,
}

impl ExactChains {
    /// `chain` (the blocks of a `Stored` event, parents first) is now stored exactly, after
    /// `parent`. A parent not stored exactly (none is while finds gallop: an exact chain
    /// below one ends galloping) is kept for its children's count.
    pub(crate) fn stored(
        &mut self,
        parent: Option<SequenceHash>,
        chain: impl IntoIterator<Item = SequenceHash>,
    ) {
        let mut above = parent.map(|p| p.0);
        for block in chain {
            let exact = self.blocks.entry(block.0).or_default();
            if !exact.stored {
                exact.stored = true;
                exact.parent = above;
                if let Some(p) = above {
                    self.blocks.entry(p).or_default().children += 1;
                }
            }
            above = Some(block.0);
        }
    }

    /// The slot's exact claim on `block` ended. Returns whether exact children of it are
    /// left (the slot's exact blocks no longer form a prefix of each chain; what is kept
    /// after that is read no more, as finds stop galloping).
    pub(crate) fn removed(&mut self, block: SequenceHash) -> bool {
        let Some(gone) = self.blocks.remove(&block.0) else {
            return false;
        };
        if let Some(Entry::Occupied(mut p)) = gone.parent.map(|p| self.blocks.entry(p)) {
            let parent = p.get_mut();
            parent.children = parent.children.saturating_sub(1);
            if !parent.stored && parent.children == 0 {
                p.remove();
            }
        }
        gone.children > 0
    }

    /// Forgets everything (the slot is recycled, or galloping ended).
    pub(crate) fn clear(&mut self) {
        *self = Self::default();
    }

    /// The bytes of the entries kept, for the memory estimate (allocator rounding and the
    /// maps' control bytes not counted).
    pub(crate) fn bytes(&self) -> usize {
        self.blocks.len() * std::mem::size_of::<(u64, Exact)>()
    }
}

impl Workers {
    /// `slot`'s exact chains, locked: a KV event of the slot holds them from its first
    /// look at the tree to its last change, so that events of one slot on different
    /// threads see each other's changes whole.
    pub(crate) fn exact_chains(&self, slot: Slot) -> Option<MutexGuard<'_, ExactChains>> {
        Some(self.slots.get(slot)?.exact_chains.lock())
    }

    /// The bytes of every slot's exact chains (for the memory estimate).
    pub(crate) fn exact_chain_bytes(&self) -> usize {
        self.sum_over_slots(|info| info.exact_chains.lock().bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_removed_before_its_exact_children_leaves_a_gap() {
        let s = |n| SequenceHash(n);
        let mut chains = ExactChains::default();
        chains.stored(None, [s(1), s(2), s(3)]);
        chains.stored(Some(s(2)), [s(4)]);
        chains.stored(Some(s(1)), [s(2)]); // stored again: counted once
        assert!(chains.removed(s(2)), "2 still has 3 and 4 below it");
        let mut chains = ExactChains::default();
        chains.stored(None, [s(1), s(2), s(3)]);
        chains.stored(Some(s(2)), [s(4)]);
        // Leaves first, as an LRU engine evicts: no gap at any step.
        for b in [4, 3, 2, 1] {
            assert!(!chains.removed(s(b)), "{b}");
        }
        assert_eq!(chains.bytes(), 0);
        assert!(!chains.removed(s(9)), "a block never stored");
    }

    /// A parent that was not stored exactly counts its exact children until they go, and
    /// counts as stored, with them, once it is.
    #[test]
    fn a_parent_stored_after_its_children_keeps_their_count() {
        let s = |n| SequenceHash(n);
        let mut chains = ExactChains::default();
        chains.stored(Some(s(1)), [s(2)]);
        chains.stored(None, [s(0), s(1)]);
        assert!(chains.removed(s(0)), "0 has 1 below it");
        assert!(chains.removed(s(1)), "1 still has 2 below it");
        let mut chains = ExactChains::default();
        chains.stored(Some(s(1)), [s(2), s(3)]);
        assert!(!chains.removed(s(3)));
        assert!(!chains.removed(s(2)));
        assert_eq!(
            chains.bytes(),
            0,
            "the parent never stored goes with its last child"
        );
    }
}
