//! A tree node's payload: which worker slots hold the block, and until when.
//!
//! A node held by one slot keeps its holder *inline*, in the node's own fields (no
//! allocation, and a find reads it from the map's bucket, which the probe already brought
//! into cache). Two or more holders are an array sorted by slot, published through the
//! node's pointer word (`crossbeam_epoch::Pointer::into_usize`), with room for more: the
//! node's length (`len` below, the field `slot_or_len`) says how many of its cells are
//! holders. Its *claim*
//! fields (see `claim.rs`) are atomics that refreshers update in place; its *shape* (which
//! slots are present) changes only under the node's map-shard write lock, in two ways: a
//! slot above every holder is *appended* in place (written into the first free cell, then
//! counted in `len`), anything else builds a new array and swaps it in.
//!
//! Protocol (see `docs/design.md`, "Epoch protocol"):
//! - readers copy the array pointer and `len` as a pair (a dump under the shard read lock,
//!   which it then drops; a find in a copy of the node that the map checks against the
//!   shard's version, `map.rs`), and read those `len` holders under an epoch guard: a later
//!   append writes only cells past them, and a later shape change publishes a new array. An
//!   inline holder is copied out instead ([`Holders::Sole`]): the bucket it lives in may
//!   move once the lock is dropped or the copy checked;
//! - a writer changes a copy of the node, which the map writes back into the bucket inside
//!   the shard's odd window (`map.rs`), so `&mut self` here is the write lock and never
//!   the bucket a lock-free reader is copying;
//! - refreshers update a claim atomically while holding the shard *read* lock, so a shape
//!   change or walk (write lock) never runs concurrently and can never lose a refresh;
//! - a shape change copies the current claims into a new array, publishes it, and
//!   `defer_destroy`s the old one, which a pinned reader may still be reading.

use crossbeam_epoch::{self as epoch, Guard, Owned, Pointer, Shared};

use super::claim::Claim;
use super::holder::{as_holders, find, new_array, retire, Holder, HolderArray, Holders};
use crate::slot::Slot;
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::tree::run_alloc::{RunPtr, RunSpan};
use crate::{LocalBlockHash, SequenceHash};

/// A radix-tree node, stored inline as the value of the node map (keyed by its sequence
/// hash): 48 bytes.
///
/// Its holders are in one of two places, told apart by the `ARRAY` flag of `meta`:
/// - **inline** (flag clear): one holder, whose slot is `slot_or_len`, whose approximate
///   expiry is `word` and whose exact flag is `meta`'s `EXACT` bit; or none, for the moment
///   between a walk removing the last holder and the caller unlinking the node under the
///   same write lock (`EMPTY`);
/// - **array** (flag set): the first `slot_or_len` cells (two or more) of a published array,
///   whose pointer (`Pointer::into_usize`) is `word`.
///
/// The flags, `slot_or_len` and (in array form) `word` change only under the shard write
/// lock, so whoever holds the lock reads them as a pair. A refresher (read lock) changes
/// only an inline holder's claim in place: `word` by an atomic max, `EXACT` by an atomic or.
#[derive(Debug)]
pub(crate) struct Node {
    /// The parent's sequence hash; meaningless when `depth() == 0` ([`Node::parent`]).
    parent: AtomicU64,
    /// The hash of this block's tokens alone ([`Node::local`]); a run's pointer in a head
    /// or a tail marker.
    local: AtomicU64,
    /// Inline: the holder's approximate expiry (0: none). Array: the array's pointer.
    word: AtomicU64,
    /// A head's run, as far as a find reads it before the run itself ([`RunSpan`]): its
    /// number of blocks and its last block's sequence hash. A run never changes, so
    /// neither do these while the node heads it. Meaningless in other nodes (zero in those
    /// made as such; copies and write-backs of them skip these words).
    run_len: AtomicU64,
    run_tail: AtomicU64,
    /// Inline: the holder's slot. Array: how many leading cells are holders (the rest are
    /// free room).
    slot_or_len: AtomicU32,
    /// The position of the block in its prompt (the low 29 bits, saturating at
    /// [`MAX_DEPTH`]) and the flags `EXACT`, `ARRAY` and `EMPTY`.
    meta: AtomicU32,
}

