//! Running requests' blocks, pinned until they finish (`ApproxKvIndexer::begin_request`).
//!
//! A pinned block's approximate claim is raised to [`PIN`], the last expiry there is: it
//! never expires (no TTL reaches it), and no eviction walk removes it (a walk ends claims
//! at or before its decision's expiry, which is earlier), so caps and capacities evict
//! around it. A pinned decision pushes no timer and is not logged for eviction.
//!
//! Pins are counted per (slot, block): requests sharing a prefix on one worker each pin
//! it. Every request pins a whole path from the root, so the pinned blocks of a worker are
//! closed under prefixes and counts never grow with depth along a path: a request's
//! blocks whose count falls to zero when it is released are the deepest ones of its path.
//! A slot keeps its running requests' paths as a trie of stretches with their counts
//! (`pin_paths.rs`), so a pin or a release costs a pass over the request's hashes.
//! A walk from the request's leaf lowers exactly that many claims in place, from `PIN` to a
//! fresh expiry, and the whole path is recorded again as a decision taken at the release
//! (its expiry taken after the lowering: [`Core::release_pins`]), with a timer and a log
//! entry: released blocks then expire one TTL after the release, and caps evict them in
//! release order, deepest first. Lowering, not removing, keeps the prefix of the worker's
//! deeper blocks off the path (claimed earlier, so lower).
//!
//! A slot's pin operations (pin, release) run under its entry's lock in the table, so a
//! release's walk never removes a block that another request pinned meanwhile. Entries are
//! tagged with the slot's generation: a handle of a removed worker changes nothing.

use std::sync::atomic::Ordering::Relaxed;

use crossbeam_epoch as epoch;
use dashmap::DashMap;

use super::pin_paths::PinPaths;
use super::Core;
use crate::slot::{Slot, SlotOwners};
use crate::tree::{HashedQuery, Span, Walk, Writing};
use crate::workers::{Workers, WriteKind};
use crate::{LocalBlockHash, SequenceHash, WorkerKey};

pub(crate) use crate::tree::claim::PIN;

/// Blocks a release's walk lowers at a time in a tree without runs (see `Core::unpin`).
const UNPIN_CHUNK: usize = 16;

/// Pin counts of every slot with running requests.
#[derive(Default)]
pub(crate) struct PinTable {
    slots: DashMap<Slot, SlotPins>,
}

/// One slot's pins: the registration (generation) they belong to, and its running
/// requests' paths, which count the requests pinning each block.
#[derive(Default)]
struct SlotPins {
    generation: u16,
    paths: PinPaths,
}

/// The registry as one worker's find reads it: every slot but `slot` is dead.
struct OnlySlot<'w> {
    workers: &'w Workers,
    slot: Slot,
}

impl SlotOwners for OnlySlot<'_> {
    #[inline]
    fn alive<W: WorkerKey>(&self, slot: Slot) -> Option<W> {
        (slot == self.slot)
            .then(|| self.workers.alive(slot))
            .flatten()
    }

    #[inline]
    fn alive_with_entries<W: WorkerKey>(&self, slot: Slot) -> Option<(W, usize)> {
        (slot == self.slot)
            .then(|| self.workers.alive_with_entries(slot))
            .flatten()
    }
}

/// What a request's begin found and did: the handle keeps it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Begun {
    pub(crate) slot: Slot,
    pub(crate) generation: u16,
    /// The worker's found depth for the prompt just before the decision.
    pub(crate) predicted: usize,
    /// The worker's approximate claim on its deepest predicted block just before the
    /// decision (0: none known): the last time it was used, for the loss rule of
    /// `reports.rs`.
    pub(crate) prior: u64,
    /// When the request began (this index's clock).
    pub(crate) at: u64,
}

