//! What reports teach about a worker's capacity (`reports.rs` calls it), and the ghosts
//! that let them raise it.
//!
//! - **A loss well inside a known capacity lowers it.** A worker that lost a block while
//!   the index believed it held fewer blocks than seven eighths of its capacity holds
//!   less than the capacity says: the capacity drops by an eighth (at least one block),
//!   not below what the worker holds once the loss rule has dropped its older claims.
//! - **A loss that leaves most claims bounds it.** An engine that evicts least recently
//!   used blocks first evicted the lost block while holding at most the blocks used since,
//!   which are the claims the loss rule kept: when those are at least five eighths of
//!   what the worker held (a restart takes recent blocks too, and leaves fewer), a
//!   capacity above them moves halfway down to them, if that is lower than the step
//!   above. Halfway, not all the way: the index does not see every block the engine
//!   holds (output it was not told of, other routers' requests), so the claims kept
//!   undercount what the engine used since. A loss near a capacity that the kept claims
//!   reach changes nothing: that is what an LRU cache does.
//! - **A loss with no capacity set gives it a first value**: the claims the worker held
//!   when the loss showed (before the loss rule dropped any; at least one block). It
//!   errs high: the claims a TTL kept are an engine's retention at most, and the loss
//!   rule and later losses bring a capacity down, while one too low costs hits that only
//!   ghosts win back.
//! - **Ghosts raise it.** The blocks a worker's capacity (or the per-worker cap) evicted
//!   are remembered per slot, the most recent `4 x cap` of them (64 to 65,536), as ARC
//!   keeps its ghost lists (four times over: a capacity guessed a quarter of the truth
//!   still sees the engine's whole retention), with the count of the slot's evictions
//!   once the walk that evicted it was done. A worker that delivers more blocks than predicted, and the extra blocks are
//!   ghosts, still held what the index evicted. Every block it holds now, and every one
//!   evicted by a later walk than the oldest of those ghosts, was used after that ghost: when they are
//!   at least its capacity, the capacity was short, and rises by the ghosts hit, at least
//!   doubling, so that a capacity guessed four times too low is right after two such
//!   reports. When they are fewer, the capacity now in force would have kept the ghost
//!   (it was evicted before a raise), and nothing is learned. The request's own blocks,
//!   the ghosts among them, are back already: its begin recorded them.
//! - **A raise goes to every worker on the same guess.** The capacity learned from ghosts
//!   is also set for every other live worker whose capacity in force was the same (its
//!   own, or the per-worker cap) and that no report has taught since a caller set it: a
//!   fleet given one guess is short everywhere, while ghost hits come only to the workers
//!   that requests land on by load (the index no longer predicts the forgotten prefixes).
//!   A worker raised too high learns it back from its losses, which come soon: the router
//!   sends it the prompts the index believes it holds.
//!
//! A learned capacity is set as `set_worker_capacity` sets one (evicting at once when it
//! is lowered), counted in `IndexStats::capacities_learned` (a raise of other workers,
//! once per worker), and shared with the other replicas as a capacity change of each
//! worker it set. A capacity taught by a report (a loss, or ghosts) is the worker's own:
//! a raise of another worker leaves it alone until a caller sets it again.

use std::collections::{HashMap, VecDeque};

use dashmap::DashMap;

use super::Core;
use crate::id_hasher::IdBuildHasher;
use crate::slot::Slot;
use crate::{SequenceHash, WorkerWithDpRank};

/// The fewest and most ghosts a slot keeps.
const GHOSTS: (usize, usize) = (64, 1 << 16);
/// Ghosts a slot keeps per block of its cap.
const GHOSTS_PER_BLOCK: usize = 4;

/// Recently evicted blocks per slot, tagged with the registration.
#[derive(Default)]
pub(crate) struct GhostTable {
    slots: DashMap<Slot, SlotGhosts>,
}

