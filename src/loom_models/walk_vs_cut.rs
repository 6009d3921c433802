//! An eviction walk racing the cut of the run it walks.
//!
//! A worker's run of four blocks, the only decision it holds there; an eviction walk of
//! that decision arrives at the run's tail marker (`Tree::walk`) while a record whose
//! prompt leaves the run after two blocks cuts it (`Tree::cut`). The walk reads the marker,
//! lets go of its shard, and locks the head the marker names (`Tree::walk_run`): a live run
//! there, it removes the worker's entry on it (the run's head, then its marker); a frozen
//! one, it waits for the cut and reads the marker again. If the cut ended in between, the
//! head names the first piece: the walk reads the marker again, which now names the second
//! piece, and walks that (the first piece is the walk's next step up, not modelled).
//! Whatever the interleaving, the run's last blocks end up evicted: no marker is left.
//!
//! Checked ordering: a cut changes the marker before the head, so a head that no longer
//! names the marker's run means either the marker changed too (look again) or the run is
//! gone (the marker still names it: stop).
//!
//! The second test cuts a run of three blocks after two: its last block becomes a block
//! node at the run's tail key (a piece of one block), and the first piece's tail marker
//! goes in at block 1's key before the head names the first piece. A walk that arrives at
//! the block node, removes the worker's entry there and goes up to block 1 may so meet
//! the first piece's marker while the head still names the run, frozen. Checked: it waits
//! for the cut and looks again (`Tree::walk_run`); a marker whose head names another run,
//! live, is one that outlived its run. With `--cfg loom_break="walk_stops_at_a_piece_not_in"`
//! (the walk stops there, as it once did) loom reports "a walk stopped at a cut's first
//! piece": the worker kept blocks 0 and 1, in no log, and block 2 gone from under
//! anything its next decisions hung there (`caps::races` saw about one run in 4,500 end
//! with a block above a gap).
//!
//! Can fail: with `--cfg loom_break="walk_stops_on_moved_head"` (the walk stops when the
//! head no longer names the run, as it once did) loom finds the walk that read the marker
//! before the cut and the head after it, and leaves the second piece held: "a walk racing
//! a cut stopped short". Before that was fixed, four threads recording under a cap kept
//! blocks that no log named (the cap exceeded for good) and, once later decisions above
//! them went, held blocks below a gap (`tests/concurrency/threads.rs`,
//! `walks_that_cut_runs_from_many_threads_leave_prefixes_within_the_capacity`).

use loom::sync::{Arc, RwLock};

use super::node::{Kind, Node, Outcome, Settle};
use super::run_cut::{freeze, held_run, race, race_cut, RunShards, CUT};
use super::Shard;
use crate::tree::run_alloc::{run_at, RunSpan};
use crate::{LocalBlockHash, SequenceHash};

const WORKER: u32 = 1;
const EXPIRY: u64 = 10;

/// What one look at the marker gives the walk (`Tree::walk_run`'s outcomes).
enum Step {
    Removed,
    Stop,
    Again,
}

/// The shard of the head keyed `key`: the run's (block 0) or the second piece's.
fn head_shard<'s>(shards: &'s RunShards, key: SequenceHash) -> &'s Shard {
    if key == shards.seq[0] {
        &shards.head
    } else {
        assert_eq!(key, shards.seq[CUT], "the second piece's head");
        &shards.at_cut
    }
}

/// One step of the walk at the tail marker, as `Tree::walk` and `Tree::walk_run` take it.
fn walk_step(shards: &RunShards, guard: &crossbeam_epoch::Guard) -> Step {
    // The marker, read under its shard's lock, which is then let go.
    let named = match shards.tail.read().unwrap().as_ref().map(|n| n.kind()) {
        Some(Kind::Tail { head, run }) => (head, run),
        None => return Step::Stop,
        Some(_) => unreachable!("the tail's key holds a marker or nothing"),
    };
    let (head, run) = named;
    let shard = head_shard(shards, head);
    let mut node = shard.write().unwrap();
    if node.as_ref().map(|n| n.kind()) != Some(Kind::Head(run)) {
        drop(node);
        if cfg!(loom_break = "walk_stops_on_moved_head") {
            return Step::Stop;
        }
        let marker = Kind::Tail { head, run };
        let still = shards.tail.read().unwrap().as_ref().map(|n| n.kind()) == Some(marker);
        return if still { Step::Stop } else { Step::Again };
    }
    // SAFETY: read from a head under its lock, with `guard` pinned.
    let r = unsafe { run_at(run, guard) };
    if !r.is_live() {
        drop(node);
        r.wait_split();
        return Step::Again;
    }
    let n = node.as_ref().expect("a head");
    let claim = n.holders(guard)[0].claim();
    assert_eq!(n.holders(guard)[0].slot(), WORKER);
    assert!(claim.expiry <= EXPIRY, "the walk's own decision");
    // `Tree::remove_run`: the head, then the marker.
    *node = None;
    drop(node);
    *shards.tail.write().unwrap() = None;
    Step::Removed
}

