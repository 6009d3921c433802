//! What reports teach about a worker's capacity (`reports.rs` calls it), and the ghosts
//! that let them raise it.
//!
//! - **A loss well inside a known capacity lowers it.** A worker that lost a block while
//!   the index believed it held fewer blocks than seven eighths of its capacity holds
//!   less than the capacity says: the capacity drops by an eighth (at least one block),
//!   not below what the worker holds once the loss rule has dropped its older claims. A
//!   loss near the capacity is what an LRU cache does, and changes nothing.
//! - **A loss with no capacity set gives it a first value**: the claims the worker held
//!   when the loss showed (before the loss rule dropped any; at least one block). It
//!   errs high: the claims a TTL kept are an engine's retention at most, and the loss
//!   rule and later losses bring a capacity down, while one too low costs hits that only
//!   ghosts win back.
//! - **Ghosts raise it.** The blocks a worker's capacity (or the per-worker cap) evicted
//!   are remembered per slot, the most recent `4 x cap` of them (64 to 65,536), as ARC
//!   keeps its ghost lists (four times over: a capacity guessed a quarter of the truth
//!   still sees the engine's whole retention). A worker that delivers more blocks than
//!   predicted, and the extra blocks are ghosts, still held what the index evicted: its
//!   capacity (the cap, if it had none) rises by those blocks, and at least doubles, so
//!   that a capacity guessed four times too low is right after two such reports. The
//!   request's own blocks, the ghosts among them, are back already: its begin recorded
//!   them.
//!
//! A learned capacity is set as `set_worker_capacity` sets one (evicting at once when it
//! is lowered) and counted in `IndexStats::capacities_learned`.

use std::collections::{HashMap, VecDeque};

use dashmap::DashMap;

use super::Core;
use crate::id_hasher::IdBuildHasher;
use crate::slot::Slot;
use crate::SequenceHash;

/// The fewest and most ghosts a slot keeps.
const GHOSTS: (usize, usize) = (64, 1 << 16);
/// Ghosts a slot keeps per block of its cap.
const GHOSTS_PER_BLOCK: usize = 4;

/// Recently evicted blocks per slot, tagged with the registration.
#[derive(Default)]
pub(crate) struct GhostTable {
    slots: DashMap<Slot, SlotGhosts>,
}

/// One slot's ghosts: each block with the stamp of its latest eviction, and the
/// evictions in order (an entry whose stamp is not the block's latest is stale).
#[derive(Default)]
struct SlotGhosts {
    generation: u16,
    stamp: u64,
    latest: HashMap<SequenceHash, u64, IdBuildHasher>,
    order: VecDeque<(SequenceHash, u64)>,
}

impl SlotGhosts {
    fn add(&mut self, block: SequenceHash, bound: usize) {
        self.stamp += 1;
        self.latest.insert(block, self.stamp);
        self.order.push_back((block, self.stamp));
        while self.latest.len() > bound {
            let Some((oldest, stamp)) = self.order.pop_front() else {
                break;
            };
            if self.latest.get(&oldest) == Some(&stamp) {
                self.latest.remove(&oldest);
            }
        }
        if self.order.len() > 2 * bound {
            // Drop the stale entries: the live ones, in stamp order.
            let latest = &self.latest;
            self.order.retain(|(b, s)| latest.get(b) == Some(s));
        }
    }
}

impl GhostTable {
    /// Remembers that `slot` (registration `generation`) lost `blocks` to its cap `cap`.
    pub(crate) fn add(&self, (slot, generation): (Slot, u16), blocks: &[SequenceHash], cap: usize) {
        if blocks.is_empty() {
            return;
        }
        let bound = cap
            .saturating_mul(GHOSTS_PER_BLOCK)
            .clamp(GHOSTS.0, GHOSTS.1);
        let mut ghosts = self.slots.entry(slot).or_default();
        if ghosts.generation != generation {
            *ghosts = SlotGhosts {
                generation,
                ..SlotGhosts::default()
            };
        }
        for &block in blocks {
            ghosts.add(block, bound);
        }
    }

    /// The heap bytes the ghosts hold: per ghost a map entry (its block and stamp) and a
    /// queue entry, as allocated (allocator rounding and the maps' control bytes not
    /// counted).
    pub(crate) fn bytes(&self) -> usize {
        let entry = std::mem::size_of::<(SequenceHash, u64)>();
        self.slots
            .iter()
            .map(|g| (g.latest.capacity() + g.order.capacity()) * entry)
            .sum()
    }

    /// How many of `blocks` are `slot`'s ghosts; they are forgotten.
    fn take(&self, (slot, generation): (Slot, u16), blocks: &[SequenceHash]) -> usize {
        let Some(mut ghosts) = self.slots.get_mut(&slot) else {
            return 0;
        };
        if ghosts.generation != generation {
            return 0;
        }
        blocks
            .iter()
            .filter(|b| ghosts.latest.remove(b).is_some())
            .count()
    }
}

impl Core {
    /// After a loss: `held` entries before the loss rule dropped any. Returns the
    /// capacity learned, if any.
    pub(super) fn learn_from_loss(&self, slot: Slot, held: usize) -> Option<usize> {
        let kept = self.workers.entries(slot).max(1);
        let learned = match self.workers.capacity(slot) {
            None => held.max(1),
            Some(cap) if held < cap - cap / 8 => (cap - (cap / 8).max(1)).max(kept),
            Some(_) => return None,
        };
        self.set_slot_capacity(slot, Some(learned));
        self.capacities_learned.add(1);
        Some(learned)
    }

    /// After a gain on `extra`, the prompt's blocks past the predicted ones that the
    /// worker delivered.
    /// Returns the capacity learned, if any.
    pub(super) fn learn_from_gain(
        &self,
        (slot, generation): (Slot, u16),
        extra: &[SequenceHash],
    ) -> Option<usize> {
        let hits = self.ghosts.take((slot, generation), extra);
        if hits == 0 {
            return None;
        }
        let cap = self.worker_cap(slot)?;
        let learned = cap.saturating_add(hits.max(cap));
        self.set_slot_capacity(slot, Some(learned));
        self.capacities_learned.add(1);
        Some(learned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ghosts_are_bounded_by_four_times_the_cap_and_counted_in_bytes() {
        let table = GhostTable::default();
        assert_eq!(table.bytes(), 0);
        let slot: Slot = 3;
        let blocks: Vec<SequenceHash> = (0..1000).map(SequenceHash).collect();
        table.add((slot, 1), &blocks, 100); // at most 400 kept
        let entry = std::mem::size_of::<(SequenceHash, u64)>();
        assert!(table.bytes() >= 2 * 400 * entry, "{}", table.bytes());
        // The oldest 600 went; each of the newest 400 is taken once.
        assert_eq!(table.take((slot, 1), &blocks[..600]), 0);
        assert_eq!(table.take((slot, 1), &blocks[600..601]), 1);
        assert_eq!(table.take((slot, 1), &blocks[600..]), 399);
        assert_eq!(table.take((slot, 2), &blocks), 0, "another registration's");
    }
}
