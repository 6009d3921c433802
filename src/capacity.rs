//! Bounded memory: per-worker and global caps on stored entries, enforced by evicting a
//! worker's least recently recorded decisions, deepest blocks first.
//!
//! Each worker slot keeps a [`DecisionLog`]: `(expiry, leaf)` per recorded decision, oldest
//! first (only when a cap is configured). Evicting a decision is the same walk as expiring
//! it, with the decision's own expiry as the threshold instead of "now": the walk starts at
//! the leaf, removes the slot's entries not refreshed since that decision, and stops at the
//! first block a later decision refreshed. Deeper blocks go first, and since a later decision
//! refreshes the whole path up to the root, a surviving block never loses its prefix.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use crate::sync::Mutex;
use crate::SequenceHash;

/// A worker slot's recorded decisions, oldest first.
///
/// Several threads may evict from one log at once: each pops its own decision (the pop is
/// atomic), so no thread ever waits for another's eviction. Two evictors seeing the same
/// excess may both evict it, so under contention a worker can end slightly under its cap.
#[derive(Debug, Default)]
pub(crate) struct DecisionLog {
    decisions: Mutex<VecDeque<Decision>>,
}

/// One logged decision: its order among all decisions (for the global cap), its expiry
/// (the walk's threshold) and its leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Decision {
    stamp: u64,
    expiry: u64,
    leaf: SequenceHash,
}

impl DecisionLog {
    /// Appends a decision (`stamp` orders it among all workers' decisions). Returns the
    /// log's length afterwards.
    pub(crate) fn push(&self, stamp: u64, expiry: u64, leaf: SequenceHash) -> usize {
        let mut d = self.decisions.lock();
        d.push_back(Decision {
            stamp,
            expiry,
            leaf,
        });
        d.len()
    }

    /// The stamp of the oldest decision, if any.
    pub(crate) fn oldest_stamp(&self) -> Option<u64> {
        self.decisions.lock().front().map(|d| d.stamp)
    }

    /// Takes the oldest decision: `(expiry, leaf)`. If it is only partly evicted, put it
    /// back with the returned closure's help.
    fn pop_oldest(&self) -> Option<Decision> {
        self.decisions.lock().pop_front()
    }

    /// Puts back a partly evicted decision as the oldest.
    fn push_front(&self, decision: Decision) {
        self.decisions.lock().push_front(decision);
    }

    /// Drops decisions whose TTL has passed at `now` (the wheel's walks handle their
    /// entries). The log is ordered by expiry up to races between concurrent recorders,
    /// so this stops at the first live one.
    pub(crate) fn prune_expired(&self, now: u64) {
        let mut d = self.decisions.lock();
        while d.front().is_some_and(|x| x.expiry <= now) {
            d.pop_front();
        }
    }

    /// Keeps only the decisions `needed` says are still the latest for their leaf.
    pub(crate) fn compact(&self, mut needed: impl FnMut(u64, SequenceHash) -> bool) {
        let snapshot: Vec<_> = self.decisions.lock().drain(..).collect();
        let kept: Vec<_> = snapshot
            .into_iter()
            .filter(|x| needed(x.expiry, x.leaf))
            .collect();
        let mut d = self.decisions.lock();
        // Decisions pushed while we filtered are newer: they go after the kept ones.
        let newer: Vec<_> = d.drain(..).collect();
        d.extend(kept);
        d.extend(newer);
    }

    /// Forgets everything (the slot is being recycled).
    pub(crate) fn clear(&self) {
        self.decisions.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_is_fifo_prunes_and_compacts() {
        let log = DecisionLog::default();
        for i in 1..=5 {
            log.push(i, i * 10, SequenceHash(i));
        }
        log.prune_expired(20);
        assert_eq!(log.oldest_stamp(), Some(3));
        assert_eq!(log.pop_oldest().map(|d| d.leaf), Some(SequenceHash(3)));
        log.compact(|_, leaf| leaf.0 != 4);
        assert_eq!(log.pop_oldest().map(|d| d.expiry), Some(50));
        assert_eq!(log.oldest_stamp(), None);
    }
}

/// The configured caps.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Caps {
    pub(crate) per_worker: Option<usize>,
    pub(crate) total: Option<usize>,
}

impl Caps {
    /// Whether any cap is set (and so decision logs are kept).
    pub(crate) fn any(&self) -> bool {
        self.per_worker.is_some() || self.total.is_some()
    }
}

/// Order and turn-taking for the global cap.
#[derive(Debug, Default)]
pub(crate) struct GlobalEviction {
    cursor: std::sync::atomic::AtomicU32,
    stamps: std::sync::atomic::AtomicU64,
}

