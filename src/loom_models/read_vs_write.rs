//! A lock-free read of the node map racing a writer that changes the node's holders and
//! reclaims what it retired.
//!
//! This model runs the real map (`src/tree/map.rs`, two shards of four buckets under
//! loom) and the real node. The node has two holders, so an array. The writer removes one
//! (the other goes back inline and the array is retired inside the writer's odd window),
//! then runs collections until anything retired can be freed. The reader copies the node
//! with [`NodeMap::read`](crate::tree::map::NodeMap::read) and reads its holders: it must
//! see the whole array or the inline holder, never a copy mixing the two, and the array
//! must not be freed while it reads it (the allocator watch, `watch.rs`, looking back from
//! before the read, since the address is known only after it). (Removing the node as
//! well, a backward shift of its bucket, multiplied the model's run time by ten; the
//! threaded test `map::tests::lock_free_reads_see_only_whole_nodes_while_a_writer_changes_them`
//! and the TSan runs cover removals and growth.)
//!
//! Checked ordering: a read returns only a copy taken while the shard's version stayed
//! even and unchanged (the writer makes it odd before its first bucket write and anything
//! it retires, even after its last), with an acquire fence between the copy and the check
//! (`docs/design.md`, "Lock-free reads").
//!
//! Can fail: with `--cfg loom_break="read_unchecked"` (the read returns its copy without
//! the version check) loom finds a copy mixing the inline holder's words with the array's
//! ("a torn copy").

use crossbeam_epoch as epoch;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

use super::{reclaim, watch};
use crate::tree::claim::Claim;
use crate::tree::map::NodeMap;
use crate::tree::node::{Node, Outcome, Settle};
use crate::tree::Holders;
use crate::{LocalBlockHash, SequenceHash};

const KEY: u64 = 7;
const WORKER: u32 = 3;
const CLAIM: u64 = 50;
const OTHER: u32 = 5;
const OTHER_CLAIM: u64 = 70;

#[test]
fn read_races_a_change_and_reclamation() {
    super::model(|| {
        let map = Arc::new(NodeMap::new());
        let array = {
            let guard = epoch::pin(); // the main thread sets up, registered
            let node = Node::new(
                SequenceHash(1),
                LocalBlockHash(2),
                1,
                WORKER,
                Claim::approx(CLAIM),
            );
            map.insert(KEY, node);
            let mut n = map.get_mut(&KEY).expect("just put");
            assert!(n.upsert(OTHER, Claim::approx(OTHER_CLAIM), &guard));
            drop(n);
            let held = map.get(&KEY).expect("just put").holders(&guard);
            match held {
                Holders::Shared(a) => a.as_ptr() as usize,
                _ => unreachable!("two holders are an array"),
            }
        };
        let reclaimed = Arc::new(AtomicBool::new(false));
        let reader = {
            let (map, reclaimed) = (Arc::clone(&map), Arc::clone(&reclaimed));
            thread::spawn(move || {
                let guard = epoch::pin();
                let mark = watch::mark();
                let copy = map.read(KEY, &guard)?;
                assert_eq!(
                    (copy.parent(), copy.local()),
                    (SequenceHash(1), LocalBlockHash(2))
                );
                let holders = copy.holders(&guard);
                if let Holders::Shared(a) = &holders {
                    assert_eq!(a.as_ptr() as usize, array, "a torn copy");
                    // Stands for the reads below, which are checked before they happen:
                    // reading a freed loom atomic is undefined behaviour.
                    let _ = reclaimed.load(Ordering::Relaxed);
                    let freed = watch::freed_since(mark, array);
                    assert!(!freed, "the array was freed while the read used it");
                }
                let seen: Vec<(u32, u64)> = holders
                    .iter()
                    .map(|h| (h.slot(), h.claim().expiry))
                    .collect();
                Some(seen)
            })
        };
        let writer = {
            let (map, reclaimed) = (Arc::clone(&map), Arc::clone(&reclaimed));
            thread::spawn(move || {
                {
                    let guard = epoch::pin();
                    let mut n = map.get_mut(&KEY).expect("only this thread removes");
                    let outcome = n.settle(OTHER, |_| Settle::Remove, &guard);
                    assert!(matches!(outcome, Outcome::Removed { last: false, .. }));
                }
                reclaim(2);
                reclaimed.store(true, Ordering::Relaxed);
            })
        };
        let seen = reader.join().unwrap();
        writer.join().unwrap();
        let whole = [(WORKER, CLAIM), (OTHER, OTHER_CLAIM)];
        let published: [Option<&[(u32, u64)]>; 2] = [Some(&whole), Some(&whole[..1])];
        assert!(
            published.contains(&seen.as_deref()),
            "a torn copy: {seen:?}"
        );
    });
}
