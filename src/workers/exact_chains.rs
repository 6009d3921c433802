//! Each slot's exactly stored blocks and, per block, how many of them are its children, so
//! that a `Removed` event can tell whether it leaves a gap below which the slot still
//! holds blocks (finds may gallop only while no slot has such a gap: `tree/nesting.rs`).
//!
//! Kept only while finds gallop: once they walk, nothing reads it again, and the slot's
//! next event empties it.

use std::collections::HashMap;

use super::Workers;
use crate::id_hasher::IdBuildHasher;
use crate::slot::Slot;
use crate::sync::MutexGuard;
use crate::SequenceHash;

/// One slot's exact blocks: each with its parent (`None`: a root block), and each parent
/// with the number of its exact children.
#[derive(Debug, Default)]
pub(crate) struct ExactChains {
    parents: HashMap<u64, Option<u64>, IdBuildHasher>,
    children: HashMap<u64, u32, IdBuildHasher>,
}

impl ExactChains {
    /// `chain` (the blocks of a `Stored` event, parents first) is now stored exactly, after
    /// `parent`.
    pub(crate) fn stored(
        &mut self,
        parent: Option<SequenceHash>,
        chain: impl IntoIterator<Item = SequenceHash>,
    ) {
        let mut above = parent.map(|p| p.0);
        for block in chain {
            if let std::collections::hash_map::Entry::Vacant(v) = self.parents.entry(block.0) {
                v.insert(above);
                if let Some(p) = above {
                    *self.children.entry(p).or_insert(0) += 1;
                }
            }
            above = Some(block.0);
        }
    }

    /// The slot's exact claim on `block` ended. Returns whether exact children of it are
    /// left (the slot's exact blocks no longer form a prefix of each chain).
    pub(crate) fn removed(&mut self, block: SequenceHash) -> bool {
        if let Some(Some(parent)) = self.parents.remove(&block.0) {
            if let Some(n) = self.children.get_mut(&parent) {
                *n -= 1;
                if *n == 0 {
                    self.children.remove(&parent);
                }
            }
        }
        self.children.contains_key(&block.0)
    }

    /// Forgets everything (the slot is recycled, or galloping ended).
    pub(crate) fn clear(&mut self) {
        *self = Self::default();
    }

    /// The bytes of the entries kept, for the memory estimate (allocator rounding and the
    /// maps' control bytes not counted).
    pub(crate) fn bytes(&self) -> usize {
        self.parents.len() * std::mem::size_of::<(u64, Option<u64>)>()
            + self.children.len() * std::mem::size_of::<(u64, u32)>()
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
}
