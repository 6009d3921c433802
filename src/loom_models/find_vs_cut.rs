//! A find racing the cut of the run it reads.
//!
//! A worker's run of four blocks is cut after two (`Tree::cut`): the second piece's head
//! goes in at block 2's key, the run's tail marker is made the second piece's, and last
//! the run's head is replaced by the first piece's. A find of the run's four blocks reads
//! the head: the whole run, or the first piece, after whose end it probes block 2, where
//! the second piece must already be. Whatever the interleaving, it finds all four blocks
//! held. (The first piece's tail marker, placed first, is not read through: a probe of it
//! before the head names its piece reads as a miss, which a find trusts only next to a
//! block or a run's end it found; see `docs/design.md`, "Cuts".)
//!
//! Checked ordering: the second piece is in place before the head names the first.
//!
//! Can fail: with `--cfg loom_break="cut_head_first"` (the head is replaced first) loom
//! finds the find that stops at the first piece's end: "a find racing a cut lost blocks".

use loom::sync::{Arc, RwLock};
use loom::thread;

use super::node::{Kind, Node};
use super::{Claim, Shard};
use crate::tree::run::{run_at, Run};
use crate::{LocalBlockHash, SequenceHash};

const WORKER: u32 = 1;
const EXPIRY: u64 = 10;
/// Blocks of the run, and where the cut falls.
const LEN: usize = 4;
const CUT: usize = 2;

/// The blocks a find of the run's hashes `seq` counts from the shards of the head and of
/// block `CUT`, as `Tree::find_into` goes through runs.
fn found(
    head: &Shard,
    at_cut: &Shard,
    seq: &[SequenceHash],
    guard: &crossbeam_epoch::Guard,
) -> usize {
    let through = |shard: &Shard, at: usize| {
        let node = shard.read().unwrap();
        match node.as_ref().map(|n| (n.kind(), n.holders(guard))) {
            Some((Kind::Head(run), holders)) if holders[0].slot() == WORKER => {
                // SAFETY: read from a head under its lock, with `guard` pinned.
                unsafe { run_at(run, guard) }.matched(at, LEN, &mut &seq[..])
            }
            _ => 0,
        }
    };
    let matched = through(head, 0);
    if matched == CUT {
        // The first piece's end: block `CUT` is the next run's head, or a true miss.
        return matched + through(at_cut, CUT);
    }
    matched
}

#[test]
fn find_races_cut() {
    super::model(|| {
        let local: Vec<LocalBlockHash> = (1..=LEN as u64).map(LocalBlockHash).collect();
        let seq = crate::compute_seq_hashes(&local);
        let run = Run::make(&local, &seq);
        let head_node = Node::run_head(SequenceHash(0), run, 0, WORKER, EXPIRY);
        let head: Arc<Shard> = Arc::new(RwLock::new(Some(head_node)));
        let at_cut: Arc<Shard> = Arc::new(RwLock::new(None));
        let tail: Arc<Shard> = Arc::new(RwLock::new(Some(Node::run_tail(
            seq[0],
            run,
            LEN as u32 - 1,
        ))));

        let finder = {
            let (head, at_cut, seq) = (Arc::clone(&head), Arc::clone(&at_cut), seq.clone());
            thread::spawn(move || {
                let guard = crossbeam_epoch::pin();
                let n = found(&head, &at_cut, &seq, &guard);
                assert_eq!(n, LEN, "a find racing a cut lost blocks");
            })
        };
        let cutter = {
            let (head, at_cut, tail) = (Arc::clone(&head), Arc::clone(&at_cut), Arc::clone(&tail));
            thread::spawn(move || {
                let guard = crossbeam_epoch::pin();
                // SAFETY: the run is owned by the head, which only this thread replaces.
                let r = unsafe { run_at(run, &guard) };
                let holders = {
                    let node = head.write().unwrap();
                    r.freeze();
                    let h = &node.as_ref().unwrap().holders(&guard)[0];
                    [(h.slot(), h.claim())]
                };
                let (a, b) = (r.part(0..CUT), r.part(CUT..LEN));
                let block = |i: usize, parent| {
                    let local = LocalBlockHash(r.locals()[i]);
                    Node::held_by(parent, local, i as u32, &holders, &guard)
                };
                let first = block(0, SequenceHash(0)).into_head(a);
                let second = block(CUT, seq_at(r, CUT - 1)).into_head(b);
                let marker = Node::run_tail(seq_at(r, CUT), b, LEN as u32 - 1);
                if cfg!(loom_break = "cut_head_first") {
                    // Broken: the head names the first piece before the second is in.
                    *head.write().unwrap() = Some(first);
                    *at_cut.write().unwrap() = Some(second);
                    *tail.write().unwrap() = Some(marker);
                } else {
                    *at_cut.write().unwrap() = Some(second);
                    *tail.write().unwrap() = Some(marker);
                    *head.write().unwrap() = Some(first);
                }
                for piece in [a, b] {
                    // SAFETY: placed at its head above; freed only once that head goes.
                    unsafe { run_at(piece, &guard) }.thaw();
                }
            })
        };
        finder.join().unwrap();
        cutter.join().unwrap();
        let _ = Claim::approx(EXPIRY);
    });
}

/// Block `i`'s sequence hash in `r`.
fn seq_at(r: &Run, i: usize) -> SequenceHash {
    SequenceHash(r.seqs()[i])
}
