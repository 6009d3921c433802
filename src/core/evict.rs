//! Bounded memory: per-worker and global caps on stored entries, enforced by evicting the
//! least recently recorded decisions, deepest blocks first.
//!
//! The decisions come from the [`DecisionLog`]s (`capacity.rs`). Evicting a decision is the
//! same walk as expiring it, with the decision's own expiry as the threshold instead of
//! "now": the walk starts at the leaf, removes the slot's entries not refreshed since that
//! decision, and stops at the first block a later decision refreshed. Deeper blocks go
//! first, and since a later decision refreshes the whole path up to the root, a surviving
//! block never loses its prefix.
//!
//! A logged decision may be stale when it is popped: refreshed since (its walk then stops
//! at once), already evicted through the other log, or of a registration that was removed
//! and whose slot now serves another worker (told by the slot's generation, and skipped).

use std::sync::Arc;

use super::learn::GhostTable;
use crate::capacity::{Among, DecisionLog, LoggedDecision};
use crate::slot::Slot;
use crate::timers::{Timer, Timers};
use crate::tree::{Span, Tree, Walk, Writing};
use crate::workers::{LogKind, Workers};

/// A recorder's own decision, just logged: its expiry and its blocks (see
/// [`Evictor::evict_worker`]). A recorder overtaken by a later decision of its worker
/// passes that one's expiry and no blocks: everything before it may go.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fresh {
    pub(crate) expiry: u64,
    pub(crate) blocks: usize,
}

/// What an eviction touches: the tree, the registry (counts, per-slot logs, generations),
/// the index-wide log (under a global cap), and the timers (for the rest of a partly
/// evicted decision), if the index keeps timers.
pub(crate) struct Evictor<'a> {
    pub(crate) tree: &'a Tree,
    pub(crate) workers: &'a Arc<Workers>,
    pub(crate) global: Option<&'a DecisionLog>,
    pub(crate) timers: Option<&'a Timers>,
    /// Where a worker's cap leaves the blocks it evicted (`learn.rs`).
    pub(crate) ghosts: &'a GhostTable,
    pub(crate) guard: &'a Writing<'a>,
}

