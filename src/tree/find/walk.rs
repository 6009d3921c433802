//! The block-by-block walk: the find while holder sets may not be nested, and the end of a
//! galloping find whose search met a claim that changed under it.

use super::active::{report, ActiveSet};
use super::query_keys::{HashedQuery, Keys};
use super::{through_run, Probed, Reading, Scratch};
use crate::scores::ScoreSink;
use crate::slot::SlotOwners;
use crate::tree::run_alloc::QueryKeys;
use crate::tree::Tree;
use crate::WorkerKey;

impl Tree {
    /// The block-by-block walk, for when holder sets may not be nested.
    pub(super) fn find_walk<W: WorkerKey>(
        &self,
        query: HashedQuery<'_>,
        reading: Reading<'_, impl SlotOwners>,
        scratch: &mut Scratch,
        out: &mut impl ScoreSink<W>,
    ) {
        let Scratch { active, seq } = scratch;
        let mut keys = Keys::new(query, seq);
        self.walk_from(0, &mut keys, active, reading, out);
    }

    /// Walks the query block by block from block `from`, reporting each worker where it
    /// drops out and those left at the end. From block 0 the active set is that block's
    /// live holders; from any other block, `active` holds the workers that hold every block
    /// before it (a galloping search handing over). Each step moves on by a block or
    /// through a run, so the walk ends after at most one probe a block.
    pub(super) fn walk_from<W: WorkerKey>(
        &self,
        from: usize,
        keys: &mut Keys<'_, '_>,
        active: &mut ActiveSet,
        reading: Reading<'_, impl SlotOwners>,
        out: &mut impl ScoreSink<W>,
    ) {
        let Reading {
            now,
            workers,
            guard,
        } = reading;
        let n = keys.query.len();
        let mut i = from;
        while i < n {
            let Probed {
                holders,
                starts: run,
                ..
            } = self.probe(keys.key(i), guard);
            if i == 0 {
                active.start(&holders, now, workers, out.wants_entries());
            } else {
                active.retain_holders(&holders, now, |worker| report(out, worker, i as u32));
            }
            if active.is_empty() {
                return;
            }
            // Every block of a run has the head's holders: on to where the query leaves it.
            let Some(run) = run else {
                i += 1;
                continue;
            };
            match through_run(run, (i, n), keys, active, out) {
                Some(end) => i = end + 1,
                None => return,
            }
        }
        active.report_all(out, n);
    }
}
