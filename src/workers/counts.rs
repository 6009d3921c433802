//! Per-slot counts: the entries each slot holds in the tree (and their running total,
//! under a global cap), and the latest expiry each slot was handed (under caps, so that
//! eviction tells a worker's decisions apart by age).

use std::sync::Arc;

use super::table::{DEAD, STATE_BITS, STATE_MASK};
use super::Workers;
use crate::capacity::LoggedDecision;
use crate::slot::Slot;
use crate::sync::Ordering;
use crate::tree::claim::LAST_INSTANT;

/// Which log a decision is evicted from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogKind {
    /// Its slot's log (a per-worker cap or capacity).
    Slot = 0,
    /// The index-wide log (the global cap).
    Global = 1,
}

impl Workers {
    /// Entries over all slots, if tracked.
    #[inline]
    pub(crate) fn tracked_total(&self) -> Option<usize> {
        self.total
            .as_ref()
            .map(|t| t.load(Ordering::Relaxed).max(0) as usize)
    }

    /// Entries stored for `slot` (clamped at zero).
    #[inline]
    pub(crate) fn entries(&self, slot: Slot) -> usize {
        self.slots
            .get(slot)
            .map_or(0, |i| i.entries.load(Ordering::Relaxed).max(0) as usize)
    }

    /// Adds `delta` to the slot's entry count; recycles a dead slot whose count reaches zero.
    pub(crate) fn adjust_entries(self: &Arc<Self>, slot: Slot, delta: i64) {
        if delta == 0 {
            return;
        }
        let Some(info) = self.slots.get(slot) else {
            return;
        };
        if let Some(total) = &self.total {
            total.fetch_add(delta, Ordering::Relaxed);
        }
        let now = info.entries.fetch_add(delta, Ordering::SeqCst) + delta;
        if now <= 0 {
            let state = self
                .slots
                .key(slot)
                .map_or(0, |k| k.state.load(Ordering::SeqCst));
            if state & STATE_MASK == DEAD {
                self.schedule_reclaim(slot, state >> STATE_BITS);
            }
        }
    }

    /// Sum of entries over all slots, including dead ones not yet swept.
    pub(crate) fn total_entries(&self) -> usize {
        let next = self.free.lock().next;
        (0..next)
            .filter_map(|s| self.slots.get(s as Slot))
            .map(|i| i.entries.load(Ordering::Relaxed).max(0) as usize)
            .sum()
    }

    /// Notes that `decision` was taken from a log (`from`) to be evicted. Called under
    /// the log's lock: a recorder that logs a decision there afterwards sees it
    /// ([`evicted_past`](Self::evicted_past)).
    pub(crate) fn note_eviction(&self, decision: &LoggedDecision, from: LogKind) {
        if self.generation(decision.slot) != decision.generation {
            return; // a removed registration's, skipped by the eviction
        }
        if let Some(info) = self.slots.get(decision.slot) {
            info.evicted_until[from as usize].fetch_max(decision.expiry, Ordering::AcqRel);
        }
    }

    /// Whether a decision of `slot` later than `expiry` was taken from a log (`from`) to
    /// be evicted: by then, an earlier decision still being written (expiries are handed
    /// out in order) may have had blocks below the later one's, which its walk took.
    pub(crate) fn evicted_past(&self, slot: Slot, expiry: u64, from: LogKind) -> bool {
        self.slots
            .get(slot)
            .is_some_and(|info| info.evicted_until[from as usize].load(Ordering::Acquire) > expiry)
    }

    /// Makes later [`unique_expiry`](Self::unique_expiry) results come after `expiry`
    /// (a restored or replayed claim).
    pub(crate) fn note_expiry(&self, slot: Slot, expiry: u64) {
        if let Some(info) = self.slots.get(slot) {
            info.last_expiry.fetch_max(expiry, Ordering::AcqRel);
        }
    }

    /// The expiry for another replica's decision of `slot` that asks for `wanted` (its age
    /// kept), and whether it is the worker's newest decision. Newest if it asks for no
    /// earlier an expiry than any decision of the worker got before: it then gets one
    /// later than all of them, as [`unique_expiry`](Self::unique_expiry) gives one taken
    /// now (and later ones follow it). Otherwise it keeps `wanted`, or if it asks for no
    /// earlier an expiry than the last such decision did (decisions arrive in their
    /// origin's order, and one origin's decisions taken at one instant all ask for the
    /// same expiry), follows that one by a nanosecond at least. Eviction thus takes a
    /// worker's decisions in the order they came, and a later one's claims on the blocks
    /// it shares with an earlier one outlast the earlier one's walk (equal claims would go
    /// with the earlier one's eviction and leave the later one's deeper blocks above a
    /// gap). A decision older than the last (another origin's, late) keeps its expiry.
    pub(crate) fn dated_expiry(&self, slot: Slot, wanted: u64) -> (u64, bool) {
        let Some(info) = self.slots.get(slot) else {
            return (wanted, false);
        };
        let mut last = info.last_dated.lock();
        if wanted < last.0 {
            return (wanted, false);
        }
        let after_dated = wanted.max(last.1.saturating_add(1)).min(LAST_INSTANT);
        let (mut given, mut newest) = (after_dated, false);
        let _ = info
            .last_expiry
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |own| {
                newest = wanted >= own;
                given = if newest {
                    after_dated.max(own.saturating_add(1)).min(LAST_INSTANT)
                } else {
                    after_dated
                };
                newest.then_some(given)
            });
        *last = (wanted, given);
        (given, newest)
    }

    /// Whether `expiry` is still the latest expiry handed out for `slot` (with caps, where
    /// [`unique_expiry`](Self::unique_expiry) hands them out).
    pub(crate) fn is_last_expiry(&self, slot: Slot, expiry: u64) -> bool {
        let last = self
            .slots
            .get(slot)
            .map(|info| info.last_expiry.load(Ordering::Acquire));
        last.unwrap_or(expiry) == expiry
    }

    /// An expiry of at least `wanted` and later than any handed out before for `slot`, so
    /// that eviction tells any two decisions of a worker apart by age even when the clock
    /// did not move between them (a manual clock, or a burst within a nanosecond). Each
    /// such decision stretches the TTL by a nanosecond: reads are exact to within the
    /// number of decisions one worker recorded at the same clock reading, in nanoseconds.
    pub(crate) fn unique_expiry(&self, slot: Slot, wanted: u64) -> u64 {
        let Some(info) = self.slots.get(slot) else {
            return wanted;
        };
        let mut chosen = wanted;
        let _ = info
            .last_expiry
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
                chosen = wanted.max(last.saturating_add(1)).min(LAST_INSTANT);
                Some(chosen)
            });
        chosen
    }
}
