//! Cuts: a run that a prompt leaves (or ends in) after its first blocks becomes two runs,
//! instead of one node per block.
//!
//! A decision that branches inside a run (a conversation's next turn, whose last block
//! changed; another worker sharing only the run's first blocks) needs a run's end where
//! it leaves: its own new blocks hang there, and another worker joins only the blocks
//! before. Splitting the run up costs a map insert per block; a *cut* costs four map
//! writes whatever the run's length. The pieces keep the run's holders and claims; a
//! piece of one block is a block node.
//!
//! The order keeps every reader and walker right (see `docs/design.md`, "Cuts"): the
//! pieces are born frozen, so a walk or a writer that meets one waits, as for a split;
//! the first piece's tail marker and the second piece's head go in first (keys inside
//! the run: no one looks there), then the run's tail marker is made the second piece's,
//! and last the run's head is replaced by the first piece's, which retires the run. Then
//! the pieces are thawed. A key the pieces need that is taken (blocks or runs left above a
//! gap by walks) makes the cut fall back to splitting the run up.

use crossbeam_epoch::Guard;

use super::map::Entry;
use super::node::{Kind, Node};
use super::run::{self, run_at, Run, RunSpan, MIN_RUN};
use super::runs::Frozen;
use super::Tree;
use crate::{LocalBlockHash, SequenceHash};

impl Tree {
    /// Makes the run `run` at `head` (keyed `seq[i]`, block `i` of a prompt that met it)
    /// end where the prompt leaves it or ends: cut in two after the blocks the prompt
    /// matches. A frozen run (a split or a cut under way) is waited for instead: its
    /// pieces may be what the prompt needs. The caller looks at the key again.
    pub(super) fn fit_run(
        &self,
        seq: &[SequenceHash],
        i: usize,
        (head, run): (SequenceHash, usize),
        guard: &Guard,
    ) {
        // SAFETY: `run` was read from the head at `head` under the shard lock, with
        // `guard` pinned since (the callers' contract).
        let r = unsafe { run_at(run, guard) };
        if !r.is_live() {
            r.wait_split();
            return;
        }
        let matched = r.matched(i, seq.len(), &mut &seq[..]);
        if matched < r.len() {
            self.cut(head, run, matched, guard);
        } else {
            // Covered whole, but the caller could not join it: it went (or froze) since.
            r.wait_split();
        }
    }

    /// Cuts the run `run` at `head` after its first `k` blocks (`0 < k < len`; else, or
    /// if a key the pieces need is taken, the run is split up). Takes the turn of splits.
    pub(super) fn cut(&self, head: SequenceHash, run: usize, k: usize, guard: &Guard) {
        let is_head = self
            .nodes
            .get(&head.0)
            .is_some_and(|n| n.kind() == Kind::Head(run));
        if !is_head {
            return;
        }
        let _turn = self.splitting.lock();
        let Some(frozen) = self.freeze(head, run, guard) else {
            return;
        };
        // SAFETY: read from the head under its lock (`freeze`), with `guard` pinned; the
        // run stays at its head (frozen) until this cut or the split replaces it.
        let r = unsafe { run_at(run, guard) };
        if !(1..r.len()).contains(&k) || !self.cut_frozen(head, run, r, k, &frozen, guard) {
            self.split_frozen(head, run, frozen, &mut Vec::new(), guard);
        }
    }

