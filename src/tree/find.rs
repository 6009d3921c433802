//! Find: for each live worker, the length of the leading run of a query's blocks it holds.
//!
//! While holder sets are *nested* (every worker's live entries along a prompt form a
//! prefix: decisions cover prompts from block 0, claims only move later, and expiry and
//! eviction take the deepest blocks first), the find probes the last block, which settles
//! every worker holding the whole query, then gallops and bisects to each block where some
//! remaining worker drops out. Otherwise (after KV events, restores or dump replays that
//! could break nesting) it walks block by block. See `docs/design.md`.

use std::cell::RefCell;

use crossbeam_epoch::Guard;

use super::{Holder, Holders, Tree};
use crate::hash::SeqChain;
use crate::scores::ScoreSink;
use crate::slot::{Slot, SlotOwners};
use crate::{LocalBlockHash, SequenceHash, WorkerKey, WorkerWithDpRank};

/// A find's working memory, kept per thread so that a find allocates nothing once warm
/// (with an `OverlapScores` reused, or a callback, nothing at all).
#[derive(Default)]
struct Scratch {
    /// Workers holding every block so far, sorted by slot, with their entry counts (read
    /// with their liveness, in one lookup of the slot).
    active: Vec<(Slot, Active)>,
    /// Sequence hashes of a query of local hashes, as far as probes needed them.
    seq: Vec<u64>,
}

/// An active worker: its key and its number of entries.
#[derive(Clone, Copy)]
struct Active {
    key: WorkerWithDpRank,
    entries: usize,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Runs `f` with this thread's scratch, or with a fresh one where that is unavailable (a
/// find nested in another, or a thread being torn down): never a panic.
fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    let mut f = Some(f);
    let reused = SCRATCH.try_with(|cell| {
        cell.try_borrow_mut().ok().map(|mut scratch| {
            scratch.active.clear();
            scratch.seq.clear();
            (f.take().expect("called once"))(&mut scratch)
        })
    });
    match reused {
        Ok(Some(r)) => r,
        _ => (f.take().expect("called once"))(&mut Scratch::default()),
    }
}

/// A find's query: its blocks' local hashes (the find chains them into sequence hashes as
/// far as its probes need), or their sequence hashes, computed once by the caller.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Query<'a> {
    /// Local hashes, chained here.
    Local(&'a [LocalBlockHash]),
    /// Sequence hashes, probed as they are.
    Seq(&'a [SequenceHash]),
}

impl Query<'_> {
    fn len(self) -> usize {
        match self {
            Query::Local(local) => local.len(),
            Query::Seq(seq) => seq.len(),
        }
    }

    /// The node key of block `k`, chaining local hashes into `chained` as far as needed.
    #[inline]
    fn key(self, k: usize, chain: &mut SeqChain, chained: &mut Vec<u64>) -> u64 {
        match self {
            Query::Seq(seq) => seq[k].0,
            Query::Local(local) => {
                while chained.len() <= k {
                    chained.push(chain.next(local[chained.len()]).0);
                }
                chained[k]
            }
        }
    }
}

impl Tree {
    /// For each live worker, the length of the leading run of the query's blocks it holds
    /// at `now`, reported to `out` (after `out.begin()`, which empties an `OverlapScores`
    /// and keeps its capacity).
    pub(crate) fn find_into<W: WorkerKey>(
        &self,
        query: Query<'_>,
        now: u64,
        workers: &impl SlotOwners,
        guard: &Guard,
        out: &mut impl ScoreSink<W>,
    ) {
        out.begin();
        with_scratch(|scratch| {
            if self.nested.load(std::sync::atomic::Ordering::Relaxed) {
                self.find_nested(query, now, workers, guard, scratch, out);
            } else {
                self.find_walk(query, now, workers, guard, scratch, out);
            }
        });
    }

