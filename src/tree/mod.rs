//! The concurrent hash-map radix tree.
//!
//! Nodes live in one [`DashMap`] keyed by sequence hash: since a sequence hash names a
//! block *and its whole prefix*, the map is a radix tree whose edges are implicit (a
//! node's parent is the node keyed by its `parent` hash). A find walks it with one map
//! probe per block, never holding a shard lock across blocks.

pub(crate) mod claim;
mod cut;
mod export;
mod find;
mod node;
pub(crate) mod run;
mod runs;

use std::sync::atomic::Ordering::Relaxed;

use crossbeam_epoch::Guard;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use crate::id_hasher::IdBuildHasher;
use crate::slot::Slot;
use crate::stats::StripedCounter;
use crate::{LocalBlockHash, SequenceHash};

use claim::Claim;
pub(crate) use export::{LiveEntry, ReadAt};
pub(crate) use find::Query;
pub(crate) use node::{Holder, Holders};
use node::{Kind, Node, Outcome, Settle};
use run::MIN_RUN;
use runs::RunWalk;

/// Shards of the node map: enough that writers on different prefixes rarely meet.
const SHARDS: usize = 128;

/// The node map and the operations of find, record, sweep and dump on it.
pub(crate) struct Tree {
    nodes: DashMap<u64, Node, IdBuildHasher>,
    /// True while every worker's live entries along any prompt form a prefix (holder sets
    /// shrink with depth), which lets find gallop. Cleared for good by anything that can
    /// break it: KV events, restores, and decisions whose sequence hashes are not the
    /// chain of their local hashes.
    pub(crate) nested: std::sync::atomic::AtomicBool,
    /// Heap bytes of the holder arrays (nodes with two or more holders) and of the runs, as
    /// a wrapping sum of the changes that shape changes made ([`Tree::reshape`], `run.rs`).
    array_bytes: StripedCounter,
    /// Runs in the tree (`run.rs`): while there are none, every block has a key.
    runs: std::sync::atomic::AtomicUsize,
    /// The blocks of those runs.
    run_blocks: std::sync::atomic::AtomicUsize,
    /// Entries that splits merged into a block the run's slot already held (left above a
    /// gap, as walks and purges may leave them): the slot's count has them twice, until
    /// the engine takes them ([`Tree::take_merged`]) and uncounts them.
    merged: crate::sync::SegQueue<(Slot, usize)>,
    /// Splits of runs take turns (`run.rs`, `Tree::split`).
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
    pub(crate) fn new() -> Self {
        Self {
            nodes: DashMap::with_capacity_and_hasher_and_shard_amount(
                0,
                IdBuildHasher::default(),
                SHARDS,
            ),
            nested: std::sync::atomic::AtomicBool::new(true),
            array_bytes: StripedCounter::default(),
            runs: std::sync::atomic::AtomicUsize::new(0),
            run_blocks: std::sync::atomic::AtomicUsize::new(0),
            merged: crate::sync::SegQueue::new(),
            splitting: parking_lot::Mutex::new(()),
        }
    }

