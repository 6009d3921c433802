//! The purge of removed workers' entries: every slot removed with entries is queued
//! (`Workers::kill`), and the sweeper takes the queued slots together into one *pass* over
//! the node map, a few shards a tick ([`PURGE_SHARDS_PER_TICK`]), so no tick scans the whole
//! map; `sweep_expired` runs the pass to its end. A pass over all shards that found
//! anything, or after which a slot still counts entries, is followed by another (a run
//! split or cut during the pass may have put blocks in shards already passed) until one
//! finds nothing and leaves the slots' counts at 0 (at most [`MAX_ROUNDS`]); then the
//! slots are released for recycling.

use super::Core;
use crate::slot::Slot;
use crate::tree::SHARDS;

/// Shards of the node map a sweeper tick purges: a pass over the whole map takes
/// `SHARDS / PURGE_SHARDS_PER_TICK` ticks (8: 0.8 s at the default tick).
pub(crate) const PURGE_SHARDS_PER_TICK: usize = 16;

/// Passes over the whole map for one set of slots, at most.
const MAX_ROUNDS: usize = 16;

/// A purge under way: the slots it removes (sorted), and how far it went.
#[derive(Debug, Default)]
pub(crate) struct PurgePass {
    slots: Vec<Slot>,
    /// The next shard to purge.
    next: usize,
    /// Whether this round over the shards found any entry of the slots.
    found: bool,
    /// Rounds over the whole map done for these slots.
    rounds: usize,
}

impl Core {
    /// Purges up to `budget` shards (`None`: until every slot queued so far is purged),
    /// uncounting what it removed as it goes. `pass` is the sweep turn's purge state.
    /// Returns the entries removed.
    pub(super) fn purge_dead(&self, pass: &mut PurgePass, budget: Option<usize>) -> usize {
        let mut left = budget.unwrap_or(usize::MAX);
        let mut freed = 0;
        while left > 0 {
            if pass.slots.is_empty() && !self.start_pass(pass) {
                break;
            }
            let end = pass.next.saturating_add(left).min(SHARDS);
            left -= end - pass.next;
            let guard = self.tree.writing();
            let mut removed = vec![0; pass.slots.len()];
            pass.found |= self
                .tree
                .purge_shards(&pass.slots, &mut removed, pass.next..end, &guard);
            for (&slot, &n) in pass.slots.iter().zip(&removed) {
                self.workers.adjust_entries(slot, -(n as i64));
                freed += n;
            }
            pass.next = end;
            if end == SHARDS {
                self.end_round(pass);
            }
        }
        freed
    }

    /// Takes the queued slots into a new pass; false if none is ready (a slot with a
    /// writer in flight waits for a later pass).
    fn start_pass(&self, pass: &mut PurgePass) -> bool {
        let (mut slots, busy): (Vec<Slot>, Vec<Slot>) = self
            .workers
            .take_purges()
            .into_iter()
            .partition(|&slot| !self.workers.writes_in_flight(slot));
        self.workers.requeue_purges(busy);
        slots.sort_unstable();
        slots.dedup();
        *pass = PurgePass {
            slots,
            ..PurgePass::default()
        };
        !pass.slots.is_empty()
    }

