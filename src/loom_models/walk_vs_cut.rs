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
//! Can fail: with `--cfg loom_break="walk_stops_on_moved_head"` (the walk stops when the
//! head no longer names the run, as it once did) loom finds the walk that read the marker
//! before the cut and the head after it, and leaves the second piece held: "a walk racing
//! a cut stopped short". Before that was fixed, four threads recording under a cap kept
//! blocks that no log named (the cap exceeded for good) and, once later decisions above
//! them went, held blocks below a gap (`tests/concurrency/threads.rs`,
//! `walks_that_cut_runs_from_many_threads_leave_prefixes_within_the_capacity`).

use super::node::Kind;
use super::run_cut::{race_cut, RunShards, CUT};
use super::Shard;
use crate::tree::run_alloc::run_at;
use crate::SequenceHash;

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
