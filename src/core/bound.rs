//! A decision under caps: its log entry, and the evictions it calls for on the recorder's
//! thread, including those a race with another recorder of the same worker left to it.

use super::evict::{Evictor, Fresh};
use super::Core;
use crate::capacity::{Among, LoggedDecision};
use crate::slot::Slot;
use crate::tree::claim::LAST_INSTANT;
use crate::tree::{Span, Writing};
use crate::SequenceHash;

/// A decision just written to the tree, to be logged and bounded.
#[derive(Debug, Clone, Copy)]
pub(super) struct Written {
    /// Its last block, where its walk starts.
    pub(super) leaf: SequenceHash,
    /// Its blocks.
    pub(super) blocks: usize,
    pub(super) expiry: u64,
    /// Another replica's decision, older than the worker's newest.
    pub(super) past: bool,
    /// The entries it added, and those a release made evictable again.
    pub(super) evictable: usize,
}

impl Core {
    /// Logs a decision `slot` just wrote (after every decision of an earlier or equal
    /// expiry) and enforces the caps. Two recorders of one worker race here: expiries are
    /// handed out in order, but a decision is logged once written, so a later one may be
    /// logged, and evicted, before an earlier one is logged (`docs/design.md`, Bounded
    /// memory, "Overtaken"):
    /// - if a later decision was taken to be evicted meanwhile, its walk may have taken
    ///   blocks this one's hang below: this one, older, is evicted too (with any other
    ///   logged after that one was taken, up to this one), as the order asks;
    /// - if a later decision was logged first, its recorder could neither evict this one
    ///   (not logged) nor make room past its own: this recorder evicts as that one would
    ///   have, every decision before the later one, its own included.
    pub(super) fn bound_decision(&self, slot: Slot, written: Written, guard: &Writing<'_>) {
        let Written {
            leaf,
            blocks,
            expiry,
            past,
            evictable,
        } = written;
        guard.uncount_dropped(); // before the caps read the counts
        let later = self.log(slot, (leaf, expiry, Span::Path), Among::Last, guard);
        // A decision from the past is evicted in its turn like any older one. Expiries
        // name a worker's decisions (unique per slot) except once saturated at the last
        // instant, where they stop telling the fresh one apart.
        if past || expiry == LAST_INSTANT {
            self.enforce_caps(slot, 2 * evictable, None, guard);
            return;
        }
        let cap = self.worker_cap(slot);
        let evicted = self.evictor(guard).evict_overtaken(slot, expiry, cap);
        self.evictions.add(evicted as u64);
        match later {
            Some(later) => {
                let overtaken = Fresh {
                    expiry: later,
                    blocks: 0,
                };
                self.enforce_caps(slot, 2 * evictable + blocks, Some(overtaken), guard);
            }
            None => {
                let fresh = Fresh { expiry, blocks };
                self.enforce_caps(slot, 2 * evictable, Some(fresh), guard);
            }
        }
    }

    /// Logs a walk of `slot` for eviction, in expiry order, `among` those of equal expiry.
    /// Returns the expiry of a later decision of the slot logged first (`Evictor::log`).
    pub(super) fn log(
        &self,
        slot: Slot,
        walk: (SequenceHash, u64, Span),
        among: Among,
        guard: &Writing<'_>,
    ) -> Option<u64> {
        let (leaf, expiry, span) = walk;
        let decision = LoggedDecision {
            slot,
            generation: self.workers.generation(slot),
            span,
            expiry,
            leaf,
        };
        self.evictor(guard).log(decision, among)
    }

