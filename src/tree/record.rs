//! Recording a decision: refreshing what the slot holds, joining runs the prompt covers,
//! inserting the rest as one run or block by block (`Tree::record`), and the same block
//! by block for KV events (`Tree::upsert_chain`).

use super::Writing;
use std::sync::atomic::Ordering::Relaxed;

use crossbeam_epoch::Guard;

use super::claim::Claim;
use super::map::Entry;
use super::node::{Kind, Node};
use super::run_alloc::{self, MIN_RUN};
use super::{Block, Tree};
use crate::slot::Slot;
use crate::{LocalBlockHash, SequenceHash};

impl Tree {
    /// Records that `slot` holds every block of the prompt until `expiry`. Returns the
    /// number of (block, slot) entries newly added (the rest were refreshed). `holds_none`:
    /// the slot had no entries when the caller looked (a worker's first decision, such as
    /// each new sharer of a system prompt), so no block needs the read-locked refresh probe
    /// first; a hint only, since the write-locked insert refreshes an entry it finds.
    ///
    /// Blocks the tree does not have yet become one run while finds gallop (`run_alloc.rs`); a
    /// run the slot holds that the prompt covers whole is refreshed with one atomic; any
    /// other run met on the way is split up first.
    pub(crate) fn record(
        &self,
        slot: Slot,
        (local, seq): (&[LocalBlockHash], &[SequenceHash]),
        expiry: u64,
        holds_none: bool,
        guard: &Writing<'_>,
    ) -> usize {
        let claim = Claim::approx(expiry);
        let n = seq.len().min(local.len());
        let mut added = 0;
        let (mut i, mut depth) = (0, 0u32);
        let mut parent = SequenceHash::default();
        // As in `upsert_chain`: past the slot's known prefix, skip the read-locked probe
        // (from the start for a slot that held nothing).
        let mut past_the_known_prefix = holds_none;
        // Whether the next block may be missing (not merely unheld by the slot): a run is
        // tried only then, so a worker joining a shared prompt tries none per block.
        let mut may_be_missing = true;
        // Once runs are off, every block is a node of its own: prefetch the next ones.
        let per_block = !self.makes_runs.load(Relaxed);
        let mut prefetched = 0;
        while i < n {
            if per_block {
                self.nodes
                    .prefetch_ahead(|j| seq[j].0, (i, n), &mut prefetched, guard);
            }
            if !past_the_known_prefix {
                match self.refresh_at(slot, &seq[..n], i, claim, guard) {
                    Refresh::Done { blocks, added: a } => {
                        added += a;
                        i += blocks;
                        depth = depth.saturating_add(blocks as u32);
                        parent = seq[i - 1];
                        continue;
                    }
                    Refresh::Split(head, run) => {
                        self.fit_run(&seq[..n], i, (head, run), guard);
                        continue;
                    }
                    Refresh::Missing => past_the_known_prefix = true,
                }
            }
            if may_be_missing && n - i >= MIN_RUN && self.makes_runs.load(Relaxed) {
                let blocks = (&local[i..n], &seq[i..n]);
                if self.insert_run(slot, parent, depth, blocks, expiry, guard) {
                    added += n - i;
                    break;
                }
            }
            let block = BlockAt {
                seq: seq[i],
                parent,
                local: local[i],
                depth,
            };
            match self.upsert_locked((slot, claim), block, guard) {
                Ok(placed) => {
                    added += usize::from(placed != Placed::Raised);
                    may_be_missing = placed == Placed::NewNode;
                }
                // A run the prompt covers whole: the slot joins it.
                Err((head, run)) if head == seq[i] => {
                    if let Some((blocks, joined)) = self.join_run(slot, &seq[..n], i, claim, guard)
                    {
                        added += if joined { blocks } else { 0 };
                        i += blocks;
                        depth = depth.saturating_add(blocks as u32);
                        parent = seq[i - 1];
                        may_be_missing = true;
                        continue;
                    }
                    self.fit_run(&seq[..n], i, (head, run), guard);
                    continue;
                }
                Err(run) => {
                    self.clear_run_at(seq[i].0, run, guard);
                    continue;
                }
            }
            parent = seq[i];
            depth = depth.saturating_add(1);
            i += 1;
        }
        added
    }

