//! Reclamation: every tick the sweeper thread frees what is due (dead slots to purge, due
//! timers' walks, expired logged decisions). Due timers are taken from the wheel in bounded
//! batches (the wheel's lock is held only to take one) and walked without a lock of the
//! sweep's own, so several threads can reclaim at once. When the sweeper falls behind
//! (starved of CPU by more runnable threads than cores), recording callers take batches
//! too: each frees at least twice what it added, without waiting (they only *try* the
//! wheel's lock).

use std::sync::atomic::Ordering::Relaxed;

use super::purge::PURGE_SHARDS_PER_TICK;
use super::Core;
use crate::timers::Timer;
use crate::tree::{Span, Walk};

/// Due timers taken from the wheel at a time.
const BATCH: usize = 64;

/// Callers start helping once the last sweep that left nothing due is this many ticks old.
const HELP_AFTER_TICKS: u64 = 4;

impl Core {
    /// Frees everything due at the clock's time, on this thread (`sweep_expired`). Sweeps
    /// take turns for their purges, and a sweep returns only once every due timer taken so
    /// far, by any thread, has been walked: a sweep that returns has finished its work.
    /// Returns the entries freed by this call.
    pub(crate) fn sweep(&self) -> usize {
        let mut pass = self.sweeping.lock();
        let now = self.now();
        let mut freed = self.purge_dead(&mut pass, None);
        while let Some((n, more)) = self.expire_batch(now, true) {
            freed += n;
            if !more {
                break;
            }
        }
        self.timers.wait_for_batches();
        self.prune_logs(now);
        self.swept_until.fetch_max(now, Relaxed);
        self.expirations.add(freed as u64);
        freed
    }

    /// The background sweeper's tick: the purges in turn with other sweeps, then due
    /// timers batch by batch, alongside any callers that help.
    pub(crate) fn sweep_in_batches(&self) {
        let now = self.now();
        let mut freed = {
            let mut pass = self.sweeping.lock();
            self.purge_dead(&mut pass, Some(PURGE_SHARDS_PER_TICK))
        };
        while let Some((n, more)) = self.expire_batch(now, true) {
            freed += n;
            if !more {
                self.swept_until.fetch_max(now, Relaxed);
                break;
            }
        }
        self.prune_logs(now);
        self.expirations.add(freed as u64);
    }

    /// Callers stop helping for good (the background sweeper was stopped: reclamation
    /// stops with it, except by `sweep_expired`).
    pub(crate) fn stop_helping(&self) {
        self.help.store(false, Relaxed);
    }

    /// Called by a recorder that added `added` entries at `now`: if the sweeper is behind,
    /// frees at least twice that many due entries (or all that is due), in batches, taking
    /// a batch only when the wheel's lock is free.
    pub(super) fn help_sweep(&self, now: u64, added: usize) {
        if !self.help.load(Relaxed) {
            return;
        }
        let lag = now.saturating_sub(self.swept_until.load(Relaxed));
        if lag <= HELP_AFTER_TICKS.saturating_mul(self.tick_nanos) {
            return;
        }
        let target = 2 * added.max(1);
        let mut freed = 0;
        while freed < target {
            let Some((n, more)) = self.expire_batch(now, false) else {
                break; // another thread holds the wheel: no waiting
            };
            freed += n;
            if !more {
                self.swept_until.fetch_max(now, Relaxed);
                break;
            }
        }
        self.expirations.add(freed as u64);
        self.caller_expirations.add(freed as u64);
    }

    /// Takes up to [`BATCH`] due timers (waiting for the wheel's lock if `wait`, else
    /// giving up with `None`) and walks each. Returns the entries freed and whether due
    /// timers are left.
    fn expire_batch(&self, now: u64, wait: bool) -> Option<(usize, bool)> {
        let batch = self.timers.take_due(now, BATCH, wait)?;
        let mut freed = 0;
        let guard = self.tree.writing();
        for &(deadline, timer) in &batch.timers {
            let Timer {
                leaf,
                slot,
                generation,
            } = timer;
            if self.workers.generation(slot) != generation {
                continue; // of a recycled slot's earlier registration, whose entries are gone
            }
            let alive = self.workers.is_alive(slot);
            // A timer another sweeper found due may be walked by a thread whose clock
            // reading is a little older: the deadline has passed all the same.
            let threshold = now.max(deadline);
            let uncount = |_| self.workers.adjust_entries(slot, -1);
            let walk = Walk {
                leaf,
                slot,
                threshold,
                slot_alive: alive,
                budget: usize::MAX,
                span: Span::Path,
                blocks: usize::MAX,
                lower_to: None,
            };
            let walked = self.tree.walk(walk, uncount, &guard);
            freed += walked.removed;
        }
        // A batch retires hundreds of holder arrays; a pin collects only a few bags of
        // garbage now and then, so with many threads freeing at once the collector would
        // fall behind (memory growing while entries stay level). Each flush hands this
        // thread's garbage over and collects up to 8 expired bags (512 arrays).
        if freed > 0 {
            for _ in 0..freed.div_ceil(256).min(8) {
                guard.flush();
            }
        }
        Some((freed, batch.more))
    }

    /// Drops logged decisions whose TTL has passed (their timers' walks free them).
    fn prune_logs(&self, now: u64) {
        if !self.capped() || self.never {
            return;
        }
        for slot in 0..self.workers.slot_count() {
            if let Some(log) = self.workers.log(slot) {
                log.prune_expired(now);
            }
        }
        if let Some(log) = &self.global_log {
            log.prune_expired(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::{Builder, LocalBlockHash, ManualClock, SequenceHash};

    /// An engine whose callers help as if a background sweeper ran and had fallen
    /// behind: none runs here, so only the callers can have reclaimed anything.
    fn helped_engine(clock: &Arc<ManualClock>) -> Core {
        let b = Builder::default()
            .block_size(1)
            .ttl(Duration::from_secs(1))
            .tick(Duration::from_millis(10))
            .clock(clock.clone())
            .background_sweeper(false);
        let mut engine = Core::new(&b);
        engine.help = std::sync::atomic::AtomicBool::new(true);
        engine
    }

    fn record(engine: &Core, prompt: u64) {
        let local: Vec<_> = [prompt, 1, 2, 3].map(LocalBlockHash).to_vec();
        let seq: Vec<SequenceHash> = crate::compute_seq_hashes(&local);
        engine.record(0u64, &local, &seq);
    }

    #[test]
    fn recorders_reclaim_at_least_twice_what_they_add_when_behind() {
        let clock = Arc::new(ManualClock::new());
        let engine = helped_engine(&clock);
        for p in 0..100 {
            record(&engine, 1_000 + p);
        }
        // Within 4 ticks of the last sweep (at 0): nobody helps.
        clock.advance(Duration::from_millis(40));
        record(&engine, 5);
        assert_eq!(engine.stats().caller_expirations, 0);
        // Everything recorded is due, 100 ticks after the last sweep.
        clock.advance(Duration::from_secs(1));
        record(&engine, 6);
        let stats = engine.stats();
        assert!(stats.caller_expirations >= 8, "{stats:?}");
        for p in 0..60 {
            record(&engine, 2_000 + p);
        }
        let stats = engine.stats();
        assert_eq!(stats.caller_expirations, 404, "{stats:?}");
        assert_eq!(stats.entries, 4 + 4 * 60, "{stats:?}");
    }
}
