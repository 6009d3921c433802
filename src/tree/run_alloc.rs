//! A run: a stretch of consecutive blocks on one chain that the same workers hold with the
//! same claims, stored as one value (see `run_nodes.rs` for what the tree does with runs, and
//! `docs/design.md`, "Runs").
//!
//! A run is one allocation: a header (its length and state), then its blocks' sequence
//! hashes and their local hashes. Its head node keeps the allocation's address as one word;
//! [`run_at`] and [`RunAt`] turn that word back into a reference under an epoch guard, and
//! [`retire`] hands a run whose head left the map to the epoch collector. A find compares
//! its query with a run in one loop ([`Run::matched`]).

use std::alloc::Layout;
use std::sync::atomic::Ordering::SeqCst;

use crossbeam_epoch::{Guard, Pointable, Pointer, Shared};

use crate::sync::{AtomicU8, Ordering};
use crate::{LocalBlockHash, SequenceHash};

/// The address of a run's allocation (`Owned::<Run>::into_usize`), as a head node and a
/// tail marker keep it in their words: read it only with [`run_at`], under a guard.
pub(crate) type RunPtr = usize;

/// The run is in use.
const LIVE: u8 = 0;
/// The run is being split up into nodes: its claim no longer changes.
const FROZEN: u8 = 1;
/// The run left the tree (split up, or removed).
const GONE: u8 = 2;

/// The fewest new blocks that make a run (one block is a node).
pub(crate) const MIN_RUN: usize = 2;

/// Blocks a run compare takes at a time ([`Run::matched`]).
const STEP: usize = 16;

/// A query's sequence hashes, as a run compare reads them: the query may compute them only
/// as far as asked (a find from local hashes chains them on demand).
pub(crate) trait QueryKeys {
    /// The sequence hash of block `k`.
    fn key(&mut self, k: usize) -> u64;
    /// The sequence hashes of the blocks `range`.
    fn keys(&mut self, range: std::ops::Range<usize>) -> &[SequenceHash];
    /// Whether every key is at hand, so that reading one far ahead costs no more than the
    /// next one (a query of sequence hashes; one of local hashes chains as it goes).
    fn at_hand(&self) -> bool;
}

/// A query whose sequence hashes are all at hand.
impl QueryKeys for &[SequenceHash] {
    #[inline]
    fn key(&mut self, k: usize) -> u64 {
        self[k].0
    }
    #[inline]
    fn keys(&mut self, range: std::ops::Range<usize>) -> &[SequenceHash] {
        &self[range]
    }
    #[inline]
    fn at_hand(&self) -> bool {
        true
    }
}

/// A block hash as the word a run stores.
trait Word: Copy {
    fn word(self) -> u64;
}

impl Word for u64 {
    #[inline]
    fn word(self) -> u64 {
        self
    }
}

impl Word for SequenceHash {
    #[inline]
    fn word(self) -> u64 {
        self.0
    }
}

impl Word for LocalBlockHash {
    #[inline]
    fn word(self) -> u64 {
        self.0
    }
}

