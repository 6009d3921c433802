//! Runs in the tree: a decision's new blocks stored as one entry, joined, cut and split.
//!
//! When a decision reaches blocks the tree does not have yet (the new suffix of a prompt:
//! most blocks of most decisions), and finds gallop (holder sets are nested), the suffix
//! becomes one *run* ([`Run`], `run_alloc.rs`) instead of one node per block, owned by a **head**
//! node at the first block's key, which holds the run's holders and claims like a block's
//! (inline, or an array); and a **tail** marker at the last block's key, which names the
//! head. Every block of a run is held by the same slots with the same claims, so a refresh
//! of the whole run is one atomic on the head, a walk removes a slot from the whole run at
//! once, and a find that reaches the head compares the run's hashes with its query in one
//! loop.
//!
//! The blocks between head and tail have no key: the tree's *ends* are keys (a decision's
//! leaf is a tail or a block, a child hangs only below a tail or a block), so walks, timers
//! and caps' logs never need them. Another worker whose prompt covers a run whole **joins**
//! it ([`Tree::join_run`]); a prompt that leaves a run or ends inside it, and a walk that
//! may settle only the run's last blocks (less budget, or fewer blocks, than the run),
//! **cut** it in two (`cut.rs`). Anything else that would make the run's blocks differ (a
//! KV event, a restore, a cut whose keys are taken) first
//! **splits it up** into one node per block ([`Tree::split`]): the run is frozen, its blocks
//! are inserted as nodes with its holders and claims, then its tail marker and its head are
//! replaced, and the run is retired through the epoch collector. Readers see the same
//! holders and claims on every block throughout. A writer that meets a frozen run waits for
//! the split to end (a few microseconds: one map insert per block).

use super::Writing;
use std::sync::atomic::Ordering::SeqCst;

use crossbeam_epoch::Guard;

use super::claim::Claim;
use super::map::Entry;
use super::node::{Kind, Node, Outcome, Settle};
use super::run_alloc::{self, bytes_of, run_at, Run, RunPtr, RunSpan, MIN_RUN};
use super::walk::{Span, Walk};
use super::Tree;
use crate::slot::Slot;
use crate::{LocalBlockHash, SequenceHash};

/// What a walk did at a run (see [`Tree::walk_run`]).
pub(crate) enum RunWalk {
    /// The walk's slot left the whole run (`removed` entries), or only its approximate
    /// claim on it ended (`removed` 0: the engine stores the run exactly): `blocks` blocks
    /// settled; go on from `parent` (at `depth`, the head's).
    Removed {
        removed: usize,
        blocks: usize,
        parent: SequenceHash,
        depth: u32,
    },
    /// Stop here (another holder, a later claim, or the run is gone).
    Stop,
    /// The run was split up or changed: look at the key again.
    Again,
}

