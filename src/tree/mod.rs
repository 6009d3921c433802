//! The concurrent hash-map radix tree.
//!
//! Nodes live in one [`NodeMap`] keyed by sequence hash: since a sequence hash names a
//! block *and its whole prefix*, the map is a radix tree whose edges are implicit (a
//! node's parent is the node keyed by its `parent` hash). A find walks it with one
//! lock-free map probe per block; writers never hold a shard lock across blocks.

pub(crate) mod claim;
mod cut;
mod export;
mod find;
mod holder;
#[cfg(not(loom))]
mod map;
#[cfg(loom)]
pub(crate) mod map; // for the loom model `read_vs_write`
mod nesting;
#[cfg(not(loom))]
mod node;
#[cfg(loom)]
pub(crate) mod node;
mod record;
pub(crate) mod run_alloc;
mod run_nodes;
mod split;
mod walk;
mod writing;

use std::sync::atomic::Ordering::Relaxed;

use crossbeam_epoch::Guard;

use crate::slot::{Slot, SlotBook};
use crate::stats::StripedCounter;
use crate::{LocalBlockHash, SequenceHash};

use claim::Claim;
pub(crate) use export::{LiveEntry, ReadAt};
pub(crate) use find::HashedQuery;
pub(crate) use holder::{Holder, Holders};
pub(crate) use map::SHARDS;
use map::{Entry, NodeMap};
use node::{Kind, Node, Outcome, Settle};
pub(crate) use walk::{Span, Walk};
pub(crate) use writing::Writing;

/// The most probes [`Tree::claim_on_last`] makes going down a prompt from a key above the
/// run that it looks for (each a dependent miss) before it probes every block up to it.
const CLAIM_HOPS: usize = 16;

/// The node map and the operations of find, record, sweep and dump on it.
pub(crate) struct Tree {
    nodes: NodeMap,
    /// True while every worker's live entries along any prompt form a prefix (holder sets
    /// shrink with depth), which lets find gallop. Cleared for good by anything that can
    /// break it (`nesting.rs`): KV events that may leave a gap or an exact claim below
    /// one that can end, and restores of entries that may.
    pub(crate) holders_nested: std::sync::atomic::AtomicBool,
    /// True while decisions may make runs: cleared for good with `holders_nested`, and by
    /// the first exact KV event (which looks blocks up by key: see [`Tree::stop_runs`]).
    pub(crate) makes_runs: std::sync::atomic::AtomicBool,
    /// Heap bytes of the holder arrays (nodes with two or more holders) and of the runs, as
    /// a wrapping sum of the changes that shape changes made ([`Tree::reshape`], `run_alloc.rs`).
    array_bytes: StripedCounter,
    /// Runs in the tree (`run_alloc.rs`): while there are none, every block has a key. Padded,
    /// as `run_blocks`: every new run writes them, and no find's read of `nodes` and
    /// `nested` should miss for it.
    runs: crossbeam_utils::CachePadded<std::sync::atomic::AtomicUsize>,
    /// The blocks of those runs.
    run_blocks: crossbeam_utils::CachePadded<std::sync::atomic::AtomicUsize>,
    /// Entries that left the tree while their slots' counts still have them, until the
    /// write's [`Writing`] pin ends and hands them to `book`: entries that splits merged
    /// into a block the run's slot already held (left above a gap, as walks and purges may
    /// leave them), and removed workers' holders that a copy of their array dropped
    /// ([`Tree::upsert_holder`]).
    uncounted: crate::sync::SegQueue<(Slot, usize)>,
    /// The worker registry: which slots are dead, and where `uncounted` goes.
    book: std::sync::Arc<dyn SlotBook>,
    /// Whether writers that copy a holder array leave out dead slots' holders.
    drop_dead: bool,
    /// Splits of runs take turns (`run_alloc.rs`, `Tree::split`).
    splitting: parking_lot::Mutex<()>,
}

/// One block to store: its hashes and the claim to raise (or add) for the slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Block {
    pub(crate) local: LocalBlockHash,
    pub(crate) seq: SequenceHash,
    pub(crate) claim: Claim,
}

/// An approximate claim that left the tree with an entry in the middle of a path: the
/// entries above it (from `leaf` up) still carry claims of the same decisions, and need a
/// walk of their own at `expiry` (see `docs/design.md`, "One timer per decision").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Anchor {
    pub(crate) leaf: SequenceHash,
    pub(crate) expiry: u64,
}

