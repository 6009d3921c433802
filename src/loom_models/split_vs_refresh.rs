//! A record refreshing a whole run racing the run's split.
//!
//! A worker's run (here of two blocks: its head, and the block the split places as a node)
//! holds an old claim; one thread refreshes the whole run to a new claim as a record does
//! (`Tree::refresh_at`: under the head's read lock, in place if the run is live), another
//! splits it up (`Tree::split`: under the head's write lock, freeze the run and read its
//! claim; place the block as a node with that claim; replace the head with its block's
//! node). A refresh that finds the run frozen waits for the split and then raises the
//! blocks as nodes. Whatever the interleaving, both blocks end with the new claim.
//!
//! Checked ordering: the split freezes the run and reads its claim *under the head's write
//! lock*, so no in-place refresh runs between the read and the freeze (`docs/design.md`,
//! "Runs").
//!
//! Can fail: with `--cfg loom_break="freeze_unlocked"` (the split reads the claim under the
//! read lock and freezes after dropping it) loom finds the lost refresh: "the refresh of
//! the run was lost".

use loom::sync::{Arc, RwLock};
use loom::thread;

use super::node::{Kind, Node};
use super::{claim_of, Claim, Shard};
use crate::tree::run_alloc::{run_at, Run, RunSpan};
use crate::{LocalBlockHash, SequenceHash};

const WORKER: u32 = 1;
const OLD: u64 = 10;
const NEW: u64 = 100;

/// Raises `WORKER`'s claim on a block node to `expiry` (adding it if the node is missing).
fn raise(shard: &Shard, expiry: u64, guard: &crossbeam_epoch::Guard) {
    let mut node = shard.write().unwrap();
    match node.as_mut() {
        Some(n) => {
            n.upsert(WORKER, Claim::approx(expiry), guard);
        }
        None => {
            let block = Node::new(
                SequenceHash(0),
                LocalBlockHash(2),
                1,
                WORKER,
                Claim::approx(expiry),
            );
            *node = Some(block);
        }
    }
}

#[test]
fn refresh_races_split() {
    super::model(|| {
        let local = [LocalBlockHash(1), LocalBlockHash(2)];
        let seq = crate::compute_seq_hashes(&local);
        let run = Run::make(&local, &seq);
        let head: Arc<Shard> = Arc::new(RwLock::new(Some(Node::run_head(
            SequenceHash(0),
            (run, RunSpan::of_seq(&seq)),
            0,
            WORKER,
            OLD,
        ))));
        let block: Arc<Shard> = Arc::new(RwLock::new(None));

        let refresher = {
            let (head, block) = (Arc::clone(&head), Arc::clone(&block));
            thread::spawn(move || {
                let guard = crossbeam_epoch::pin();
                let frozen = {
                    let node = head.read().unwrap();
                    let n = node.as_ref().expect("the head or its block");
                    match n.kind() {
                        Kind::Head(run) => {
                            // SAFETY: read from the head under its lock, `guard` pinned.
                            let r = unsafe { run_at(run, &guard) };
                            let want = Claim::approx(NEW);
                            let refreshed = r.is_live() && n.update_claim(WORKER, want, &guard);
                            (!refreshed).then_some(Some(r))
                        }
                        // Split already: the blocks are nodes.
                        _ => Some(None),
                    }
                };
                if let Some(run) = frozen {
                    if let Some(r) = run {
                        r.wait_split();
                    }
                    raise(&head, NEW, &guard);
                    raise(&block, NEW, &guard);
                }
            })
        };
        let splitter = {
            let (head, block) = (Arc::clone(&head), Arc::clone(&block));
            thread::spawn(move || {
                let guard = crossbeam_epoch::pin();
                let claim = if cfg!(loom_break = "freeze_unlocked") {
                    // Broken: the claim is read under the read lock, the run frozen later.
                    let claim = head.read().unwrap().as_ref().unwrap().holders(&guard)[0].claim();
                    // SAFETY: the run is owned by the head, which only this thread replaces.
                    unsafe { run_at(run, &guard) }.freeze();
                    claim
                } else {
                    let node = head.write().unwrap();
                    // SAFETY: as above; read under the head's write lock.
                    unsafe { run_at(run, &guard) }.freeze();
                    node.as_ref().unwrap().holders(&guard)[0].claim()
                };
                raise(&block, claim.expiry, &guard);
                // The head's node replaced by its block's: dropping it retires the run.
                let first = Node::new(SequenceHash(0), LocalBlockHash(1), 0, WORKER, claim);
                *head.write().unwrap() = Some(first);
            })
        };
        refresher.join().unwrap();
        splitter.join().unwrap();

        let guard = crossbeam_epoch::pin();
        for shard in [&head, &block] {
            let claim = claim_of(shard, WORKER, &guard);
            assert_eq!(
                claim,
                Some(NEW),
                "the refresh of the run was lost: {claim:?}"
            );
        }
    });
}