/// The inline holder's exact flag (a KV event stored the block).
const EXACT: u32 = 1 << 31;
/// The holders are in an array.
const ARRAY: u32 = 1 << 30;
/// The node has no holder (inline form only; it is about to be unlinked).
const EMPTY: u32 = 1 << 29;
/// The node is the first block of a [run](super::run_alloc): its `local` field is the run's
/// pointer, its holders (inline or in an array) hold every block of the run.
const HEAD: u32 = 1 << 28;
/// The node marks the last block of a run: `parent` is the run's head, `local` the run's
/// pointer (an identity only: never read through), no holder.
const TAIL: u32 = 1 << 27;
/// The deepest position a node records: deeper blocks (of a prompt of more than 2^27 - 1
/// blocks) all read as this depth, which matters only for the order of dumps among them.
pub(crate) const MAX_DEPTH: u32 = TAIL - 1;

// The layout the memory figures in `docs/design.md` assume.
const _: () = assert!(std::mem::size_of::<Node>() == 48 || cfg!(loom));

/// What a map entry is (see [`Node::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One block, with its holders.
    Block,
    /// The first block of a run, and the run.
    Head(RunPtr),
    /// The marker of a run's last block: the run's head and pointer.
    Tail { head: SequenceHash, run: RunPtr },
}

impl Kind {
    /// The run that a head or a tail marker keyed `key` names: its head's key and its
    /// pointer (`None` for a block).
    #[inline]
    pub(crate) fn run(self, key: u64) -> Option<(SequenceHash, usize)> {
        match self {
            Kind::Block => None,
            Kind::Head(run) => Some((SequenceHash(key), run)),
            Kind::Tail { head, run } => Some((head, run)),
        }
    }
}

pub(crate) use shape::{Outcome, Settle};

impl Node {
    /// A node held by one slot with the given claim.
    pub(crate) fn new(
        parent: SequenceHash,
        local: LocalBlockHash,
        depth: u32,
        slot: Slot,
        claim: Claim,
    ) -> Self {
        Self {
            parent: AtomicU64::new(parent.0),
            local: AtomicU64::new(local.0),
            word: AtomicU64::new(claim.expiry),
            run_len: AtomicU64::new(0),
            run_tail: AtomicU64::new(0),
            slot_or_len: AtomicU32::new(slot),
            meta: AtomicU32::new(depth.min(MAX_DEPTH) | if claim.exact { EXACT } else { 0 }),
        }
    }

    /// A node held by `holders` (one or more, sorted by slot, unique), as a split of a run
    /// makes its blocks: inline for one, else an array of exactly their number.
    pub(crate) fn held_by(
        parent: SequenceHash,
        local: LocalBlockHash,
        depth: u32,
        holders: &[(Slot, Claim)],
        guard: &Guard,
    ) -> Self {
        assert!(!holders.is_empty(), "a node has a holder");
        let mut node = Self::new(parent, local, depth, holders[0].0, holders[0].1);
        if holders.len() >= 2 {
            let len = holders.len();
            node.set_array(new_array(len, len, holders.iter().copied()), len, guard);
        }
        node
    }

    /// This node, made the head of the run `run` (`Owned::into_usize`), whose blocks
    /// `span` tells: its holders hold every block of the run.
    pub(crate) fn into_head(self, run: RunPtr, span: RunSpan) -> Self {
        self.local.store(run as u64, Ordering::Relaxed);
        self.run_len.store(span.len as u64, Ordering::Relaxed);
        self.run_tail.store(span.tail, Ordering::Relaxed);
        self.meta.fetch_or(HEAD, Ordering::Relaxed);
        self
    }

    /// The head of a run: the run's first block, held by `slot` with `claim` on every
    /// block of the run; `run` is the run's pointer (`Owned::into_usize`), `span` its
    /// blocks.
    pub(crate) fn run_head(
        parent: SequenceHash,
        (run, span): (usize, RunSpan),
        depth: u32,
        slot: Slot,
        expiry: u64,
    ) -> Self {
        Self {
            parent: AtomicU64::new(parent.0),
            local: AtomicU64::new(run as u64),
            word: AtomicU64::new(expiry),
            run_len: AtomicU64::new(span.len as u64),
            run_tail: AtomicU64::new(span.tail),
            slot_or_len: AtomicU32::new(slot),
            meta: AtomicU32::new(depth.min(MAX_DEPTH) | HEAD),
        }
    }