/// The blocks of a run, in one allocation with its header: their number, the run's state,
/// then their sequence hashes and their local hashes. A find reaching a run's head reads
/// its blocks with no further pointer to chase.
///
/// A dynamically sized type: `&Run` carries the length of `hashes` (`2 * len`), and a head
/// or tail keeps the allocation's address as one word ([`Run::alloc`] makes it as
/// `Owned::into_usize` would), from which [`Pointable::deref`] rebuilds the reference
/// (the header's `len` gives the length).
#[repr(C)]
pub(crate) struct Run {
    /// Number of blocks.
    len: usize,
    state: AtomicU8,
    /// The blocks' sequence hashes, then their local hashes (`2 * len` words).
    hashes: [u64],
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("len", &self.len)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// The layout of a run of `len` blocks: the header (`len`, `state`) as `#[repr(C)]` lays it
/// out, then `2 * len` words. `None` if it would not fit the address space.
fn layout(len: usize) -> Option<Layout> {
    let header = Layout::new::<usize>()
        .extend(Layout::new::<AtomicU8>())
        .ok()?
        .0;
    let words = Layout::array::<u64>(len.checked_mul(2)?).ok()?;
    Some(header.extend(words).ok()?.0.pad_to_align())
}

/// Heap bytes of a run of `len` blocks.
pub(super) fn bytes_of(len: usize) -> usize {
    layout(len).map_or(0, |l| l.size())
}

/// The fat pointer of the run allocated at `ptr`, whose header says `len` blocks.
fn fat(ptr: *mut u8, len: usize) -> *mut Run {
    // A `*mut [u64]` and a `*mut Run` carry the same metadata, the trailing slice's
    // length; the cast keeps it and the address.
    std::ptr::slice_from_raw_parts_mut(ptr.cast::<u64>(), 2 * len) as *mut Run
}

/// A fresh allocation of a run of `len` blocks in `state`, its header written; its words
/// zeroed if `zeroed`, otherwise left unwritten, for the caller to write every one of them
/// before any reference to the run exists.
fn allocate(len: usize, state: u8, zeroed: bool) -> *mut Run {
    let layout = layout(len).expect("a run fits the address space");
    // SAFETY: `layout` has a non-zero size (the header).
    let ptr = unsafe {
        if zeroed {
            std::alloc::alloc_zeroed(layout)
        } else {
            std::alloc::alloc(layout)
        }
    };
    if ptr.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    let run = fat(ptr, len);
    // SAFETY: `ptr` is a fresh allocation of `layout`, which holds `Run`'s header and
    // `2 * len` words at the offsets `#[repr(C)]` gives them; the header's fields are
    // written through raw pointers before any reference to the run exists.
    unsafe {
        std::ptr::addr_of_mut!((*run).len).write(len);
        std::ptr::addr_of_mut!((*run).state).write(AtomicU8::new(state));
    }
    run
}

// SAFETY (of the impl's contract): `init` returns the address of a live allocation of
// `layout(len)` bytes whose header is written and whose words are zeroed (every bit pattern
// is a valid `u64`); `deref`/`deref_mut` rebuild the reference from the `len` stored at that
// address, so the reference covers exactly the allocation; `drop` drops the header's
// `state` in place and frees the allocation with the layout it was made with. Alignment:
// `ALIGN` is the largest of the fields' alignments, which the address (from the global
// allocator, with `layout`'s alignment) has.
impl Pointable for Run {
    const ALIGN: usize = {
        let (a, b, c) = (
            std::mem::align_of::<usize>(),
            std::mem::align_of::<AtomicU8>(),
            std::mem::align_of::<u64>(),
        );
        let ab = if a > b { a } else { b };
        if ab > c {
            ab
        } else {
            c
        }
    };

    /// The number of blocks and the state to start in.
    type Init = (usize, u8);

    unsafe fn init((len, state): (usize, u8)) -> usize {
        allocate(len, state, true).cast::<u8>() as usize
    }

    unsafe fn deref<'a>(ptr: usize) -> &'a Self {
        // SAFETY: the caller's contract: `ptr` came from `init` and is not yet dropped; its
        // first word is the header's `len`.
        unsafe { &*fat(ptr as *mut u8, *(ptr as *const usize)) }
    }

    unsafe fn deref_mut<'a>(ptr: usize) -> &'a mut Self {
        // SAFETY: as `deref`, and the caller holds the only pointer to the run.
        unsafe { &mut *fat(ptr as *mut u8, *(ptr as *const usize)) }
    }

    unsafe fn drop(ptr: usize) {
        // SAFETY: as `deref`; the run is dropped once, after its last use.
        unsafe {
            let len = *(ptr as *const usize);
            std::ptr::drop_in_place(std::ptr::addr_of_mut!((*fat(ptr as *mut u8, len)).state));
            let layout = layout(len).expect("made with this layout");
            std::alloc::dealloc(ptr as *mut u8, layout);
        }
    }
}

impl Run {
    /// A run of the blocks `local`/`seq` (as many of each: the shorter bounds it) in
    /// `state`, as the word a head keeps (as `Owned::into_usize` would): one allocation,
    /// each word written once (not zeroed first, as [`Pointable::init`] would: a run of a
    /// long prompt's new suffix is kilobytes).
    fn alloc(seq: &[impl Word], local: &[impl Word], state: u8) -> usize {
        debug_assert_eq!(seq.len(), local.len(), "a run's blocks have both hashes");
        let (seq, local) = (
            &seq[..seq.len().min(local.len())],
            &local[..local.len().min(seq.len())],
        );
        let len = seq.len();
        let run = allocate(len, state, false);
        // SAFETY: `run` is a fresh allocation of `layout(len)` with its header written
        // (`allocate`), which holds `2 * len` words after the header; all of them (`len`
        // from each slice) are written through raw pointers before any reference to the
        // run exists. The result is what `Pointable::init` makes and `Pointable::drop`
        // frees (same layout), with the words filled in.
        unsafe {
            let words = std::ptr::addr_of_mut!((*run).hashes).cast::<u64>();
            for (k, hash) in seq.iter().enumerate() {
                words.add(k).write(hash.word());
            }
            for (k, hash) in local.iter().enumerate() {
                words.add(len + k).write(hash.word());
            }
        }
        run.cast::<u8>() as usize
    }

