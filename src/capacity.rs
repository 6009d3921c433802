//! Bounded memory's bookkeeping: the configured caps, and the logs of decisions that
//! eviction (`core/evict.rs`) takes the least recently recorded ones from.
//!
//! A [`DecisionLog`] lists decisions oldest first: one per worker slot for the per-worker
//! cap, and one for the whole index for the global cap (so finding the globally oldest
//! decision is a pop, whatever the number of workers). Plain data: the logs know nothing of
//! the tree or the registry (which keeps the per-slot logs); the evictor walks for them.

use std::collections::VecDeque;

use crate::slot::Slot;
use crate::sync::Mutex;
use crate::tree::Span;
use crate::SequenceHash;

/// One logged decision: whose (slot and the slot's generation then, truncated), the
/// walk's threshold (the decision's expiry), where the walk starts (its leaf) and how far
/// it may go (a decision's path, or one restored or replayed claim's block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LoggedDecision {
    pub(crate) slot: Slot,
    pub(crate) generation: u16,
    pub(crate) span: Span,
    pub(crate) expiry: u64,
    pub(crate) leaf: SequenceHash,
}

/// Where a logged decision goes among those of its expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Among {
    /// Before them: restored and replayed claims and re-anchored walks, which arrive
    /// parents first, so that the deeper of one decision's goes first.
    First,
    /// After them: a decision (ours, or another replica's from the past), and the path
    /// above a removal's gap, after the decision it was cut from.
    Last,
}

/// Decisions in expiry order, oldest first. A worker's decisions have distinct expiries
/// (with caps, each is made later than the worker's previous one), so the index-wide log
/// also keeps every worker's decisions in their order.
///
/// Several threads may evict from one log at once: each pops its own decision (the pop is
/// atomic), so no thread ever waits for another's eviction.
#[derive(Debug, Default)]
pub(crate) struct DecisionLog {
    decisions: Mutex<VecDeque<LoggedDecision>>,
}

impl DecisionLog {
    /// Adds a decision: after every decision with an earlier or equal expiry (a decision
    /// just recorded usually goes at the end; concurrent recorders and other workers'
    /// same-instant decisions can put it a few places before, and another replica's,
    /// taken in the past, goes where its expiry falls, after the decisions of equal
    /// expiry, applied before it). Returns the log's length afterwards, and the expiry of
    /// the decision now right after it, if any: a later decision logged first.
    pub(crate) fn push(&self, decision: LoggedDecision) -> (usize, Option<u64>) {
        let mut d = self.decisions.lock();
        let at = d.partition_point(|x| x.expiry <= decision.expiry);
        d.insert(at, decision);
        (d.len(), d.get(at + 1).map(|x| x.expiry))
    }

    /// Inserts a decision in expiry order (restores, replayed events and re-anchored walks
    /// come with expiries of the past), *before* those with the same expiry: restores and
    /// replays put entries back parents first, so among the claims of one decision the
    /// deeper is evicted first. Returns the log's length afterwards.
    pub(crate) fn insert(&self, decision: LoggedDecision) -> usize {
        let mut d = self.decisions.lock();
        let at = d.partition_point(|x| x.expiry < decision.expiry);
        d.insert(at, decision);
        d.len()
    }

    /// The decisions, oldest first.
    pub(crate) fn decisions(&self) -> Vec<LoggedDecision> {
        self.decisions.lock().iter().copied().collect()
    }

    /// Takes the oldest decision.
    #[cfg(test)]
    pub(crate) fn pop_oldest(&self) -> Option<LoggedDecision> {
        self.pop_oldest_if(|_| true, |_| {})
    }

    /// Removes and returns the oldest decision if `take` accepts it, calling `taken` with
    /// it first; otherwise leaves the log as it is. One step under the log's lock, so no
    /// other thread sees it taken, and one that logs a decision afterwards sees what
    /// `taken` did.
    pub(crate) fn pop_oldest_if(
        &self,
        take: impl FnOnce(&LoggedDecision) -> bool,
        taken: impl FnOnce(&LoggedDecision),
    ) -> Option<LoggedDecision> {
        let mut d = self.decisions.lock();
        if take(d.front()?) {
            let decision = d.pop_front();
            decision.as_ref().map(taken);
            decision
        } else {
            None
        }
    }

