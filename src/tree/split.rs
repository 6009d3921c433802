//! Splitting a run up into one node per block (`Tree::split`): what a KV event, a restore
//! or a cut that meets a taken key needs, since they look blocks up by sequence hash.
//!
//! A split freezes the run under its head's write lock (refreshes and joins then stop, and
//! its holders and claims are read once), inserts its blocks as nodes with those holders
//! and claims, deepest first and the tail's last (replacing the marker), then replaces the
//! head with the first block's node, whose `Drop` retires the run. Readers see the same
//! holders and claims on every block throughout. Splits take turns (`Tree::splitting`): a
//! split that meets another run inside its blocks (left there above a gap) splits that one
//! first, and the entries a nested split leaves at the keys of a run it is nested in wait
//! for that run's split (`docs/design.md`, "Runs").

use std::sync::atomic::Ordering::SeqCst;

use crossbeam_epoch::Guard;

use super::claim::Claim;
use super::map::Entry;
use super::node::{Kind, Node};
use super::run_alloc::{run_at, RunPtr};
use super::{Tree, Writing};
use crate::slot::Slot;
use crate::{LocalBlockHash, SequenceHash};

/// A split under way that nested splits are inside of: its run, and the entries (block
/// key, slot, claim) they left for it to place once its tail's block is in.
pub(super) type OuterSplit = (usize, Vec<(u64, Slot, Claim)>);

/// A frozen run's head: its parent, depth and holders (see [`Tree::freeze`]).
pub(super) struct Frozen {
    pub(super) parent: SequenceHash,
    pub(super) depth: u32,
    pub(super) holders: Vec<(Slot, Claim)>,
}

/// A run being split up into blocks: its holders, and per holder the entries merged into
/// blocks it already held.
struct Splitting<'h> {
    run: RunPtr,
    holders: &'h [(Slot, Claim)],
    merged: Vec<usize>,
}

impl Tree {
    /// Splits up the run `run` whose head is at `head` into one node per block, all held by
    /// the run's holders with their claims; returns once no run `run` is at `head`.
    ///
    /// Splits take turns (`Tree::splitting`, held for the whole split; no shard lock is held
    /// while taking it): a split may have to split another run first (below), and two
    /// splits each waiting for the other's run would never end.
    pub(crate) fn split(&self, head: SequenceHash, run: RunPtr, guard: &Writing<'_>) {
        let is_head = |tree: &Self| {
            tree.nodes
                .get(&head.0)
                .is_some_and(|n| n.kind() == Kind::Head(run))
        };
        if !is_head(self) {
            return;
        }
        let _turn = self.splitting.lock();
        self.split_in_turn(head, run, &mut Vec::new(), guard);
    }

    /// [`split`](Self::split), the turn held. `outer`: the runs this split is nested in,
    /// with the (block key, slot, claim) entries this split left for them to place.
    ///
    /// A run's blocks may already have keys: blocks, or another run, left behind by walks
    /// above a gap (a walk removes a block whose other children it does not know; their
    /// own walks remove them later), over which a decision made this run. A block there
    /// takes the run's holders too (and the count the slot now has twice goes to
    /// `Tree::uncounted`); another run there is split up first, and where its tail marker
    /// (or, for runs that overlap, its head) is the key of a run this split is nested in,
    /// its entry there waits for that run's split.
    fn split_in_turn(
        &self,
        head: SequenceHash,
        run: RunPtr,
        outer: &mut Vec<OuterSplit>,
        guard: &Guard,
    ) {
        if let Some(frozen) = self.freeze(head, run, guard) {
            self.split_frozen(head, run, frozen, outer, guard);
        }
    }

    /// Freezes the run `run` at `head` for a split or a cut (the turn held), copying its
    /// parent, depth and holders; `None` if no such run is there.
    pub(super) fn freeze(&self, head: SequenceHash, run: RunPtr, guard: &Guard) -> Option<Frozen> {
        let node = self.nodes.get_mut(&head.0)?;
        if node.kind() != Kind::Head(run) {
            return None;
        }
        // SAFETY: read from a head under the shard lock, with `guard` pinned.
        let r = unsafe { run_at(run, guard) };
        let holders: Vec<(Slot, Claim)> = node
            .holders(guard)
            .iter()
            .map(|h| (h.slot(), h.claim()))
            .collect();
        if holders.is_empty() {
            // A head always has a holder: a walk that removes the last one unlinks the
            // head under the same lock.
            return None;
        }
        // Only the split (or cut) in turn freezes a run, and the pieces of a cut are live
        // again before its turn ends: this one is live. From here on its holders' claims
        // no longer change (refreshes and joins check it is live under the head's lock,
        // which we hold), so the copy above stays true.
        r.freeze();
        Some(Frozen {
            parent: node.parent(),
            depth: node.depth(),
            holders,
        })
    }

