//! The active set of a find: the workers holding every block so far, and how each probe's
//! holders thin it (the workers that drop out, or that hold on, reported with their
//! scores).
//!
//! The set is a roster, the live workers of the first block probed, sorted by slot, and a
//! bitset over the roster's places: a probe merges the active workers' slots with its
//! holders' (both sorted) and marks those held, and the set is thinned and reported a word
//! of 64 workers at a time; no roster entry moves.

use crate::scores::ScoreSink;
use crate::slot::{Slot, SlotOwners};
use crate::tree::Holder;
use crate::{WorkerKey, WorkerWithDpRank};

/// An active worker: its key and its number of entries.
#[derive(Clone, Copy)]
pub(super) struct Active {
    pub(super) key: WorkerWithDpRank,
    pub(super) entries: usize,
}

/// The workers a find still follows, by their place in the roster. Kept per thread in the
/// find's scratch, so that a warm find allocates nothing.
#[derive(Default)]
pub(super) struct ActiveSet {
    /// The workers the find started with, sorted by slot, with keys and entry counts.
    roster: Vec<(Slot, Active)>,
    /// Bit `p` is set while the worker at place `p` of the roster is active.
    active: Vec<u64>,
    /// Scratch of each probe: bit `p` is set if the probe's holders include a live entry
    /// of the worker at place `p`.
    held: Vec<u64>,
    /// How many bits of `active` are set.
    len: usize,
}

impl ActiveSet {
    /// Whether no worker is active.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many workers are active.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Empties the set.
    #[inline]
    pub(super) fn clear(&mut self) {
        self.roster.clear();
        self.active.clear();
        self.held.clear();
        self.len = 0;
    }

    /// Starts the set over with the holders live at `now` whose worker is alive (`holders`
    /// sorted by slot), with their keys and (if `entries`) entry counts.
    #[inline]
    pub(super) fn start(
        &mut self,
        holders: &[Holder],
        now: u64,
        workers: &impl SlotOwners,
        entries: bool,
    ) {
        self.clear();
        self.roster.reserve(holders.len());
        let live = holders.iter().filter(|h| h.live_at(now)).map(Holder::slot);
        let roster = &mut self.roster;
        workers.each_alive(live, entries, |slot, key, entries| {
            roster.push((slot, Active { key, entries }));
        });
        let len = self.roster.len();
        self.len = len;
        let words = len.div_ceil(64);
        self.active.resize(words, u64::MAX);
        self.held.resize(words, 0);
        if len % 64 != 0 {
            self.active[words - 1] = (1u64 << (len % 64)) - 1;
        }
    }

    /// Marks in `held` the active workers that hold a live entry in `holders` (sorted by
    /// slot): a merge of the active workers' slots with the holders'.
    #[inline]
    fn mark_held(&mut self, holders: &[Holder], now: u64) {
        let mut j = 0;
        for (word, (&active, held)) in self.active.iter().zip(&mut self.held).enumerate() {
            let (mut left, mut found) = (active, 0);
            while left != 0 {
                let bit = left.trailing_zeros();
                let slot = self.roster[word * 64 + bit as usize].0;
                while j < holders.len() && holders[j].slot() < slot {
                    j += 1;
                }
                if j < holders.len() && holders[j].slot() == slot && holders[j].live_at(now) {
                    found |= 1 << bit;
                }
                left &= left - 1;
            }
            *held = found;
        }
    }

    /// Whether every active worker holds a live entry in `holders` (sorted by slot): a merge
    /// of the active workers' slots with the holders', which stops at the first worker
    /// missing (a search's probe that misses is usually told so by the first few). The
    /// same merge as [`mark_held`](Self::mark_held)'s, written out: one generic merge with
    /// a callback for both made the finds slower (per-round ratios of 1.11 at the hot p50
    /// with 16 workers, `ab_finds.sh`).
    #[inline]
    pub(super) fn all_kept(&self, holders: &[Holder], now: u64) -> bool {
        if holders.len() < self.len {
            return false;
        }
        let mut j = 0;
        for (word, &active) in self.active.iter().enumerate() {
            let mut left = active;
            while left != 0 {
                let slot = self.roster[word * 64 + left.trailing_zeros() as usize].0;
                while j < holders.len() && holders[j].slot() < slot {
                    j += 1;
                }
                if j == holders.len() || holders[j].slot() != slot || !holders[j].live_at(now) {
                    return false;
                }
                left &= left - 1;
            }
        }
        true
    }

    /// Keeps the active workers that hold a live entry in `holders` (sorted by slot);
    /// reports each dropped worker to `dropped`, by slot.
    #[inline]
    pub(super) fn retain_holders(
        &mut self,
        holders: &[Holder],
        now: u64,
        dropped: impl FnMut(Active),
    ) {
        self.mark_held(holders, now);
        self.thin(true, dropped);
    }

    /// Keeps the active workers that do *not* hold a live entry in `holders` (sorted by
    /// slot); reports each worker that does to `settled`, by slot.
    #[inline]
    pub(super) fn retain_missing(
        &mut self,
        holders: &[Holder],
        now: u64,
        settled: impl FnMut(Active),
    ) {
        self.mark_held(holders, now);
        self.thin(false, settled);
    }