#[test]
fn walk_races_cut() {
    super::model(|| {
        let shards = race_cut(WORKER, EXPIRY, |shards, guard| loop {
            match walk_step(shards, guard) {
                Step::Again => continue,
                Step::Removed | Step::Stop => break,
            }
        });
        assert!(
            shards.tail.read().unwrap().is_none(),
            "a walk racing a cut stopped short"
        );
    });
}

/// A run of three blocks in the shards of its head, block 1 and its tail.
struct ThreeShards {
    seq: Vec<SequenceHash>,
    run: usize,
    head: Shard,
    mid: Shard,
    tail: Shard,
}

/// `Tree::cut` of the three-block run after two: freeze under the head's lock, the first
/// piece's marker at block 1 (step 1), the tail marker replaced by block 2's node (step 3;
/// a piece of one block has no head, step 2), the head by the first piece's (step 4), and
/// the piece thawed.
fn cut_after_two(s: &ThreeShards, guard: &crossbeam_epoch::Guard) {
    // SAFETY: the run is owned by the head, which only this thread replaces with a node.
    let r = unsafe { run_at(s.run, guard) };
    let Some(copied) = freeze(&s.head, s.run, guard) else {
        return;
    };
    let first = r.part(0..2);
    let block = |i: usize, parent| {
        let local = LocalBlockHash(r.locals()[i]);
        Node::held_by(parent, local, i as u32, &copied, guard)
    };
    *s.mid.write().unwrap() = Some(Node::run_tail(s.seq[0], first, 1));
    {
        let mut tail = s.tail.write().unwrap();
        assert!(tail.as_ref().is_some_and(|n| n.kind()
            == Kind::Tail {
                head: s.seq[0],
                run: s.run
            }));
        *tail = Some(block(2, s.seq[1]));
    }
    let head = block(0, SequenceHash(0)).into_head(first, RunSpan::of_seq(&s.seq[..2]));
    *s.head.write().unwrap() = Some(head);
    // SAFETY: placed at the head above; freed only once that head goes.
    unsafe { run_at(first, guard) }.thaw();
}

/// `Tree::walk_run` at the marker `(head, run)` read from `marker`: the whole run removed
/// (`Some(true)`), stop (`Some(false)`), or look again (`None`).
fn walk_marker(
    s: &ThreeShards,
    marker: &Shard,
    run: usize,
    guard: &crossbeam_epoch::Guard,
) -> Option<bool> {
    let mut node = s.head.write().unwrap();
    match node.as_ref().map(|n| n.kind()) {
        Some(Kind::Head(r)) if r == run => {
            // SAFETY: read from a head under its lock, with `guard` pinned.
            let r = unsafe { run_at(run, guard) };
            if !r.is_live() {
                drop(node);
                r.wait_split();
                return None;
            }
            *node = None; // `Tree::remove_run`: the head, then the marker
            drop(node);
            *marker.write().unwrap() = None;
            Some(true)
        }
        Some(Kind::Head(moving))
            if !cfg!(loom_break = "walk_stops_at_a_piece_not_in") && {
                // SAFETY: as above.
                !unsafe { run_at(moving, guard) }.is_live()
            } =>
        {
            // Another run, frozen: its cut placed this marker and has yet to replace
            // the head. Wait for it and look again.
            drop(node);
            // SAFETY: as above.
            unsafe { run_at(moving, guard) }.wait_split();
            None
        }
        _ => {
            drop(node);
            let named = Kind::Tail {
                head: s.seq[0],
                run,
            };
            let still = marker.read().unwrap().as_ref().map(|n| n.kind()) == Some(named);
            if still {
                Some(false)
            } else {
                None
            }
        }
    }
}

/// The walk of the worker's decision that ends at block 2 (`Tree::walk`), up to the root.
fn walk_from_tail(s: &ThreeShards, guard: &crossbeam_epoch::Guard) {
    let mut at_tail = true;
    loop {
        let shard = if at_tail { &s.tail } else { &s.mid };
        let kind = shard.read().unwrap().as_ref().map(|n| n.kind());
        match kind {
            None => return,
            Some(Kind::Tail { run, .. }) => match walk_marker(s, shard, run, guard) {
                Some(_) => return, // removed up to the root, or stopped
                None => continue,
            },
            Some(Kind::Block) => {
                let mut node = shard.write().unwrap();
                let Some(n) = node.as_mut() else { continue };
                match n.settle(WORKER, |_| Settle::Remove, guard) {
                    Outcome::Removed { last: true, .. } => *node = None,
                    other => panic!("the worker's only entry: {other:?}"),
                }
                assert!(at_tail, "block 1 is inside the first piece");
                at_tail = false;
            }
            Some(Kind::Head(_)) => unreachable!("no head at blocks 1 and 2"),
        }
    }
}

#[test]
fn walk_from_a_piece_of_one_block_races_cut() {
    super::model(|| {
        let (seq, run, head, tail) = held_run(3, WORKER, EXPIRY);
        let s = Arc::new(ThreeShards {
            seq,
            run,
            head: RwLock::new(Some(head)),
            mid: RwLock::new(None),
            tail: RwLock::new(Some(tail)),
        });
        race(&s, walk_from_tail, cut_after_two);
        let left = [&s.head, &s.mid, &s.tail].map(|shard| shard.read().unwrap().is_some());
        assert_eq!(left, [false; 3], "a walk stopped at a cut's first piece");
    });
}