impl Core {
    /// Begins a request of `worker` for the prompt (`local`, `seq`): finds the worker's
    /// depth, reads its claim there, and pins the prompt's blocks. `None`: the registry is
    /// full (2^32 live registrations), nothing stored.
    pub(crate) fn begin_request<W: WorkerKey>(
        &self,
        worker: W,
        (local, seq): (&[LocalBlockHash], &[SequenceHash]),
    ) -> Option<Begun> {
        // Pinned from the lookup to the last use of the slot: a removal's recycling of it waits
        // for this pin, so the slot stays this worker's registration (`docs/design.md`, "Epoch
        // protocol").
        let _pinned = epoch::pin();
        let at = self.now(); // before anything changes (see `record_dated`)
        let slot = self.workers.resolve(worker)?;
        let predicted = self.depth_in(slot, HashedQuery::Seq(seq));
        let prior = self.claim_before(slot, &seq[..predicted]);
        let generation = self.workers.generation(slot);
        if !seq.is_empty() {
            self.records.add(1);
        }
        self.pin(slot, generation, (local, seq), 0);
        Some(Begun {
            slot,
            generation,
            predicted,
            prior,
            at,
        })
    }

    /// How many leading blocks of `query` `worker` holds now (0 if it is not registered).
    pub(crate) fn depth_of<W: WorkerKey>(&self, worker: W, query: HashedQuery<'_>) -> usize {
        let _pinned = epoch::pin(); // from the lookup on (see `begin_request`)
        self.workers
            .lookup(worker)
            .map_or(0, |slot| self.depth_in(slot, query))
    }

    /// How many leading blocks of `query` `slot` holds now: a find that follows that slot
    /// alone (every other slot reads as dead to it), so that it ends where the slot drops
    /// out, not where the last of the prompt's holders does.
    fn depth_in(&self, slot: Slot, query: HashedQuery<'_>) -> usize {
        let mut depth = 0;
        let guard = epoch::pin();
        let now = self.read_time(self.now());
        // The one slot the find follows is the only one it can report.
        let mut sink = |_: crate::WorkerWithDpRank, score: u32| depth = score as usize;
        let only = OnlySlot {
            workers: &self.workers,
            slot,
        };
        self.tree.find_into(query, now, &only, &guard, &mut sink);
        depth
    }

    /// `slot`'s approximate claim on the last block of `held` (blocks it holds), as
    /// [`Tree::claim_on_last`](crate::tree::Tree::claim_on_last) reads it; 0 if none is
    /// found.
    fn claim_before(&self, slot: Slot, held: &[SequenceHash]) -> u64 {
        let guard = epoch::pin();
        let claim = self.tree.claim_on_last(slot, held, &guard);
        claim.map_or(0, |c| c.expiry)
    }

    /// Pins `slot`'s blocks of the path (`local`, `seq`), counting a pin on those from
    /// `from` on (the ones before are the request's already). Changes nothing if the slot
    /// is not `generation`'s registration any more. Returns whether it pinned them.
    pub(crate) fn pin(
        &self,
        slot: Slot,
        generation: u16,
        (local, seq): (&[LocalBlockHash], &[SequenceHash]),
        from: usize,
    ) -> bool {
        if from >= seq.len() {
            return true;
        }
        let mut pins = self.pins.slots.entry(slot).or_default();
        let guard = self.tree.writing();
        if !self.workers.begin_write(slot, WriteKind::Approx) {
            return false; // removed: its handles change nothing
        }
        if self.workers.generation(slot) != generation {
            self.workers.end_write(slot);
            return false; // removed, and the slot serves another registration now
        }
        if pins.generation != generation {
            // Left by a removed registration's handles: none of it stands.
            pins.paths.clear();
            pins.generation = generation;
        }
        pins.paths.pin(seq, from);
        let holds_none = self.workers.entries(slot) == 0;
        let added = self
            .tree
            .record(slot, (local, seq), PIN, holds_none, &guard);
        self.workers.adjust_entries(slot, added as i64);
        if self.capped() {
            guard.uncount_dropped();
            // Pinned entries count toward the caps; the evictions make room around them.
            self.enforce_caps(slot, 2 * added, None, &guard);
        }
        self.workers.end_write(slot);
        true
    }

