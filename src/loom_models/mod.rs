//! Loom models of every place where two threads meet without a lock.
//!
//! Built only with `RUSTFLAGS="--cfg loom --cfg crossbeam_loom"` (see `docs/testing.md`):
//! the crate's atomics then come from loom through `crate::sync`, crossbeam-epoch is
//! loom-aware, and the locks the protocols lean on are loom's. The node map's lock-free
//! read is modelled on the real map (`read_vs_write`); elsewhere the shard lock of a
//! node is played by a `loom::sync::RwLock<Option<Node>>` ([`Shard`]); the operations on
//! it follow `Tree`'s (read lock for a refresh or a find, write lock for a shape change or
//! a walk; a find's read lock stands for the map's checked copy, which `read_vs_write`
//! shows to be a state some writer left) and call the real [`Node`](node::Node) methods of `src/tree/node.rs` (and the
//! holders of `src/tree/holder.rs`), compiled here a second time because both modules are
//! private to `tree`.
//!
//! Each model names, in its doc comment, the ordering it checks and the `loom_break` cfg
//! (or the one-line patch) that breaks it, with the failure loom then reports.

mod append_vs_find;
mod find_vs_cut;
mod find_vs_recycle;
mod find_vs_refresh;
mod find_vs_unlink;
mod handover;
mod insert_run_vs_purge;
mod join_vs_cut;
mod kill_vs_reclaim;
mod outbox_bound;
mod raise_vs_set;
mod read_vs_write;
mod record_vs_sweep;
mod remove_vs_record;
mod run_cut;
mod split_vs_refresh;
mod uncount_vs_recycle;
mod walk_vs_cut;
mod watch;

use crossbeam_epoch::Guard;
use loom::sync::RwLock;

use crate::slot::Slot;
/// `super::claim` for the included `node.rs`.
use crate::tree::claim;
use crate::{LocalBlockHash, SequenceHash};

#[path = "../tree/node.rs"]
#[allow(dead_code, clippy::duplicate_mod)] // `tree::node` is private to `tree`
mod node;

/// `super::holder` for the included `node.rs`.
#[path = "../tree/holder.rs"]
#[allow(dead_code, clippy::duplicate_mod)] // `tree::holder` is private to `tree`
mod holder;

use claim::Claim;
use node::{Node, Outcome, Settle};

/// One node's map shard: `None` once the node is unlinked.
type Shard = RwLock<Option<Node>>;

/// A shard holding a first-block node with one approximate entry.
fn shard_with(slot: Slot, expiry: u64) -> Shard {
    RwLock::new(Some(Node::new(
        SequenceHash(0),
        LocalBlockHash(1),
        0,
        slot,
        Claim::approx(expiry),
    )))
}

/// `Tree::upsert_chain` for one block: refresh in place under the read lock, else add the
/// entry (or the node) under the write lock. Returns the entries added (0 or 1).
fn record(shard: &Shard, slot: Slot, expiry: u64, guard: &Guard) -> usize {
    let want = Claim::approx(expiry);
    let refreshed = if cfg!(loom_break = "refresh_unlocked") {
        // Broken: the refresh runs after the read lock is dropped.
        let holders = shard.read().unwrap().as_ref().map(|n| n.holders(guard));
        // (An inline holder is a copy once the lock is dropped: raising it raises nothing.)
        holders.is_some_and(|h| {
            holder::find(&h, slot).is_some_and(|h| {
                h.raise(want);
                true
            })
        })
    } else {
        let node = shard.read().unwrap();
        node.as_ref()
            .is_some_and(|n| n.update_claim(slot, want, guard))
    };
    if refreshed {
        return 0;
    }
    let mut node = shard.write().unwrap();
    match node.as_mut() {
        Some(n) => usize::from(n.upsert(slot, want, guard)),
        None => {
            let fresh = Node::new(SequenceHash(0), LocalBlockHash(1), 0, slot, want);
            *node = Some(fresh);
            1
        }
    }
}

/// `Tree::walk` for one block: under the write lock, remove `slot`'s entry if it expired
/// by `threshold` (any entry of a dead slot, as a purge removes it), unlinking the node it
/// leaves empty. Returns
/// the entries removed (0 or 1).
fn walk(
    shard: &Shard,
    slot: Slot,
    threshold: u64,
    alive: bool,
    mut forget: impl FnMut(),
    guard: &Guard,
) -> usize {
    let mut node = shard.write().unwrap();
    let Some(n) = node.as_mut() else {
        return 0;
    };
    // `tree::walk_decision` for claims without the exact bit; `forget` before a removal,
    // as `Tree::walk` calls it.
    let decide = |c: Claim| {
        if alive && (c.expiry == 0 || c.expiry > threshold) {
            Settle::Keep
        } else {
            forget();
            Settle::Remove
        }
    };
    match n.settle(slot, decide, guard) {
        Outcome::Removed { last: true, .. } => {
            *node = None;
            1
        }
        Outcome::Removed { last: false, .. } => 1,
        Outcome::Absent | Outcome::Kept | Outcome::Cleared => 0,
    }
}

/// `slot`'s approximate expiry on the block, read as a find does (the lock dropped
/// before the read).
fn claim_of(shard: &Shard, slot: Slot, guard: &Guard) -> Option<u64> {
    let holders = shard.read().unwrap().as_ref().map(|n| n.holders(guard))?;
    holder::find(&holders, slot).map(|h| h.claim().expiry)
}

/// Runs `flushes` collections: each advances the global epoch at most once, and what a
/// thread retired is freed two advances after its bag reached the global queue.
fn reclaim(flushes: usize) {
    for _ in 0..flushes {
        crossbeam_epoch::pin().flush();
    }
}

/// `loom::model`, with the default epoch collector created before `f` spawns threads, as
/// in a running index: otherwise loom would also explore the threads racing to create it.
fn model(f: impl Fn() + Sync + Send + 'static) {
    loom::model(move || {
        let _ = crossbeam_epoch::default_collector();
        f();
    });
}
