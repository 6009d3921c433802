//! Find: for each live worker, the length of the leading run of a query's blocks it holds.
//!
//! While holder sets are *nested* (every worker's live entries along a prompt form a
//! prefix: decisions cover prompts from block 0, claims only move later, and expiry and
//! eviction take the deepest blocks first), the find probes the last block, which settles
//! every worker holding the whole query, then gallops and bisects to each block where some
//! remaining worker drops out. Otherwise (after KV events, restores or dump replays that
//! could break nesting) it walks block by block. See `docs/design.md`.

mod active;
mod query_keys;
mod search;
mod walk;

use std::cell::RefCell;

use crossbeam_epoch::Guard;

use self::active::{report, report_live_workers, ActiveSet};
pub(crate) use self::query_keys::HashedQuery;
use self::query_keys::{Keys, CHAINED_FOR_THE_LAST};
use self::search::{SearchFrom, Turn};
use super::node::Kind;
use super::run_alloc::{QueryKeys, RunAt, RunSpan};
use super::{Holder, Holders, Tree};
use crate::scores::ScoreSink;
use crate::slot::SlotOwners;
use crate::thread_buffer::with_thread_buffer;
use crate::{SequenceHash, WorkerKey};

/// A find's working memory, kept per thread so that a find allocates nothing once warm
/// (with an `OverlapScores` reused, or a callback, nothing at all).
#[derive(Default)]
struct Scratch {
    /// Workers holding every block so far, with their entry counts (read with their
    /// liveness, in one lookup of the slot).
    active: ActiveSet,
    /// Sequence hashes of a query of local hashes, as far as probes needed them.
    seq: Vec<SequenceHash>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Runs `f` with this thread's scratch, emptied, or with a fresh one where that is
/// unavailable (a find nested in another, or a thread being torn down).
fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    with_thread_buffer(&SCRATCH, |scratch| {
        scratch.active.clear();
        scratch.seq.clear();
        f(scratch)
    })
}

/// What a probe of one block found.
struct Probed<'g> {
    /// The block's holders (none if it has no key: missing, or inside a run).
    holders: Holders<'g>,
    /// The run the block begins, if it is a run's head.
    starts: Option<RunAt<'g>>,
    /// The run the block ends, if it is a run's tail marker: the key and span that its
    /// head records (the holders above are the head's).
    ends: Option<(u64, RunSpan)>,
}

impl Probed<'_> {
    const NONE: Self = Self {
        holders: Holders::NONE,
        starts: None,
        ends: None,
    };
}