    /// The cut itself (see the module docs); false, with nothing changed, if a key the
    /// pieces need is taken.
    fn cut_frozen(
        &self,
        head: SequenceHash,
        run: usize,
        r: &Run,
        k: usize,
        f: &Frozen,
        guard: &Guard,
    ) -> bool {
        let (seqs, len) = (r.seqs(), r.len());
        let depth = |i: usize| f.depth.saturating_add(i as u32);
        // Block `i` of the run as a node held as the run is.
        let block = |i: usize| {
            let parent = if i == 0 {
                f.parent
            } else {
                SequenceHash(seqs[i - 1])
            };
            let local = LocalBlockHash(r.locals()[i]);
            Node::held_by(parent, local, depth(i), &f.holders, guard)
        };
        // A node entering the map where nothing with an array was: its array counted in.
        let counted = |node: Node| {
            self.array_bytes.add(node.array_bytes(guard) as u64);
            node
        };
        // The pieces that are runs (two blocks or more), born frozen.
        let piece = |range: std::ops::Range<usize>| (range.len() >= MIN_RUN).then(|| r.part(range));
        let (first, second) = (piece(0..k), piece(k..len));
        let drop_pieces = |pieces: &[Option<usize>]| {
            for p in pieces.iter().flatten() {
                run::retire(*p, guard);
            }
        };
        // Each step below lets go of its entry (the shard's write lock) before it takes back
        // what earlier steps placed: those keys may lie in the same shard.
        // 1. The first piece's tail marker, inside the run.
        if let Some(a) = first {
            let placed = match self.nodes.entry(seqs[k - 1]) {
                Entry::Vacant(v) => {
                    v.insert(Node::run_tail(head, a, depth(k - 1)));
                    true
                }
                Entry::Occupied(_) => false,
            };
            if !placed {
                drop_pieces(&[first, second]);
                return false;
            }
        }
        // 2. The second piece's head, inside the run (no one finds it through the run yet;
        // walks wait at it while it is frozen).
        if let Some(b) = second {
            let placed = match self.nodes.entry(seqs[k]) {
                Entry::Vacant(v) => {
                    v.insert(counted(block(k).into_head(b, RunSpan::of(&seqs[k..]))));
                    true
                }
                Entry::Occupied(_) => false,
            };
            if !placed {
                self.unplace(first.map(|_| seqs[k - 1]), None, guard);
                drop_pieces(&[first, second]);
                return false;
            }
        }
        // 3. The run's tail marker: the second piece's (or its one block). A run's tail key
        // holds its marker while the run is at its head.
        let placed = match self.nodes.entry(seqs[len - 1]) {
            Entry::Occupied(mut o) if o.get().kind() == (Kind::Tail { head, run }) => {
                *o.get_mut() = match second {
                    Some(b) => Node::run_tail(SequenceHash(seqs[k]), b, depth(len - 1)),
                    None => counted(block(len - 1)),
                };
                true
            }
            _ => false,
        };
        if !placed {
            let second_head = second.map(|_| seqs[k]);
            self.unplace(first.map(|_| seqs[k - 1]), second_head, guard);
            if first.is_some() {
                drop_pieces(&[first]);
            }
            return false;
        }
        // 4. The head: the first piece's (or its one block). Dropping the run's head
        // retires the run.
        if let Some(mut node) = self.nodes.get_mut(&head.0) {
            if node.kind() == Kind::Head(run) {
                let new = match first {
                    Some(a) => block(0).into_head(a, RunSpan::of(&seqs[..k])),
                    None => block(0),
                };
                self.reshape(&mut node, guard, |n| *n = new);
            }
        }
        self.unlinked_run(len, r.bytes());
        for p in [first, second].into_iter().flatten() {
            // SAFETY: made above and placed at its head, whose lock this cut's turn keeps
            // every split and cut from taking; walks wait while it is frozen.
            let piece = unsafe { run_at(p, guard) };
            self.linked_run(piece.len());
            piece.thaw();
        }
        true
    }

    /// Takes back what a cut that fell back had placed: the first piece's tail marker and
    /// the second piece's head (which retires that piece).
    fn unplace(&self, marker: Option<u64>, second_head: Option<u64>, guard: &Guard) {
        for key in [second_head, marker].into_iter().flatten() {
            if let Some((_, node)) = self.nodes.remove(&key) {
                self.array_bytes
                    .add((node.array_bytes(guard) as u64).wrapping_neg());
            }
        }
    }
}