    /// A round over every shard ended: another if it found anything or a slot still
    /// counts entries, else the slots are purged (their logs cleared, released for
    /// recycling once their counts are 0).
    ///
    /// A round is no snapshot of the map: a cut may move a slot's holder from a key the
    /// round has yet to reach to one it has passed, and a record's copy of the first key's
    /// holders then drop it there (`Tree::upsert_holder`) before the round arrives. The
    /// round then finds nothing while the slot still holds the block it passed; its count
    /// says so (a dead slot gains no entry, so a count above 0 is an entry still held, or
    /// an uncount about to land).
    fn end_round(&self, pass: &mut PurgePass) {
        pass.rounds += 1;
        let counted = || {
            pass.slots
                .iter()
                .any(|&slot| self.workers.entries(slot) > 0)
        };
        if (pass.found || counted()) && pass.rounds < MAX_ROUNDS {
            (pass.next, pass.found) = (0, false);
            return;
        }
        for &slot in &pass.slots {
            if let Some(log) = self.workers.log(slot) {
                log.clear();
            }
            self.workers.purge_done(slot);
        }
        *pass = PurgePass::default();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::core::testing::chain;
    use crate::workers::WriteKind;
    use crate::{Builder, LocalBlockHash, ManualClock, SequenceHash};

    /// An engine of blocks of one token with `ttl`, on `clock`, with no sweeper thread.
    fn engine(clock: &Arc<ManualClock>, ttl: Duration) -> Core {
        let b = Builder::default()
            .block_size(1)
            .ttl(ttl)
            .clock(clock.clone())
            .background_sweeper(false);
        Core::new(&b)
    }

    /// Each sweeper tick purges `PURGE_SHARDS_PER_TICK` shards: a removed worker's
    /// entries, spread over the map, are not all gone after one tick, and all are after
    /// the two rounds over every shard that a purge takes (the second finds nothing), with
    /// the live worker's untouched; `sweep_expired` purges a later removal whole at once.
    #[test]
    fn the_sweeper_purges_a_few_shards_a_tick_and_finishes_within_two_rounds() {
        let clock = Arc::new(ManualClock::new());
        let engine = engine(&clock, Duration::from_secs(3600));
        // 200 one-block prompts for workers 1, 2 and 3: 200 nodes, spread over the shards.
        for p in 0..200u64 {
            let local = [LocalBlockHash(10_000 + p)];
            let seq: Vec<SequenceHash> = crate::compute_seq_hashes(&local);
            for w in 1..=3u64 {
                engine.record(w, &local, &seq);
            }
        }
        engine.workers.remove(1u64);
        assert_eq!(engine.stats().entries, 600);
        engine.sweep_in_batches();
        let after_one = engine.stats().entries;
        assert!(
            (400..600).contains(&after_one),
            "one tick purges some shards, not all: {after_one}"
        );
        let ticks = 2 * SHARDS / PURGE_SHARDS_PER_TICK;
        for _ in 1..ticks {
            engine.sweep_in_batches();
        }
        assert_eq!(engine.stats().entries, 400);
        assert_eq!(engine.workers.take_purges(), Vec::<Slot>::new());
        assert_eq!(*engine.sweeping.lock().slots, [], "the pass ended");
        engine.workers.remove(2u64);
        assert_eq!(
            engine.sweep(),
            200,
            "sweep_expired: the whole purge at once"
        );
        assert_eq!(engine.stats().entries, 200);
    }

    /// A round of a purge is not a snapshot: a cut can move a dead holder from a key the
    /// round has yet to reach (a run's head) to one it has passed (the run's tail, made a
    /// block), and a record's copy of the head's holders can then drop it there (as it
    /// drops every dead holder, uncounting it) before the round arrives. The round then
    /// finds nothing, yet the dead slot still holds the tail block: the pass goes on while
    /// the slot's count says it holds entries. Before, it ended there, and the entry, which
    /// a pinned decision's missing timer left to the purge alone, stayed for good (the
    /// stress of every call racing: about one run in 50,000).
    #[test]
    fn a_purge_goes_on_while_a_dead_slot_still_counts_entries() {
        let clock = Arc::new(ManualClock::new());
        let engine = engine(&clock, Duration::from_secs(10));
        // A two-block prompt whose tail lies in an earlier shard than its head.
        let (local, seq) = (1..)
            .map(|p| chain(&[p, 1_000 + p]))
            .find(|(_, seq)| engine.tree.shard_of(seq[1]) < engine.tree.shard_of(seq[0]))
            .unwrap();
        let (head, tail) = (local[0].0, engine.tree.shard_of(seq[1]));
        // Worker 2 takes slot 0, worker 1 slot 1, worker 3 slot 2.
        let (z_local, z_seq) = chain(&[7]);
        engine.record(2u64, &z_local, &z_seq);
        // Worker 1's request pins the prompt (a run; no timer), worker 3 joins the run.
        let slot = engine.begin_request(1u64, (&local, &seq)).unwrap().slot;
        engine.record(3u64, &local, &seq);
        engine.remove_worker(1);
        let mut pass = PurgePass::default();
        // The round passes the tail's shard: the tail is the run's marker, which holds nothing.
        engine.purge_dead(&mut pass, Some(tail + 1));
        assert_eq!(engine.workers.entries(slot), 2, "the head not reached yet");
        // Worker 2 leaves the run after its head: the run is cut into two blocks, and
        // worker 2's copy of the head's holders drops the dead slot there.
        let (x_local, x_seq) = chain(&[head, 9]);
        engine.record(2u64, &x_local, &x_seq);
        assert_eq!(engine.workers.entries(slot), 1, "the tail still held");
        engine.purge_dead(&mut pass, None);
        assert_eq!(
            engine.workers.entries(slot),
            0,
            "the purge reached the tail"
        );
        assert_eq!(engine.stats().entries, 5, "workers 2 and 3: 3 and 2 blocks");
        clock.advance(Duration::from_secs(11));
        engine.sweep();
        let stats = engine.stats();
        assert_eq!((stats.entries, stats.nodes), (0, 0), "{stats:?}");
    }

    /// A record still storing when its worker is removed, found no entry counted: its
    /// entries go by the purge all the same. Before approximate records took part in the
    /// writer handshake, no purge was queued, and they were left to the record's timer's
    /// walk: another worker's insert that copied a shared block's holders left the dead
    /// worker's holder out there (as it may), the walk stopped at that block, and the dead
    /// worker's entry on the block above stayed for good (the stress test's failure: a
    /// system prompt's first block, held by a removed worker).
    #[test]
    fn a_record_in_flight_across_its_workers_removal_is_purged_whole() {
        let clock = Arc::new(ManualClock::new());
        let engine = engine(&clock, Duration::from_secs(10));
        let local: Vec<LocalBlockHash> = [1, 2, 3].map(LocalBlockHash).to_vec();
        let seq: Vec<SequenceHash> = crate::compute_seq_hashes(&local);
        // Worker 1 (slot 0) holds a, b, c, each block a node of its own (one new block a
        // record: no run); worker 3 (slot 1) holds a.
        for n in 1..=3 {
            engine.record(1u64, &local[..n], &seq[..n]);
        }
        engine.record(3u64, &local[..1], &seq[..1]);
        // Worker 9's record (slot 2): its write begun, then the removal, then its stores.
        {
            let guard = engine.tree.writing();
            let slot = engine.workers.resolve(9u64).unwrap();
            assert!(engine.workers.begin_write(slot, WriteKind::Approx));
            assert!(engine.workers.remove(9u64));
            let expiry = engine.expiry_for(slot, engine.now(), engine.ttl_nanos);
            engine.store_decision(slot, (&local, &seq), (expiry, false), 0, &guard);
            engine.workers.end_write(slot);
        }
        // Worker 3 joins b: slot 1 goes below slot 2 in b's holders, a new array, which
        // leaves the dead slot out.
        engine.record(3u64, &local[..2], &seq[..2]);
        clock.advance(Duration::from_secs(11));
        engine.sweep();
        let stats = engine.stats();
        assert_eq!((stats.entries, stats.nodes), (0, 0), "{stats:?}");
    }
}