impl Tree {
    /// What the block keyed `key` is: its holders, and the run it begins or ends. A tail
    /// marker reads as its run's holder (a second probe, of the head).
    ///
    /// Lock-free: each probe is a [`NodeMap::read`](super::map::NodeMap::read), a copy of
    /// the node as some writer left it.
    #[inline]
    fn probe<'g>(&self, key: u64, guard: &'g Guard) -> Probed<'g> {
        let Some(node) = self.nodes.read(key, guard) else {
            return Probed::NONE;
        };
        match node.kind() {
            Kind::Block => Probed {
                holders: node.holders(guard),
                ..Probed::NONE
            },
            Kind::Head(run) => Probed {
                holders: node.holders(guard),
                // SAFETY: a head's run, read from a copy that the map checked, with
                // `guard` pinned since before the read (a run is retired only after its
                // head leaves the map, `map.rs`).
                starts: Some(unsafe { RunAt::new(run, node.run_span(), guard) }),
                ends: None,
            },
            marker @ Kind::Tail { head, run } => match self.nodes.read(head.0, guard) {
                Some(h) if h.kind() == Kind::Head(run) => Probed {
                    holders: h.holders(guard),
                    starts: None,
                    ends: Some((head.0, h.run_span())),
                },
                _ => self.probe_moved(key, marker, guard),
            },
        }
    }

    /// A probe of a tail marker (`marker`, keyed `key`) whose head no longer names the
    /// marker's run: probe the key again if the marker moved, else no holder (as
    /// [`Tree::marker_moved`] tells, with this probe's lock-free reads).
    #[cold]
    #[inline(never)]
    fn probe_moved<'g>(&self, key: u64, marker: Kind, guard: &'g Guard) -> Probed<'g> {
        match self.nodes.read(key, guard) {
            Some(again) if again.kind() != marker => self.probe(key, guard),
            _ => Probed::NONE,
        }
    }

    /// For each live worker, the length of the leading run of the query's blocks it holds
    /// at `now`, reported to `out` (after `out.begin()`, which empties an `OverlapScores`
    /// and keeps its capacity).
    pub(crate) fn find_into<W: WorkerKey>(
        &self,
        query: HashedQuery<'_>,
        now: u64,
        workers: &impl SlotOwners,
        guard: &Guard,
        out: &mut impl ScoreSink<W>,
    ) {
        out.begin();
        with_scratch(|scratch| {
            let reading = Reading {
                now,
                workers,
                guard,
            };
            if self
                .holders_nested
                .load(std::sync::atomic::Ordering::Relaxed)
            {
                self.find_nested(query, reading, scratch, out);
            } else {
                self.find_walk(query, reading, scratch, out);
            }
        });
    }

    /// The galloping find, for nested holder sets (`docs/design.md`, "The paths": the last
    /// block first, then galloping and bisecting to each block where workers drop out,
    /// through runs in one compare; "Why every find ends"). Block 0 first
    /// ([`Tree::start_from_first_block`]), then turns of [`Tree::search_turn`].
    fn find_nested<W: WorkerKey>(
        &self,
        query: HashedQuery<'_>,
        reading: Reading<'_, impl SlotOwners>,
        scratch: &mut Scratch,
        out: &mut impl ScoreSink<W>,
    ) {
        let n = query.len();
        if n == 0 {
            return;
        }
        let now = reading.now;
        let Scratch { active, seq } = scratch;
        let mut keys = Keys::new(query, seq);
        let Some(mut lo) = self.start_from_first_block(&mut keys, active, reading, out) else {
            return;
        };
        // The last block next, for a query of sequence hashes or of a few local hashes. A
        // longer query of local hashes gallops on from block 0 instead, so that it chains
        // only as far as it probes (about twice the depth where the last worker drops out,
        // against the whole query to probe the last block): a search turn then starts
        // with `hi` past the query.
        let (last, last_run, unprobed) = if keys.at_hand() || n <= CHAINED_FOR_THE_LAST {
            let Some((last, last_run)) = self.settle_last_block(&mut keys, active, reading, out)
            else {
                return;
            };
            (last, last_run, n - 1)
        } else {
            (Holders::NONE, None, n)
        };
        // The last block read as no key: missing, or inside a run (see `SearchFrom`).
        let last_keyless = unprobed < n && last.is_empty() && last_run.is_none();
        while !active.is_empty() {
            let from = SearchFrom {
                lo,
                last_run,
                unprobed,
                at_hi_keyless: last_keyless,
            };
            let (hi, at_hi, run_hi) = match self.search_turn(from, &mut keys, active, reading) {
                Turn::Whole => {
                    active.report_all(out, n);
                    return;
                }
                Turn::DropOut { hi, holders, run } => (hi, holders, run),
            };
            if hi == n {
                // Past the query: every worker left holds its last block.
                active.report_all(out, n);
                return;
            }
            let depth = hi as u32;
            let at_hi: &[Holder] = at_hi.as_deref().unwrap_or(&last);
            let searched = active.len();
            active.retain_holders(at_hi, now, |worker| report(out, worker, depth));
            if active.len() == searched && !cfg!(loom_break = "search_unbounded") {
                // Nobody dropped out where the search saw someone miss: a claim it read
                // changed since (a refresh raised it in place, an event stored it), or
                // the holder sets are not nested. Those left hold block `hi` as last
                // read: on from there block by block, which ends (design.md, "Why every
                // find ends").
                self.walk_from(hi, &mut keys, active, reading, out);
                return;
            }
            lo = hi;
            // The workers left hold block `hi`; if it is a run's head, they are among its
            // holders, and the blocks after it have no key: on through the run.
            if let (Some(run), false) = (run_hi, active.is_empty()) {
                if let Some(end) = through_run(run, (hi, n), &mut keys, active, out) {
                    lo = end;
                }
            }
        }
    }

    /// A galloping find's probe of the last block: every active worker that holds it holds
    /// the whole query and is reported (`None`: all of them, and the find is over). Returns
    /// the last block's holders, and where the run that it ends begins if the query
    /// reaches that run there: every block from there on has the last block's holders, so
    /// each worker left misses that block already.
    #[inline]
    fn settle_last_block<'g, W: WorkerKey>(
        &self,
        keys: &mut Keys<'_, '_>,
        active: &mut ActiveSet,
        reading: Reading<'g, impl SlotOwners>,
        out: &mut impl ScoreSink<W>,
    ) -> Option<(Holders<'g>, Option<usize>)> {
        let Reading { now, guard, .. } = reading;
        let n = keys.query.len();
        let Probed {
            holders: last,
            ends,
            ..
        } = self.probe(keys.key(n - 1), guard);
        if active.all_kept(&last, now) {
            active.report_all(out, n);
            return None;
        }
        active.retain_missing(&last, now, |worker| report(out, worker, n as u32));
        let last_run = ends.and_then(|(head, span)| {
            let at = n.checked_sub(span.len)?;
            (keys.key(at) == head).then_some(at)
        });
        Some((last, last_run))
    }

    /// A galloping find's first step: probes block 0 (and starts loading the last
    /// block's bucket, probed next, so that its miss overlaps this one's; the query's keys
    /// were prefetched first thing: `HashedQuery::preload`). Where the first block's live
    /// holders all end, if that is known now (the query ends in or leaves the run that the
    /// first block begins: one compare; or it is one block long), they are reported
    /// straight from the holders, with no active set, and the find is over (`None`: a
    /// prompt a whole fleet shares is one run, and this is its whole find). Otherwise
    /// they become the active set, and the block they all hold up to is returned.
    #[inline]
    fn start_from_first_block<W: WorkerKey>(
        &self,
        keys: &mut Keys<'_, '_>,
        active: &mut ActiveSet,
        reading: Reading<'_, impl SlotOwners>,
        out: &mut impl ScoreSink<W>,
    ) -> Option<usize> {
        let Reading {
            now,
            workers,
            guard,
        } = reading;
        let n = keys.query.len();
        if keys.at_hand() {
            self.nodes.prefetch(keys.key(n - 1), guard);
        }
        let Probed {
            holders: first,
            starts: run,
            ..
        } = self.probe(keys.key(0), guard);
        let mut lo = 0;
        let settled_at = match run {
            Some(run) => {
                self.prefetch_past(run, 0, keys, guard);
                match jump(run, 0, n, keys) {
                    Jump::Whole => Some(n),
                    Jump::Parted(left) => Some(left),
                    Jump::Past(end) => {
                        lo = end;
                        None
                    }
                }
            }
            None => (n == 1).then_some(1),
        };
        if let Some(depth) = settled_at {
            report_live_workers(&first, now, workers, out, depth as u32);
            return None;
        }
        active.start(&first, now, workers, out.wants_entries());
        if active.is_empty() {
            return None;
        }
        out.reserve(active.len());
        Some(lo)
    }

    /// Starts loading the bucket of the block after the run that the query reaches at
    /// block `at`, where a find that goes through the run probes next: its miss then
    /// overlaps the reads of the run's holders (only for a query of sequence hashes, whose
    /// keys are at hand).
    #[inline]
    fn prefetch_past(&self, run: RunAt<'_>, at: usize, keys: &mut Keys<'_, '_>, guard: &Guard) {
        let next = at + run.span().len;
        if keys.at_hand() && next < keys.query.len() {
            self.nodes.prefetch(keys.key(next), guard);
        }
    }
}