    /// The galloping find, for nested holder sets.
    fn find_nested<W: WorkerKey>(
        &self,
        query: Query<'_>,
        now: u64,
        workers: &impl SlotOwners,
        guard: &Guard,
        scratch: &mut Scratch,
        out: &mut impl ScoreSink<W>,
    ) {
        let n = query.len();
        if n == 0 {
            return;
        }
        let Scratch { active, seq } = scratch;
        let mut chain = SeqChain::default();
        match self.nodes.get(&query.key(0, &mut chain, seq)) {
            Some(node) => active.extend(live_workers(&node.holders(guard), now, workers)),
            None => return,
        }
        if active.is_empty() {
            return;
        }
        out.reserve(active.len());
        let mut probe = |k: usize| -> Holders<'_> {
            self.nodes
                .get(&query.key(k, &mut chain, seq))
                .map_or(Holders::NONE, |node| node.holders(guard))
        };
        // Holder sets shrink with depth (`nested`): a worker holding the last block holds
        // them all, and one holding block k holds blocks 0..=k. So one probe of the last
        // block settles every worker that holds the whole query (a system prompt shared by
        // a fleet, the worker a conversation went to). Each other drop-out point is found
        // by galloping forward from the deepest block all remaining workers hold (`lo`:
        // 1, 2, 4, ... blocks on, through the shallow blocks many queries share, which
        // stay in cache), then bisecting up to the shallowest block some of them miss
        // (`hi`, whose holders are kept, so the drop-outs there need no second probe).
        if n == 1 {
            for &(_, worker) in active.iter() {
                report(out, worker, 1);
            }
            return;
        }
        let last = probe(n - 1);
        if all_kept(active, &last, now) {
            for &(_, worker) in active.iter() {
                report(out, worker, n as u32);
            }
            return;
        }
        retain_missing(active, &last, now, |worker| report(out, worker, n as u32));
        let mut lo = 0;
        while !active.is_empty() {
            // Every remaining worker holds block `lo` and misses block `hi`; `at_hi` holds
            // block `hi`'s holders (`None`: the last block's).
            let (mut hi, mut at_hi) = (n - 1, None);
            let mut step = 1;
            while lo + step < hi {
                let holders = probe(lo + step);
                if all_kept(active, &holders, now) {
                    lo += step;
                    step *= 2;
                } else {
                    (hi, at_hi) = (lo + step, Some(holders));
                }
            }
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                let holders = probe(mid);
                if all_kept(active, &holders, now) {
                    lo = mid;
                } else {
                    (hi, at_hi) = (mid, Some(holders));
                }
            }
            let depth = hi as u32;
            let at_hi: &[Holder] = at_hi.as_deref().unwrap_or(&last);
            retain_holders(active, at_hi, now, |worker| report(out, worker, depth));
            lo = hi;
        }
    }

    /// The block-by-block walk, for when holder sets may not be nested.
    fn find_walk<W: WorkerKey>(
        &self,
        query: Query<'_>,
        now: u64,
        workers: &impl SlotOwners,
        guard: &Guard,
        scratch: &mut Scratch,
        out: &mut impl ScoreSink<W>,
    ) {
        // Workers still matching every block so far, sorted by slot.
        let Scratch { active, seq } = scratch;
        let mut chain = SeqChain::default();
        let mut depth = 0u32;
        for i in 0..query.len() {
            let key = query.key(i, &mut chain, seq);
            // The shard read lock lives only for this statement: the slice stays valid
            // through the epoch guard.
            let Some(holders) = self.nodes.get(&key).map(|n| n.holders(guard)) else {
                break;
            };
            if i == 0 {
                active.extend(live_workers(&holders, now, workers));
            } else {
                retain_holders(active, &holders, now, |worker| report(out, worker, depth));
            }
            if active.is_empty() {
                break;
            }
            depth += 1;
        }
        for &(_, worker) in active.iter() {
            report(out, worker, depth);
        }
    }
}

/// Reports `worker`'s score to `out`, with its number of entries.
#[inline]
fn report<W: WorkerKey>(out: &mut impl ScoreSink<W>, worker: Active, depth: u32) {
    let key = W::from_parts(worker.key.worker_id, worker.key.dp_rank);
    out.report(key, depth, worker.entries);
}

/// The holders live at `now` whose worker is alive, with their keys and entry counts, by
/// slot.
#[inline]
fn live_workers<'a>(
    holders: &'a [Holder],
    now: u64,
    workers: &'a impl SlotOwners,
) -> impl Iterator<Item = (Slot, Active)> + 'a {
    holders
        .iter()
        .filter(move |h| h.live_at(now))
        .filter_map(|h| {
            let slot = h.slot();
            let (key, entries) = workers.alive_with_entries(slot)?;
            Some((slot, Active { key, entries }))
        })
}

/// Whether every worker of `active` holds a live entry in `holders` (both sorted by slot);
/// stops at the first that does not.
#[inline]
fn all_kept<W>(active: &[(Slot, W)], holders: &[Holder], now: u64) -> bool {
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
fn retain_missing<T: Copy>(
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
fn retain_holders<T: Copy>(
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
fn retain_holders_by<T: Copy>(
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
