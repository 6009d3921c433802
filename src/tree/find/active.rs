//! The active set of a find: the workers holding every block so far, by slot, and how
//! each probe's holders thin it (the workers that drop out, or that hold on, reported with
//! their scores).

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

/// Reports every active worker's score as `depth`, and empties the active set.
#[inline]
pub(super) fn report_all_active<W: WorkerKey>(
    active: &mut Vec<(Slot, Active)>,
    out: &mut impl ScoreSink<W>,
    depth: usize,
) {
    for &(_, worker) in active.iter() {
        report(out, worker, depth as u32);
    }
    active.clear();
}

/// Reports `worker`'s score to `out`, with its number of entries.
#[inline]
pub(super) fn report<W: WorkerKey>(out: &mut impl ScoreSink<W>, worker: Active, depth: u32) {
    let key = W::from_parts(worker.key.worker_id, worker.key.dp_rank);
    out.report(key, depth, worker.entries);
}

/// Pushes to `active` the holders live at `now` whose worker is alive, with their keys and
/// (if `entries`) entry counts, by slot.
#[inline]
pub(super) fn push_live_workers(
    active: &mut Vec<(Slot, Active)>,
    holders: &[Holder],
    now: u64,
    workers: &impl SlotOwners,
    entries: bool,
) {
    active.reserve(holders.len());
    let live = holders.iter().filter(|h| h.live_at(now)).map(Holder::slot);
    workers.each_alive(live, entries, |slot, key, entries| {
        active.push((slot, Active { key, entries }));
    });
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

/// Whether every worker of `active` holds a live entry in `holders` (both sorted by slot);
/// stops at the first that does not.
#[inline]
pub(super) fn all_kept<W>(active: &[(Slot, W)], holders: &[Holder], now: u64) -> bool {
    if holders.len() < active.len() {
        return false;
    }
    let mut j = 0;
    active.iter().all(|&(slot, _)| {
        while j < holders.len() && holders[j].slot() < slot {
            j += 1;
        }
        j < holders.len() && holders[j].slot() == slot && holders[j].live_at(now)
    })
}

/// Keeps the `active` workers that do *not* hold a live entry in `holders` (both sorted by
/// slot); reports each worker that does to `settled`.
#[inline]
pub(super) fn retain_missing<T: Copy>(
    active: &mut Vec<(Slot, T)>,
    holders: &[Holder],
    now: u64,
    mut settled: impl FnMut(T),
) {
    retain_holders_by(active, holders, now, |held, worker| {
        if held {
            settled(worker);
        }
        !held
    });
}

/// Keeps the `active` workers that hold a live entry in `holders` (both sorted by slot);
/// reports each dropped worker to `dropped`.
#[inline]
pub(super) fn retain_holders<T: Copy>(
    active: &mut Vec<(Slot, T)>,
    holders: &[Holder],
    now: u64,
    mut dropped: impl FnMut(T),
) {
    retain_holders_by(active, holders, now, |held, worker| {
        if !held {
            dropped(worker);
        }
        held
    });
}

/// Keeps the `active` workers for which `keep(held, worker)` says so, where `held` tells
/// whether the worker holds a live entry in `holders` (both sorted by slot).
#[inline]
pub(super) fn retain_holders_by<T: Copy>(
    active: &mut Vec<(Slot, T)>,
    holders: &[Holder],
    now: u64,
    mut keep: impl FnMut(bool, T) -> bool,
) {
    let mut j = 0;
    active.retain(|&(slot, worker)| {
        while j < holders.len() && holders[j].slot() < slot {
            j += 1;
        }
        let held = j < holders.len() && holders[j].slot() == slot && holders[j].live_at(now);
        keep(held, worker)
    });
}