impl Tree {
    /// Stores the new blocks `seq`, `local` (two or more, whose first block's key is
    /// free, and so are the others': the tree is closed under prefixes) as one run held by
    /// `slot` with an approximate claim until `expiry`, below `parent` at `depth`. Returns
    /// false, storing nothing, if the first block's key is taken meanwhile, or the last
    /// block's by something a run may not replace (a block, or a live run's marker).
    ///
    /// The tail marker goes in before the head. Once the head is in, other writers join
    /// the run through it, hang blocks below its tail and log decisions that end there;
    /// a walk of those arrives at the tail key and must find the marker: a key found
    /// empty ends a walk, whose decision is gone from its log by then, so the run's claims
    /// it should have ended would be held past their turn for good (and the blocks above,
    /// once a later walk took the run's prefix, above a gap). Before the head is in,
    /// nothing holds the run: a walk that meets the marker then reads the run as gone and
    /// stops, as it would at a key without our run.
    pub(super) fn insert_run(
        &self,
        slot: Slot,
        parent: SequenceHash,
        depth: u32,
        (local, seq): (&[LocalBlockHash], &[SequenceHash]),
        expiry: u64,
        guard: &Writing<'_>,
    ) -> bool {
        debug_assert!(seq.len() >= MIN_RUN);
        let (head, tail) = (seq[0], seq[seq.len() - 1]);
        // A worker's first decision tries a run where a shared prompt's head usually is:
        // no run copied, no marker placed and taken back, then.
        if self.nodes.get(&head.0).is_some() {
            return false;
        }
        let run = Run::make(local, seq);
        let tail_depth = depth.saturating_add(seq.len() as u32 - 1);
        if !self.place_tail_marker(tail.0, (head, run), tail_depth) {
            run_alloc::retire(run, guard); // never published
            return false;
        }
        let v = match self.nodes.entry(head.0) {
            Entry::Vacant(v) => v,
            taken @ Entry::Occupied(_) => {
                // Our marker names a run that never had a head: it goes (unless another
                // run's replaced it; the head's lock let go first, as the marker may be in
                // the same shard), and the run was never reachable.
                drop(taken);
                self.remove_tail_marker(tail.0, head, run);
                run_alloc::retire(run, guard);
                return false;
            }
        };
        self.linked_run(seq.len());
        let span = RunSpan::of_seq(seq);
        v.insert(Node::run_head(parent, (run, span), depth, slot, expiry));
        // Before our head was in, another run's insert (or a split meeting the marker)
        // read our run as gone and replaced or removed the marker: the run must be blocks.
        // Runs are made only while `makes_runs` holds; whoever cleared it splits every run
        // it looks a block up in, and this one may have come after its look (`split_all`).
        let marker = Kind::Tail { head, run };
        let marked = self.nodes.get(&tail.0).is_some_and(|n| n.kind() == marker);
        if !marked || !self.makes_runs.load(SeqCst) {
            self.split(head, run, guard);
        }
        // The purge of a removed worker (a record does not wait for one) may have taken the
        // run out after its head went in, and its marker with it or not: ours goes then (a
        // no-op while the head names the run, or once the split above put the last block
        // over it). Loom model `insert_run_vs_purge`.
        self.remove_tail_marker(tail.0, head, run);
        true
    }

    /// Places the marker of the run (`head`, `run`) at `tail`: into a free key, or over the
    /// marker of a run that is gone (removed from its head first) or whose head is not in
    /// yet (another insert's, which then finds its marker replaced and splits its run).
    /// False where a block or a live run's marker is.
    fn place_tail_marker(
        &self,
        tail: u64,
        (head, run): (SequenceHash, RunPtr),
        depth: u32,
    ) -> bool {
        loop {
            let (other_head, other_run) = match self.nodes.entry(tail) {
                Entry::Vacant(v) => {
                    v.insert(Node::run_tail(head, run, depth));
                    return true;
                }
                Entry::Occupied(o) => match o.get().kind() {
                    Kind::Tail { head, run } => (head, run),
                    _ => return false,
                },
            };
            let live = self
                .nodes
                .get(&other_head.0)
                .is_some_and(|n| n.kind() == Kind::Head(other_run));
            if live {
                return false;
            }
            if let Entry::Occupied(mut o) = self.nodes.entry(tail) {
                let other = Kind::Tail {
                    head: other_head,
                    run: other_run,
                };
                if o.get().kind() == other {
                    *o.get_mut() = Node::run_tail(head, run, depth);
                    return true;
                }
            }
        }
    }