impl GlobalEviction {
    /// The next decision's stamp (one shared atomic: only used under a global cap).
    pub(crate) fn stamp(&self) -> u64 {
        self.stamps.fetch_add(1, Ordering::Relaxed)
    }
}

use crate::expiry::{Expiry, Timer};
use crate::tree::Tree;
use crate::workers::{Slot, Workers};
use crossbeam_epoch::Guard;
use std::sync::Arc;

/// Evicts `slot`'s oldest decisions until it holds at most `cap` entries, or `quota`
/// entries are evicted. A recorder passes the number of entries it added as its quota:
/// concurrent recorders then evict no more together than they added, so none of them
/// can strip a worker of its newest decisions by evicting the same excess twice.
/// Returns the entries evicted.
pub(crate) fn evict_worker(
    tree: &Tree,
    workers: &Arc<Workers>,
    timers: Option<&Expiry>,
    slot: Slot,
    cap: usize,
    quota: usize,
    guard: &Guard,
) -> usize {
    let mut evicted = 0;
    while evicted < quota {
        // Read the count once: another thread may evict this worker concurrently.
        let excess = workers
            .entries(slot)
            .saturating_sub(cap)
            .min(quota - evicted);
        if excess == 0 {
            break;
        }
        let Some(n) = evict_oldest(tree, workers, timers, slot, excess, guard) else {
            break; // nothing left to evict (the rest is exact, or counted but in flight)
        };
        evicted += n;
    }
    evicted
}

/// How many workers' oldest decisions are compared to pick the next victim under the
/// global cap: with at most this many workers the order is exactly least recently
/// recorded first; beyond, it is approximately so (the oldest of a rotating sample).
const SAMPLE: u32 = 8;

/// Evicts the globally least recently recorded decisions (approximately: see [`SAMPLE`])
/// until all entries together are at most `cap`, or `quota` entries are evicted (see
/// [`evict_worker`]). Gives up when a sample finds nothing to evict.
pub(crate) fn evict_total(
    tree: &Tree,
    workers: &Arc<Workers>,
    timers: Option<&Expiry>,
    global: &GlobalEviction,
    cap: usize,
    quota: usize,
    guard: &Guard,
) -> usize {
    let mut evicted = 0;
    loop {
        let excess = workers.tracked_total().unwrap_or(0).saturating_sub(cap);
        let excess = excess.min(quota.saturating_sub(evicted));
        if excess == 0 {
            return evicted;
        }
        let slots = workers.slot_count().max(1);
        let start = global.cursor.fetch_add(1, Ordering::Relaxed);
        let victim = (0..SAMPLE.min(slots))
            .map(|i| start.wrapping_add(i) % slots)
            .filter_map(|slot| Some((workers.log(slot)?.oldest_stamp()?, slot)))
            .min();
        let Some((_, slot)) = victim else {
            return evicted; // nothing to evict in this sample
        };
        evicted += evict_oldest(tree, workers, timers, slot, excess, guard).unwrap_or(0);
    }
}

/// Evicts up to `budget` entries of `slot`'s oldest decision (putting back what is left
/// of it, with a timer for what is left: the decision's own timer starts at its old leaf,
/// which is gone, so its walk would stop there). `None` if the log is empty.
fn evict_oldest(
    tree: &Tree,
    workers: &Arc<Workers>,
    timers: Option<&Expiry>,
    slot: Slot,
    budget: usize,
    guard: &Guard,
) -> Option<usize> {
    let log = workers.log(slot)?;
    let decision = log.pop_oldest()?;
    let alive = workers.is_alive(slot);
    let walked = tree.walk(decision.leaf, slot, decision.expiry, alive, budget, guard);
    if let Some(rest) = walked.resume {
        log.push_front(Decision {
            leaf: rest,
            ..decision
        });
        if let Some(timers) = timers {
            timers.schedule(decision.expiry, Timer { leaf: rest, slot });
        }
    }
    workers.adjust_entries(slot, -(walked.removed as i64));
    Some(walked.removed)
}

/// Drops logged decisions that a later decision on the same leaf superseded (their
/// blocks were all refreshed since), when the log has grown past twice the slot's
/// entries. Amortised O(1) per decision: the survivors name distinct live leaves.
pub(crate) fn compact_if_long(
    tree: &Tree,
    workers: &Workers,
    slot: Slot,
    log_len: usize,
    guard: &Guard,
) {
    if log_len <= 2 * workers.entries(slot) + 64 {
        return;
    }
    let Some(log) = workers.log(slot) else {
        return;
    };
    log.compact(|expiry, leaf| {
        tree.claim_of(leaf, slot, guard).is_some_and(|c| {
            crate::tree::claim::approx(c) <= expiry && crate::tree::claim::approx(c) != 0
        })
    });
}