/// What every probe of one find reads with: the time claims are read at, the workers'
/// liveness, and the epoch guard pinned for the whole find.
struct Reading<'r, O> {
    now: u64,
    workers: &'r O,
    guard: &'r Guard,
}

// Not derived: a derive would ask `O: Copy` of the registry.
impl<O> Clone for Reading<'_, O> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<O> Copy for Reading<'_, O> {}

/// Where a query that reaches a run's head at block `at` goes on: see [`jump`].
enum Jump {
    /// The run reaches the query's last block.
    Whole,
    /// The query leaves the run before the run's end: block `.0` is not the run's (and has
    /// no key, since nothing hangs inside a run).
    Parted(usize),
    /// The query goes on past the run, whose last block is block `.0`.
    Past(usize),
}

/// Compares the query (from block `at`, `n` blocks in all) with the run whose head it
/// reached at `at`.
#[inline]
fn jump(run: RunAt<'_>, at: usize, n: usize, keys: &mut impl QueryKeys) -> Jump {
    // The query reaches the run's last block with its sequence hash: it goes through the
    // whole run, decided from the head's copy without loading the run.
    let span = run.span();
    let end = at + span.len;
    if span.len > 0 && end <= n && keys.key(end - 1) == span.tail {
        return if end == n {
            Jump::Whole
        } else {
            Jump::Past(end - 1)
        };
    }
    let run = run.get();
    let matched = run.matched(at, n, keys);
    if at + matched == n {
        Jump::Whole
    } else if matched < run.len() {
        Jump::Parted(at + matched)
    } else {
        Jump::Past(at + matched - 1)
    }
}

/// The active workers, all of them the holder of the run whose head is block `at`, go on
/// through it: settled where the query leaves the run or ends (`None`), or still active at
/// the run's last block, which is returned when the query goes on past it.
#[inline]
fn through_run<W: WorkerKey>(
    run: RunAt<'_>,
    (at, n): (usize, usize),
    keys: &mut impl QueryKeys,
    active: &mut ActiveSet,
    out: &mut impl ScoreSink<W>,
) -> Option<usize> {
    match jump(run, at, n, keys) {
        Jump::Whole => active.report_all(out, n),
        Jump::Parted(left) => active.report_all(out, left),
        Jump::Past(end) => return Some(end),
    }
    None
}

#[cfg(test)]
mod tests;
