//! The concurrent hash-map radix tree.
//!
//! Nodes live in one [`DashMap`] keyed by sequence hash: since a sequence hash names a
//! block *and its whole prefix*, the map is a radix tree whose edges are implicit (a
//! node's parent is the node keyed by its `parent` hash). A find walks it with one map
//! probe per block, never holding a shard lock across blocks.

pub(crate) mod claim;
mod export;
mod find;
mod node;

use crossbeam_epoch::Guard;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use crate::hash::SeqChain;
use crate::id_hasher::IdBuildHasher;
use crate::workers::Slot;
use crate::{LocalBlockHash, SequenceHash};

pub(crate) use export::LiveEntry;
pub(crate) use node::Holder;
use node::{Node, Outcome, Settle};

/// Shards of the node map: enough that writers on different prefixes rarely meet.
const SHARDS: usize = 128;

/// The node map and the operations of find, record, sweep and dump on it.
pub(crate) struct Tree {
    nodes: DashMap<u64, Node, IdBuildHasher>,
    /// True while every worker's live entries along any prompt form a prefix (holder sets
    /// shrink with depth), which lets find gallop. Cleared for good by anything that can
    /// break it: exact KV events, restores, and decisions whose sequence hashes are not the
    /// chain of their local hashes.
    pub(crate) nested: std::sync::atomic::AtomicBool,
}