impl Tree {
    /// A tree whose slots `book` keeps. With `drop_dead`, writers that copy a holder array
    /// leave out the holders of the slots `book` says are dead (see [`Tree::upsert_holder`]).
    pub(crate) fn new(book: std::sync::Arc<dyn SlotBook>, drop_dead: bool) -> Self {
        Self {
            nodes: NodeMap::new(),
            holders_nested: std::sync::atomic::AtomicBool::new(true),
            makes_runs: std::sync::atomic::AtomicBool::new(true),
            array_bytes: StripedCounter::default(),
            runs: crossbeam_utils::CachePadded::new(std::sync::atomic::AtomicUsize::new(0)),
            run_blocks: crossbeam_utils::CachePadded::new(std::sync::atomic::AtomicUsize::new(0)),
            uncounted: crate::sync::SegQueue::new(),
            book,
            drop_dead,
            splitting: parking_lot::Mutex::new(()),
        }
    }

    /// A tree of its own, for the tree's tests and loom models: every slot alive, no
    /// counts kept.
    #[cfg(test)]
    pub(crate) fn standalone() -> Self {
        Self::new(std::sync::Arc::new(crate::slot::AllAlive), false)
    }

    /// Raises `slot`'s claim on `node` (a block, or the head of a run of `blocks` blocks)
    /// to include `claim`, adding the slot if it is not a holder, under the shard write
    /// lock; returns whether it was added. A copy of the node's holder array (an insert
    /// below the last slot, or a full array growing) leaves out the holders of dead
    /// slots, and hands their entries (one per block) to the uncount queue: under churn, a
    /// shared block's array carries at most the dead holders appended since its last copy,
    /// and each costs a live call O(1) amortised.
    fn upsert_holder(
        &self,
        node: &mut Node,
        (slot, claim): (Slot, Claim),
        blocks: usize,
        guard: &Guard,
    ) -> bool {
        let book = &self.book;
        self.reshape(node, guard, |n| {
            if self.drop_dead && book.any_dead() {
                n.upsert_dropping(
                    (slot, claim),
                    |s| book.is_dead(s),
                    |s| self.uncounted.push((s, blocks)),
                    guard,
                )
            } else {
                n.upsert(slot, claim, guard)
            }
        })
    }

    /// The shard of the node map that holds the block `seq` (see `NodeMap::shard_of`).
    #[cfg(test)]
    pub(crate) fn shard_of(&self, seq: SequenceHash) -> usize {
        self.nodes.shard_of(seq.0)
    }

    /// `slot`'s claim on the block `seq`, if it holds one. A block inside a run has no key:
    /// if `seq` has none while runs exist, they are split up and `seq` looked up again.
    pub(crate) fn claim_of(
        &self,
        seq: SequenceHash,
        slot: Slot,
        guard: &Writing<'_>,
    ) -> Option<Claim> {
        self.keyed(guard, |tree| tree.claim_at(seq, slot, guard))
            .flatten()
    }

    /// `slot`'s claim on the last block of `held`, a prefix of a prompt that the slot holds
    /// (as a find just read it): the claim at the nearest key at or above that block, since
    /// the blocks inside a run, which have no key, share their run's claims. `None` if no
    /// key is found, or the slot holds none there.
    ///
    /// The last block's own key first. Without one, it is inside a run, whose head may be
    /// a hundred blocks up (a conversation's next turn leaves the last turn's run where the
    /// last trace block changed): the probes gallop up from it, and a run headed at the
    /// first key they meet that the prompt follows down to the last block is that run (no
    /// block inside it has a key). Any other key: on down the prompt from it, a run or a
    /// block a probe, for at most [`CLAIM_HOPS`] probes; then every block up from the
    /// last to the last key that met, in turn, their buckets loaded a few keys ahead.
    pub(crate) fn claim_on_last(
        &self,
        slot: Slot,
        held: &[SequenceHash],
        guard: &Guard,
    ) -> Option<Claim> {
        let last = held.len().checked_sub(1)?;
        if let Some(found) = self.claim_at(held[last], slot, guard) {
            return found;
        }
        // Where the prompt leaves the run headed at its block `at` (the callers hold the
        // head's shard lock).
        let reach = |run: run_alloc::RunPtr, at: usize| {
            // SAFETY: read from a head under its shard's lock, with `guard` pinned (a run
            // is retired only after its head leaves the map).
            let run = unsafe { run_alloc::run_at(run, guard) };
            at + run.matched(at, held.len(), &mut &held[..])
        };
        let (mut at, mut step) = (last, 1);
        // The first key the gallop met, if any: the nearest is there or below it.
        let floor = loop {
            if at == 0 {
                break 0;
            }
            at = at.saturating_sub(step);
            step *= 2;
            let Some(node) = self.nodes.get(&held[at].0) else {
                continue;
            };
            if let Kind::Head(run) = node.kind() {
                if reach(run, at) == held.len() {
                    return holder::find(&node.holders(guard), slot).map(Holder::claim);
                }
            }
            break at;
        };
        // On from that key along the prompt, a run or a block a probe, to the last key at
        // or above the last block.
        let (mut at, mut key_at) = (floor, floor);
        for _ in 0..CLAIM_HOPS {
            let Some(node) = self.nodes.get(&held[at].0) else {
                break;
            };
            key_at = at;
            let next = match node.kind() {
                Kind::Head(run) => reach(run, at).max(at + 1),
                Kind::Block | Kind::Tail { .. } => at + 1,
            };
            drop(node);
            if next > last {
                return self.claim_at(held[at], slot, guard).flatten();
            }
            at = next;
        }
        let keys = held[key_at..last].iter().rev();
        let mut keys = self.nodes.prefetching(keys, |k| k.0, guard);
        keys.find_map(|&seq| self.claim_at(seq, slot, guard))
            .flatten()
    }