    /// Refreshes `slot`'s claim on block `i` of `seq` in place (under the shard read
    /// lock), or on the whole run that starts there if the slot holds it and the prompt
    /// covers it.
    fn refresh_at(
        &self,
        slot: Slot,
        seq: &[SequenceHash],
        i: usize,
        claim: Claim,
        guard: &Writing<'_>,
    ) -> Refresh {
        let Some(node) = self.nodes.get(&seq[i].0) else {
            return Refresh::Missing;
        };
        match node.kind() {
            Kind::Block => {
                // A record starts at the prompt's first block: block `i` is at depth `i`.
                if let Some(&parent) = i.checked_sub(1).and_then(|p| seq.get(p)) {
                    node.raise_depth(parent, i as u32);
                }
                if node.update_claim(slot, claim, guard) {
                    Refresh::Done {
                        blocks: 1,
                        added: 0,
                    }
                } else {
                    Refresh::Missing
                }
            }
            Kind::Head(run) => {
                // SAFETY: read from a head under the shard lock, with `guard` pinned.
                let r = unsafe { run_alloc::run_at(run, guard) };
                let span = node.run_span();
                // The claim changes in place only while the run is live: a split freezes
                // it under the write lock, which this read lock excludes.
                if !r.is_live() || !span.covered_by(seq, i) {
                    return Refresh::Split(seq[i], run);
                }
                if node.update_claim(slot, claim, guard) {
                    return Refresh::Done {
                        blocks: span.len,
                        added: 0,
                    };
                }
                // Another slot's run that the prompt covers: join it (write lock).
                drop(node);
                match self.join_run(slot, seq, i, claim, guard) {
                    Some((blocks, joined)) => Refresh::Done {
                        blocks,
                        added: if joined { blocks } else { 0 },
                    },
                    None => Refresh::Split(seq[i], run),
                }
            }
            // A tail marker where a prompt's walk from the root arrives (a marker left
            // behind by a run that is gone): the run, if any, goes.
            Kind::Tail { head, run } => {
                drop(node);
                self.clear_run_at(seq[i].0, (head, run), guard);
                Refresh::Missing
            }
        }
    }

    /// Whether `slot` holds the block `seq` live at `now`.
    pub(crate) fn holds_live(
        &self,
        seq: SequenceHash,
        slot: Slot,
        now: u64,
        guard: &Writing<'_>,
    ) -> bool {
        self.claim_of(seq, slot, guard).is_some_and(|c| c.live(now))
    }

    /// Raises `slot`'s claim on each block of a chain that continues `parent` (`None`: the
    /// chain starts at the root), adding missing entries and nodes. Returns the number of
    /// entries added.
    pub(crate) fn upsert_chain(
        &self,
        slot: Slot,
        parent: Option<SequenceHash>,
        blocks: impl Iterator<Item = Block> + Clone,
        guard: &Writing<'_>,
    ) -> usize {
        let mut added = 0;
        let mut parent = parent;
        let mut depth = parent.map_or(0, |p| self.depth_below(p, guard));
        // Once a block is missing, or the slot does not hold it, its descendants in this
        // chain are missing for the slot too (holder sets shrink with depth; a concurrent
        // record racing us, or entries of KV events that break the nesting, are handled by
        // the write-locked path, which raises an entry it finds): skip the read-locked
        // probe so that a new entry costs one map probe, not two.
        let mut past_the_known_prefix = false;
        for Block { local, seq, claim } in self.nodes.prefetching(blocks, |b| b.seq.0, guard) {
            // In place under the shard read lock: one probe, one atomic.
            let done = !past_the_known_prefix
                && self.nodes.get(&seq.0).is_some_and(|node| {
                    node.kind() == Kind::Block && {
                        node.raise_depth(parent.unwrap_or_default(), depth);
                        node.update_claim(slot, claim, guard)
                    }
                });
            past_the_known_prefix |= !done;
            if !done {
                let block = BlockAt {
                    seq,
                    parent: parent.unwrap_or_default(),
                    local,
                    depth,
                };
                added += usize::from(self.upsert_block((slot, claim), block, guard));
            }
            parent = Some(seq);
            depth = depth.saturating_add(1);
        }
        added
    }