/// One slot's ghosts: each block with the stamp of its latest eviction (the count of the
/// slot's evictions once the walk that evicted it was done), and the evictions in order
/// (an entry whose stamp is not the block's latest is stale).
#[derive(Default)]
struct SlotGhosts {
    generation: u16,
    stamp: u64,
    latest: HashMap<SequenceHash, u64, IdBuildHasher>,
    order: VecDeque<(SequenceHash, u64)>,
}

impl SlotGhosts {
    /// Remembers the blocks one walk evicted, all with the count of evictions once it was
    /// done (blocks evicted together were used together: none is "since" another).
    fn add_walk(&mut self, blocks: &[SequenceHash], bound: usize) {
        self.stamp += blocks.len() as u64;
        for &block in blocks {
            self.latest.insert(block, self.stamp);
            self.order.push_back((block, self.stamp));
        }
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
        ghosts.add_walk(blocks, bound);
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

    /// Takes `slot`'s ghosts among `blocks` (they are forgotten): how many there were,
    /// and the most blocks evicted by walks after the one that evicted any of them
    /// (`None`: no ghost).
    fn take(
        &self,
        (slot, generation): (Slot, u16),
        blocks: &[SequenceHash],
    ) -> Option<(usize, u64)> {
        let mut ghosts = self.slots.get_mut(&slot)?;
        if ghosts.generation != generation {
            return None;
        }
        let now = ghosts.stamp;
        let stamps = blocks.iter().filter_map(|b| ghosts.latest.remove(b));
        let (hits, oldest) = stamps.fold((0, u64::MAX), |(n, o), s| (n + 1, o.min(s)));
        (hits > 0).then(|| (hits, now - oldest))
    }
}

/// The capacity a loss teaches (see the module), for a worker whose capacity is `cap`
/// that held `held` entries when the loss showed and `kept` (at least 1) once the loss
/// rule had dropped its older claims. `None`: nothing learned.
fn capacity_after_loss(cap: Option<usize>, held: usize, kept: usize) -> Option<usize> {
    let Some(cap) = cap else {
        return Some(held.max(1));
    };
    let step = if held < cap - cap / 8 {
        (cap - (cap / 8).max(1)).max(kept)
    } else {
        cap
    };
    let bound = if kept < cap && kept.saturating_mul(8) >= held.saturating_mul(5) {
        kept + (cap - kept) / 2
    } else {
        cap
    };
    let learned = step.min(bound);
    (learned < cap).then_some(learned)
}

impl Core {
    /// After a loss: `held` entries before the loss rule dropped any. Returns the
    /// capacity learned, if any.
    pub(super) fn learn_from_loss(&self, slot: Slot, held: usize) -> Option<usize> {
        let kept = self.workers.entries(slot).max(1);
        let learned = capacity_after_loss(self.workers.capacity(slot), held, kept)?;
        self.teach_capacity(slot, learned);
        Some(learned)
    }

    /// After a gain on `extra`, the prompt's blocks past the predicted ones that the
    /// worker delivered. Returns the capacity learned, if any, and the other workers
    /// raised to it (see the module).
    pub(super) fn learn_from_gain(
        &self,
        (slot, generation): (Slot, u16),
        extra: &[SequenceHash],
    ) -> Option<(usize, Vec<WorkerWithDpRank>)> {
        let (hits, evicted_since) = self.ghosts.take((slot, generation), extra)?;
        let cap = self.worker_cap(slot)?;
        // Every block the worker holds now, and every one evicted by a later walk, was used
        // after the oldest ghost hit: unless that is the capacity at least, the capacity would
        // have kept the ghost, and the hit says nothing new.
        let used_since = self.workers.entries(slot) as u64 + evicted_since;
        if used_since < cap as u64 {
            return None;
        }
        let learned = cap.saturating_add(hits.max(cap));
        self.teach_capacity(slot, learned);
        Some((learned, self.raise_peers(slot, cap, learned)))
    }

    /// Sets the capacity a report taught `slot`.
    fn teach_capacity(&self, slot: Slot, learned: usize) {
        self.set_slot_capacity(slot, Some(learned));
        self.workers.mark_capacity_taught(slot);
        self.capacities_learned.add(1);
    }