    /// Starts loading the buckets of `keys`, the last first (the order a walk from a
    /// leaf takes them): a hint, as [`NodeMap::prefetch`].
    pub(crate) fn prefetch_keys(&self, keys: &[SequenceHash], guard: &Guard) {
        for key in keys.iter().rev() {
            self.nodes.prefetch(key.0, guard);
        }
    }

    /// `slot`'s claim on the block keyed `seq` (a block, a run's head, or its tail marker,
    /// which reads as the run): `None` if there is no such key, `Some(None)` if the slot
    /// does not hold it. For blocks that are keys whenever they exist, such as a logged
    /// decision's leaf: nothing is split.
    pub(crate) fn claim_at(
        &self,
        seq: SequenceHash,
        slot: Slot,
        guard: &Guard,
    ) -> Option<Option<Claim>> {
        loop {
            let node = self.nodes.get(&seq.0)?;
            let holders = match node.kind() {
                Kind::Block | Kind::Head(_) => node.holders(guard),
                Kind::Tail { head, run } => {
                    drop(node);
                    match self.nodes.get(&head.0) {
                        Some(h) if h.kind() == Kind::Head(run) => h.holders(guard),
                        _ if self.marker_moved(seq.0, (head, run)) => continue,
                        _ => return None, // the run is gone: no claim there
                    }
                }
            };
            return Some(holder::find(&holders, slot).map(Holder::claim));
        }
    }

    /// The parent of the block keyed `seq`, if that key is a block below another (not a
    /// run's head or marker, nor a prompt's first block).
    pub(crate) fn parent_of_block(&self, seq: SequenceHash) -> Option<SequenceHash> {
        let node = self.nodes.get(&seq.0)?;
        (node.kind() == Kind::Block && node.depth() > 0).then(|| node.parent())
    }