    /// A live run of the blocks `local`/`seq` (as [`Run::alloc`]).
    pub(crate) fn make(local: &[LocalBlockHash], seq: &[SequenceHash]) -> usize {
        Self::alloc(seq, local, LIVE)
    }

    /// The blocks `range` of this run as a run of their own (as [`Run::alloc`]), born
    /// frozen (the pieces of a cut, which [`thaw`](Self::thaw) once both are in place).
    pub(crate) fn part(&self, range: std::ops::Range<usize>) -> usize {
        Self::alloc(&self.seqs()[range.clone()], &self.locals()[range], FROZEN)
    }

    /// Makes a piece of a cut live.
    pub(crate) fn thaw(&self) {
        self.state.store(LIVE, SeqCst);
    }

    /// Number of blocks.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The blocks' sequence hashes.
    #[inline]
    pub(crate) fn seqs(&self) -> &[u64] {
        &self.hashes[..self.len]
    }

    /// The blocks' local hashes.
    #[inline]
    pub(crate) fn locals(&self) -> &[u64] {
        &self.hashes[self.len..]
    }

    /// The last block's sequence hash.
    #[inline]
    pub(crate) fn tail(&self) -> u64 {
        self.hashes[self.len - 1]
    }

    /// Whether the run is in use (not frozen for a split, not gone).
    #[inline]
    pub(crate) fn is_live(&self) -> bool {
        self.state.load(Ordering::Acquire) == LIVE
    }

    /// Heap bytes: the run itself and its hashes.
    pub(super) fn bytes(&self) -> usize {
        bytes_of(self.len)
    }

    /// How many leading blocks of the run the query's blocks from `at` match (`n` blocks
    /// in all). Sequence hashes chain (a block's names its whole prefix), so matching
    /// blocks are a prefix of the run and one compare tells whether block `k` is in it:
    /// the last block the query reaches is compared first, which decides when the query
    /// holds on to its end. Otherwise, for a query whose keys are all at hand, bisection
    /// finds where they part (log2 of the run's length compares, not one per block, for
    /// the long runs of long prompts); a query chained on demand is compared [`STEP`]
    /// blocks at a time (a loop the compiler vectorizes), asking for no more keys than
    /// that past the first difference.
    #[inline]
    pub(crate) fn matched(&self, at: usize, n: usize, query: &mut impl QueryKeys) -> usize {
        let len = self.len().min(n.saturating_sub(at));
        if len == 0 {
            return 0;
        }
        let seqs = &self.seqs()[..len];
        let at_hand = query.at_hand();
        if (len == self.len() || at_hand) && query.key(at + len - 1) == seqs[len - 1] {
            return len;
        }
        if at_hand {
            // Blocks `..lo` match, block `hi` does not.
            let (mut lo, mut hi) = (0, len - 1);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if query.key(at + mid) == seqs[mid] {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            return lo;
        }
        let mut i = 0;
        while i < len {
            let end = (i + STEP).min(len);
            let theirs = &seqs[i..end];
            let ours = query.keys(at + i..at + end);
            let differ = ours.iter().zip(theirs).fold(0, |d, (a, b)| d | (a.0 ^ b));
            if differ != 0 {
                return i + ours
                    .iter()
                    .zip(theirs)
                    .take_while(|(a, b)| a.0 == **b)
                    .count();
            }
            i = end;
        }
        len
    }

    /// Freezes the run for a split: its claim no longer changes in place. Only the split in
    /// turn calls it, holding the head's write lock, which every in-place refresh's read
    /// lock excludes (loom model `split_vs_refresh`).
    pub(crate) fn freeze(&self) {
        self.state.store(FROZEN, SeqCst);
    }

    /// Spins until a split of this run ends.
    pub(crate) fn wait_split(&self) {
        while self.state.load(Ordering::Acquire) == FROZEN {
            crate::sync::yield_now();
        }
    }
}

/// The run a head or tail names, read under `guard`.
///
/// # Safety
/// `run` must have been read from a head node (its `Kind::Head`) under the shard lock,
/// with `guard` pinned since: a head's run is retired (`retire`, from the head's `Drop`)
/// only once the head has left the map, so it outlives the guard.
#[inline]
pub(crate) unsafe fn run_at(run: RunPtr, _guard: &Guard) -> &Run {
    // SAFETY: the caller's contract: `run` is what `Run::alloc` gave for a run that
    // is retired only through `defer_destroy` after its head left the map, which happened
    // after `_guard` was pinned, if at all.
    unsafe { Shared::<Run>::from_usize(run).deref() }
}

/// What a head records of its run, so that a find can tell whether a query goes through
/// the run without loading it: its number of blocks and its last block's sequence hash
/// (which names the whole prefix, so one compare decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunSpan {
    pub(crate) len: usize,
    pub(crate) tail: u64,
}

impl RunSpan {
    /// The span of a run of the blocks keyed `seqs` (one or more).
    #[inline]
    pub(crate) fn of(seqs: &[u64]) -> Self {
        Self {
            len: seqs.len(),
            tail: seqs.last().copied().unwrap_or_default(),
        }
    }