    pub(super) fn evictor<'a>(&'a self, guard: &'a Writing<'_>) -> Evictor<'a> {
        Evictor {
            tree: &self.tree,
            workers: &self.workers,
            global: self.global_log.as_ref(),
            timers: self.timers_kept(),
            ghosts: &self.ghosts,
            guard,
        }
    }

    /// After `slot` gained entries: while over a cap, evicts up to `quota` entries (a
    /// writer passes twice the entries it added: enough to drain leftovers of races,
    /// while concurrent writers cannot strip a worker by all evicting the same excess).
    /// `fresh`: the caller's own decision, if it recorded one (see
    /// [`Evictor::evict_worker`]).
    pub(super) fn enforce_caps(
        &self,
        slot: Slot,
        quota: usize,
        fresh: Option<Fresh>,
        guard: &Writing<'_>,
    ) {
        if quota == 0 {
            return;
        }
        let evictor = self.evictor(guard);
        let mut evicted = 0;
        if let Some(cap) = self.worker_cap(slot) {
            evicted += evictor.evict_worker(slot, cap, quota, fresh);
        }
        if let Some(cap) = self.caps.total {
            evicted += evictor.evict_total(cap, quota.saturating_sub(evicted));
        }
        self.evictions.add(evicted as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{chain, engine, held, record};
    use super::*;
    use crate::LocalBlockHash;

    /// Worker 1's decision of `blocks`, its expiry taken now (its slot, expiry and
    /// hashes): `write` and `bound` then take its two steps, so that a test can put
    /// another recorder's whole decision between them.
    fn in_flight(
        engine: &Core,
        blocks: &[u64],
    ) -> (Slot, u64, (Vec<LocalBlockHash>, Vec<SequenceHash>)) {
        let _pinned = crossbeam_epoch::pin(); // the lookup's rule
        let slot = engine.workers.resolve(1u64).unwrap();
        let expiry = engine.expiry_for(slot, engine.now(), engine.ttl_nanos);
        (slot, expiry, chain(blocks))
    }

    fn write(
        engine: &Core,
        slot: Slot,
        expiry: u64,
        (local, seq): &(Vec<LocalBlockHash>, Vec<SequenceHash>),
    ) -> usize {
        let guard = engine.tree.writing();
        engine.write_decision(slot, (local, seq), expiry, &guard)
    }

    fn bound(engine: &Core, slot: Slot, expiry: u64, seq: &[SequenceHash], added: usize) {
        let guard = engine.tree.writing();
        let written = Written {
            leaf: *seq.last().unwrap(),
            blocks: seq.len(),
            expiry,
            past: false,
            evictable: added,
        };
        engine.bound_decision(slot, written, &guard);
    }

    /// A decision (1, 2, 4) takes its expiry, then another recorder's later decision
    /// (1, 2, 3) is written, logged and evicted down to block 1 (a capacity lowered)
    /// while the first is still being written: that walk took block 2, which the first
    /// decision's block 4 hangs below. Logged then, the first decision, older than the
    /// one evicted, is evicted too, block 4 with it (it stayed above a gap, named by no
    /// walk to come).
    #[test]
    fn a_decision_written_while_a_later_one_is_evicted_leaves_no_block_above_a_gap() {
        let engine = engine(100);
        let (slot, first, blocks) = in_flight(&engine, &[1, 2, 4]);
        record(&engine, &[1, 2, 3]);
        let added = write(&engine, slot, first, &blocks);
        assert_eq!(added, 1);
        engine.set_slot_capacity(slot, Some(2));
        bound(&engine, slot, first, &blocks.1, added);
        assert_eq!(held(&engine), (vec![1], true));
        assert_eq!(engine.workers.entries(slot), 1);
    }

    /// A decision (1, 2, 3, 20) takes its expiry, refreshes an older decision's blocks
    /// and adds block 20; another recorder's later decision (10, 11) is recorded whole
    /// meanwhile: 6 entries for a cap of 4, but that recorder finds the older decision's
    /// walk stopped by the refreshed blocks, the first decision not logged, and its own
    /// protected. Logged then, the first decision is evicted as that recorder would
    /// have: the worker is back at its cap, the later decision kept whole.
    #[test]
    fn a_decision_logged_after_a_later_one_evicts_as_its_recorder_would_have() {
        let engine = engine(4);
        record(&engine, &[1, 2, 3]);
        let (slot, first, blocks) = in_flight(&engine, &[1, 2, 3, 20]);
        let added = write(&engine, slot, first, &blocks);
        record(&engine, &[10, 11]);
        assert_eq!(engine.workers.entries(slot), 6);
        bound(&engine, slot, first, &blocks.1, added);
        assert_eq!(held(&engine), (vec![1, 2, 10, 11], true));
        assert_eq!(engine.workers.entries(slot), 4);
    }
}