    /// The marker of a run's last block (at `depth`), naming the run's head and pointer.
    pub(crate) fn run_tail(head: SequenceHash, run: RunPtr, depth: u32) -> Self {
        Self {
            parent: AtomicU64::new(head.0),
            local: AtomicU64::new(run as u64),
            word: AtomicU64::new(0),
            run_len: AtomicU64::new(0),
            run_tail: AtomicU64::new(0),
            slot_or_len: AtomicU32::new(0),
            meta: AtomicU32::new(depth.min(MAX_DEPTH) | TAIL),
        }
    }

    /// What the node is: a block, a run's head or a run's tail marker.
    #[inline]
    pub(crate) fn kind(&self) -> Kind {
        let meta = self.meta.load(Ordering::Relaxed);
        if meta & HEAD != 0 {
            Kind::Head(self.local.load(Ordering::Relaxed) as usize)
        } else if meta & TAIL != 0 {
            Kind::Tail {
                head: self.parent(),
                run: self.local.load(Ordering::Relaxed) as usize,
            }
        } else {
            Kind::Block
        }
    }

    /// A head's run's blocks, as the head records them (meaningless for other nodes: their
    /// copies and write-backs skip these words, so a bucket may keep an earlier head's).
    #[inline]
    pub(crate) fn run_span(&self) -> RunSpan {
        RunSpan {
            len: self.run_len.load(Ordering::Relaxed) as usize,
            tail: self.run_tail.load(Ordering::Relaxed),
        }
    }

    /// The `HEAD` and `TAIL` bits, which no change of holders clears (a head emptied by a
    /// walk still owns its run, which `Drop` retires).
    #[inline]
    fn run_bits(&self) -> u32 {
        self.meta.load(Ordering::Relaxed) & (HEAD | TAIL)
    }

    /// Position of the block in its prompt (0 for a first block), at most [`MAX_DEPTH`].
    #[inline]
    pub(crate) fn depth(&self) -> u32 {
        self.meta.load(Ordering::Relaxed) & MAX_DEPTH
    }

    /// Raises the block's recorded position to `depth` (at most [`MAX_DEPTH`]) if the writer
    /// places it below the same `parent`, keeping the flags. A writer that knows the
    /// position (a record from the prompt's first block) may meet a node that a `Stored`
    /// event below a parent nobody held made, at depth 1: below one parent, positions are
    /// only ever too low, so the higher one is right. (A node whose key two chains spell at
    /// two places, a collision, keeps its first writer's parent and position.)
    pub(crate) fn raise_depth(&self, parent: SequenceHash, depth: u32) {
        if self.depth() == 0 || self.parent() != parent {
            return;
        }
        let depth = depth.min(MAX_DEPTH);
        // Under the shard's write lock (excluding every other change of `meta`), or its read
        // lock beside the refreshers' atomic or of `EXACT`, which keeps the depth: a CAS. A
        // reader's copy sees either depth, the flags alike.
        let _ = self
            .meta
            .fetch_update(Ordering::Release, Ordering::Relaxed, |meta| {
                (meta & MAX_DEPTH < depth).then_some((meta & !MAX_DEPTH) | depth)
            });
    }

    /// The parent's sequence hash (meaningless at depth 0; a tail marker's: its run's head).
    #[inline]
    pub(crate) fn parent(&self) -> SequenceHash {
        SequenceHash(self.parent.load(Ordering::Relaxed))
    }

    /// The hash of the block's tokens alone (a run's pointer in a head or a tail marker).
    #[inline]
    pub(crate) fn local(&self) -> LocalBlockHash {
        LocalBlockHash(self.local.load(Ordering::Relaxed))
    }

    /// The inline holder's slot, or the array's length.
    #[inline]
    fn slot_or_len(&self) -> u32 {
        self.slot_or_len.load(Ordering::Relaxed)
    }

