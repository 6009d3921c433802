//! The purge of a removed worker racing a record that lays that worker's new blocks as a run.
//!
//! An approximate record does not wait for a removal of its worker, so the purge may meet
//! the run while the record is still laying it (`Tree::insert_run`): the record puts the
//! head in (the worker its only holder), then the tail marker, then looks at the head again
//! and takes its marker out if the head no longer names the run. The purge
//! (`Tree::purge_shards`), under the head's write lock, removes the worker's holder and
//! with it the head, then the tail marker if it names the run (`Tree::remove_run`). Whatever
//! the interleaving, a marker of the run is left only with its head.
//!
//! Checked ordering: the record puts its marker in before it looks at the head again, and
//! the purge takes the head out before it looks for the marker, so one of the two sees the
//! other's change.
//!
//! Can fail: with `--cfg loom_break="run_marker_unchecked"` (the record does not look at
//! the head again, as it once did not) loom finds the purge that took the head out before
//! the marker went in: "a tail marker outlived its run". Such a marker stayed in the map for
//! good, a node in `IndexStats::nodes`, and named a freed run whose address a later run could
//! take.

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
fn purge_races_run_insert() {
    super::model(|| {
        let local: Vec<LocalBlockHash> = (1..=LEN as u64).map(LocalBlockHash).collect();
        let seq = crate::compute_seq_hashes(&local);
        let head: Arc<Shard> = Arc::new(RwLock::new(None));
        let tail: Arc<Shard> = Arc::new(RwLock::new(None));
        let run = Run::make(&local, &seq);
        let recorder = {
            let (head, tail) = (Arc::clone(&head), Arc::clone(&tail));
            let first = seq[0];
            thread::spawn(move || {
                let span = RunSpan::of_seq(&seq);
                let node = Node::run_head(SequenceHash(0), (run, span), 0, WORKER, EXPIRY);
                *head.write().unwrap() = Some(node);
                let marker = Node::run_tail(first, run, LEN as u32 - 1);
                *tail.write().unwrap() = Some(marker);
                if !cfg!(loom_break = "run_marker_unchecked") {
                    remove_tail_marker(&head, &tail, run);
                }
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
        recorder.join().unwrap();
        purger.join().unwrap();
        let head_live = head.read().unwrap().is_some();
        let marker = tail.read().unwrap().is_some();
        assert!(!marker || head_live, "a tail marker outlived its run");
    });
}
