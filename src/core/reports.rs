//! What engines report of each request: how many of its prompt's leading blocks the
//! worker found cached (`ApproxKvIndexer::observe_cached`), against how many the index
//! predicted, and the claims a shortfall shows to be gone.
//!
//! The loss rule: a worker that delivers fewer blocks than predicted lost the first
//! block it did not deliver, although the index believed it held it. An engine evicts
//! least recently used blocks first, so every block the worker last used no later than
//! that one is gone too. The lost block was used no earlier than the deepest predicted
//! block (claims never grow with depth along a path: each decision refreshes its whole
//! path), so the index drops every claim of the worker made no later than its claim on
//! the deepest predicted block before the request (the handle's `prior`): its decisions
//! with expiries at or before it, from the worker's decision log, each walked as an
//! eviction walks it. The request's own blocks are pinned, later than any of those, so a
//! report never drops them. If another running request had pinned the deepest predicted
//! block, only a restart explains the loss: every unpinned claim of the worker goes.

use dashmap::DashMap;

use super::pins::PIN;
use super::Core;
use crate::slot::Slot;
use crate::stats::CacheReport;
use crate::{SequenceHash, WorkerKey, WorkerWithDpRank};

/// What a report changed, for the replicas.
#[derive(Debug, Default, Clone)]
pub(crate) struct Reported {
    /// A loss: how long before now the lost block was last used (a restart: how long
    /// before now the request began, and a nanosecond more, so that other replicas keep
    /// its own decision, which the engine holds again, and drop the claims before it).
    pub(crate) lost_used_before: Option<u64>,
    /// The capacity the report taught, if it taught one.
    pub(crate) learned: Option<usize>,
    /// The other workers a ghost hit raised to the capacity learned (`learn.rs`).
    pub(crate) peers_raised: Vec<WorkerWithDpRank>,
}

/// Reports per slot, tagged with the registration they belong to.
#[derive(Default)]
pub(crate) struct ReportTable {
    slots: DashMap<Slot, (u16, CacheReport)>,
}

impl Core {
    /// Takes a report that a request of `slot` (registration `generation`), predicted to
    /// find `predicted` blocks cached, found `delivered`; `prior` is the handle's claim
    /// before the request (see the module), `prompt` its prompt's blocks. A gain or a loss
    /// teaches the worker's capacity (`learn.rs`). `None` (nothing taken) if the slot is
    /// not that registration's any more. `begun`: when the request began.
    pub(crate) fn report_cached(
        &self,
        (slot, generation): (Slot, u16),
        (predicted, delivered): (usize, usize),
        (prior, begun): (u64, u64),
        prompt: &[SequenceHash],
    ) -> Option<Reported> {
        if self.workers.generation(slot) != generation || !self.workers.is_alive(slot) {
            return None;
        }
        let at = self.read_at(); // the clock read before anything changes
        let now = at.clock;
        {
            let mut entry = self.reports.slots.entry(slot).or_default();
            if entry.0 != generation {
                *entry = (generation, CacheReport::default());
            }
            let report = &mut entry.1;
            report.reports += 1;
            report.predicted_blocks += predicted as u64;
            report.delivered_blocks += delivered as u64;
        }
        let mut reported = Reported::default();
        if delivered > predicted {
            let extra = &prompt[predicted.min(prompt.len())..delivered.min(prompt.len())];
            if let Some((learned, peers)) = self.learn_from_gain((slot, generation), extra) {
                reported.learned = Some(learned);
                reported.peers_raised = peers;
            }
        }
        if delivered >= predicted || prior == 0 {
            return Some(reported);
        }
        // A block another running request pinned was lost: the worker restarted.
        let bound = if prior == PIN { PIN - 1 } else { prior };
        let held = self.workers.entries(slot);
        self.drop_claims_until(slot, bound, at);
        // When the lost block was last used, before now (its claim was one TTL after).
        reported.lost_used_before = Some(if prior == PIN {
            now.saturating_sub(begun).saturating_add(1)
        } else {
            now.saturating_add(self.ttl_nanos).saturating_sub(prior)
        });
        reported.learned = self.learn_from_loss(slot, held);
        Some(reported)
    }

    /// Another replica's loss (`Action::DropOlder`): `key`'s claims of decisions taken
    /// `used_before` nanoseconds ago or earlier go.
    pub(crate) fn drop_older(&self, key: impl WorkerKey, used_before: u64) {
        let _pinned = crossbeam_epoch::pin(); // from the lookup on (see `Core::begin_request`)
        let Some(slot) = self.workers.lookup(key) else {
            return;
        };
        let at = self.read_at();
        let used_at = at.clock.saturating_sub(used_before);
        self.drop_claims_until(
            slot,
            crate::tree::claim::expiry_after(used_at, self.ttl_nanos),
            at,
        );
    }

    /// Drops `slot`'s approximate claims made by decisions expiring at or before `bound`
    /// (pinned ones stay). Starts slot logs first if none are kept.
    fn drop_claims_until(&self, slot: Slot, bound: u64, at: crate::tree::ReadAt) -> usize {
        let mut bound = bound;
        if self.workers.start_slot_logs() {
            // What is held is logged with expiries made unique, in order: the decisions
            // expiring at or before `bound` (those of its clock reading too) are now those
            // up to the last one raised from there.
            bound = self
                .log_what_is_held(at)
                .into_iter()
                .filter(|&(of, was, _)| of == slot && was <= bound)
                .fold(bound, |bound, (_, _, now)| bound.max(now));
        }
        let guard = self.tree.writing();
        guard.uncount_dropped();
        let dropped = self.evictor(&guard).evict_until(slot, bound);
        self.dropped_by_reports.add(dropped as u64);
        dropped
    }

    /// Every live registration's reports, by worker key.
    pub(crate) fn cache_reports<W: WorkerKey>(&self) -> Vec<(W, CacheReport)> {
        let mut rows: Vec<(W, CacheReport)> = self
            .reports
            .slots
            .iter()
            .filter(|e| self.workers.generation(*e.key()) == e.value().0)
            .filter_map(|e| Some((self.workers.alive::<W>(*e.key())?, e.value().1)))
            .collect();
        rows.sort_unstable_by_key(|r| r.0);
        rows
    }

    /// All live registrations' reports summed.
    pub(crate) fn cache_report_totals(&self) -> CacheReport {
        self.cache_reports::<crate::WorkerWithDpRank>()
            .into_iter()
            .fold(CacheReport::default(), |sum, (_, r)| CacheReport {
                reports: sum.reports + r.reports,
                predicted_blocks: sum.predicted_blocks + r.predicted_blocks,
                delivered_blocks: sum.delivered_blocks + r.delivered_blocks,
            })
    }

    /// Publishes the stats and each worker's reports as `metrics` (`stats::publish`).
    #[cfg(feature = "metrics")]
    pub(crate) fn publish_metrics(&self) {
        let reports: Vec<_> = self
            .cache_reports::<crate::WorkerWithDpRank>()
            .into_iter()
            .map(|(key, r)| ((key.worker_id, key.dp_rank), r))
            .collect();
        crate::stats::publish(&self.stats(), &reports);
    }
}