    /// Releases a request's pins on the path (`local`, `seq`) of `slot`: the claims of
    /// blocks no other running request pins are lowered to a fresh expiry, and the whole
    /// path is recorded again as a decision taken now with it. Changes nothing if the slot
    /// is not `generation`'s registration any more.
    pub(crate) fn release(
        &self,
        slot: Slot,
        generation: u16,
        (local, seq): (&[LocalBlockHash], &[SequenceHash]),
    ) {
        if seq.is_empty() {
            return;
        }
        let now = self.now(); // before anything changes (see `record_dated`)
        let Some(mut pins) = self.pins.slots.get_mut(&slot) else {
            return;
        };
        if pins.generation != generation {
            return;
        }
        let released = pins.paths.release(seq);
        if released == 0 {
            return;
        }
        let guard = self.tree.writing();
        if !self.workers.begin_write(slot, WriteKind::Approx) {
            return;
        }
        if self.workers.generation(slot) == generation {
            let lowered = self.expiry_for(slot, now, self.ttl_nanos);
            self.release_pins(slot, (local, seq), (released, lowered), now, &guard);
        }
        self.workers.end_write(slot);
    }

    /// The release's steps once its pins are counted off: the deepest `released` blocks'
    /// claims lowered to `lowered` (`unpin`), then the path recorded as a decision.
    ///
    /// That decision's expiry is taken after the lowering. A record of the slot racing
    /// the release may take a later expiry than `lowered`, refresh a released block
    /// while it is still pinned (the refresh changes nothing: `PIN` is later) and a
    /// block below it: lowered to `lowered`, the released block would end before that
    /// child, above a gap once a walk took it. With caps, an expiry taken after the
    /// lowering is later than every one the slot was given before (`Workers::unique_expiry`),
    /// that record's included, and the decision raises the path to it (`lowered` itself
    /// if it is still the slot's latest: no record took one since). Without caps
    /// (expiries are the clock plus the TTL, for every record), such a child outlives its
    /// parent by no more than the time between the two calls' clock readings.
    fn release_pins(
        &self,
        slot: Slot,
        (local, seq): (&[LocalBlockHash], &[SequenceHash]),
        (released, lowered): (usize, u64),
        now: u64,
        guard: &Writing<'_>,
    ) {
        self.unpin(slot, seq, (released, lowered), guard);
        let expiry = if self.workers.is_last_expiry(slot, lowered) {
            lowered // no decision of the slot took an expiry since
        } else {
            self.expiry_for(slot, now, self.ttl_nanos)
        };
        // The released entries are evictable again: the caps may make room for them now,
        // as for entries just added.
        self.store_decision(slot, (local, seq), (expiry, false), released, guard);
    }

    /// Takes `slot`'s pins off the deepest `released` blocks of the path `seq`, lowering
    /// their claims to `expiry` in place (no entry leaves: a worker's deeper blocks off
    /// the path, claimed earlier, keep their prefix): walks from the leaf, settling
    /// exactly those blocks. A block a `Removed` event took out meanwhile (or one held
    /// exactly with no claim to lower) stops a walk; the next starts above it.
    fn unpin(
        &self,
        slot: Slot,
        seq: &[SequenceHash],
        (released, expiry): (usize, u64),
        guard: &Writing<'_>,
    ) {
        let lowest = seq.len() - released;
        // seq[lowest..top] are still pinned.
        let mut top = seq.len();
        // Once runs are off (exact KV events), every block is a node of its own, and the
        // walk a probe a block that loads only its next parent's bucket ahead: it goes a
        // chunk at a time then, the next chunk's buckets loading while it works (in a tree
        // of runs, a chunk would split them, and a walk is a probe a run).
        let chunk = if self.tree.makes_runs.load(Relaxed) {
            usize::MAX
        } else {
            self.tree.prefetch_keys(
                &seq[top.saturating_sub(UNPIN_CHUNK).max(lowest)..top],
                guard,
            );
            UNPIN_CHUNK
        };
        while top > lowest {
            let blocks = (top - lowest).min(chunk);
            if blocks == chunk {
                let next = top - blocks;
                let keys = &seq[next.saturating_sub(chunk).max(lowest)..next];
                self.tree.prefetch_keys(keys, guard);
            }
            let walk = Walk {
                leaf: seq[top - 1],
                slot,
                threshold: PIN,
                slot_alive: true,
                budget: usize::MAX,
                span: Span::Path,
                blocks,
                lower_to: Some(expiry),
            };
            let walked = self.tree.walk(walk, |_| {}, guard);
            // The walk settled seq[top - settled..top]; unless it settled all it was let,
            // it stopped at the block below, which it skips.
            top -= walked.settled;
            if walked.settled < blocks {
                top = top.saturating_sub(1).max(lowest);
            }
        }
    }
}

#[cfg(test)]
mod tests;