    /// Keeps the active workers whose `held` bit is `keep_held`, and reports the others to
    /// `leaving`, in the roster's order.
    #[inline]
    fn thin(&mut self, keep_held: bool, mut leaving: impl FnMut(Active)) {
        for (word, (active, &held)) in self.active.iter_mut().zip(&self.held).enumerate() {
            let kept = if keep_held { held } else { *active & !held };
            let mut left = *active & !kept;
            *active = kept;
            self.len -= left.count_ones() as usize;
            while left != 0 {
                let place = word * 64 + left.trailing_zeros() as usize;
                leaving(self.roster[place].1);
                left &= left - 1;
            }
        }
    }

    /// Reports every active worker's score as `depth`, and empties the set.
    #[inline]
    pub(super) fn report_all<W: WorkerKey>(&mut self, out: &mut impl ScoreSink<W>, depth: usize) {
        for (word, active) in self.active.iter_mut().enumerate() {
            let mut left = std::mem::take(active);
            while left != 0 {
                let place = word * 64 + left.trailing_zeros() as usize;
                report(out, self.roster[place].1, depth as u32);
                left &= left - 1;
            }
        }
        self.len = 0;
    }
}

/// Reports `worker`'s score to `out`, with its number of entries.
#[inline]
pub(super) fn report<W: WorkerKey>(out: &mut impl ScoreSink<W>, worker: Active, depth: u32) {
    let key = W::from_parts(worker.key.worker_id, worker.key.dp_rank);
    out.report(key, depth, worker.entries);
}

/// Reports every holder live at `now` whose worker is alive as holding `depth` blocks.
#[inline]
pub(super) fn report_live_workers<W: WorkerKey>(
    holders: &[Holder],
    now: u64,
    workers: &impl SlotOwners,
    out: &mut impl ScoreSink<W>,
    depth: u32,
) {
    out.reserve(holders.len());
    let live = holders.iter().filter(|h| h.live_at(now)).map(Holder::slot);
    workers.each_alive(live, out.wants_entries(), |_, key, entries| {
        out.report(key, depth, entries);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slot::AllAlive;
    use crate::tree::claim::Claim;

    /// Holders of `slots` (ascending), live at time 10 when `live(slot)`.
    fn holders(slots: impl Iterator<Item = Slot>, live: impl Fn(Slot) -> bool) -> Vec<Holder> {
        slots
            .map(|s| Holder::new(s, Claim::approx(if live(s) { 100 } else { 5 })))
            .collect()
    }

    /// An active set over more than two words of workers thins, settles and reports as
    /// a sorted list of slots would: the workers reported at each step, in slot order,
    /// and the workers left.
    #[test]
    fn thins_and_reports_across_words_as_a_list_would() {
        let now = 10;
        // 150 workers on slots 0, 3, 6, ...: three words, the last partly used. Slot 30's
        // entry has expired, so it never joins.
        let first = holders((0..150).map(|i| 3 * i), |s| s != 30);
        let mut set = ActiveSet::default();
        set.start(&first, now, &AllAlive, false);
        assert_eq!(set.len(), 149);
        let mut model: Vec<Slot> = (0..150).map(|i| 3 * i).filter(|&s| s != 30).collect();

        // A probe holding every active worker keeps them all.
        assert!(set.all_kept(&holders(0..450, |_| true), now));
        // One missing from each word (slot 192 is in the second and slot 441 in the
        // third), one expired.
        let probe = holders((0..450).filter(|&s| s != 192 && s != 441), |s| s != 90);
        assert!(!set.all_kept(&probe, now));
        let mut dropped = Vec::new();
        set.retain_holders(&probe, now, |w| dropped.push(w.key.worker_id as Slot));
        assert_eq!(dropped, [90, 192, 441]);
        model.retain(|s| ![90, 192, 441].contains(s));
        assert_eq!(set.len(), model.len());
        assert!(set.all_kept(&probe, now));

        // The workers holding the last block settle; the others stay active.
        let last = holders((0..450).filter(|s| s % 2 == 0), |_| true);
        let mut settled = Vec::new();
        set.retain_missing(&last, now, |w| settled.push(w.key.worker_id as Slot));
        let (held, missing): (Vec<Slot>, Vec<Slot>) = model.iter().partition(|&&s| s % 2 == 0);
        assert_eq!(settled, held);
        assert_eq!(set.len(), missing.len());

        let mut scores = crate::OverlapScores::<u64>::default();
        set.report_all(&mut scores, 7);
        assert!(set.is_empty());
        let mut reported: Vec<u64> = scores.scores.keys().copied().collect();
        reported.sort_unstable();
        let want: Vec<u64> = missing.iter().map(|&s| u64::from(s)).collect();
        assert_eq!(reported, want);
        assert!(scores.scores.values().all(|&d| d == 7));
    }

    /// A probe with fewer holders than active workers, or none, keeps none of them.
    #[test]
    fn short_probes_keep_nobody() {
        let now = 10;
        let mut set = ActiveSet::default();
        set.start(&holders(0..70, |_| true), now, &AllAlive, false);
        assert!(!set.all_kept(&holders(0..69, |_| true), now));
        let mut dropped = 0;
        set.retain_holders(&[], now, |_| dropped += 1);
        assert_eq!((dropped, set.len()), (70, 0));
    }
}