    /// As [`of`](Self::of), from sequence hashes.
    #[inline]
    pub(crate) fn of_seq(seqs: &[SequenceHash]) -> Self {
        Self {
            len: seqs.len(),
            tail: seqs.last().map_or(0, |s| s.0),
        }
    }

    /// Whether the prompt `seq` covers the whole run from its block `i` on (the run starts
    /// there): it reaches the run's last block, with the same sequence hash (which names the
    /// whole prefix, so one compare decides). From the head's copy: the run itself is not
    /// read (its header, then its last block, two misses one after the other).
    #[inline]
    pub(crate) fn covered_by(self, seq: &[SequenceHash], i: usize) -> bool {
        let end = i + self.len;
        end <= seq.len() && seq[end - 1].0 == self.tail
    }
}

/// A run a find met at a head, with the span the head records: reading the run itself
/// ([`RunAt::get`]) loads its header, a cache miss that a find pays only where the query
/// leaves the run before its end.
#[derive(Clone, Copy)]
pub(crate) struct RunAt<'g> {
    run: RunPtr,
    span: RunSpan,
    guard: &'g Guard,
}

impl<'g> RunAt<'g> {
    /// The run `run`, whose head records `span`, to be read under `guard`.
    ///
    /// # Safety
    /// As [`run_at`]: `run` was read from a head node under the shard lock, with `guard`
    /// pinned since.
    #[inline]
    pub(crate) unsafe fn new(run: RunPtr, span: RunSpan, guard: &'g Guard) -> Self {
        Self { run, span, guard }
    }

    /// The run's span, as its head records it.
    #[inline]
    pub(crate) fn span(self) -> RunSpan {
        self.span
    }

    /// The run.
    #[inline]
    pub(crate) fn get(self) -> &'g Run {
        // SAFETY: `new`'s contract, with the same guard.
        unsafe { run_at(self.run, self.guard) }
    }
}

