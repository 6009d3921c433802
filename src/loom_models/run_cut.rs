//! What the models of cuts share (`find_vs_cut`, `join_vs_cut`, `walk_vs_cut`): a worker's
//! run of four blocks in the shards of its head, of the block where a cut after two puts
//! the second piece's head, and of its tail marker; the cut itself, as `Tree::cut` does it;
//! and a race of the cut with what each model checks.

use loom::sync::{Arc, RwLock};
use loom::thread;

use super::node::{Kind, Node};
use super::{Claim, Shard};
use crate::slot::Slot;
use crate::tree::run_alloc::{run_at, Run, RunSpan};
use crate::{LocalBlockHash, SequenceHash};

/// Blocks of the run, and where the cut falls.
pub(super) const LEN: usize = 4;
pub(super) const CUT: usize = 2;

/// A run in its shards (see the module docs).
pub(super) struct RunShards {
    /// The run's blocks' sequence hashes.
    pub(super) seq: Vec<SequenceHash>,
    /// The run (`Run::make`).
    pub(super) run: usize,
    pub(super) head: Arc<Shard>,
    pub(super) at_cut: Arc<Shard>,
    pub(super) tail: Arc<Shard>,
}

/// A run of [`LEN`] blocks held by `slot` until `expiry`, at its head and tail, and nothing
/// yet at block [`CUT`].
pub(super) fn run_shards(slot: Slot, expiry: u64) -> RunShards {
    let (seq, run, head, tail) = held_run(LEN, slot, expiry);
    RunShards {
        seq,
        run,
        head: Arc::new(RwLock::new(Some(head))),
        at_cut: Arc::new(RwLock::new(None)),
        tail: Arc::new(RwLock::new(Some(tail))),
    }
}

/// A run of `len` blocks held by `slot` until `expiry`: its blocks' sequence hashes, the
/// run, its head and its tail marker.
pub(super) fn held_run(
    len: usize,
    slot: Slot,
    expiry: u64,
) -> (Vec<SequenceHash>, usize, Node, Node) {
    let local: Vec<LocalBlockHash> = (1..=len as u64).map(LocalBlockHash).collect();
    let seq = crate::compute_seq_hashes(&local);
    let run = Run::make(&local, &seq);
    let head = Node::run_head(
        SequenceHash(0),
        (run, RunSpan::of_seq(&seq)),
        0,
        slot,
        expiry,
    );
    let tail = Node::run_tail(seq[0], run, len as u32 - 1);
    (seq, run, head, tail)
}

/// `Tree::freeze`: under the head's write lock, the run frozen and its holders copied;
/// `None` if the head no longer names the run (a walk removed it).
pub(super) fn freeze(
    head: &Shard,
    run: usize,
    guard: &crossbeam_epoch::Guard,
) -> Option<Vec<(u32, Claim)>> {
    let node = head.write().unwrap();
    let n = node.as_ref().filter(|n| n.kind() == Kind::Head(run))?;
    // SAFETY: read from the head under its lock, with `guard` pinned.
    unsafe { run_at(run, guard) }.freeze();
    Some(
        n.holders(guard)
            .iter()
            .map(|h| (h.slot(), h.claim()))
            .collect(),
    )
}

/// `Tree::cut` of the run after [`CUT`] blocks: under the head's write lock, freeze the run
/// and copy its holders (nothing, if the head no longer names the run: a walk removed
/// it); place the second piece's head at block `CUT`, make the tail marker the second
/// piece's, and last replace the head with the first piece's (first, with
/// `--cfg loom_break="cut_head_first"`); thaw the pieces. Only the calling thread replaces
/// the head with anything but nothing.
pub(super) fn cut(shards: &RunShards, guard: &crossbeam_epoch::Guard) {
    let RunShards {
        run,
        head,
        at_cut,
        tail,
        ..
    } = shards;
    // SAFETY: the run is owned by the head, which only this thread replaces.
    let r = unsafe { run_at(*run, guard) };
    let Some(copied) = freeze(head, *run, guard) else {
        return;
    };
    let (a, b) = (r.part(0..CUT), r.part(CUT..LEN));
    let block = |i: usize, parent| {
        let local = LocalBlockHash(r.locals()[i]);
        Node::held_by(parent, local, i as u32, &copied, guard)
    };
    let first = block(0, SequenceHash(0)).into_head(a, RunSpan::of(&r.seqs()[..CUT]));
    let second =
        block(CUT, SequenceHash(r.seqs()[CUT - 1])).into_head(b, RunSpan::of(&r.seqs()[CUT..]));
    let marker = Node::run_tail(SequenceHash(r.seqs()[CUT]), b, LEN as u32 - 1);
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
        unsafe { run_at(piece, guard) }.thaw();
    }
}

/// A run of [`LEN`] blocks held by `slot` until `expiry` ([`run_shards`]), `f` on one thread
/// and the [`cut`] on another; the shards once both are done.
pub(super) fn race_cut(
    slot: Slot,
    expiry: u64,
    f: impl FnOnce(&RunShards, &crossbeam_epoch::Guard) + Send + 'static,
) -> Arc<RunShards> {
    let shards = Arc::new(run_shards(slot, expiry));
    race(&shards, f, cut);
    shards
}

/// `racer` and `cutter` on `shared`, each on a thread of its own with its own pin; returns
/// once both are done.
pub(super) fn race<S: Send + Sync + 'static>(
    shared: &Arc<S>,
    racer: impl FnOnce(&S, &crossbeam_epoch::Guard) + Send + 'static,
    cutter: impl FnOnce(&S, &crossbeam_epoch::Guard) + Send + 'static,
) {
    let threads = [
        thread::spawn({
            let shared = Arc::clone(shared);
            move || racer(&shared, &crossbeam_epoch::pin())
        }),
        thread::spawn({
            let shared = Arc::clone(shared);
            move || cutter(&shared, &crossbeam_epoch::pin())
        }),
    ];
    threads.into_iter().for_each(|t| t.join().unwrap());
}
