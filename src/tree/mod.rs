//! The concurrent hash-map radix tree.
//!
//! Nodes live in one [`DashMap`] keyed by sequence hash: since a sequence hash names a
//! block *and its whole prefix*, the map is a radix tree whose edges are implicit (a
//! node's parent is the node keyed by its `parent` hash). A find walks it with one map
//! probe per block, never holding a shard lock across blocks.

mod node;

use crossbeam_epoch::Guard;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use crate::events::{KvCacheEventData, KvCacheStoreData, KvCacheStoredBlockData, RouterEvent};
use crate::hash::SeqChain;
use crate::id_hasher::IdBuildHasher;
use crate::scores::OverlapScores;
use crate::workers::{Slot, Workers};
use crate::{LocalBlockHash, SequenceHash, WorkerId};

pub(crate) use node::Holder;
use node::{Node, Removal};

/// Shards of the node map: enough that writers on different prefixes rarely meet.
const SHARDS: usize = 128;

/// The node map and the operations of find, record, sweep and dump on it.
pub(crate) struct Tree {
    nodes: DashMap<u64, Node, IdBuildHasher>,
}

impl Tree {
    pub(crate) fn new() -> Self {
        Self {
            nodes: DashMap::with_capacity_and_hasher_and_shard_amount(
                0,
                IdBuildHasher::default(),
                SHARDS,
            ),
        }
    }

    /// Number of nodes (takes each shard's read lock in turn).
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// For each live worker, the length of the leading run of `local` blocks it holds at `now`.
    pub(crate) fn find(
        &self,
        local: &[LocalBlockHash],
        now: u64,
        workers: &Workers,
        guard: &Guard,
    ) -> OverlapScores {
        let mut scores = OverlapScores::default();
        // Workers still matching every block so far, sorted by slot.
        let mut active: Vec<(Slot, WorkerId)> = Vec::new();
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
                active.extend(
                    holders
                        .iter()
                        .filter(|h| h.live_at(now))
                        .filter_map(|h| workers.alive(h.slot).map(|w| (h.slot, w))),
                );
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

    /// Records that `slot` holds every block of the prompt until `expiry`. Returns the
    /// number of (block, slot) entries newly added (the rest were refreshed).
    pub(crate) fn record(
        &self,
        slot: Slot,
        local: &[LocalBlockHash],
        seq: &[SequenceHash],
        expiry: u64,
        guard: &Guard,
    ) -> usize {
        let mut added = 0;
        let mut parent = SequenceHash(0);
        for (depth, (&local, &seq)) in local.iter().zip(seq).enumerate() {
            // Refresh in place under the shard read lock: one probe, one atomic.
            let refreshed = self
                .nodes
                .get(&seq.0)
                .is_some_and(|n| n.refresh(slot, expiry, guard));
            if !refreshed {
                // Shape change under the shard write lock.
                match self.nodes.entry(seq.0) {
                    Entry::Occupied(o) => {
                        added += usize::from(o.get().insert_holder(slot, expiry, guard))
                    }
                    Entry::Vacant(v) => {
                        let depth = u32::try_from(depth).unwrap_or(u32::MAX);
                        v.insert(Node::new(parent, local, depth, slot, expiry));
                        added += 1;
                    }
                }
            }
            parent = seq;
        }
        added
    }

    /// Walks from `leaf` towards the root removing `slot`'s entries that are expired at
    /// `now` (or all of them if the slot is dead), and unlinks nodes left empty.
    ///
    /// Stops at the first block where the slot's entry is live, absent, or whose node is
    /// gone: see `docs/design.md` ("Why a walk may stop early") for why everything above
    /// such a block is covered by another pending walk. Returns the entries removed.
    pub(crate) fn sweep_path(
        &self,
        leaf: SequenceHash,
        slot: Slot,
        now: u64,
        slot_alive: bool,
        guard: &Guard,
    ) -> usize {
        let mut removed = 0;
        let mut key = leaf.0;
        loop {
            let Entry::Occupied(entry) = self.nodes.entry(key) else {
                break;
            };
            let node = entry.get();
            let (parent, depth) = (node.parent, node.depth);
            match node.remove_holder_if(slot, |expiry| !slot_alive || expiry <= now, guard) {
                Removal::Absent | Removal::Kept => break,
                Removal::Removed => removed += 1,
                Removal::RemovedLast => {
                    entry.remove();
                    removed += 1;
                }
            }
            if depth == 0 {
                break;
            }
            key = parent.0;
        }
        removed
    }

    /// Every live (block, worker) pair as a one-block `Stored` event, parents first.
    pub(crate) fn dump(&self, now: u64, workers: &Workers, guard: &Guard) -> Vec<RouterEvent> {
        let mut rows = Vec::new();
        for node in self.nodes.iter() {
            let seq = *node.key();
            for holder in node.holders(guard) {
                let expiry = holder.expiry.load(std::sync::atomic::Ordering::Acquire);
                if expiry <= now {
                    continue;
                }
                if let Some(worker) = workers.alive(holder.slot) {
                    rows.push((
                        node.depth,
                        worker,
                        seq,
                        node.parent,
                        node.local,
                        expiry - now,
                    ));
                }
            }
        }
        rows.sort_unstable_by_key(|r| (r.0, r.1, r.2));
        rows.into_iter()
            .zip(0u64..)
            .map(
                |((depth, worker, seq, parent, local, left), event_id)| RouterEvent {
                    worker_id: worker,
                    event_id,
                    data: KvCacheEventData::Stored(KvCacheStoreData {
                        parent_hash: (depth > 0).then_some(parent),
                        blocks: vec![KvCacheStoredBlockData {
                            block_hash: SequenceHash(seq),
                            tokens_hash: local,
                            expires_in: std::time::Duration::from_nanos(left),
                        }],
                    }),
                },
            )
            .collect()
    }
}

/// Keeps the `active` workers that hold a live entry in `holders` (both sorted by slot);
/// reports each dropped worker to `dropped`.
#[inline]
fn retain_holders(
    active: &mut Vec<(Slot, WorkerId)>,
    holders: &[Holder],
    now: u64,
    mut dropped: impl FnMut(Slot, WorkerId),
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