    /// `look(self)`, and if it finds nothing while runs exist (the block may be inside
    /// one), again once every run is split up.
    fn keyed<R>(&self, guard: &Writing<'_>, look: impl Fn(&Self) -> Option<R>) -> Option<R> {
        look(self).or_else(|| {
            if self.runs.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                return None;
            }
            self.split_all(guard);
            look(self)
        })
    }

    /// Number of blocks (distinct prefixes) in the tree: the map's entries, with each run
    /// counted as its blocks instead of its head and tail marker (takes each shard's read
    /// lock in turn; a run made or removed meanwhile may be counted off by its blocks).
    pub(crate) fn len(&self) -> usize {
        let (runs, blocks) = (self.runs.load(Relaxed), self.run_blocks.load(Relaxed));
        (self.nodes.len() + blocks).saturating_sub(2 * runs)
    }

    /// An estimate of the heap bytes held: the map's buckets (key and inline node, 64
    /// bytes) at their current capacity, plus the holder arrays of nodes held by two or
    /// more slots (an 8-byte capacity header and 16 bytes per cell) and the runs, before
    /// allocator rounding.
    pub(crate) fn estimated_bytes(&self) -> usize {
        self.nodes.heap_bytes() + self.array_bytes.sum() as usize
    }

    /// Runs a change of `node`'s holders (the shard write lock held), keeping the count
    /// of array bytes in step with the arrays it builds and retires.
    fn reshape<R>(&self, node: &mut Node, guard: &Guard, change: impl FnOnce(&mut Node) -> R) -> R {
        let before = node.array_bytes(guard);
        let result = change(node);
        let after = node.array_bytes(guard);
        if after != before {
            self.array_bytes
                .add((after as u64).wrapping_sub(before as u64));
        }
        result
    }

    /// Removes `slot`'s entries on the given blocks, exact and approximate claims alike,
    /// as a `Removed` KV event does. Returns the entries removed, and an [`Anchor`] for
    /// each removed approximate claim that had a parent: the walks of the decisions behind
    /// it stop at the gap, so the caller schedules (and logs) one walk from the parent.
    ///
    /// Runs stop ([`Tree::stop_runs`]). While finds gallop, `leaves_gap(block, claim)` is
    /// asked of each entry removed, with the claim it had: whether the slot may still hold
    /// blocks below it, which ends galloping.
    pub(crate) fn remove_entries(
        &self,
        slot: Slot,
        blocks: impl Iterator<Item = SequenceHash> + Clone,
        mut leaves_gap: impl FnMut(SequenceHash, Claim) -> bool,
        guard: &Writing<'_>,
    ) -> (usize, Vec<Anchor>) {
        self.stop_runs();
        let mut removed = 0;
        let mut anchors = Vec::new();
        for seq in self.nodes.prefetching(blocks, |s| s.0, guard) {
            let Some(mut entry) = self.block_entry(seq, guard) else {
                continue;
            };
            let (parent, depth) = (entry.get().parent(), entry.get().depth());
            let outcome = self.reshape(entry.get_mut(), guard, |n| {
                n.settle(
                    slot,
                    |was| {
                        // Before the removal is written back: a find that gallops over
                        // the gap started before it.
                        if self.holders_nested.load(Relaxed) && leaves_gap(seq, was) {
                            self.not_nested();
                        }
                        Settle::Remove
                    },
                    guard,
                )
            });
            if let Outcome::Removed { was, .. } = outcome {
                if was.expiry != 0 && depth > 0 {
                    anchors.push(Anchor {
                        leaf: parent,
                        expiry: was.expiry,
                    });
                }
            }
            removed += finish_removal(entry, outcome);
        }
        (removed, anchors)
    }

    /// The write-locked entry of block `seq` as a block node: a run it is in is split up
    /// first (if `seq` has no key while runs exist, every run is). `None`: no such block.
    fn block_entry(
        &self,
        seq: SequenceHash,
        guard: &Writing<'_>,
    ) -> Option<map::OccupiedEntry<'_>> {
        let mut split_all = self.runs.load(std::sync::atomic::Ordering::SeqCst) > 0;
        loop {
            let Entry::Occupied(entry) = self.nodes.entry(seq.0) else {
                // (The vacant entry's lock is dropped here, before the pass over the map.)
                if !split_all {
                    return None;
                }
                split_all = false;
                self.split_all(guard);
                continue;
            };
            let Some(run) = entry.get().kind().run(seq.0) else {
                return Some(entry);
            };
            drop(entry);
            self.clear_run_at(seq.0, run, guard);
        }
    }
}