    /// The published array, if the node has one. Under the shard lock.
    #[inline]
    fn array<'g>(&self, _guard: &'g Guard) -> Option<Shared<'g, HolderArray>> {
        if self.meta.load(Ordering::Acquire) & ARRAY == 0 {
            return None;
        }
        let word = self.word.load(Ordering::Acquire) as usize;
        // SAFETY: with `ARRAY` set, `word` holds what `Owned::into_usize` gave for the array
        // this node published (`set_array`; the flag and the word change together under the
        // write lock, and the caller holds the lock, so it reads them as a pair). The array
        // is retired only through `defer_destroy` once the node no longer points at it, so
        // it stays allocated for as long as `_guard` is pinned, which bounds `'g`.
        Some(unsafe { Shared::from_usize(word) })
    }

    /// The inline holder, as a value, if the node has one. Under the shard lock.
    #[inline]
    fn sole(&self) -> Option<(Slot, Claim)> {
        let meta = self.meta.load(Ordering::Acquire);
        (meta & (ARRAY | EMPTY | TAIL) == 0).then(|| {
            let claim = Claim {
                exact: meta & EXACT != 0,
                expiry: self.word.load(Ordering::Acquire),
            };
            (self.slot_or_len(), claim)
        })
    }

    /// Raises the inline holder's claim to include `want`, writing nothing when it already
    /// does (as [`Holder::raise`]). Under the shard lock, inline form only.
    #[inline]
    fn raise_sole(&self, want: Claim) {
        if want.exact && self.meta.load(Ordering::Acquire) & EXACT == 0 {
            self.meta.fetch_or(EXACT, Ordering::AcqRel);
        }
        if want.expiry > self.word.load(Ordering::Acquire) {
            self.word.fetch_max(want.expiry, Ordering::AcqRel);
        }
    }

    /// Publishes `new` (of `len` holders) as the node's array and retires the array it
    /// replaces, if any. `&mut self`: the write lock.
    fn set_array(&mut self, new: Owned<HolderArray>, len: usize, guard: &Guard) {
        debug_assert!(len >= 2);
        let old = self.array(guard);
        self.word.store(new.into_usize() as u64, Ordering::Release);
        self.slot_or_len.store(len as u32, Ordering::Relaxed);
        self.meta
            .store(self.depth() | self.run_bits() | ARRAY, Ordering::Release);
        retire(old, guard);
    }

    /// Makes `(slot, claim)` the node's inline holder, retiring its array if it had one.
    /// `&mut self`: the write lock.
    fn set_sole(&mut self, (slot, claim): (Slot, Claim), guard: &Guard) {
        let old = self.array(guard);
        self.word.store(claim.expiry, Ordering::Release);
        self.slot_or_len.store(slot, Ordering::Relaxed);
        let exact = if claim.exact { EXACT } else { 0 };
        self.meta
            .store(self.depth() | self.run_bits() | exact, Ordering::Release);
        retire(old, guard);
    }

    /// The heap bytes of the node's holder array (its capacity header and cells; 0 when
    /// its holder is inline). Under the shard lock.
    pub(crate) fn array_bytes(&self, guard: &Guard) -> usize {
        self.array(guard).map_or(0, |array| {
            // SAFETY: the node's published array, alive while `guard` is pinned (`array`).
            let cells = unsafe { array.deref() }.len();
            std::mem::size_of::<usize>() + cells * std::mem::size_of::<Holder>()
        })
    }

    /// The holders, sorted by slot. Call it under the shard lock (which `&self` through
    /// the map means); the caller may drop the lock afterwards: the view stays valid, and
    /// unchanged in shape, for `'g` (an inline holder is copied; array cells are shared,
    /// so later refreshes of their claims show through).
    #[inline]
    pub(crate) fn holders<'g>(&self, guard: &'g Guard) -> Holders<'g> {
        match self.array(guard) {
            Some(array) => Holders::Shared(as_holders(array, self.slot_or_len())),
            None => match self.sole() {
                Some((slot, claim)) => Holders::Sole(Holder::new(slot, claim)),
                None => Holders::NONE,
            },
        }
    }

    /// Raises `slot`'s claim in place to include `want`. Returns false if the slot is not
    /// a holder. Takes `&self`: call it with the shard *read* lock held (a shape change,
    /// which needs `&mut self` and so the write lock, then cannot run concurrently and copy
    /// a claim this update is about to raise).
    #[inline]
    pub(crate) fn update_claim(&self, slot: Slot, want: Claim, guard: &Guard) -> bool {
        let Some(array) = self.array(guard) else {
            let held = self.sole().is_some_and(|(s, _)| s == slot);
            if held {
                self.raise_sole(want);
            }
            return held;
        };
        match find(as_holders(array, self.slot_or_len()), slot) {
            Some(holder) => {
                holder.raise(want);
                true
            }
            None => false,
        }
    }
}

/// `meta` of a free bucket of the node map (`map.rs`): no node has it (a node is never
/// both a run's head and its tail marker).
const FREE: u32 = u32::MAX;