    /// Adds `slot` with `claim` to the holders of the run whose head is keyed `seq[i]`
    /// (raising its claim if it holds the run already), if the run is live and the prompt
    /// `seq` covers it whole: returns the run's length and whether the slot was added.
    /// `None`: there is no live run there that the prompt covers, and the caller splits it.
    ///
    /// Under the head's write lock, which a split's freeze also takes: a joined run is
    /// either still live, and its split will copy the new holder, or frozen, and not
    /// joined.
    pub(super) fn join_run(
        &self,
        slot: Slot,
        seq: &[SequenceHash],
        i: usize,
        claim: Claim,
        guard: &Guard,
    ) -> Option<(usize, bool)> {
        let Entry::Occupied(mut entry) = self.nodes.entry(seq[i].0) else {
            return None;
        };
        let Kind::Head(run) = entry.get().kind() else {
            return None;
        };
        // SAFETY: read from a head under the shard lock, with `guard` pinned.
        let r = unsafe { run_at(run, guard) };
        let span = entry.get().run_span();
        if !r.is_live() || !span.covered_by(seq, i) {
            return None;
        }
        let added = self.upsert_holder(entry.get_mut(), (slot, claim), span.len, guard);
        Some((span.len, added))
    }

    /// A walk at a run's tail marker: ends the walk's slot's claim on the whole run if
    /// the walk decides so and its budget and block limit allow (its approximate claim
    /// only, if the slot also holds the run exactly), else cuts off the run's last blocks
    /// that they allow (budget too small, or the walk covers one block) so the walk meets
    /// them as a piece of their own. `forget` is called with each block removed, with the
    /// head's write lock held.
    pub(super) fn walk_run(
        &self,
        (head, run, tail): (SequenceHash, usize, u64),
        walk: Walk,
        mut forget: impl FnMut(SequenceHash),
        guard: &Writing<'_>,
    ) -> RunWalk {
        let (slot, budget, whole) = (walk.slot, walk.budget, walk.span == Span::Path);
        let decide = |c| walk.decide(c);
        let entry = match self.nodes.entry(head.0) {
            Entry::Occupied(entry) if entry.get().kind() == Kind::Head(run) => entry,
            // The head no longer names the run the marker named when the walk read it.
            // If it names another run, frozen, a cut of that one is under way, which put
            // this marker in (its first piece's) before it replaces the head: the walk
            // came up from the block node the cut made of the run's last block. Wait for
            // the cut (or the split it fell back to) and look again: the piece is held as
            // the run was (loom model `walk_vs_cut`, its second test). Otherwise a cut or
            // a split that ended since changed the marker before the head: the key now
            // names the second piece, or a block. Only a marker that still names the run
            // means that the run is gone (removed head first).
            other => {
                let frozen = match &other {
                    Entry::Occupied(o) => match o.get().kind() {
                        // SAFETY: read from a head under the shard lock, with `guard`
                        // pinned.
                        Kind::Head(moving) => Some(unsafe { run_at(moving, guard) }),
                        _ => None,
                    },
                    Entry::Vacant(_) => None,
                }
                .filter(|moving| !moving.is_live());
                drop(other);
                if let Some(moving) = frozen {
                    moving.wait_split();
                    return RunWalk::Again;
                }
                return if self.marker_moved(tail, (head, run)) {
                    RunWalk::Again
                } else {
                    RunWalk::Stop
                };
            }
        };
        // SAFETY: read from a head under the shard lock, with `guard` pinned.
        let r = unsafe { run_at(run, guard) };
        if !r.is_live() {
            drop(entry);
            r.wait_split();
            return RunWalk::Again;
        }
        let holders = entry.get().holders(guard);
        let Some(claim) = super::holder::find(&holders, slot).map(|h| h.claim()) else {
            return RunWalk::Stop;
        };
        let settle = decide(claim);
        if settle == Settle::Keep {
            return RunWalk::Stop;
        }
        let len = r.len();
        // Ending or lowering an approximate claim removes no entry: only the block limit
        // bounds it.
        let room = if settle == Settle::Remove {
            budget.min(walk.blocks)
        } else {
            walk.blocks
        };
        if !whole || len > room {
            // The walk ends the slot's claim on the run's last blocks only: they are cut
            // off as a piece of their own (a split into one node per block where a key
            // the pieces need is taken), which the walk then meets at the tail marker.
            drop(entry);
            let keep = if whole { len - room } else { len - 1 };
            self.cut(head, run, keep, guard);
            return RunWalk::Again;
        }
        let others = holders.len() > 1;
        let (parent, depth) = (entry.get().parent(), entry.get().depth());
        if settle != Settle::Remove {
            let mut entry = entry;
            let outcome = self.reshape(entry.get_mut(), guard, |n| {
                n.settle(slot, |_| settle, guard)
            });
            debug_assert_eq!(outcome, Outcome::Cleared);
            return RunWalk::Removed {
                removed: 0,
                blocks: len,
                parent,
                depth,
            };
        }
        for &seq in r.seqs() {
            forget(SequenceHash(seq));
        }
        if others {
            // The slot leaves the run; the others hold it on.
            let mut entry = entry;
            let outcome = self.reshape(entry.get_mut(), guard, |n| {
                n.settle(slot, |_| Settle::Remove, guard)
            });
            debug_assert!(matches!(outcome, Outcome::Removed { last: false, .. }));
        } else {
            self.remove_run(entry, (head, run, tail), r);
        }
        RunWalk::Removed {
            removed: len,
            blocks: len,
            parent,
            depth,
        }
    }