impl Evictor<'_> {
    /// Logs `decision` in its slot's log (under a per-worker cap) and the index-wide log
    /// (under a global cap), in expiry order, `among` those of equal expiry.
    /// Compacts a log that grew long. Returns the expiry of the decision logged right
    /// after it in its slot's log, if any (`Among::Last` only): a later decision of the
    /// worker, logged first by another thread.
    pub(crate) fn log(&self, decision: LoggedDecision, among: Among) -> Option<u64> {
        let put = |log: &DecisionLog| match among {
            Among::First => (log.insert(decision), None),
            Among::Last => log.push(decision),
        };
        let mut later = None;
        if let Some(log) = self.workers.log(decision.slot) {
            let len;
            (len, later) = put(log);
            self.compact_if_long(log, len, self.workers.entries(decision.slot));
        }
        if let Some(log) = self.global {
            let (len, _) = put(log);
            let total = self.workers.tracked_total().unwrap_or(0);
            self.compact_if_long(log, len, total);
        }
        later
    }

    /// Evicts `slot`'s oldest decisions until it holds at most `cap` entries, `quota`
    /// entries are evicted, or its log is empty. A writer passes twice the entries it
    /// added as its quota: concurrent writers then cannot strip a worker of its newest
    /// decisions by all evicting the same excess.
    ///
    /// A recorder passes its own decision as `fresh`: its blocks are evicted only as far
    /// as they alone exceed the cap, and decisions logged after it (other threads') are
    /// left to their own recorders. Without that, a recorder whose older decisions are
    /// being walked by another thread (the sweeper expiring them, or a second recorder of
    /// the worker) sees their entries still counted, finds those decisions already taken
    /// from the log, and would evict its own fresh blocks instead: a worker would hold
    /// less of the prompt it was just routed than its cap allows. When nothing else walks,
    /// every older decision has been walked by the time the fresh one is reached, so the
    /// worker's entries are the fresh decision's blocks and the bound is exact; except for
    /// a worker that stores exact entries too (KV events), which count toward the cap but
    /// are never evicted: for those the fresh decision gets no protection.
    /// Returns the entries evicted.
    pub(crate) fn evict_worker(
        &self,
        slot: Slot,
        cap: usize,
        quota: usize,
        fresh: Option<Fresh>,
    ) -> usize {
        let Some(log) = self.workers.log(slot) else {
            return 0;
        };
        let fresh = fresh
            .filter(|_| !self.workers.had_exact(slot))
            .map(|f| (f.expiry, f.blocks.saturating_sub(cap)));
        self.evict_from((log, LogKind::Slot), (quota, Some(cap)), fresh, || {
            self.workers.entries(slot).saturating_sub(cap)
        })
    }

    /// Evicts the globally least recently recorded decisions (from the index-wide log)
    /// until all entries together are at most `cap`, or `quota` entries are evicted (see
    /// [`evict_worker`](Self::evict_worker)), or the log is empty.
    pub(crate) fn evict_total(&self, cap: usize, quota: usize) -> usize {
        let Some(log) = self.global else {
            return 0;
        };
        self.evict_from((log, LogKind::Global), (quota, None), None, || {
            self.workers
                .tracked_total()
                .unwrap_or(0)
                .saturating_sub(cap)
        })
    }

    /// Evicts every decision of `slot` expiring at or before `bound`, whatever the count
    /// (a report's loss rule, `reports.rs`). Returns the entries evicted.
    pub(crate) fn evict_until(&self, slot: Slot, bound: u64) -> usize {
        let Some(log) = self.workers.log(slot) else {
            return 0;
        };
        self.evict_oldest_until((log, LogKind::Slot), bound, None)
    }

    /// Called by a recorder that just logged its decision (`slot`, `expiry`): if a later
    /// decision of the worker was taken from a log to be evicted meanwhile
    /// ([`Workers::evicted_past`]), that walk may have taken blocks that this decision's
    /// (written at the same time) hang below, leaving them above a gap. Evicting, in
    /// order, what that log holds up to this decision (the decisions taken before the
    /// later one but logged after it was taken: this one, and others still being written
    /// then) is what the order of eviction asked for, and takes those blocks. Returns the
    /// entries evicted.
    pub(crate) fn evict_overtaken(&self, slot: Slot, expiry: u64, cap: Option<usize>) -> usize {
        let mut evicted = 0;
        if let Some(log) = self.workers.log(slot) {
            if self.workers.evicted_past(slot, expiry, LogKind::Slot) {
                evicted += self.evict_oldest_until((log, LogKind::Slot), expiry, cap);
            }
        }
        if let Some(log) = self.global {
            if self.workers.evicted_past(slot, expiry, LogKind::Global) {
                evicted += self.evict_oldest_until((log, LogKind::Global), expiry, None);
            }
        }
        evicted
    }

    /// Evicts, oldest first, every decision of `log` expiring at or before `bound`.
    fn evict_oldest_until(
        &self,
        (log, kind): (&DecisionLog, LogKind),
        bound: u64,
        ghost_cap: Option<usize>,
    ) -> usize {
        let mut evicted = 0;
        let taken = |d: &LoggedDecision| self.workers.note_eviction(d, kind);
        while let Some(decision) = log.pop_oldest_if(|d| d.expiry <= bound, taken) {
            evicted += self.evict(decision, usize::MAX, ghost_cap);
        }
        evicted
    }

    /// The eviction loop. `fresh`: the caller's own decision's expiry and how many of its
    /// blocks it may lose; decisions logged after it are not taken. `ghost_cap`: a
    /// worker's cap, whose evicted blocks become ghosts.
    fn evict_from(
        &self,
        (log, kind): (&DecisionLog, LogKind),
        (quota, ghost_cap): (usize, Option<usize>),
        fresh: Option<(u64, usize)>,
        excess: impl Fn() -> usize,
    ) -> usize {
        let mut evicted = 0;
        // Later decisions are other threads' to enforce; the caller's own gives up at most
        // its spare blocks.
        let (fresh_expiry, mut spare) = fresh.unwrap_or((u64::MAX, usize::MAX));
        loop {
            // Read the count afresh: other threads evict concurrently.
            let excess = excess().min(quota.saturating_sub(evicted));
            if excess == 0 {
                return evicted;
            }
            let Some(decision) = log.pop_oldest_if(
                |d| d.expiry < fresh_expiry || (d.expiry == fresh_expiry && spare > 0),
                |d| self.workers.note_eviction(d, kind),
            ) else {
                return evicted; // nothing (else) this caller may evict
            };
            let own = fresh.is_some() && decision.expiry == fresh_expiry;
            let budget = if own { excess.min(spare) } else { excess };
            let n = self.evict(decision, budget, ghost_cap);
            if own {
                // `n` may pass the budget: a rest evicted at once (`evict`).
                spare = spare.saturating_sub(n);
            }
            evicted += n;
        }
    }

    /// Evicts up to `budget` entries of `decision` (popped from a log). What a budget cut
    /// off is logged again from the block the walk stopped at, in *every* log (the copies
    /// of the decision in the other log start at its old leaf, which is gone, so their
    /// walks would stop there), and gets a timer for the same reason. With `ghost_cap`,
    /// the blocks evicted become the slot's ghosts.
    fn evict(&self, decision: LoggedDecision, budget: usize, ghost_cap: Option<usize>) -> usize {
        let LoggedDecision { slot, leaf, .. } = decision;
        if self.workers.generation(slot) != decision.generation {
            return 0; // a removed registration's slot, serving another worker now
        }
        let alive = self.workers.is_alive(slot);
        let walk = Walk {
            leaf,
            slot,
            threshold: decision.expiry,
            slot_alive: alive,
            budget,
            span: decision.span,
            blocks: usize::MAX,
            lower_to: None,
        };
        // A block-span walk (a restored or replayed claim) takes its block alone: see
        // `log_parent_path`.
        let parent = match decision.span {
            Span::Block => self.tree.parent_of_block(leaf),
            Span::Path => None,
        };
        let mut evicted = Vec::new();
        let forget = |block| {
            self.workers.adjust_entries(slot, -1);
            if ghost_cap.is_some() {
                evicted.push(block);
            }
        };
        let walked = self.tree.walk(walk, forget, self.guard);
        if let Some(cap) = ghost_cap {
            self.ghosts.add((slot, decision.generation), &evicted, cap);
        }
        if let (Some(parent), 1..) = (parent, walked.removed) {
            self.log_parent_path(decision, parent);
        }
        if let (Some(rest), Span::Path) = (walked.resume, decision.span) {
            let rest_of_it = LoggedDecision {
                leaf: rest,
                ..decision
            };
            self.log_with_timer(rest_of_it, Among::First);
            // A later decision of the slot taken to be evicted while this walk ran (by
            // another thread) may have taken blocks the rest hangs below: the rest goes
            // now, in order, as for a recorder overtaken (`evict_overtaken`).
            let rest = self.evict_overtaken(slot, decision.expiry, ghost_cap);
            return walked.removed + rest;
        }
        walked.removed // uncounted by the walk, entry by entry
    }

    /// After a block-span eviction (a restored or replayed claim, which takes its block
    /// alone) removed `decision`'s block: if the slot's claim on the block's `parent` ends
    /// no later than the decision, the parent's path is logged at the parent's expiry,
    /// after the decisions of that expiry, with a timer. That claim may be a decision's
    /// whose leaf was this block (a record racing a restore, or a snapshot taken while
    /// callers ran, listing a child with a later claim than its parent): that decision's
    /// walks start at the block and now find it gone, and the parent and the blocks above
    /// it would be in no log and no timer's way, held past every TTL. Logged last among
    /// equal expiries, the path goes after the block-span claims of that expiry (restored
    /// siblings, evicted deepest first) and after the decisions already logged there.
    fn log_parent_path(&self, decision: LoggedDecision, parent: crate::SequenceHash) {
        let claim = self
            .tree
            .claim_at(parent, decision.slot, self.guard)
            .flatten();
        let Some(expiry) = claim
            .map(|c| c.expiry)
            .filter(|&e| e != 0 && e <= decision.expiry)
        else {
            return;
        };
        let path = LoggedDecision {
            leaf: parent,
            expiry,
            span: Span::Path,
            ..decision
        };
        self.log_with_timer(path, Among::Last);
    }

    /// Logs a walk that no log or timer holds yet (`among` the decisions of equal
    /// expiry) and gives it a timer at its expiry.
    fn log_with_timer(&self, walk: LoggedDecision, among: Among) {
        let _ = self.log(walk, among);
        if let Some(timers) = self.timers {
            let timer = Timer {
                leaf: walk.leaf,
                slot: walk.slot,
                generation: walk.generation,
            };
            timers.schedule(walk.expiry, timer);
        }
    }

    /// Drops logged decisions that need no eviction any more (superseded by a later
    /// decision on the same leaf, already evicted, or of a recycled slot) once the log
    /// has grown past twice the `entries` it could evict plus a margin. Amortised O(1) per
    /// decision: the survivors name distinct live (leaf, slot) claims.
    pub(crate) fn compact_if_long(&self, log: &DecisionLog, log_len: usize, entries: usize) {
        if log_len <= 2 * entries + 64 {
            return;
        }
        log.compact(|d| {
            self.workers.generation(d.slot) == d.generation
                // A leaf is a key whenever it exists (a block or a run's tail).
                && self
                    .tree
                    .claim_at(d.leaf, d.slot, self.guard)
                    .flatten()
                    .is_some_and(|c| c.expiry != 0 && c.expiry <= d.expiry)
        });
    }
}
