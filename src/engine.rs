//! The engine behind [`ApproxKvIndexer`](crate::ApproxKvIndexer): the state that callers
//! and the sweeper thread share, and every operation on it. The public type only adds
//! hashing, the worker-key type and the sweeper thread's life.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_epoch as epoch;

use crate::capacity::{self, Caps, GlobalEviction};
use crate::clock::{nanos, Clock};
use crate::config::Builder;
use crate::events::{KvCacheEventData, RouterEvent};
use crate::expiry::{Expiry, Timer};
use crate::scores::OverlapScores;
use crate::stats::{IndexStats, StripedCounter};
use crate::tree::claim::{EXACT, MAX_EXPIRY};
use crate::tree::Tree;
use crate::workers::{Slot, Workers};
use crate::{LocalBlockHash, SequenceHash, WorkerKey};

/// TTLs at or beyond this (about 146 years) mean "never": no timers are kept.
const NEVER: u64 = 1 << 62;

/// State shared by the callers and the sweeper thread.
pub(crate) struct Engine {
    pub(crate) block_size: u32,
    pub(crate) ttl_nanos: u64,
    /// False when the TTL means "never": decisions then push no timer.
    timers: bool,
    pub(crate) caps: Caps,
    clock: Arc<dyn Clock>,
    pub(crate) tree: Tree,
    pub(crate) workers: Arc<Workers>,
    expiry: Expiry,
    global_eviction: GlobalEviction,
    /// Held for a whole sweep (only sweepers take it).
    sweeping: parking_lot::Mutex<()>,
    records: StripedCounter,
    finds: StripedCounter,
    expirations: StripedCounter,
    evictions: StripedCounter,
}

impl Engine {
    pub(crate) fn new(b: &Builder) -> Self {
        let tick_nanos = nanos(b.tick).max(1);
        let ttl_nanos = nanos(b.ttl).clamp(1, NEVER);
        let timers = ttl_nanos < NEVER;
        let caps = Caps {
            per_worker: b.max_blocks_per_worker,
            total: b.max_entries,
        };
        Self {
            block_size: b.block_size,
            ttl_nanos,
            timers,
            caps,
            clock: Arc::clone(&b.clock),
            tree: Tree::new(),
            workers: Workers::new(caps.total.is_some(), !timers),
            expiry: Expiry::new(tick_nanos, if timers { ttl_nanos } else { 0 }),
            global_eviction: GlobalEviction::default(),
            sweeping: parking_lot::Mutex::new(()),
            records: StripedCounter::default(),
            finds: StripedCounter::default(),
            expirations: StripedCounter::default(),
            evictions: StripedCounter::default(),
        }
    }

    pub(crate) fn find<W: WorkerKey>(&self, local: &[LocalBlockHash]) -> OverlapScores<W> {
        self.finds.add(1);
        let guard = epoch::pin();
        self.tree.find(local, self.now(), &self.workers, &guard)
    }

    pub(crate) fn dump<W: WorkerKey>(&self) -> Vec<RouterEvent<W>> {
        let guard = epoch::pin();
        self.tree.dump(self.now(), &self.workers, &guard)
    }

    pub(crate) fn snapshot<W: WorkerKey>(&self) -> crate::Snapshot {
        let guard = epoch::pin();
        let rows = self
            .tree
            .live_entries::<W>(self.now(), &self.workers, &guard);
        crate::Snapshot {
            block_size: self.block_size,
            entries: rows
                .into_iter()
                .map(|r| crate::SnapshotEntry {
                    worker_id: r.worker.worker_id(),
                    dp_rank: r.worker.dp_rank(),
                    block: r.seq,
                    parent: r.parent,
                    local: r.local,
                    depth: r.depth,
                    exact: r.exact,
                    ttl_left: Duration::from_nanos(r.ttl_left),
                })
                .collect(),
        }
    }

