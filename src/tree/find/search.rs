//! One turn of the galloping search of a nested find: from a block every active worker
//! holds, gallop and bisect to the shallowest block some of them miss, going through runs
//! they all hold (`docs/design.md`, "The paths").

use super::active::ActiveSet;
use super::query_keys::Keys;
use super::{jump, Jump, Probed, Reading};
use crate::slot::SlotOwners;
use crate::tree::run_alloc::{QueryKeys, RunAt};
use crate::tree::{Holders, Tree};

impl Tree {
    /// One turn of the galloping search: every active worker holds block `lo` and misses
    /// block `unprobed` (the last block, or for a query of local hashes the block past the
    /// query; or, from where the query reaches the run that the last block ends,
    /// `last_run`, every block). Gallops from `lo` and bisects to the shallowest block
    /// some of them miss, going through runs whose holders they all are: `hi` is then
    /// `unprobed` only if they all hold every block up to it.
    pub(super) fn search_turn<'g>(
        &self,
        from: SearchFrom,
        keys: &mut Keys<'_, '_>,
        active: &ActiveSet,
        reading: Reading<'g, impl SlotOwners>,
    ) -> Turn<'g> {
        let Reading { now, guard, .. } = reading;
        let n = keys.query.len();
        let SearchFrom {
            mut lo,
            last_run,
            unprobed,
            at_hi_keyless: last_keyless,
        } = from;
        // Every remaining worker holds block `lo` and misses block `hi`; `at_hi` holds
        // block `hi`'s holders (`None`: the last block's, or none if `hi` is past the query).
        let (mut hi, mut at_hi, mut hi_keyless) = match last_run {
            Some(at) if lo < at => (at, None, false),
            _ => (unprobed, None, last_keyless),
        };
        // The run block `hi` begins, if it is a run's head.
        let mut run_hi = None;
        let mut step = 1;
        let mut galloping = true;
        // Whether block `hi`, read as no key, was read again once `lo` was next to it.
        let mut rechecked = false;
        loop {
            let p = if galloping && lo + step < hi {
                if hi == n && 2 * (lo + step) >= n {
                    // The last block, unprobed so far, once the gallop passes the query's
                    // middle: the query is then chained at most twice as far as needed,
                    // and a worker holding it all is settled without the bisection.
                    n - 1
                } else {
                    lo + step
                }
            } else if hi - lo > 1 {
                galloping = false;
                lo + (hi - lo) / 2
            } else if hi_keyless
                && !rechecked
                && hi < n
                && !cfg!(loom_break = "find_trusts_a_stale_miss")
            {
                // Block `hi` read as no key (missing, or inside a run) before block `lo` was
                // found held: a cut or split of a run holding both may have given block
                // `hi` a key since, which the workers may hold (a stable worker would
                // otherwise drop out at a block it holds). Read it again, once.
                rechecked = true;
                hi
            } else {
                break;
            };
            let Probed {
                holders,
                starts: run,
                ..
            } = self.probe(keys.key(p), guard);
            if let Some(run) = run {
                self.prefetch_past(run, p, keys, guard);
            }
            if !active.all_kept(&holders, now) {
                hi_keyless = holders.is_empty() && run.is_none();
                (hi, at_hi, run_hi) = (p, Some(holders), run);
                continue;
            }
            let Some(run) = run else {
                lo = p;
                if lo >= hi {
                    // Block `hi` (read again) is held after all: on to the last block, or
                    // done if it was the last.
                    if lo + 1 >= n {
                        return Turn::Whole;
                    }
                    (hi, at_hi, run_hi, hi_keyless) = (unprobed, None, None, last_keyless);
                    (step, galloping, rechecked) = (1, true, false);
                } else {
                    step *= 2;
                }
                continue;
            };
            match jump(run, p, n, keys) {
                Jump::Whole => return Turn::Whole,
                Jump::Parted(at) => {
                    // Read from the run itself: block `at` is not the run's.
                    (lo, hi, at_hi, run_hi) = (at - 1, at, Some(Holders::NONE), None);
                    hi_keyless = false;
                }
                Jump::Past(end) => {
                    lo = end;
                    if lo >= hi {
                        (hi, at_hi, run_hi, hi_keyless) = (unprobed, None, None, last_keyless);
                    }
                    (step, galloping, rechecked) = (1, true, false);
                }
            }
        }
        Turn::DropOut {
            hi,
            holders: at_hi,
            run: run_hi,
        }
    }
}

/// Where a turn of the galloping search starts ([`Tree::search_turn`]).
#[derive(Clone, Copy)]
pub(super) struct SearchFrom {
    /// A block every active worker holds.
    pub(super) lo: usize,
    /// Where the run that the last block ends begins, if the query reaches it there.
    pub(super) last_run: Option<usize>,
    /// The last block (or the block past a query of local hashes), which every active
    /// worker misses as last read.
    pub(super) unprobed: usize,
    /// The last block's probe found no key: missing, or inside a run as it was then (a
    /// cut or split since may have given it one), so the search reads it again before
    /// it settles workers there.
    pub(super) at_hi_keyless: bool,
}

/// Where a turn of the galloping search ended ([`Tree::search_turn`]).
pub(super) enum Turn<'g> {
    /// A run the remaining workers all hold reaches the query's last block.
    Whole,
    /// Block `hi` is the shallowest that some remaining worker misses: its holders
    /// (`None`: the last block's, already read) and the run it begins, if it is a head.
    DropOut {
        hi: usize,
        holders: Option<Holders<'g>>,
        run: Option<RunAt<'g>>,
    },
}
