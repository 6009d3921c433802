//! The purge of a removed worker racing a record that lays that worker's new blocks as a
//! run, while a walk arrives at the run's tail.
//!
//! An approximate record does not wait for a removal of its worker, so the purge may meet
//! the run while the record is still laying it (`Tree::insert_run`): the record puts the
//! tail marker in, then the head (the worker its only holder), then takes its marker out if
//! the head no longer names the run. The purge (`Tree::purge_shards`), under the head's
//! write lock, removes the worker's holder and with it the head, then the tail marker if it
//! names the run (`Tree::remove_run`). A walk (of a block hung below the run, or of a
//! decision ending at its tail, both made through the head) reads the head, then the tail.
//!
//! Checked ordering: the marker goes in before the head, and the purge takes the head out
//! before the marker, so a reader that finds the head naming the run and then no marker at
//! the tail finds the head gone too, and whatever the interleaving, a marker of the run is
//! left only with its head.
//!
//! Can fail: with `--cfg loom_break="run_head_first"` (the head in first, then the marker,
//! as the record once did) loom finds the walk that reads the head, then the tail before
//! the marker is in: "a run's head without its tail marker". Such a walk stopped there, its
//! decision gone from its log: the run's claims it should have ended stayed for good, and
//! the blocks hung below, once a later walk took the run, above a gap.

use loom::sync::{Arc, RwLock};
use loom::thread;

use super::node::{Kind, Node};
use super::Shard;
use crate::tree::run_alloc::{Run, RunSpan};
use crate::{LocalBlockHash, SequenceHash};

const WORKER: u32 = 1;
const EXPIRY: u64 = 10;
const LEN: usize = 3;

/// `Tree::remove_tail_marker`: the marker in `tail` goes if it names `run` and the head in
/// `head` no longer does.
fn remove_tail_marker(head: &Shard, tail: &Shard, run: usize) {
    let live = head.read().unwrap().as_ref().map(|n| n.kind()) == Some(Kind::Head(run));
    if live {
        return;
    }
    let mut marker = tail.write().unwrap();
    if matches!(marker.as_ref().map(|n| n.kind()), Some(Kind::Tail { run: r, .. }) if r == run) {
        *marker = None;
    }
}

#[test]
fn purge_and_walk_race_run_insert() {
    super::model(|| {
        let local: Vec<LocalBlockHash> = (1..=LEN as u64).map(LocalBlockHash).collect();
        let seq = crate::compute_seq_hashes(&local);
        let head: Arc<Shard> = Arc::new(RwLock::new(None));
        let tail: Arc<Shard> = Arc::new(RwLock::new(None));
        let run = Run::make(&local, &seq);
        let seq_head = seq[0].0;
        let recorder = {
            let (head, tail) = (Arc::clone(&head), Arc::clone(&tail));
            let first = seq[0];
            thread::spawn(move || {
                let span = RunSpan::of_seq(&seq);
                let node = Node::run_head(SequenceHash(0), (run, span), 0, WORKER, EXPIRY);
                let marker = Node::run_tail(first, run, LEN as u32 - 1);
                if cfg!(loom_break = "run_head_first") {
                    *head.write().unwrap() = Some(node);
                    *tail.write().unwrap() = Some(marker);
                } else {
                    *tail.write().unwrap() = Some(marker);
                    *head.write().unwrap() = Some(node);
                }
                remove_tail_marker(&head, &tail, run);
            })
        };
        let purger = {
            let (head, tail) = (Arc::clone(&head), Arc::clone(&tail));
            thread::spawn(move || {
                let guard = crossbeam_epoch::pin();
                let mut node = head.write().unwrap();
                let Some(n) = node.as_mut().filter(|n| n.kind() == Kind::Head(run)) else {
                    return; // not in yet: a later round of the purge takes it
                };
                if n.remove_slots(|slot| slot == WORKER, |_| {}, &guard) {
                    *node = None; // its `Drop` retires the run
                    drop(node);
                    remove_tail_marker(&head, &tail, run);
                }
            })
        };
        // The walk: the head naming the run, then the tail.
        let walker = {
            let (head, tail) = (Arc::clone(&head), Arc::clone(&tail));
            thread::spawn(move || {
                let names_run = |shard: &Shard, kind: Kind| {
                    shard.read().unwrap().as_ref().map(|n| n.kind()) == Some(kind)
                };
                let marker = Kind::Tail {
                    head: SequenceHash(seq_head),
                    run,
                };
                if names_run(&head, Kind::Head(run)) {
                    assert!(
                        names_run(&tail, marker) || !names_run(&head, Kind::Head(run)),
                        "a run's head without its tail marker"
                    );
                }
            })
        };
        recorder.join().unwrap();
        purger.join().unwrap();
        walker.join().unwrap();
        let head_live = head.read().unwrap().is_some();
        let marker = tail.read().unwrap().is_some();
        assert!(!marker || head_live, "a tail marker outlived its run");
    });
}
