//! Reclamation: every tick the sweeper thread frees what is due (dead slots to purge, due
//! timers' walks, expired logged decisions). Walks are taken from the wheel in bounded
//! batches, so when the sweeper falls behind (starved of CPU by more runnable threads than
//! cores), recording callers can take batches too: each helps free at least twice what it
//! added, without waiting (they only *try* the sweep lock).

use std::sync::atomic::Ordering::Relaxed;

use crossbeam_epoch as epoch;

use super::Engine;
use crate::expiry::Timer;
use crate::tree::Span;
use crate::workers::Slot;

/// Due timers taken from the wheel at a time.
const BATCH: usize = 64;

/// Callers start helping once the last sweep that left nothing due is this many ticks old.
const HELP_AFTER_TICKS: u64 = 4;

impl Engine {
    /// Frees everything due at the clock's time, on this thread, in one turn (a sweep that
    /// returns has finished its purges and walks, even if another sweeper started first).
    /// Returns the entries freed.
    pub(crate) fn sweep(&self) -> usize {
        let _turn = self.sweeping.lock();
        let now = self.now();
        let mut freed = self.purge_dead();
        loop {
            let (n, more) = self.expire_batch(now);
            freed += n;
            if !more {
                break;
            }
        }
        self.prune_logs(now);
        self.swept_until.fetch_max(now, Relaxed);
        self.expirations.add(freed as u64);
        freed
    }

    /// The background sweeper's tick: the same work as [`sweep`](Self::sweep), but the
    /// walks in batches that each take the sweep lock anew, so callers can help between.
    pub(crate) fn sweep_in_batches(&self) {
        let now = self.now();
        let mut freed = {
            let _turn = self.sweeping.lock();
            self.prune_logs(now);
            self.purge_dead()
        };
        loop {
            let _turn = self.sweeping.lock();
            let (n, more) = self.expire_batch(now);
            freed += n;
            if !more {
                self.swept_until.fetch_max(now, Relaxed);
                break;
            }
        }
        self.expirations.add(freed as u64);
    }

    /// Called by a recorder that added `added` entries at `now`: if the sweeper is behind,
    /// frees at least twice that many due entries (or all that is due), in batches, unless
    /// another thread is sweeping right now.
    pub(super) fn help_sweep(&self, now: u64, added: usize) {
        if !self.help {
            return;
        }
        let lag = now.saturating_sub(self.swept_until.load(Relaxed));
        if lag <= HELP_AFTER_TICKS.saturating_mul(self.tick_nanos) {
            return;
        }
        let Some(_turn) = self.sweeping.try_lock() else {
            return; // someone is sweeping: no waiting
        };
        let target = 2 * added.max(1);
        let mut freed = 0;
        while freed < target {
            let (n, more) = self.expire_batch(now);
            freed += n;
            if !more {
                self.swept_until.fetch_max(now, Relaxed);
                break;
            }
        }
        self.expirations.add(freed as u64);
        self.caller_expirations.add(freed as u64);
    }

    /// Takes up to [`BATCH`] due timers and walks each. Returns the entries freed and
    /// whether due timers are left. Call with the sweep lock held.
    fn expire_batch(&self, now: u64) -> (usize, bool) {
        let mut due: Vec<(u64, Timer)> = Vec::with_capacity(BATCH);
        let more = self
            .expiry
            .take_due(now, BATCH, |deadline, timer| due.push((deadline, timer)));
        let mut freed = 0;
        let guard = epoch::pin();
        for (deadline, Timer { leaf, slot }) in due {
            let alive = self.workers.is_alive(slot);
            // A timer another sweeper found due may be walked by a thread whose clock
            // reading is a little older: the deadline has passed all the same.
            let threshold = now.max(deadline);
            let walked =
                self.tree
                    .walk(leaf, slot, threshold, alive, usize::MAX, Span::Path, &guard);
            if walked.removed > 0 {
                self.workers.adjust_entries(slot, -(walked.removed as i64));
                freed += walked.removed;
            }
        }
        (freed, more)
    }

    /// Drops logged decisions whose TTL has passed (their timers' walks free them).
    fn prune_logs(&self, now: u64) {
        if !self.caps.any() || self.never {
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

    /// Removes every entry of dead slots that no timer will lead a walk to.
    fn purge_dead(&self) -> usize {
        let (slots, busy): (Vec<Slot>, Vec<Slot>) = self
            .workers
            .take_purges()
            .into_iter()
            .partition(|&slot| !self.workers.writes_in_flight(slot));
        self.workers.requeue_purges(busy); // a writer is still storing: next sweep
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::{Builder, LocalBlockHash, ManualClock, SequenceHash};

    /// An engine whose callers help as if a background sweeper ran and had fallen
    /// behind: none runs here, so only the callers can have reclaimed anything.
    fn helped_engine(clock: &Arc<ManualClock>) -> Engine {
        let b = Builder::default()
            .block_size(1)
            .ttl(Duration::from_secs(1))
            .tick(Duration::from_millis(10))
            .clock(clock.clone())
            .background_sweeper(false);
        let mut engine = Engine::new(&b);
        engine.help = true;
        engine
    }

    fn record(engine: &Engine, prompt: u64) {
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