    pub(crate) fn restore<W: WorkerKey>(
        &self,
        snapshot: &crate::Snapshot,
    ) -> Result<(), crate::SnapshotError> {
        if snapshot.block_size != self.block_size {
            return Err(crate::SnapshotError::BlockSizeMismatch {
                snapshot: snapshot.block_size,
                index: self.block_size,
            });
        }
        let now = self.now();
        let guard = epoch::pin();
        for e in &snapshot.entries {
            let worker = W::from_parts(e.worker_id, e.dp_rank);
            let Some(slot) = self.workers.resolve(worker) else {
                continue;
            };
            let ttl_left = nanos(e.ttl_left).min(self.ttl_nanos);
            let approx = if ttl_left == 0 {
                0
            } else {
                now.saturating_add(ttl_left).min(MAX_EXPIRY)
            };
            let claim = approx | if e.exact { EXACT } else { 0 };
            if claim == 0 {
                continue; // nothing live to restore
            }
            if e.exact && !self.workers.begin_exact(slot) {
                continue; // removed while restoring
            }
            let row = crate::tree::LiveEntry {
                depth: e.depth,
                worker: (),
                seq: e.block,
                parent: e.parent,
                local: e.local,
                exact: e.exact,
                ttl_left,
            };
            let added = self.tree.restore_entry(slot, &row, claim, &guard);
            self.workers.adjust_entries(slot, i64::from(added));
            if e.exact {
                self.workers.end_exact(slot);
            }
            if approx != 0 && self.timers {
                self.expiry.schedule(
                    approx,
                    Timer {
                        leaf: e.block,
                        slot,
                    },
                );
            }
            if approx != 0 && self.caps.any() {
                self.log_and_enforce(slot, approx, e.block, usize::from(added), &guard);
            }
        }
        Ok(())
    }

    /// The index's internal time: clock nanoseconds plus one, so it is never 0 and the
    /// claim values 0 and 1 are never live (see `tree::claim`).
    #[inline]
    fn now(&self) -> u64 {
        nanos(self.clock.now())
            .saturating_add(1)
            .min(MAX_EXPIRY - 1)
    }

    pub(crate) fn record(
        &self,
        worker: impl WorkerKey,
        local: &[LocalBlockHash],
        seq: &[SequenceHash],
    ) {
        let Some(&leaf) = seq.last() else {
            return;
        };
        self.records.add(1);
        let guard = epoch::pin();
        let Some(slot) = self.workers.resolve(worker) else {
            return; // 2^32 live registrations: nothing sensible to store
        };
        let mut expiry = self.now().saturating_add(self.ttl_nanos).min(MAX_EXPIRY);
        if self.caps.any() {
            expiry = self.workers.unique_expiry(slot, expiry).min(MAX_EXPIRY);
        }
        let added = self.tree.record(slot, local, seq, expiry, &guard);
        self.workers.adjust_entries(slot, added as i64);
        if self.timers {
            self.expiry.schedule(expiry, Timer { leaf, slot });
        }
        if self.caps.any() {
            self.log_and_enforce(slot, expiry, leaf, added, &guard);
        }
    }

    /// Logs a decision for eviction and, while over a cap, evicts up to twice as many
    /// entries as the decision `added`: enough to drain leftovers of races, while
    /// concurrent recorders cannot strip a worker by all evicting the same excess.
    fn log_and_enforce(
        &self,
        slot: Slot,
        expiry: u64,
        leaf: SequenceHash,
        added: usize,
        guard: &epoch::Guard,
    ) {
        let Some(log) = self.workers.log(slot) else {
            return;
        };
        let stamp = if self.caps.total.is_some() {
            self.global_eviction.stamp()
        } else {
            0
        };
        let len = log.push(stamp, expiry, leaf);
        capacity::compact_if_long(&self.tree, &self.workers, slot, len, guard);
        let mut evicted = 0;
        let (tree, workers) = (&self.tree, &self.workers);
        let timers = self.timers.then_some(&self.expiry);
        if let Some(cap) = self.caps.per_worker {
            let quota = 2 * added;
            evicted += capacity::evict_worker(tree, workers, timers, slot, cap, quota, guard);
        }
        if let Some(cap) = self.caps.total {
            let global = &self.global_eviction;
            let quota = (2 * added).saturating_sub(evicted);
            evicted += capacity::evict_total(tree, workers, timers, global, cap, quota, guard);
        }
        self.evictions.add(evicted as u64);
    }

