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
use super::run_alloc::{self, run_at, Run, RunPtr, RunSpan, MIN_RUN};
use super::split::Frozen;
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
            // The cut writes three keys inside the run, in as many buckets: start
            // their misses together.
            if matched > 0 {
                let seqs = r.seqs();
                for key in [seqs[matched - 1], seqs[matched], seqs[seqs.len() - 1]] {
                    self.nodes.prefetch(key, guard);
                }
            }
            self.cut(head, run, matched, guard);
        } else {
            // Covered whole, but the caller could not join it: it went (or froze) since.
            r.wait_split();
        }
    }

    /// Cuts the run `run` at `head` after its first `k` blocks (`0 < k < len`; else, or
    /// if a key the pieces need is taken, the run is split up). Takes the turn of splits.
    pub(super) fn cut(&self, head: SequenceHash, run: RunPtr, k: usize, guard: &Guard) {
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

    /// The cut itself (see the module docs), in its four steps; false, with nothing
    /// changed, if a key the pieces need is taken. Each step lets go of its entry (the
    /// shard's write lock) before a later one takes back what earlier steps placed: those
    /// keys may lie in the same shard.
    fn cut_frozen(
        &self,
        head: SequenceHash,
        run: RunPtr,
        r: &Run,
        k: usize,
        f: &Frozen,
        guard: &Guard,
    ) -> bool {
        // The pieces that are runs (two blocks or more), born frozen.
        let piece = |range: std::ops::Range<usize>| (range.len() >= MIN_RUN).then(|| r.part(range));
        let cut = Cut {
            head,
            run,
            r,
            k,
            frozen: f,
            first: piece(0..k),
            second: piece(k..r.len()),
            guard,
        };
        let (first_tail, second_head) = (r.seqs()[k - 1], r.seqs()[k]);
        if !self.place_first_tail(&cut) {
            cut.retire(&[cut.first, cut.second]);
            return false;
        }
        if !self.place_second_head(&cut) {
            self.unplace(cut.first.map(|_| first_tail), None, guard);
            cut.retire(&[cut.first, cut.second]);
            return false;
        }
        if !self.hand_over_tail(&cut) {
            let placed_head = cut.second.map(|_| second_head);
            self.unplace(cut.first.map(|_| first_tail), placed_head, guard);
            cut.retire(&[cut.first]);
            return false;
        }
        self.replace_head(&cut);
        self.unlinked_run(r.len(), r.bytes());
        for p in [cut.first, cut.second].into_iter().flatten() {
            // SAFETY: made above and placed at its head, whose lock this cut's turn keeps
            // every split and cut from taking; walks wait while it is frozen.
            let piece = unsafe { run_at(p, guard) };
            self.linked_run(piece.len());
            piece.thaw();
        }
        true
    }

    /// Step 1: the first piece's tail marker, inside the run (a piece of one block has
    /// none).
    fn place_first_tail(&self, cut: &Cut<'_>) -> bool {
        let Some(a) = cut.first else {
            return true;
        };
        let k = cut.k;
        match self.nodes.entry(cut.r.seqs()[k - 1]) {
            Entry::Vacant(v) => {
                v.insert(Node::run_tail(cut.head, a, cut.depth(k - 1)));
                true
            }
            Entry::Occupied(_) => false,
        }
    }

    /// Step 2: the second piece's head, inside the run (no one finds it through the run
    /// yet; walks wait at it while it is frozen).
    fn place_second_head(&self, cut: &Cut<'_>) -> bool {
        let Some(b) = cut.second else {
            return true;
        };
        let (k, seqs) = (cut.k, cut.r.seqs());
        match self.nodes.entry(seqs[k]) {
            Entry::Vacant(v) => {
                let node = cut.block(k).into_head(b, RunSpan::of(&seqs[k..]));
                v.insert(self.counted(node, cut.guard));
                true
            }
            Entry::Occupied(_) => false,
        }
    }

    /// Step 3: the run's tail marker becomes the second piece's (or its one block). A
    /// run's tail key holds its marker while the run is at its head.
    fn hand_over_tail(&self, cut: &Cut<'_>) -> bool {
        let (k, seqs, len) = (cut.k, cut.r.seqs(), cut.r.len());
        let marker = Kind::Tail {
            head: cut.head,
            run: cut.run,
        };
        match self.nodes.entry(seqs[len - 1]) {
            Entry::Occupied(mut o) if o.get().kind() == marker => {
                *o.get_mut() = match cut.second {
                    Some(b) => Node::run_tail(SequenceHash(seqs[k]), b, cut.depth(len - 1)),
                    None => self.counted(cut.block(len - 1), cut.guard),
                };
                true
            }
            _ => false,
        }
    }

    /// Step 4: the run's head becomes the first piece's (or its one block). Dropping the
    /// run's head retires the run.
    fn replace_head(&self, cut: &Cut<'_>) {
        let Some(mut node) = self.nodes.get_mut(&cut.head.0) else {
            return;
        };
        if node.kind() == Kind::Head(cut.run) {
            let new = match cut.first {
                Some(a) => cut
                    .block(0)
                    .into_head(a, RunSpan::of(&cut.r.seqs()[..cut.k])),
                None => cut.block(0),
            };
            self.reshape(&mut node, cut.guard, |n| *n = new);
        }
    }

    /// `node`, entering the map where nothing with an array was: its array counted in.
    fn counted(&self, node: Node, guard: &Guard) -> Node {
        self.array_bytes.add(node.array_bytes(guard) as u64);
        node
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

/// A cut under way: the run `run` at `head`, cut after its first `k` blocks, frozen with
/// `frozen`'s holders and claims, and its pieces (runs of two blocks or more, born
/// frozen; `None`: a piece of one block, which is a block node).
struct Cut<'c> {
    head: SequenceHash,
    run: RunPtr,
    r: &'c Run,
    k: usize,
    frozen: &'c Frozen,
    first: Option<usize>,
    second: Option<usize>,
    guard: &'c Guard,
}

impl Cut<'_> {
    /// The position of the run's block `i` in its prompt.
    fn depth(&self, i: usize) -> u32 {
        self.frozen.depth.saturating_add(i as u32)
    }

    /// The run's block `i` as a node held as the run is.
    fn block(&self, i: usize) -> Node {
        let parent = if i == 0 {
            self.frozen.parent
        } else {
            SequenceHash(self.r.seqs()[i - 1])
        };
        let local = LocalBlockHash(self.r.locals()[i]);
        Node::held_by(
            parent,
            local,
            self.depth(i),
            &self.frozen.holders,
            self.guard,
        )
    }

    /// Retires pieces that were made but not placed.
    fn retire(&self, pieces: &[Option<usize>]) {
        for p in pieces.iter().flatten() {
            run_alloc::retire(*p, self.guard);
        }
    }
}