    /// Adds (or raises) `slot`'s entry on `block` under the shard write lock, creating
    /// its node if it is missing. Returns whether an entry was added, or the run (head,
    /// pointer) that is there instead: the caller splits it up and tries again.
    fn upsert_locked(
        &self,
        (slot, claim): (Slot, Claim),
        block: BlockAt,
        guard: &Guard,
    ) -> Result<Placed, (SequenceHash, usize)> {
        let BlockAt {
            seq,
            parent,
            local,
            depth,
        } = block;
        match self.nodes.entry(seq.0) {
            Entry::Occupied(mut o) => {
                if let Some(run) = o.get().kind().run(seq.0) {
                    return Err(run);
                }
                o.get().raise_depth(parent, depth);
                let added = self.upsert_holder(o.get_mut(), (slot, claim), 1, guard);
                Ok(if added {
                    Placed::NewHolder
                } else {
                    Placed::Raised
                })
            }
            Entry::Vacant(v) => {
                v.insert(Node::new(parent, local, depth, slot, claim));
                Ok(Placed::NewNode)
            }
        }
    }

    /// [`upsert_locked`](Self::upsert_locked), splitting up any run in the way (a stale
    /// tail marker, whose run is gone, is replaced).
    pub(super) fn upsert_block(
        &self,
        entry: (Slot, Claim),
        block: BlockAt,
        guard: &Writing<'_>,
    ) -> bool {
        loop {
            match self.upsert_locked(entry, block, guard) {
                Ok(placed) => return placed != Placed::Raised,
                Err(run) => self.clear_run_at(block.seq.0, run, guard),
            }
        }
    }

    /// The depth a child of `parent` has: one more than the parent's, or 1 if the parent
    /// is unknown (a walk then stops at the missing parent).
    ///
    /// A parent that is a run's head is split up first: its child would be inside the run.
    /// (A tail's children hang below the run, which stays.)
    fn depth_below(&self, parent: SequenceHash, guard: &Writing<'_>) -> u32 {
        loop {
            let found = self.keyed(guard, |tree| {
                tree.nodes.get(&parent.0).map(|n| (n.kind(), n.depth()))
            });
            match found {
                None => return 1,
                Some((Kind::Head(run), _)) => self.split(parent, run, guard),
                Some((_, depth)) => return depth.saturating_add(1),
            }
        }
    }
}

/// Where a block goes in the tree: its key, its parent's key, its tokens hash and its
/// position in its prompt (a node made for it takes these).
#[derive(Debug, Clone, Copy)]
pub(super) struct BlockAt {
    pub(super) seq: SequenceHash,
    pub(super) parent: SequenceHash,
    pub(super) local: LocalBlockHash,
    pub(super) depth: u32,
}

/// What [`Tree::upsert_locked`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placed {
    /// A new node, held by the slot.
    NewNode,
    /// The slot added to a node's holders.
    NewHolder,
    /// The slot's claim raised (it held the block).
    Raised,
}

/// What [`Tree::refresh_at`] did.
enum Refresh {
    /// Refreshed (or joined) this many blocks (one, or a whole run), of which `added` are
    /// new entries of the slot (a run it joined).
    Done { blocks: usize, added: usize },
    /// The slot does not hold the block, or there is none.
    Missing,
    /// A run (head, pointer) that must be split up first.
    Split(SequenceHash, usize),
}