    pub(crate) fn apply_event<W: WorkerKey>(&self, event: &RouterEvent<W>) {
        let guard = epoch::pin();
        match &event.data {
            KvCacheEventData::Stored(data) => {
                let Some(slot) = self.workers.resolve(event.worker_id) else {
                    return;
                };
                if !self.workers.begin_exact(slot) {
                    return; // removed meanwhile: the event comes before the removal
                }
                let blocks = data.blocks.iter().map(|b| (b.tokens_hash, b.block_hash));
                let added = self
                    .tree
                    .store_exact(slot, data.parent_hash, blocks, &guard);
                self.workers.adjust_entries(slot, added as i64);
                self.workers.end_exact(slot);
            }
            KvCacheEventData::Removed(data) => {
                let Some(slot) = self.workers.lookup(event.worker_id) else {
                    return; // unknown worker: it holds nothing
                };
                let blocks = data.block_hashes.iter().copied();
                let removed = self.tree.remove_exact(slot, blocks, &guard);
                self.workers.adjust_entries(slot, -(removed as i64));
            }
            KvCacheEventData::Cleared => {
                self.workers.remove_rank(event.worker_id);
            }
        }
    }

    /// Reclaims what is due at the clock's current time: dead slots to purge, due timers,
    /// and (with caps) expired decisions in the logs. Returns the entries freed.
    pub(crate) fn sweep(&self) -> usize {
        // One sweep at a time, whole: a sweep that returns has finished its purges and walks,
        // even if another thread (the background sweeper) started first.
        let _turn = self.sweeping.lock();
        let now = self.now();
        let mut freed = self.purge_dead();
        self.expiry.take_due(now, |Timer { leaf, slot }| {
            let guard = epoch::pin();
            let alive = self.workers.is_alive(slot);
            let walked = self.tree.walk(leaf, slot, now, alive, usize::MAX, &guard);
            drop(guard);
            if walked.removed > 0 {
                self.workers.adjust_entries(slot, -(walked.removed as i64));
                freed += walked.removed;
            }
        });
        if self.caps.any() && self.timers {
            for slot in 0..self.workers.slot_count() {
                if let Some(log) = self.workers.log(slot) {
                    log.prune_expired(now);
                }
            }
        }
        self.expirations.add(freed as u64);
        freed
    }

    pub(crate) fn stats(&self) -> IndexStats {
        let (entries, nodes) = (self.workers.total_entries(), self.tree.len());
        let pending_timers = self.expiry.pending();
        IndexStats {
            entries,
            nodes,
            workers: self.workers.len(),
            records: self.records.sum(),
            finds: self.finds.sum(),
            expirations: self.expirations.sum(),
            evictions: self.evictions.sum(),
            pending_timers,
            estimated_bytes: self.tree.estimated_bytes(nodes, entries)
                + pending_timers * crate::expiry::Expiry::BYTES_PER_TIMER,
        }
    }

    /// Removes every entry of dead slots that no timer will lead a walk to.
    fn purge_dead(&self) -> usize {
        let (slots, busy): (Vec<Slot>, Vec<Slot>) = self
            .workers
            .take_purges()
            .into_iter()
            .partition(|&slot| !self.workers.exact_in_flight(slot));
        self.workers.requeue_purges(busy); // an event is still storing: next sweep
        if slots.is_empty() {
            return 0;
        }
        let guard = epoch::pin();
        let removed = self.tree.purge(&slots, &guard);
        for (&slot, &n) in slots.iter().zip(&removed) {
            if let Some(log) = self.workers.log(slot) {
                log.clear();
            }
            self.workers.adjust_entries(slot, -(n as i64));
            self.workers.purge_done(slot);
        }
        removed.iter().sum()
    }
}