    /// Takes out the run `r` (head, pointer, last key) whose head `entry` is, left with no
    /// holder: the head (whose `Drop` retires the run), then its tail marker.
    pub(super) fn remove_run(
        &self,
        entry: super::map::OccupiedEntry<'_>,
        (head, run, tail): (SequenceHash, usize, u64),
        r: &Run,
    ) {
        let (len, bytes) = (r.len(), r.bytes());
        entry.remove();
        self.unlinked_run(len, bytes);
        self.remove_tail_marker(tail, head, run);
    }

    /// Counts in a run of `len` blocks whose head enters the map.
    pub(super) fn linked_run(&self, len: usize) {
        self.runs.fetch_add(1, SeqCst);
        self.run_blocks.fetch_add(len, SeqCst);
        self.array_bytes.add(bytes_of(len) as u64);
    }

    /// Counts out a run of `len` blocks and `bytes` whose head left the map.
    pub(super) fn unlinked_run(&self, len: usize, bytes: usize) {
        self.runs.fetch_sub(1, SeqCst);
        self.run_blocks.fetch_sub(len, SeqCst);
        self.array_bytes.add((bytes as u64).wrapping_neg());
    }

    /// Splits up the run that the head or tail marker keyed `key` names (`head`, `run`),
    /// and removes the marker if it outlived its run: `key` is then a block, or missing.
    pub(super) fn clear_run_at(
        &self,
        key: u64,
        (head, run): (SequenceHash, usize),
        guard: &Writing<'_>,
    ) {
        self.split(head, run, guard);
        self.remove_tail_marker(key, head, run);
    }

    /// Whether the key `tail`, read as the marker of the run (`head`, `run`) whose head no
    /// longer names that run, names something else now. A cut or a split changes the
    /// marker before the head, so `true` means one ended since the marker was read: read
    /// the key again (the second piece's marker, or a block). `false`: the marker still
    /// names the run, which is gone (its head removed first); the marker outlived it.
    /// (A find's probe makes the same check with its lock-free reads: `find.rs`.)
    pub(super) fn marker_moved(&self, tail: u64, (head, run): (SequenceHash, RunPtr)) -> bool {
        let marker = Kind::Tail { head, run };
        self.nodes.get(&tail).map(|t| t.kind()) != Some(marker)
    }

    /// Removes the tail marker at `tail` if it still names `run`, whose head (at `head`)
    /// must be gone or split up (checked first, without holding the marker's lock: once a
    /// run leaves its head it never comes back).
    pub(super) fn remove_tail_marker(&self, tail: u64, head: SequenceHash, run: RunPtr) {
        if self
            .nodes
            .get(&head.0)
            .is_some_and(|n| n.kind() == Kind::Head(run))
        {
            return;
        }
        if let Entry::Occupied(o) = self.nodes.entry(tail) {
            if matches!(o.get().kind(), Kind::Tail { run: r, .. } if r == run) {
                o.remove();
            }
        }
    }
}

#[cfg(test)]
mod tests;
