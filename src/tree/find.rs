//! Find: for each live worker, the length of the leading run of a query's blocks it holds.
//!
//! While holder sets are *nested* (every worker's live entries along a prompt form a
//! prefix: decisions cover prompts from block 0, claims only move later, and expiry and
//! eviction take the deepest blocks first), the find gallops: it probes blocks 1, 2, 4, ...
//! until some active worker is missing, bisects to the exact block, drops the missing
//! workers, and goes on. Otherwise (after exact KV events, restores, or caller-supplied
//! hashes that are not a chain) it walks block by block. See `docs/design.md`.

use crossbeam_epoch::Guard;

use super::{Holder, Tree};
use crate::hash::SeqChain;
use crate::scores::OverlapScores;
use crate::slot::{Slot, SlotOwners};
use crate::{LocalBlockHash, WorkerKey};

impl Tree {
    /// For each live worker, the length of the leading run of `local` blocks it holds at `now`.
    pub(crate) fn find<W: WorkerKey>(
        &self,
        local: &[LocalBlockHash],
        now: u64,
        workers: &impl SlotOwners,
        guard: &Guard,
    ) -> OverlapScores<W> {
        if !self.nested.load(std::sync::atomic::Ordering::Relaxed) {
            return self.find_walk(local, now, workers, guard);
        }
        let mut scores = OverlapScores::default();
        let n = local.len();
        let Some(&first) = local.first() else {
            return scores;
        };
        // Block 0's sequence hash is its local hash.
        let mut active: Vec<(Slot, W)> = match self.nodes.get(&first.0) {
            Some(node) => live_workers(node.holders(guard), now, workers).collect(),
            None => return scores,
        };
        if active.is_empty() {
            return scores;
        }
        scores.scores.reserve(active.len());
        scores.tree_sizes.reserve(active.len());
        // Sequence hashes, computed only as far as a probe needs them.
        let mut chain = SeqChain::default();
        let mut seq: Vec<u64> = Vec::with_capacity(n);
        let mut probe = |k: usize| -> &[Holder] {
            while seq.len() <= k {
                seq.push(chain.next(local[seq.len()]).0);
            }
            self.nodes
                .get(&seq[k])
                .map_or(&[][..], |node| node.holders(guard))
        };
        // Every worker in `active` holds blocks 0..=lo. Holder sets shrink with depth
        // (`nested`), so the first block where some active worker is missing is found by
        // galloping forward (1, 2, 4, ... blocks), then bisecting.
        let mut lo = 0;
        while !active.is_empty() && lo + 1 < n {
            let mut step = 1;
            let mut hi = None;
            while lo + 1 < n {
                let k = (lo + step).min(n - 1);
                if count_kept(&active, probe(k), now) == active.len() {
                    lo = k;
                    step *= 2;
                } else {
                    hi = Some(k);
                    break;
                }
            }
            let Some(mut hi) = hi else { break };
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if count_kept(&active, probe(mid), now) == active.len() {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            let depth = hi as u32;
            retain_holders(&mut active, probe(hi), now, |slot, worker| {
                scores.scores.insert(worker, depth);
                scores.tree_sizes.insert(worker, workers.entries(slot));
            });
            lo = hi;
        }
        for &(slot, worker) in &active {
            scores.scores.insert(worker, n as u32);
            scores.tree_sizes.insert(worker, workers.entries(slot));
        }
        scores
    }

    /// The block-by-block walk, for when holder sets may not be nested.
    fn find_walk<W: WorkerKey>(
        &self,
        local: &[LocalBlockHash],
        now: u64,
        workers: &impl SlotOwners,
        guard: &Guard,
    ) -> OverlapScores<W> {
        let mut scores = OverlapScores::default();
        // Workers still matching every block so far, sorted by slot.
        let mut active: Vec<(Slot, W)> = Vec::new();
        let mut chain = SeqChain::default();
        let mut depth = 0u32;
        for (i, &block) in local.iter().enumerate() {
            let key = chain.next(block).0;
            // The shard read lock lives only for this statement: the slice stays valid
            // through the epoch guard.
            let Some(holders) = self.nodes.get(&key).map(|n| n.holders(guard)) else {
                break;
            };
            if i == 0 {
                active.extend(live_workers(holders, now, workers));
            } else {
                retain_holders(&mut active, holders, now, |slot, worker| {
                    scores.scores.insert(worker, depth);
                    scores.tree_sizes.insert(worker, workers.entries(slot));
                });
            }
            if active.is_empty() {
                break;
            }
            depth += 1;
        }
        for &(slot, worker) in &active {
            scores.scores.insert(worker, depth);
            scores.tree_sizes.insert(worker, workers.entries(slot));
        }
        scores
    }
}

/// The holders live at `now` whose worker is alive, with their worker keys, by slot.
#[inline]
fn live_workers<'a, W: WorkerKey>(
    holders: &'a [Holder],
    now: u64,
    workers: &'a impl SlotOwners,
) -> impl Iterator<Item = (Slot, W)> + 'a {
    holders
        .iter()
        .filter(move |h| h.live_at(now))
        .filter_map(|h| workers.alive(h.slot).map(|w| (h.slot, w)))
}

/// How many of `active` hold a live entry in `holders` (both sorted by slot).
#[inline]
fn count_kept<W>(active: &[(Slot, W)], holders: &[Holder], now: u64) -> usize {
    let mut j = 0;
    let mut kept = 0;
    for &(slot, _) in active {
        while j < holders.len() && holders[j].slot < slot {
            j += 1;
        }
        if j < holders.len() && holders[j].slot == slot && holders[j].live_at(now) {
            kept += 1;
        }
    }
    kept
}

/// Keeps the `active` workers that hold a live entry in `holders` (both sorted by slot);
/// reports each dropped worker to `dropped`.
#[inline]
fn retain_holders<W: Copy>(
    active: &mut Vec<(Slot, W)>,
    holders: &[Holder],
    now: u64,
    mut dropped: impl FnMut(Slot, W),
) {
    let mut j = 0;
    active.retain(|&(slot, worker)| {
        while j < holders.len() && holders[j].slot < slot {
            j += 1;
        }
        let keep = j < holders.len() && holders[j].slot == slot && holders[j].live_at(now);
        if !keep {
            dropped(slot, worker);
        }
        keep
    });
}