impl Tree {
    pub(crate) fn new() -> Self {
        Self {
            nodes: DashMap::with_capacity_and_hasher_and_shard_amount(
                0,
                IdBuildHasher::default(),
                SHARDS,
            ),
            nested: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// `slot`'s claim on the block `seq`, if it holds one.
    pub(crate) fn claim_of(&self, seq: SequenceHash, slot: Slot, guard: &Guard) -> Option<u64> {
        let holders = self.nodes.get(&seq.0).map(|n| n.holders(guard))?;
        node::find(holders, slot).map(Holder::claim)
    }

    /// Number of nodes (takes each shard's read lock in turn).
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// An estimate of the heap bytes held: the map's buckets (key, inline node, control
    /// byte) at their current capacity, plus each node's holder array (16-byte header and
    /// 16 bytes per entry, before allocator rounding).
    pub(crate) fn estimated_bytes(&self, nodes: usize, entries: usize) -> usize {
        let bucket = std::mem::size_of::<(u64, Node)>() + 1;
        self.nodes.capacity() * bucket + nodes * 16 + entries * std::mem::size_of::<Holder>()
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
        let raise = |c| claim::refreshed(c, expiry);
        self.upsert_chain(
            slot,
            None,
            local.iter().copied().zip(seq.iter().copied()),
            raise,
            guard,
        )
    }

    /// Notes a decision whose hashes came from the caller: if its sequence hashes are not
    /// the chain of its local hashes, holder sets may stop being nested, so finds stop
    /// galloping for good. (Decisions hashed by the index are chains by construction.)
    pub(crate) fn check_chain(&self, local: &[LocalBlockHash], seq: &[SequenceHash]) {
        let mut chain = SeqChain::default();
        if !local.iter().zip(seq).all(|(&l, &q)| chain.next(l) == q) {
            self.nested
                .store(false, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Marks `slot` as exactly storing each `(local, seq)` block, chained from `parent`.
    /// Returns the number of entries newly added.
    pub(crate) fn store_exact(
        &self,
        slot: Slot,
        parent: Option<SequenceHash>,
        blocks: impl Iterator<Item = (LocalBlockHash, SequenceHash)>,
        guard: &Guard,
    ) -> usize {
        self.nested
            .store(false, std::sync::atomic::Ordering::Relaxed);
        self.upsert_chain(slot, parent, blocks, |c| c | claim::EXACT, guard)
    }

    /// Applies `update` to `slot`'s claim on each block of a chain, adding missing entries
    /// and nodes. Returns the number of entries added.
    fn upsert_chain(
        &self,
        slot: Slot,
        parent: Option<SequenceHash>,
        blocks: impl Iterator<Item = (LocalBlockHash, SequenceHash)>,
        update: impl Fn(u64) -> u64 + Copy,
        guard: &Guard,
    ) -> usize {
        let mut added = 0;
        let mut parent = parent;
        let mut depth = parent.map_or(0, |p| self.depth_below(p));
        // Once a block is missing, its descendants in this chain were missing too (unless a
        // concurrent record races us, which the write-locked path handles): skip the
        // read-locked probe so that a new block costs one map insert.
        let mut past_the_known_prefix = false;
        for (local, seq) in blocks {
            // In place under the shard read lock: one probe, one atomic.
            let done = !past_the_known_prefix
                && match self.nodes.get(&seq.0) {
                    Some(node) => node.update_claim(slot, update, guard),
                    None => {
                        past_the_known_prefix = true;
                        false
                    }
                };
            if !done {
                // Shape change under the shard write lock.
                match self.nodes.entry(seq.0) {
                    Entry::Occupied(o) => added += usize::from(o.get().upsert(slot, update, guard)),
                    Entry::Vacant(v) => {
                        let parent_hash = parent.unwrap_or_default();
                        v.insert(Node::new(parent_hash, local, depth, slot, update(0)));
                        added += 1;
                    }
                }
            }
            parent = Some(seq);
            depth = depth.saturating_add(1);
        }
        added
    }

    /// The depth a child of `parent` has: one more than the parent's, or 1 if the parent
    /// is unknown (a walk then stops at the missing parent).
    fn depth_below(&self, parent: SequenceHash) -> u32 {
        self.nodes
            .get(&parent.0)
            .map_or(1, |n| n.depth.saturating_add(1))
    }

    /// Ends `slot`'s claims on the given blocks, as a `Removed` KV event does: the exact
    /// bit goes, and a pending approximate claim is killed (its timer's walk removes it).
    /// Returns the number of entries removed now.
    pub(crate) fn remove_exact(
        &self,
        slot: Slot,
        blocks: impl Iterator<Item = SequenceHash>,
        guard: &Guard,
    ) -> usize {
        self.nested
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let mut removed = 0;
        for seq in blocks {
            let Entry::Occupied(entry) = self.nodes.entry(seq.0) else {
                continue;
            };
            let outcome = entry.get().settle(
                slot,
                |c| {
                    if claim::approx(c) == 0 {
                        Settle::Remove
                    } else {
                        Settle::Set(claim::KILLED)
                    }
                },
                guard,
            );
            removed += self.finish_removal(entry, outcome);
        }
        removed
    }

    /// Walks from `leaf` towards the root ending `slot`'s approximate claims that are at
    /// or before `threshold` (all of its entries if the slot is dead): an entry with no
    /// other claim is removed, one that is also exact keeps only its exact bit. Unlinks
    /// nodes left empty.
    ///
    /// Stops at the first block where the slot's claim is later than `threshold`, absent
    /// or already ended, or whose node is gone: see `docs/design.md` ("One timer per
    /// decision") for why everything above is covered by another pending walk. Also stops
    /// once `budget` entries are removed, returning the block to resume from.
    pub(crate) fn walk(
        &self,
        leaf: SequenceHash,
        slot: Slot,
        threshold: u64,
        slot_alive: bool,
        budget: usize,
        guard: &Guard,
    ) -> Walked {
        let mut removed = 0;
        let mut key = leaf.0;
        loop {
            if removed >= budget {
                return Walked {
                    removed,
                    resume: Some(SequenceHash(key)),
                };
            }
            let Entry::Occupied(entry) = self.nodes.entry(key) else {
                break;
            };
            let node = entry.get();
            let (parent, depth) = (node.parent, node.depth);
            let outcome = node.settle(slot, |c| walk_decision(c, threshold, slot_alive), guard);
            if matches!(outcome, Outcome::Absent | Outcome::Kept) {
                break;
            }
            removed += self.finish_removal(entry, outcome);
            if depth == 0 {
                break;
            }
            key = parent.0;
        }
        Walked {
            removed,
            resume: None,
        }
    }

    /// Unlinks the node if `outcome` emptied it; returns the entries removed (0 or 1).
    fn finish_removal(
        &self,
        entry: dashmap::mapref::entry::OccupiedEntry<'_, u64, Node>,
        outcome: Outcome,
    ) -> usize {
        match outcome {
            Outcome::Removed => 1,
            Outcome::RemovedLast => {
                entry.remove();
                1
            }
            Outcome::Absent | Outcome::Kept | Outcome::Set => 0,
        }
    }

    /// Removes every entry of the given (dead) slots, node by node, one shard lock at a
    /// time. O(nodes): used only for dead slots that had exact entries, which no timer
    /// leads a walk to. Returns the entries removed per slot, in `slots` order.
    pub(crate) fn purge(&self, slots: &[Slot], guard: &Guard) -> Vec<usize> {
        let mut removed = vec![0; slots.len()];
        let keys: Vec<u64> = self
            .nodes
            .iter()
            .filter(|n| n.holders(guard).iter().any(|h| slots.contains(&h.slot)))
            .map(|n| *n.key())
            .collect();
        for key in keys {
            for (i, &slot) in slots.iter().enumerate() {
                let Entry::Occupied(entry) = self.nodes.entry(key) else {
                    break;
                };
                let outcome = entry.get().settle(slot, |_| Settle::Remove, guard);
                removed[i] += self.finish_removal(entry, outcome);
            }
        }
        removed
    }
}

/// The result of [`Tree::walk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Walked {
    /// Entries removed.
    pub(crate) removed: usize,
    /// Where the walk stopped for lack of budget, if it did.
    pub(crate) resume: Option<SequenceHash>,
}

/// What a walk does with an entry whose claim is `c`: see [`Tree::walk`].
#[inline]
fn walk_decision(c: u64, threshold: u64, slot_alive: bool) -> Settle {
    let approx = claim::approx(c);
    if !slot_alive {
        Settle::Remove
    } else if approx == 0 || approx > threshold {
        Settle::Keep
    } else if c & claim::EXACT != 0 {
        Settle::Set(claim::EXACT)
    } else {
        Settle::Remove
    }
}