/// The node as words, for the node map (`map.rs`), whose buckets hold nodes that lock-free
/// readers copy while a writer may change them.
impl Node {
    /// A free bucket's node: owns nothing, and is never dropped.
    pub(crate) fn free() -> std::mem::ManuallyDrop<Node> {
        std::mem::ManuallyDrop::new(Self {
            parent: AtomicU64::new(0),
            local: AtomicU64::new(0),
            word: AtomicU64::new(0),
            run_len: AtomicU64::new(0),
            run_tail: AtomicU64::new(0),
            slot_or_len: AtomicU32::new(0),
            meta: AtomicU32::new(FREE),
        })
    }

    /// Whether this is a free bucket's node.
    #[inline]
    pub(crate) fn is_free(&self) -> bool {
        self.meta.load(Ordering::Relaxed) == FREE
    }

    /// Marks a bucket's node free (its node was moved out or moved elsewhere).
    #[inline]
    pub(crate) fn set_free(&self) {
        self.meta.store(FREE, Ordering::Relaxed);
    }

    /// A copy of the node's words, each read atomically on its own (relaxed): a torn copy
    /// if a writer changes the node meanwhile, which the map's version check then rejects.
    /// The copy owns what the node owns only if the node is given up (moved out of its
    /// bucket); otherwise it must not be dropped, hence `ManuallyDrop`.
    #[inline]
    pub(crate) fn copy_words(&self) -> std::mem::ManuallyDrop<Node> {
        let meta = self.meta.load(Ordering::Relaxed);
        // A span is a head's only (`run_span`): other nodes' copies skip its two words.
        let span = |word: &AtomicU64| {
            AtomicU64::new(if meta & HEAD != 0 {
                word.load(Ordering::Relaxed)
            } else {
                0
            })
        };
        std::mem::ManuallyDrop::new(Self {
            parent: AtomicU64::new(self.parent.load(Ordering::Relaxed)),
            local: AtomicU64::new(self.local.load(Ordering::Relaxed)),
            word: AtomicU64::new(self.word.load(Ordering::Relaxed)),
            run_len: span(&self.run_len),
            run_tail: span(&self.run_tail),
            slot_or_len: AtomicU32::new(self.slot_or_len.load(Ordering::Relaxed)),
            meta: AtomicU32::new(meta),
        })
    }

    /// Writes the node's words over `dst` (a bucket's node), each atomically on its own
    /// (relaxed), for readers that copy them lock-free (see [`Node::copy_words`]).
    #[inline]
    pub(crate) fn store_words(&self, dst: &Node) {
        debug_assert!(!self.is_free(), "a node, never a free bucket's, is stored");
        dst.parent
            .store(self.parent.load(Ordering::Relaxed), Ordering::Relaxed);
        dst.local
            .store(self.local.load(Ordering::Relaxed), Ordering::Relaxed);
        dst.word
            .store(self.word.load(Ordering::Relaxed), Ordering::Relaxed);
        if self.meta.load(Ordering::Relaxed) & HEAD != 0 {
            dst.run_len
                .store(self.run_len.load(Ordering::Relaxed), Ordering::Relaxed);
            dst.run_tail
                .store(self.run_tail.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        dst.slot_or_len
            .store(self.slot_or_len.load(Ordering::Relaxed), Ordering::Relaxed);
        dst.meta
            .store(self.meta.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let head = match self.kind() {
            Kind::Head(run) => Some(run),
            _ => None,
        };
        // A node leaves the map under the shard write lock, usually after `settle` emptied
        // it. If it still has an array (the whole map is dropped, or a node replaced), a
        // reader that copied the pointer before may still be reading it, so it is retired
        // through the collector like any other.
        if head.is_none() && self.meta.load(Ordering::Acquire) & ARRAY == 0 {
            return; // inline: nothing on the heap, no pin needed
        }
        let guard = epoch::pin();
        if let Some(run) = head {
            // A head leaves the map (unlinked by a walk or a purge, replaced by its first
            // block when the run is split up, or the map dropped) under the shard write
            // lock: its run goes with it, through the collector like a holder array.
            crate::tree::run_alloc::retire(run, &guard);
        }
        let array = self.array(&guard);
        self.meta.store(self.depth() | EMPTY, Ordering::Release);
        retire(array, &guard);
    }
}

// Paths of their own: `loom_models` includes this file by path, from another directory.
#[path = "node/shape.rs"]
mod shape;
#[cfg(test)]
#[path = "node/tests.rs"]
mod tests;
