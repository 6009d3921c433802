//! Whether holder sets stay nested, so that finds may gallop ([`Tree::holders_nested`]): the
//! rule a restored entry is held to, the rule a KV event's chain is held to, and the
//! switch that turns galloping off for good. Decisions always keep holder sets nested;
//! these are the writes that may not.

use crossbeam_epoch::Guard;

use super::claim::Claim;
use super::export::LiveEntry;
use super::{Tree, Writing};
use crate::hash::SeqChain;
use crate::slot::Slot;
use crate::SequenceHash;

impl Tree {
    /// Finds stop galloping from now on (see [`Tree::holders_nested`]), and no more runs are made;
    /// the runs there are stay until something splits them up.
    pub(crate) fn not_nested(&self) {
        self.stop_runs();
        self.holders_nested
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// No more runs are made from now on (finds may go on galloping): for exact KV events,
    /// which look blocks up by key, so that each would otherwise split every run made
    /// since the last one up (`split_all`). The runs there are stay until something splits
    /// them up.
    pub(crate) fn stop_runs(&self) {
        self.makes_runs
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// Before `slot` stores `claims` on a chain after `parent` (a KV event's blocks):
    /// stops runs if any claim is exact, and turns galloping off unless they [keep holder
    /// sets nested](Self::chain_keeps_nesting).
    pub(crate) fn note_chain_nesting(
        &self,
        slot: Slot,
        parent: Option<SequenceHash>,
        claims: impl Iterator<Item = Claim> + Clone,
        guard: &Writing<'_>,
    ) {
        if claims.clone().any(|c| c.exact) {
            self.stop_runs();
        }
        let nested = self
            .holders_nested
            .load(std::sync::atomic::Ordering::Relaxed);
        if nested && !self.chain_keeps_nesting(slot, parent, claims, guard) {
            self.not_nested();
        }
    }

    /// Whether storing `claims` for `slot` on a chain after `parent` (its blocks placed by
    /// the chain, so each one deeper than the last) keeps holder sets nested, so that finds
    /// may go on galloping. Either every claim is exact and so is the slot's claim on the
    /// parent (or the chain starts at the root): an engine's `Stored` event, whose parent
    /// its earlier events stored; an exact claim ends only by a `Removed` or `Cleared`
    /// event, and those keep the nesting only where no exact child of the block is left
    /// ([`ExactChains`](crate::workers::ExactChains)). Or every claim is approximate and
    /// none outlives the one before it (nor the slot's claim on the parent): a replayed
    /// dump of an index that only recorded decisions (one block per event, parents first).
    fn chain_keeps_nesting(
        &self,
        slot: Slot,
        parent: Option<SequenceHash>,
        mut claims: impl Iterator<Item = Claim> + Clone,
        guard: &Writing<'_>,
    ) -> bool {
        let parent_claim = match parent {
            None => None,
            Some(parent) => match self.claim_of(parent, slot, guard) {
                None => return false,
                claim => claim,
            },
        };
        if claims.clone().all(|c| c.exact) {
            return parent_claim.map_or(true, |c| c.exact);
        }
        let mut above = match parent_claim {
            None => u64::MAX,
            Some(c) if !c.exact => c.expiry,
            Some(_) => return false,
        };
        claims.all(|claim| {
            let nested = !claim.exact && claim.expiry <= above;
            above = claim.expiry;
            nested
        })
    }

    /// Before `slot`'s `claim` is restored on `row`'s block: turns galloping off unless it
    /// [keeps holder sets nested](Self::restore_keeps_nesting).
    pub(super) fn note_restore_nesting(
        &self,
        slot: Slot,
        row: &LiveEntry,
        claim: Claim,
        guard: &Guard,
    ) {
        let nested = self
            .holders_nested
            .load(std::sync::atomic::Ordering::Relaxed);
        if nested && !self.restore_keeps_nesting(slot, row, claim, guard) {
            self.not_nested();
        }
    }

    /// Whether `slot`'s holder sets stay nested once `claim` is restored on `row`'s block,
    /// restores coming parents first (by depth): the claim is approximate; the block is
    /// where the chain of local hashes puts it (block 0's sequence hash is its local hash,
    /// a deeper one's is its parent's chained with its own), at the depth the row names
    /// (its parent's plus one); and the slot's claim on the parent lasts at least as long
    /// as its claim on the block will, so the parent cannot expire, or be evicted, while
    /// the block is still held. A snapshot of an index that only recorded decisions
    /// passes, so its restore keeps finds galloping.
    fn restore_keeps_nesting(
        &self,
        slot: Slot,
        row: &LiveEntry,
        claim: Claim,
        guard: &Guard,
    ) -> bool {
        if claim.exact {
            return false;
        }
        let existing = self.depth_and_claim(row.seq, slot, guard);
        let expiry = match existing {
            Some((depth, _)) if depth != row.depth => return false,
            Some((_, Some(c))) if c.exact => return false,
            Some((_, Some(c))) => c.expiry.max(claim.expiry),
            _ => claim.expiry,
        };
        if row.depth == 0 {
            return row.seq.0 == row.local.0;
        }
        if SeqChain::after(Some(row.parent)).next(row.local) != row.seq {
            return false;
        }
        let Some((parent_depth, parent_claim)) = self.depth_and_claim(row.parent, slot, guard)
        else {
            return false;
        };
        parent_depth.checked_add(1) == Some(row.depth)
            && parent_claim.is_some_and(|c| c.exact || c.expiry >= expiry)
    }

    /// The depth of block `seq`'s node and `slot`'s claim on it, if the node exists.
    fn depth_and_claim(
        &self,
        seq: SequenceHash,
        slot: Slot,
        guard: &Guard,
    ) -> Option<(u32, Option<Claim>)> {
        let depth = self.nodes.get(&seq.0)?.depth();
        Some((depth, self.claim_at(seq, slot, guard)?))
    }
}