/// Unlinks the node if `outcome` emptied it; returns the entries removed (0 or 1).
fn finish_removal(entry: map::OccupiedEntry<'_>, outcome: Outcome) -> usize {
    match outcome {
        Outcome::Removed { last: true, .. } => {
            entry.remove();
            1
        }
        Outcome::Removed { last: false, .. } => 1,
        Outcome::Absent | Outcome::Kept | Outcome::Cleared => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The array bytes follow the arrays and runs: a run for a prompt's new blocks, none
    /// once it is split up into blocks with one holder each, one array per block shared by
    /// two, none again once the second holder's walk ran.
    #[test]
    fn array_bytes_follow_the_nodes_that_need_an_array() {
        let tree = Tree::standalone();
        let guard = tree.writing();
        let local: Vec<LocalBlockHash> = (1..=6).map(LocalBlockHash).collect();
        let seq = crate::compute_seq_hashes(&local);
        let buckets = tree.estimated_bytes();
        assert_eq!(tree.record(1, (&local, &seq), 100, true, &guard), 6);
        // One allocation: the header (length, state), then two hashes a block.
        let run = 16 + 6 * 16;
        assert_eq!(tree.array_bytes.sum(), run as u64);
        let sizes = (tree.nodes.len(), tree.len(), tree.runs.load(Relaxed));
        assert_eq!(sizes, (2, 6, 1), "a head and a tail marker for 6 blocks");
        let map = tree.nodes.heap_bytes();
        assert_eq!(map, map::SHARDS * 8 * 64, "every shard's first table");
        assert_eq!(tree.estimated_bytes(), map + run);
        // The whole run refreshed: in place, one entry.
        assert_eq!(tree.record(1, (&local, &seq), 110, false, &guard), 0);
        assert_eq!((tree.nodes.len(), tree.len()), (2, 6));
        assert!(tree.holds_live(seq[3], 1, 109, &guard));
        // A second holder on the first four blocks: the run is split up, and four blocks
        // get arrays of two cells.
        assert_eq!(
            tree.record(2, (&local[..4], &seq[..4]), 50, true, &guard),
            4
        );
        assert_eq!(tree.array_bytes.sum(), 4 * (8 + 2 * 16));
        assert!(tree.estimated_bytes() >= buckets + 4 * 40);
        // A third holder (appended) on two of them: their arrays are rebuilt for three.
        assert_eq!(
            tree.record(3, (&local[..2], &seq[..2]), 50, true, &guard),
            2
        );
        assert_eq!(tree.array_bytes.sum(), 2 * 40 + 2 * (8 + 3 * 16));
        // Slots 2 and 3 walked out: every node is back to one inline holder.
        for slot in [2, 3] {
            let leaf = seq[if slot == 2 { 3 } else { 1 }];
            let walk = Walk {
                leaf,
                slot,
                threshold: 60,
                slot_alive: true,
                budget: usize::MAX,
                span: Span::Path,
                blocks: usize::MAX,
                lower_to: None,
            };
            let walked = tree.walk(walk, |_| {}, &guard);
            assert_eq!(walked.removed, if slot == 2 { 4 } else { 2 });
        }
        assert_eq!(tree.array_bytes.sum(), 0);
        assert_eq!(tree.len(), 6);
        assert!(tree.holds_live(seq[5], 1, 99, &guard));
        assert!(!tree.holds_live(seq[0], 2, 0, &guard));
    }

    /// The claim at the nearest key at or above a block, probed block by block: what
    /// `claim_on_last` must equal.
    fn nearest_claim(
        tree: &Tree,
        slot: Slot,
        held: &[SequenceHash],
        guard: &Guard,
    ) -> Option<Claim> {
        held.iter()
            .rev()
            .find_map(|&seq| tree.claim_at(seq, slot, guard))
            .flatten()
    }

    /// A slot's claim on the last block of a prefix it holds, read inside runs (the gallop
    /// meeting the run's head, or overshooting to an earlier one), at tail markers, at
    /// blocks, and for a slot that holds nothing there; every prefix of the prompts agrees
    /// with the claim found block by block.
    #[test]
    fn claim_on_last_reads_the_run_a_prefix_ends_in() {
        let tree = Tree::standalone();
        let guard = tree.writing();
        let local: Vec<LocalBlockHash> = (1..=300).map(LocalBlockHash).collect();
        let seq = crate::compute_seq_hashes(&local);
        // Runs [0, 100) at 300, [100, 200) at 200; a branch off block 139 held by slot 2.
        tree.record(1, (&local[..100], &seq[..100]), 300, true, &guard);
        tree.record(1, (&local[..200], &seq[..200]), 200, false, &guard);
        let branch: Vec<LocalBlockHash> =
            (1..=140).chain(1001..=1010).map(LocalBlockHash).collect();
        let branch_seq = crate::compute_seq_hashes(&branch);
        tree.record(2, (&branch, &branch_seq), 150, true, &guard);
        let claim = |slot, k: usize| tree.claim_on_last(slot, &seq[..k], &guard);
        assert_eq!(
            claim(1, 60),
            Some(Claim::approx(300)),
            "inside the first run"
        );
        assert_eq!(claim(1, 100), Some(Claim::approx(300)), "its last block");
        assert_eq!(claim(1, 180), Some(Claim::approx(200)), "inside the second");
        assert_eq!(claim(1, 120), Some(Claim::approx(200)), "inside the second");
        assert_eq!(claim(2, 120), Some(Claim::approx(150)));
        assert_eq!(
            claim(2, 190),
            None,
            "slot 2 does not hold the second run's end"
        );
        assert_eq!(claim(1, 0), None, "nothing held");
        for slot in [1, 2, 3] {
            for k in 0..=300 {
                let expected = nearest_claim(&tree, slot, &seq[..k], &guard);
                assert_eq!(claim(slot, k), expected, "slot {slot}, {k} blocks");
            }
            for k in 0..=branch_seq.len() {
                let held = &branch_seq[..k];
                let expected = nearest_claim(&tree, slot, held, &guard);
                assert_eq!(tree.claim_on_last(slot, held, &guard), expected);
            }
        }
    }
}