    /// Drops decisions whose TTL has passed at `now` (the wheel's walks handle their
    /// entries).
    pub(crate) fn prune_expired(&self, now: u64) {
        let mut d = self.decisions.lock();
        while d.front().is_some_and(|x| x.expiry <= now) {
            d.pop_front();
        }
    }

    /// Keeps only the decisions `needed` says are still to be evicted.
    pub(crate) fn compact(&self, mut needed: impl FnMut(&LoggedDecision) -> bool) {
        let snapshot: Vec<_> = self.decisions.lock().drain(..).collect();
        let kept: Vec<_> = snapshot.into_iter().filter(|x| needed(x)).collect();
        let mut d = self.decisions.lock();
        // Decisions logged while we filtered (in order themselves) are merged in by
        // expiry: concurrent recorders log a little out of order, and restores and
        // re-anchored walks anywhere.
        let logged: Vec<_> = d.drain(..).collect();
        let (mut kept, mut logged) = (kept.into_iter().peekable(), logged.into_iter().peekable());
        while let (Some(k), Some(l)) = (kept.peek(), logged.peek()) {
            let next = if k.expiry <= l.expiry {
                kept.next()
            } else {
                logged.next()
            };
            d.extend(next);
        }
        d.extend(kept);
        d.extend(logged);
    }

    /// Forgets everything (the slot is being recycled).
    pub(crate) fn clear(&self) {
        self.decisions.lock().clear();
    }

    /// Decisions logged.
    pub(crate) fn len(&self) -> usize {
        self.decisions.lock().len()
    }
}

/// The configured caps.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Caps {
    pub(crate) per_worker: Option<usize>,
    pub(crate) total: Option<usize>,
}

impl Caps {
    /// Whether any cap is set (and so decisions are logged).
    pub(crate) fn any(&self) -> bool {
        self.per_worker.is_some() || self.total.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(expiry: u64) -> LoggedDecision {
        LoggedDecision {
            slot: 0,
            generation: 0,
            span: Span::Path,
            expiry,
            leaf: SequenceHash(expiry),
        }
    }

    #[test]
    fn log_is_ordered_prunes_and_compacts() {
        let log = DecisionLog::default();
        for i in [10, 20, 50] {
            assert_eq!(log.push(decision(i)).1, None);
        }
        assert_eq!(log.push(decision(40)), (4, Some(50)));
        assert_eq!(log.insert(decision(30)), 5);
        log.insert(decision(5));
        log.prune_expired(10);
        assert_eq!(log.pop_oldest().map(|d| d.expiry), Some(20));
        log.compact(|d| d.expiry != 40);
        let rest: Vec<_> = std::iter::from_fn(|| log.pop_oldest().map(|d| d.expiry)).collect();
        assert_eq!(rest, [30, 50]);
        assert_eq!(log.len(), 0);
    }

    /// Recorders log while a compaction filters (concurrent ones a little out of order):
    /// what they logged is merged in by expiry, not put after every kept decision (a
    /// decision older than a kept one would be evicted after it, and a walk of the later
    /// one may take blocks the older one's hang below).
    #[test]
    fn decisions_logged_during_a_compaction_are_merged_in_order() {
        let log = DecisionLog::default();
        for i in [10, 30, 50] {
            log.push(decision(i));
        }
        let mut first = true;
        log.compact(|d| {
            if std::mem::take(&mut first) {
                log.push(decision(40));
                log.push(decision(20));
            }
            d.expiry != 50
        });
        let order: Vec<_> = std::iter::from_fn(|| log.pop_oldest().map(|d| d.expiry)).collect();
        assert_eq!(order, [10, 20, 30, 40]);
    }

    #[test]
    fn equal_expiries_go_last_in_first_out() {
        let log = DecisionLog::default();
        log.insert(LoggedDecision {
            leaf: SequenceHash(1),
            ..decision(7)
        });
        log.insert(LoggedDecision {
            leaf: SequenceHash(2),
            ..decision(7)
        });
        assert_eq!(log.pop_oldest().map(|d| d.leaf), Some(SequenceHash(2)));
    }
}