    /// Finds stop galloping from now on (see [`Tree::nested`]), and no more runs are made;
    /// the runs there are stay until something splits them up.
    pub(crate) fn not_nested(&self) {
        self.nested
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// `slot`'s claim on the block `seq`, if it holds one. A block inside a run has no key:
    /// if `seq` has none while runs exist, they are split up and `seq` looked up again.
    pub(crate) fn claim_of(&self, seq: SequenceHash, slot: Slot, guard: &Guard) -> Option<Claim> {
        self.keyed(guard, |tree| tree.claim_at(seq, slot, guard))
            .flatten()
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
        let node = self.nodes.get(&seq.0)?;
        let holders = match node.kind() {
            Kind::Block | Kind::Head(_) => node.holders(guard),
            Kind::Tail { head, .. } => {
                drop(node);
                self.nodes.get(&head.0)?.holders(guard)
            }
        };
        Some(node::find(&holders, slot).map(Holder::claim))
    }

    /// `look(self)`, and if it finds nothing while runs exist (the block may be inside
    /// one), again once every run is split up.
    fn keyed<R>(&self, guard: &Guard, look: impl Fn(&Self) -> Option<R>) -> Option<R> {
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

    /// An estimate of the heap bytes held: the map's buckets (key, inline node, control
    /// byte) at their current capacity, plus the holder arrays of nodes held by two or more
    /// slots (an 8-byte capacity header and 16 bytes per cell, before allocator rounding).
    pub(crate) fn estimated_bytes(&self) -> usize {
        let bucket = std::mem::size_of::<(u64, Node)>() + 1;
        self.nodes.capacity() * bucket + self.array_bytes.sum() as usize
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

    /// Records that `slot` holds every block of the prompt until `expiry`. Returns the
    /// number of (block, slot) entries newly added (the rest were refreshed). `holds_none`:
    /// the slot had no entries when the caller looked (a worker's first decision, such as
    /// each new sharer of a system prompt), so no block needs the read-locked refresh probe
    /// first; a hint only, since the write-locked insert refreshes an entry it finds.
    ///
    /// Blocks the tree does not have yet become one run while finds gallop (`run.rs`); a
    /// run the slot holds that the prompt covers whole is refreshed with one atomic; any
    /// other run met on the way is split up first.
    pub(crate) fn record(
        &self,
        slot: Slot,
        (local, seq): (&[LocalBlockHash], &[SequenceHash]),
        expiry: u64,
        holds_none: bool,
        guard: &Guard,
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
        while i < n {
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
            if may_be_missing && n - i >= MIN_RUN && self.nested.load(Relaxed) {
                let blocks = (&local[i..n], &seq[i..n]);
                if self.insert_run(slot, parent, depth, blocks, expiry, guard) {
                    added += n - i;
                    break;
                }
            }
            match self.upsert_locked(slot, seq[i], parent, local[i], depth, claim, guard) {
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
        guard: &Guard,
    ) -> Refresh {
        let Some(node) = self.nodes.get(&seq[i].0) else {
            return Refresh::Missing;
        };
        match node.kind() {
            Kind::Block if node.update_claim(slot, claim, guard) => Refresh::Done {
                blocks: 1,
                added: 0,
            },
            Kind::Block => Refresh::Missing,
            Kind::Head(run) => {
                // SAFETY: read from a head under the shard lock, with `guard` pinned.
                let r = unsafe { run::run_at(run, guard) };
                // The claim changes in place only while the run is live: a split freezes
                // it under the write lock, which this read lock excludes.
                if !r.is_live() || !r.covered_by(seq, i) {
                    return Refresh::Split(seq[i], run);
                }
                if node.update_claim(slot, claim, guard) {
                    return Refresh::Done {
                        blocks: r.len(),
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
        guard: &Guard,
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
        blocks: impl Iterator<Item = Block>,
        guard: &Guard,
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
        for Block { local, seq, claim } in blocks {
            // In place under the shard read lock: one probe, one atomic.
            let done = !past_the_known_prefix
                && self.nodes.get(&seq.0).is_some_and(|node| {
                    node.kind() == Kind::Block && node.update_claim(slot, claim, guard)
                });
            past_the_known_prefix |= !done;
            if !done {
                let parent_hash = parent.unwrap_or_default();
                added += usize::from(self.upsert_block(
                    slot,
                    seq,
                    parent_hash,
                    local,
                    depth,
                    claim,
                    guard,
                ));
            }
            parent = Some(seq);
            depth = depth.saturating_add(1);
        }
        added
    }

    /// Adds (or raises) `slot`'s entry on `seq` under the shard write lock, creating the
    /// node with the given parent, local hash and depth if it is missing. Returns whether
    /// an entry was added, or the run (head, pointer) that is there instead: the caller
    /// splits it up and tries again.
    #[allow(clippy::too_many_arguments)]
    fn upsert_locked(
        &self,
        slot: Slot,
        seq: SequenceHash,
        parent: SequenceHash,
        local: LocalBlockHash,
        depth: u32,
        claim: Claim,
        guard: &Guard,
    ) -> Result<Placed, (SequenceHash, usize)> {
        match self.nodes.entry(seq.0) {
            Entry::Occupied(mut o) => {
                if let Some(run) = o.get().kind().run(seq.0) {
                    return Err(run);
                }
                let added = self.reshape(o.get_mut(), guard, |n| n.upsert(slot, claim, guard));
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
    #[allow(clippy::too_many_arguments)]
    fn upsert_block(
        &self,
        slot: Slot,
        seq: SequenceHash,
        parent: SequenceHash,
        local: LocalBlockHash,
        depth: u32,
        claim: Claim,
        guard: &Guard,
    ) -> bool {
        loop {
            match self.upsert_locked(slot, seq, parent, local, depth, claim, guard) {
                Ok(placed) => return placed != Placed::Raised,
                Err(run) => self.clear_run_at(seq.0, run, guard),
            }
        }
    }

    /// The depth a child of `parent` has: one more than the parent's, or 1 if the parent
    /// is unknown (a walk then stops at the missing parent).
    ///
    /// A parent that is a run's head is split up first: its child would be inside the run.
    /// (A tail's children hang below the run, which stays.)
    fn depth_below(&self, parent: SequenceHash, guard: &Guard) -> u32 {
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

    /// Removes `slot`'s entries on the given blocks, exact and approximate claims alike,
    /// as a `Removed` KV event does. Returns the entries removed, and an [`Anchor`] for
    /// each removed approximate claim that had a parent: the walks of the decisions behind
    /// it stop at the gap, so the caller schedules (and logs) one walk from the parent.
    pub(crate) fn remove_entries(
        &self,
        slot: Slot,
        blocks: impl Iterator<Item = SequenceHash>,
        guard: &Guard,
    ) -> (usize, Vec<Anchor>) {
        self.not_nested();
        let mut removed = 0;
        let mut anchors = Vec::new();
        for seq in blocks {
            let Some(mut entry) = self.block_entry(seq, guard) else {
                continue;
            };
            let (parent, depth) = (entry.get().parent, entry.get().depth());
            let outcome = self.reshape(entry.get_mut(), guard, |n| {
                n.settle(slot, |_| Settle::Remove, guard)
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
        guard: &Guard,
    ) -> Option<dashmap::mapref::entry::OccupiedEntry<'_, u64, Node>> {
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

    /// Walks from `leaf` towards the root ending `slot`'s approximate claims that are at
    /// or before `threshold`: an entry with no other claim is removed, one that is also
    /// exact keeps only its exact claim (or goes whole, and an exact-only entry too, if the
    /// slot is dead). Unlinks nodes left empty.
    ///
    /// Stops at the first block where the slot's approximate claim is later than
    /// `threshold` or absent, where the slot holds no entry, or whose node is gone: see
    /// `docs/design.md` ("One timer per decision") for why everything above is covered by
    /// another pending walk. Also stops once `budget` entries are removed, returning the
    /// block to resume from, and after the first block if `span` is [`Span::Block`].
    ///
    /// Calls `forget` just *before* each entry is removed, with the shard's write lock
    /// held: the caller uncounts the entry there, so a slot's count never overstates the
    /// entries it holds while a walk runs (a writer of the same slot computing its excess
    /// over a cap would otherwise evict blocks it need not). A dead slot's count may then
    /// reach zero a moment before its last entry goes; its recycling waits for this
    /// thread's pin (`docs/design.md`, "Epoch protocol").
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn walk(
        &self,
        leaf: SequenceHash,
        slot: Slot,
        threshold: u64,
        slot_alive: bool,
        budget: usize,
        span: Span,
        mut forget: impl FnMut(),
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
            let Entry::Occupied(mut entry) = self.nodes.entry(key) else {
                break;
            };
            match entry.get().kind() {
                Kind::Block => {}
                // A walk reaches a run through its tail (a decision's leaf, or the parent
                // of a block or run below it).
                Kind::Tail { head, run } => {
                    drop(entry);
                    let decide = |c| walk_decision(c, threshold, slot_alive);
                    let whole = span == Span::Path;
                    let at = (head, run, key);
                    match self.walk_run(
                        at,
                        slot,
                        decide,
                        budget - removed,
                        whole,
                        &mut forget,
                        guard,
                    ) {
                        RunWalk::Removed {
                            removed: n,
                            parent,
                            depth,
                        } => {
                            removed += n;
                            if depth == 0 {
                                break;
                            }
                            key = parent.0;
                        }
                        RunWalk::Stop => break,
                        RunWalk::Again => {}
                    }
                    continue;
                }
                // A head is never a walk's leaf or a block's parent; split it and look again.
                Kind::Head(run) => {
                    drop(entry);
                    self.split(SequenceHash(key), run, guard);
                    continue;
                }
            }
            let (parent, depth) = (entry.get().parent, entry.get().depth());
            let decide = |c| {
                let settle = walk_decision(c, threshold, slot_alive);
                if settle == Settle::Remove {
                    forget();
                }
                settle
            };
            let outcome = self.reshape(entry.get_mut(), guard, |n| n.settle(slot, decide, guard));
            if matches!(outcome, Outcome::Absent | Outcome::Kept) {
                break;
            }
            removed += finish_removal(entry, outcome);
            if depth == 0 || span == Span::Block {
                break;
            }
            key = parent.0;
        }
        Walked {
            removed,
            resume: None,
        }
    }

    /// Removes every entry of the given (dead) slots, node by node, one shard lock at a
    /// time. O(nodes): used only for dead slots that no timer leads a walk to (exact
    /// entries, or no timers at all). Returns the entries removed per slot, in `slots`
    /// order.
    pub(crate) fn purge(&self, slots: &[Slot], guard: &Guard) -> Vec<usize> {
        let mut removed = vec![0; slots.len()];
        // A run of such a slot split up by another thread's record during the pass over
        // the map may have put blocks in shards already passed: pass again until a pass
        // finds nothing (a run the first pass saw as a head, it removed or followed; the
        // slots get no new entries, so the second pass usually finds none).
        // (Bounded all the same, should a pass keep finding what it cannot remove.)
        for _ in 0..16 {
            if !self.purge_pass(slots, &mut removed, guard) {
                break;
            }
        }
        removed
    }

    /// One pass of [`purge`](Self::purge), adding to `removed`; whether it found anything.
    fn purge_pass(&self, slots: &[Slot], removed: &mut [usize], guard: &Guard) -> bool {
        // Each key with its run, if it is a run's head (the run, pinned, outlives a split).
        let keys: Vec<(u64, Option<usize>)> = self
            .nodes
            .iter()
            .filter(|n| n.holders(guard).iter().any(|h| slots.contains(&h.slot())))
            .map(|n| match n.kind() {
                Kind::Head(run) => (*n.key(), Some(run)),
                _ => (*n.key(), None),
            })
            .collect();
        if keys.is_empty() {
            return false;
        }
        let mut blocks = Vec::new();
        for (key, run) in keys {
            let Some(run) = run else {
                blocks.push(key);
                continue;
            };
            // SAFETY: read from a head under the shard lock, with `guard` pinned since.
            let r = unsafe { run::run_at(run, guard) };
            // The purged slots among the run's holders.
            let held: Option<Vec<usize>> = self.nodes.get(&key).and_then(|n| {
                let here = n.kind() == Kind::Head(run);
                here.then(|| {
                    let holders = n.holders(guard);
                    let purged = |(_, &slot): &(usize, &Slot)| node::find(&holders, slot).is_some();
                    slots
                        .iter()
                        .enumerate()
                        .filter(purged)
                        .map(|(i, _)| i)
                        .collect()
                })
            });
            // Split up since the scan (its blocks are nodes now), or removed.
            let Some(held) = held else {
                blocks.extend_from_slice(r.seqs());
                continue;
            };
            let at = (SequenceHash(key), run, r.tail());
            for i in held {
                let remove = |_| Settle::Remove;
                match self.walk_run(at, slots[i], remove, usize::MAX, true, || {}, guard) {
                    RunWalk::Removed { removed: n, .. } => removed[i] += n,
                    RunWalk::Again => {
                        blocks.extend_from_slice(r.seqs());
                        break;
                    }
                    RunWalk::Stop => {}
                }
            }
        }
        for key in blocks {
            for (i, &slot) in slots.iter().enumerate() {
                let Entry::Occupied(mut entry) = self.nodes.entry(key) else {
                    break;
                };
                if entry.get().kind() != Kind::Block {
                    break;
                }
                let outcome = self.reshape(entry.get_mut(), guard, |n| {
                    n.settle(slot, |_| Settle::Remove, guard)
                });
                removed[i] += finish_removal(entry, outcome);
            }
        }
        true
    }
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

/// Unlinks the node if `outcome` emptied it; returns the entries removed (0 or 1).
fn finish_removal(
    entry: dashmap::mapref::entry::OccupiedEntry<'_, u64, Node>,
    outcome: Outcome,
) -> usize {
    match outcome {
        Outcome::Removed { last: true, .. } => {
            entry.remove();
            1
        }
        Outcome::Removed { last: false, .. } => 1,
        Outcome::Absent | Outcome::Kept | Outcome::Cleared => 0,
    }
}

/// How far a walk may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Span {
    /// From the leaf up, as far as the stop rules allow (a decision's walk).
    Path,
    /// The leaf only (a restored or replayed claim: its ancestors have walks of their own,
    /// and may carry an equal expiry while other children still need them).
    Block,
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
fn walk_decision(c: Claim, threshold: u64, slot_alive: bool) -> Settle {
    if c.expiry > threshold {
        // A later decision's claim, whose own walk comes (for a dead slot too: removing it
        // here would leave that decision's deeper blocks above a gap).
        Settle::Keep
    } else if !slot_alive {
        Settle::Remove
    } else if c.expiry == 0 {
        Settle::Keep
    } else if c.exact {
        Settle::ClearApprox
    } else {
        Settle::Remove
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
        let tree = Tree::new();
        let guard = crossbeam_epoch::pin();
        let local: Vec<LocalBlockHash> = (1..=6).map(LocalBlockHash).collect();
        let seq = crate::compute_seq_hashes(&local);
        let buckets = tree.estimated_bytes();
        assert_eq!(tree.record(1, (&local, &seq), 100, true, &guard), 6);
        // One allocation: the header (length, state), then two hashes a block.
        let run = 16 + 6 * 16;
        assert_eq!(tree.array_bytes.sum(), run as u64);
        let sizes = (tree.nodes.len(), tree.len(), tree.runs.load(Relaxed));
        assert_eq!(sizes, (2, 6, 1), "a head and a tail marker for 6 blocks");
        let map = tree.nodes.capacity() * (8 + 32 + 1);
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
            let walked = tree.walk(leaf, slot, 60, true, usize::MAX, Span::Path, || {}, &guard);
            assert_eq!(walked.removed, if slot == 2 { 4 } else { 2 });
        }
        assert_eq!(tree.array_bytes.sum(), 0);
        assert_eq!(tree.len(), 6);
        assert!(tree.holds_live(seq[5], 1, 99, &guard));
        assert!(!tree.holds_live(seq[0], 2, 0, &guard));
    }
}