    /// Raises to `learned` every other live worker whose capacity in force is `cap`, as
    /// `slot`'s was, and whose capacity no report has taught since a caller set it.
    /// Returns their keys.
    fn raise_peers(&self, slot: Slot, cap: usize, learned: usize) -> Vec<WorkerWithDpRank> {
        let mut raised = Vec::new();
        for peer in (0..self.workers.slot_count()).filter(|&p| p != slot) {
            let Some(key) = self.workers.alive::<WorkerWithDpRank>(peer) else {
                continue;
            };
            let own = self.workers.capacity(peer);
            if own.or(self.caps.per_worker) != Some(cap) {
                continue;
            }
            if self.workers.raise_untaught_capacity(peer, own, learned) {
                self.capacities_learned.add(1);
                raised.push(key);
            }
        }
        raised
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loss_lowers_a_capacity_by_a_step_or_halfway_to_the_claims_kept() {
        // No capacity: the claims held when the loss showed (at least one).
        assert_eq!(capacity_after_loss(None, 500, 300), Some(500));
        assert_eq!(capacity_after_loss(None, 0, 1), Some(1));
        // Held well inside the capacity, most claims kept: halfway down to them, below
        // the eighth's step.
        assert_eq!(capacity_after_loss(Some(1000), 400, 300), Some(650));
        // Held well inside, few kept (a restart): the eighth's step, not below them.
        assert_eq!(capacity_after_loss(Some(1000), 800, 100), Some(875));
        assert_eq!(capacity_after_loss(Some(8), 2, 1), Some(7));
        // Held near the capacity: halfway down to the claims kept, if they are most of
        // it; nothing learned if they are few, or reach the capacity.
        assert_eq!(capacity_after_loss(Some(1000), 950, 600), Some(800));
        assert_eq!(capacity_after_loss(Some(1000), 950, 593), None, "under 5/8");
        assert_eq!(capacity_after_loss(Some(1000), 1000, 1000), None);
        assert_eq!(capacity_after_loss(Some(1000), 1100, 1050), None);
        // Kept one below the capacity: halfway rounds down, to the claims kept.
        assert_eq!(capacity_after_loss(Some(1000), 1000, 999), Some(999));
        assert_eq!(capacity_after_loss(Some(1), 1, 1), None);
        assert_eq!(
            capacity_after_loss(Some(usize::MAX), usize::MAX, usize::MAX - 2),
            Some(usize::MAX - 1)
        );
    }

    #[test]
    fn ghosts_are_bounded_by_four_times_the_cap_and_counted_in_bytes() {
        let table = GhostTable::default();
        assert_eq!(table.bytes(), 0);
        let slot: Slot = 3;
        let blocks: Vec<SequenceHash> = (0..1000).map(SequenceHash).collect();
        table.add((slot, 1), &blocks, 100); // at most 400 kept
        let entry = std::mem::size_of::<(SequenceHash, u64)>();
        assert!(table.bytes() >= 2 * 400 * entry, "{}", table.bytes());
        // The oldest 600 went; each of the newest 400 is taken once. One walk evicted
        // them all: none was evicted since another.
        assert_eq!(table.take((slot, 1), &blocks[..600]), None);
        assert_eq!(table.take((slot, 1), &blocks[600..601]), Some((1, 0)));
        assert_eq!(table.take((slot, 1), &blocks[600..]), Some((399, 0)));
        // Two walks: the first's blocks have seen the second's 200 evictions since.
        table.add((slot, 1), &blocks[..100], 100);
        table.add((slot, 1), &blocks[100..300], 100);
        assert_eq!(table.take((slot, 1), &blocks[50..51]), Some((1, 200)));
        assert_eq!(table.take((slot, 1), &blocks[100..300]), Some((200, 0)));
        assert_eq!(
            table.take((slot, 2), &blocks),
            None,
            "another registration's"
        );
    }
}