/// Hands the run of a head that left the map (or of one that never had a head) to the
/// epoch collector.
pub(crate) fn retire(run: RunPtr, guard: &Guard) {
    // SAFETY: `run` came from `Run::alloc` (as `Owned::into_usize` gives) and is retired
    // once: by the `Drop` of the one head that owns it, under the shard write lock that
    // removed or replaced the head, or by the writer that made it and never placed it at
    // a head (an insert or a cut that fell back; a tail marker may name it, which readers
    // compare but follow only through a head that names it). No new reader can load it
    // from a head, and readers that did are pinned, so `defer_destroy` frees it only after
    // they unpin.
    unsafe {
        let shared = Shared::<Run>::from_usize(run);
        shared.deref().state.store(GONE, Ordering::Release);
        guard.defer_destroy(shared);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute_seq_hashes;
    use crossbeam_epoch::Owned;

    /// A query that counts the keys a compare asks for, all at hand or (as far as a
    /// compare can tell) chained on demand.
    struct Counted<'a> {
        keys: &'a [SequenceHash],
        asked: usize,
        at_hand: bool,
    }

    impl<'a> Counted<'a> {
        fn new(keys: &'a [SequenceHash], at_hand: bool) -> Self {
            Self {
                keys,
                asked: 0,
                at_hand,
            }
        }
    }

    impl QueryKeys for Counted<'_> {
        fn key(&mut self, k: usize) -> u64 {
            self.asked += 1;
            self.keys[k].0
        }
        fn keys(&mut self, range: std::ops::Range<usize>) -> &[SequenceHash] {
            self.asked += range.len();
            &self.keys[range]
        }
        fn at_hand(&self) -> bool {
            self.at_hand
        }
    }

    /// The run made at `run`, owned by the test (freed when dropped).
    fn owned(run: RunPtr) -> Owned<Run> {
        // SAFETY: `run` was just made by `Run::make` or `Run::part`, and nothing else has it.
        unsafe { Owned::from_usize(run) }
    }

    #[test]
    fn a_run_matches_its_query_in_one_compare_or_to_where_it_branches() {
        let local: Vec<LocalBlockHash> = (1..=5).map(LocalBlockHash).collect();
        let seq = compute_seq_hashes(&local);
        let run = owned(Run::make(&local[1..], &seq[1..]));
        let run: &Run = &run;
        assert_eq!((run.len(), run.tail()), (4, seq[4].0));
        assert_eq!(run.locals(), &[2, 3, 4, 5]);
        for at_hand in [false, true] {
            let mut query = Counted::new(&seq, at_hand);
            assert_eq!((run.matched(1, 5, &mut query), query.asked), (4, 1));
        }
        // A shorter query, and one that branches after two blocks.
        assert_eq!(run.matched(1, 3, &mut &seq[..]), 2);
        let other = compute_seq_hashes(&[1, 2, 3, 9, 9].map(LocalBlockHash));
        assert_eq!(run.matched(1, 5, &mut &other[..]), 2);
        assert_eq!(run.matched(1, 1, &mut &seq[..]), 0);
    }

    /// One allocation holds the header and both hashes of every block; a part copies its
    /// blocks, born frozen; a long compare finds the first difference in any step, by
    /// bisection when the query's keys are at hand (a few keys asked), else step by step
    /// (no more than a step's keys past the difference).
    #[test]
    fn a_run_is_one_allocation_and_long_compares_find_the_first_difference() {
        let local: Vec<LocalBlockHash> = (1..=100).map(LocalBlockHash).collect();
        let seq = compute_seq_hashes(&local);
        let run = owned(Run::make(&local, &seq));
        assert_eq!(run.len(), 100);
        assert_eq!(run.bytes(), 16 + 100 * 16);
        assert_eq!(run.seqs(), seq.iter().map(|s| s.0).collect::<Vec<_>>());
        assert_eq!(run.locals(), (1..=100).collect::<Vec<u64>>());
        assert!(run.is_live());
        for differ in [0, 1, 15, 16, 17, 40, 63, 97, 98] {
            let mut other = local.clone();
            other[differ] = LocalBlockHash(999);
            let other = compute_seq_hashes(&other);
            for at_hand in [false, true] {
                let mut query = Counted::new(&other, at_hand);
                let matched = run.matched(0, 99, &mut query);
                assert_eq!(matched, differ, "at {differ}, at hand: {at_hand}");
                let most = if at_hand { 1 + 7 } else { differ + STEP };
                assert!(query.asked <= most, "{} keys asked", query.asked);
            }
        }
        for at_hand in [false, true] {
            let mut query = Counted::new(&seq, at_hand);
            assert_eq!(run.matched(0, 99, &mut query), 99);
            let most = if at_hand { 1 } else { 99 };
            assert_eq!(query.asked, most, "one compare when keys are at hand");
        }
        assert_eq!(run.matched(0, 99, &mut &seq[..]), 99);
        assert_eq!(run.matched(0, 100, &mut &seq[..]), 100);
        let part = owned(run.part(30..70));
        assert_eq!((part.len(), part.tail()), (40, seq[69].0));
        assert_eq!(part.locals(), (31..=70).collect::<Vec<u64>>());
        assert!(!part.is_live(), "born frozen");
        part.thaw();
        assert!(part.is_live());
        assert_eq!(part.matched(30, 100, &mut &seq[..]), 40);
    }
}