    /// [`split_in_turn`](Self::split_in_turn) of a run frozen by [`freeze`](Self::freeze).
    pub(super) fn split_frozen(
        &self,
        head: SequenceHash,
        run: RunPtr,
        frozen: Frozen,
        outer: &mut Vec<OuterSplit>,
        guard: &Guard,
    ) {
        outer.push((run, Vec::new()));
        // SAFETY: as above; the run stays in the map (frozen) until we replace its head.
        let r = unsafe { run_at(run, guard) };
        let (seqs, locals) = (r.seqs(), r.locals());
        let mut split = Splitting {
            run,
            holders: &frozen.holders,
            merged: vec![0; frozen.holders.len()],
        };
        // Every block but the first, deepest first, then the tail's: a reader that finds a
        // block of the run as a node finds every deeper one (the tail's as its marker,
        // which reads as the run), so a miss next to a block it found is still a true one;
        // and a walk, which enters a run's blocks only through its tail, then finds every
        // block above it in place (and the head, which it waits for).
        let last = r.len() - 1;
        let order = (1..last).rev().chain(std::iter::once(last));
        for i in self.nodes.prefetching(order, |&i| seqs[i], guard) {
            let node = || {
                let parent = SequenceHash(seqs[i - 1]);
                let depth = frozen.depth.saturating_add(i as u32);
                let local = LocalBlockHash(locals[i]);
                let node = Node::held_by(parent, local, depth, &frozen.holders, guard);
                self.array_bytes.add(node.array_bytes(guard) as u64);
                node
            };
            self.place_split_block(&mut split, seqs[i], node, outer, guard);
        }
        // Every block is in place once the head is replaced: the entries nested splits
        // left for our blocks (the tail's, or the head's) go in then.
        let (_, waiting) = outer.pop().expect("pushed above");
        self.replace_split_head(head, run, &frozen, guard);
        self.place_waiting_entries(waiting, guard);
        for (&(slot, _), merged) in frozen.holders.iter().zip(split.merged) {
            if merged > 0 {
                self.uncounted.push((slot, merged));
            }
        }
    }

    /// Puts the block keyed `key` of the run `split` is splitting in place as `node()`:
    /// into a free key; merged into a block already there (counting the entries its
    /// holders already had); over the run's own tail marker. Another run met there is
    /// split first (its tail marker removed), unless this split is nested in it: its split
    /// places the block, and these entries after it.
    fn place_split_block(
        &self,
        split: &mut Splitting<'_>,
        key: u64,
        node: impl Fn() -> Node,
        outer: &mut Vec<OuterSplit>,
        guard: &Guard,
    ) {
        loop {
            let mut o = match self.nodes.entry(key) {
                Entry::Vacant(v) => {
                    v.insert(node());
                    return;
                }
                Entry::Occupied(o) => o,
            };
            match o.get().kind() {
                Kind::Block => {
                    for (h, &(slot, claim)) in split.holders.iter().enumerate() {
                        let added =
                            self.reshape(o.get_mut(), guard, |n| n.upsert(slot, claim, guard));
                        split.merged[h] += usize::from(!added);
                    }
                }
                Kind::Tail { run: mine, .. } if mine == split.run => *o.get_mut() = node(),
                // A run this split is nested in (its tail marker, or its head, when a run
                // was laid over another's head): its split places the block, and these
                // entries after it.
                Kind::Tail { run: other, .. } | Kind::Head(other)
                    if outer.iter().any(|(r, _)| *r == other) =>
                {
                    let waiting = outer.iter_mut().find(|(r, _)| *r == other);
                    if let Some((_, entries)) = waiting {
                        let holders = split.holders.iter();
                        entries.extend(holders.map(|&(slot, claim)| (key, slot, claim)));
                    }
                }
                Kind::Tail {
                    head: other_head,
                    run: other,
                } => {
                    drop(o);
                    self.split_in_turn(other_head, other, outer, guard);
                    self.remove_tail_marker(key, other_head, other);
                    continue;
                }
                Kind::Head(other) => {
                    drop(o);
                    self.split_in_turn(SequenceHash(key), other, outer, guard);
                    continue;
                }
            }
            return;
        }
    }

    /// Adds the entries that nested splits left for blocks of this run, once those blocks
    /// are in place. One that is not added is uncounted: the block already had it, or the
    /// block is no longer there as a block (its holders' walks took it out meanwhile: the
    /// entry goes too, as if walked).
    pub(super) fn place_waiting_entries(&self, waiting: Vec<(u64, Slot, Claim)>, guard: &Guard) {
        for (key, slot, claim) in waiting {
            let added = match self.nodes.entry(key) {
                Entry::Occupied(mut o) if o.get().kind() == Kind::Block => {
                    self.reshape(o.get_mut(), guard, |n| n.upsert(slot, claim, guard))
                }
                _ => false,
            };
            if !added {
                self.uncounted.push((slot, 1));
            }
        }
    }

    /// Replaces the head of the split run with its first block, which retires the run.
    fn replace_split_head(&self, head: SequenceHash, run: RunPtr, frozen: &Frozen, guard: &Guard) {
        let Some(mut node) = self.nodes.get_mut(&head.0) else {
            return;
        };
        if node.kind() != Kind::Head(run) {
            return;
        }
        // SAFETY: the head still names the run, which stays until it is replaced here.
        let r = unsafe { run_at(run, guard) };
        let bytes = r.bytes();
        let local = LocalBlockHash(r.locals()[0]);
        let first = Node::held_by(frozen.parent, local, frozen.depth, &frozen.holders, guard);
        // Dropping the head retires the run (and its holder array, whose bytes the
        // reshape counts out as it counts in the new node's).
        self.reshape(&mut node, guard, |n| *n = first);
        self.unlinked_run(r.len(), bytes);
    }

    /// Splits up every run in the tree (one pass over the map), so that every block has a
    /// key: for what looks blocks up by sequence hash (KV events, restores).
    pub(crate) fn split_all(&self, guard: &Writing<'_>) {
        if self.runs.load(SeqCst) == 0 {
            return;
        }
        let mut heads: Vec<(u64, usize)> = Vec::new();
        self.nodes.for_each(|key, n| {
            if let Kind::Head(run) = n.kind() {
                heads.push((key, run));
            }
        });
        for (head, run) in heads {
            self.split(SequenceHash(head), run, guard);
        }
    }
}
