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

use crossbeam_epoch::Guard;

use crate::capacity::{Decision, DecisionLog};
use crate::expiry::{Expiry, Timer};
use crate::slot::Slot;
use crate::tree::{Span, Tree};
use crate::workers::Workers;

/// What an eviction touches: the tree, the registry (counts, per-slot logs, generations),
/// the index-wide log (under a global cap), and the timers (for the rest of a partly
/// evicted decision), if the index keeps timers.
pub(crate) struct Evictor<'a> {
    pub(crate) tree: &'a Tree,
    pub(crate) workers: &'a Arc<Workers>,
    pub(crate) global: Option<&'a DecisionLog>,
    pub(crate) timers: Option<&'a Expiry>,
    pub(crate) guard: &'a Guard,
}

impl Evictor<'_> {
    /// Logs `decision` in its slot's log (under a per-worker cap) and the index-wide log
    /// (under a global cap): appended if just recorded, else (`sorted`) in expiry order.
    /// Compacts a log that grew long.
    pub(crate) fn log(&self, decision: Decision, sorted: bool) {
        let put = |log: &DecisionLog| {
            if sorted {
                log.insert(decision)
            } else {
                log.push(decision)
            }
        };
        if let Some(log) = self.workers.log(decision.slot) {
            let len = put(log);
            self.compact_if_long(log, len, self.workers.entries(decision.slot));
        }
        if let Some(log) = self.global {
            let len = put(log);
            let total = self.workers.tracked_total().unwrap_or(0);
            self.compact_if_long(log, len, total);
        }
    }

    /// Evicts `slot`'s oldest decisions until it holds at most `cap` entries, `quota`
    /// entries are evicted, or its log is empty. A writer passes twice the entries it
    /// added as its quota: concurrent writers then cannot strip a worker of its newest
    /// decisions by all evicting the same excess. Returns the entries evicted.
    pub(crate) fn evict_worker(&self, slot: Slot, cap: usize, quota: usize) -> usize {
        let Some(log) = self.workers.log(slot) else {
            return 0;
        };
        self.evict_from(log, quota, || {
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
        self.evict_from(log, quota, || {
            self.workers
                .tracked_total()
                .unwrap_or(0)
                .saturating_sub(cap)
        })
    }

    fn evict_from(&self, log: &DecisionLog, quota: usize, excess: impl Fn() -> usize) -> usize {
        let mut evicted = 0;
        loop {
            // Read the count afresh: other threads evict concurrently.
            let excess = excess().min(quota - evicted);
            if excess == 0 {
                return evicted;
            }
            let Some(n) = self.evict_oldest(log, excess) else {
                return evicted; // nothing approximate left to evict
            };
            evicted += n;
        }
    }

    /// Evicts up to `budget` entries of the oldest decision in `log`. What a budget cut off
    /// is logged again from the block the walk stopped at, in *every* log (the copies of
    /// the decision in the other log start at its old leaf, which is gone, so their walks
    /// would stop there), and gets a timer for the same reason. `None` if the log is empty.
    fn evict_oldest(&self, log: &DecisionLog, budget: usize) -> Option<usize> {
        let decision = log.pop_oldest()?;
        let Decision { slot, leaf, .. } = decision;
        if self.workers.generation(slot) != decision.generation {
            return Some(0); // a removed registration's slot, serving another worker now
        }
        let alive = self.workers.is_alive(slot);
        let walked = self.tree.walk(
            leaf,
            slot,
            decision.expiry,
            alive,
            budget,
            decision.span,
            self.guard,
        );
        if let (Some(rest), Span::Path) = (walked.resume, decision.span) {
            self.log(
                Decision {
                    leaf: rest,
                    ..decision
                },
                true,
            );
            if let Some(timers) = self.timers {
                timers.schedule(decision.expiry, Timer { leaf: rest, slot });
            }
        }
        self.workers.adjust_entries(slot, -(walked.removed as i64));
        Some(walked.removed)
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
                && self
                    .tree
                    .claim_of(d.leaf, d.slot, self.guard)
                    .is_some_and(|c| c.expiry != 0 && c.expiry <= d.expiry)
        });
    }
}
