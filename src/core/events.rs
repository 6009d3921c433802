//! KV events: an engine's exact `Stored`/`Removed`/`Cleared` events, and replays of
//! [`dump_events`](crate::ApproxKvIndexer::dump_events) (whose `Stored` blocks carry the
//! TTL they had left).
//!
//! Blocks are placed by this index's sequence hashes, computed from the event's tokens
//! hashes chained after the parent, so a find reaches them whatever hashes the engine
//! uses. The engine's own block hashes are kept per worker (where they differ from ours)
//! only to resolve that worker's later parents and removals.

use super::Core;
use crate::capacity::Among;
use crate::events::{KvCacheEventData, KvCacheRemoveData, KvCacheStoreData, RouterEvent};
use crate::hash::SeqChain;
use crate::slot::Slot;
use crate::sync::MutexGuard;
use crate::tree::claim::Claim;
use crate::tree::{Block, Span, Writing};
use crate::workers::{ExactChains, WriteKind};
use crate::{SequenceHash, WorkerKey};
use std::sync::atomic::Ordering::Relaxed;

impl Core {
    pub(crate) fn apply_event<W: WorkerKey>(&self, event: &RouterEvent<W>) {
        match &event.data {
            KvCacheEventData::Stored(data) => self.stored(event.worker_id, data),
            KvCacheEventData::Removed(data) => self.removed(event.worker_id, data),
            KvCacheEventData::Cleared => {
                self.workers.remove_rank(event.worker_id);
            }
        }
    }

    /// The block of `slot`'s worker that an event names `hash`: the block the worker's
    /// engine called so in an earlier `Stored` event, else the block whose sequence hash is
    /// `hash` if the worker holds it live (engines that use this index's hashes, and
    /// replayed dumps).
    fn resolve_block(
        &self,
        slot: Slot,
        hash: SequenceHash,
        guard: &Writing<'_>,
    ) -> Option<SequenceHash> {
        if let Some(ours) = self.workers.engine_hash(slot, hash) {
            return Some(ours);
        }
        let now = self.read_time(self.now());
        self.tree.holds_live(hash, slot, now, guard).then_some(hash)
    }

    fn stored<W: WorkerKey>(&self, worker: W, data: &KvCacheStoreData) {
        if names_repeat(data) {
            // Each block is one name: an event that reuses one (or names a block as its own
            // parent) would rebind it, so that later removals hit the wrong block. Dropped,
            // as Dynamo drops it.
            self.rejected_events.add(1);
            return;
        }
        let guard = self.tree.writing();
        let parent = match data.parent_hash {
            None => None,
            Some(hash) => {
                let resolved = self
                    .workers
                    .lookup(worker)
                    .and_then(|slot| self.resolve_block(slot, hash, &guard))
                    .or_else(|| in_our_hashes(hash, data).then_some(hash));
                if resolved.is_none() {
                    // An engine's name for a block the worker does not hold: the blocks
                    // cannot be placed, so (as Dynamo does) the event is dropped.
                    self.rejected_events.add(1);
                    return;
                }
                resolved
            }
        };
        let Some(slot) = self.workers.resolve(worker) else {
            return;
        };
        let now = self.now(); // before anything changes (see `Core::record_dated`)
                              // Held to the last change: the slot's other events wait (see `removed`).
        let mut exact_chains = self.exact_chains(slot);
        let exact = data.blocks.iter().any(|b| b.expires_in.is_none());
        let write = if exact {
            WriteKind::Exact
        } else {
            WriteKind::Approx
        };
        if !self.workers.begin_write(slot, write) {
            return; // removed meanwhile: the event comes before the removal
        }
        // Each block's claim: exact, or approximate with the TTL it had left (at most the
        // index's). The chain stops at a block with nothing left to claim.
        let mut chain = SeqChain::after(parent);
        let blocks: Vec<(Block, SequenceHash)> = data
            .blocks
            .iter()
            .map_while(|b| {
                let claim = match b.expires_in {
                    None => Claim::EXACT,
                    Some(left) if left.is_zero() => return None,
                    Some(left) => {
                        let left = self.ttl_left_kept(crate::clock::nanos(left));
                        Claim::approx(crate::tree::claim::expiry_after(now, left))
                    }
                };
                let seq = chain.next(b.tokens_hash);
                Some((
                    Block {
                        local: b.tokens_hash,
                        seq,
                        claim,
                    },
                    b.block_hash,
                ))
            })
            .collect();
        self.tree
            .note_chain_nesting(slot, parent, blocks.iter().map(|b| b.0.claim), &guard);
        for (block, engine_hash) in &blocks {
            if block.claim.exact && *engine_hash != block.seq {
                self.workers.map_engine_hash(slot, *engine_hash, block.seq);
            }
        }
        let added = self
            .tree
            .upsert_chain(slot, parent, blocks.iter().map(|b| b.0), &guard);
        if exact && self.tree.holders_nested.load(Relaxed) {
            if let Some(chains) = exact_chains.as_mut() {
                chains.stored(parent, blocks.iter().map(|b| b.0.seq));
            }
        }
        self.workers.adjust_entries(slot, added as i64);
        for (block, _) in blocks.iter().filter(|b| !b.0.claim.exact) {
            let walk = (block.seq, block.claim.expiry, Span::Block);
            self.schedule_walk(slot, walk, Among::First, &guard);
        }
        self.enforce_caps(slot, 2 * added, None, &guard);
        self.workers.end_write(slot);
    }

    /// `slot`'s exact chains, locked, emptied if finds no longer gallop (nothing reads them
    /// again then).
    fn exact_chains(&self, slot: Slot) -> Option<MutexGuard<'_, ExactChains>> {
        let mut chains = self.workers.exact_chains(slot)?;
        if !self.tree.holders_nested.load(Relaxed) && chains.bytes() > 0 {
            chains.clear();
        }
        Some(chains)
    }

    /// A walk of `slot`'s claims from `leaf` at `expiry` that comes from the past: a
    /// timer, and with caps a log entry in expiry order that evicts `span` (the block of a
    /// replayed or restored claim, or the path above a removal's gap), before the
    /// decisions of equal expiry or, `Among::Last`, after them.
    pub(super) fn schedule_walk(
        &self,
        slot: Slot,
        (leaf, expiry, span): (SequenceHash, u64, Span),
        among_equal: Among,
        guard: &Writing<'_>,
    ) {
        self.schedule_timer(slot, leaf, expiry);
        if self.capped() {
            self.workers.note_expiry(slot, expiry);
            let _ = self.log(slot, (leaf, expiry, span), among_equal, guard);
        }
    }

    fn removed<W: WorkerKey>(&self, worker: W, data: &KvCacheRemoveData) {
        // Pinned before the lookup, as `stored` is: the slot stays this worker's.
        let guard = self.tree.writing();
        let Some(slot) = self.workers.lookup(worker) else {
            return; // unknown worker: it holds nothing
        };
        // Held to the last change, as by `stored`: a `Stored` of the slot racing this event
        // then checks the parent it stores below before this removes it, or after.
        let mut exact_chains = self.exact_chains(slot);
        let blocks: Vec<SequenceHash> = data
            .block_hashes
            .iter()
            .map(|&hash| self.workers.unmap_engine_hash(slot, hash).unwrap_or(hash))
            .collect();
        let now = self.read_time(self.now());
        // The slot may hold blocks below a removed one if it was stored exactly and exact
        // children of it are left, or if its approximate claim was live: the claims of
        // decisions shrink with depth, so only then may decisions below it still be.
        let leaves_gap = |block: SequenceHash, was: Claim| {
            let exact_below = was.exact
                && exact_chains
                    .as_mut()
                    .map_or(true, |chains| chains.removed(block));
            exact_below || Claim::approx(was.expiry).live(now)
        };
        let (removed, anchors) =
            self.tree
                .remove_entries(slot, blocks.into_iter(), leaves_gap, &guard);
        self.workers.adjust_entries(slot, -(removed as i64));
        // A pinned claim's parent is pinned too, and a release unpins what is left of the
        // request's path: no walk of a decision needs to resume there.
        // The path above the gap goes after the decision of its expiry (the one it was
        // cut from), whose walk takes the blocks below the gap first: deepest first.
        for anchor in anchors.into_iter().filter(|a| a.expiry != super::PIN) {
            let walk = (anchor.leaf, anchor.expiry, Span::Path);
            self.schedule_walk(slot, walk, Among::Last, &guard);
        }
    }
}

/// Whether an event with a parent speaks this index's hashes: its first block's hash is
/// the sequence hash chained from the parent by the block's tokens hash (a replayed dump,
/// or an engine that hashes as Dynamo does). Its parent is then a sequence hash, and the
/// blocks go where it says even if the worker no longer holds the parent.
fn in_our_hashes(parent: SequenceHash, data: &KvCacheStoreData) -> bool {
    data.blocks
        .first()
        .is_some_and(|b| SeqChain::after(Some(parent)).next(b.tokens_hash) == b.block_hash)
}

/// Whether a `Stored` event names two of its blocks alike, or a block as its parent.
fn names_repeat(data: &KvCacheStoreData) -> bool {
    let names = || data.blocks.iter().map(|b| b.block_hash.0);
    if data.parent_hash.is_some_and(|p| names().any(|n| n == p.0)) {
        return true;
    }
    if data.blocks.len() < 2 {
        return false;
    }
    let mut sorted: Vec<u64> = names().collect();
    sorted.sort_unstable();
    sorted.windows(2).any(|w| w[0] == w[1])
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::Relaxed;

    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::events::KvCacheStoredBlockData;
    use crate::{Builder, LocalBlockHash, ManualClock, WorkerId};

    fn engine(clock: &Arc<ManualClock>) -> Core {
        let b = Builder::default()
            .block_size(1)
            .ttl(Duration::from_secs(100))
            .clock(clock.clone())
            .background_sweeper(false);
        Core::new(&b)
    }

    fn record(engine: &Core, worker: WorkerId, blocks: &[u64]) {
        let local: Vec<LocalBlockHash> = blocks.iter().map(|&b| LocalBlockHash(b)).collect();
        let seq = crate::compute_seq_hashes(&local);
        engine.record(worker, &local, &seq);
    }

    /// One `Stored` event of `worker` for `blocks` (tokens hashes) chained after `parent`,
    /// each with the given TTL left (`None`: exact).
    fn store(engine: &Core, worker: WorkerId, parent: Option<u64>, blocks: &[(u64, Option<u64>)]) {
        let mut chain = SeqChain::after(parent.map(SequenceHash));
        let blocks = blocks
            .iter()
            .map(|&(local, left)| KvCacheStoredBlockData {
                block_hash: chain.next(LocalBlockHash(local)),
                tokens_hash: LocalBlockHash(local),
                expires_in: left.map(Duration::from_secs),
            })
            .collect();
        engine.apply_event(&RouterEvent {
            worker_id: worker,
            event_id: 0,
            data: KvCacheEventData::Stored(KvCacheStoreData {
                parent_hash: parent.map(SequenceHash),
                blocks,
            }),
        });
    }

    #[test]
    fn replaying_a_dump_of_decisions_keeps_finds_galloping_and_exact_events_stop_it() {
        let clock = Arc::new(ManualClock::new());
        let original = engine(&clock);
        record(&original, 1, &[1, 2, 3, 4]);
        clock.advance(Duration::from_secs(10));
        record(&original, 2, &[1, 2]);
        record(&original, 1, &[1, 2, 5]);
        let replayed = engine(&clock);
        for event in original.dump::<WorkerId>() {
            replayed.apply_event(&event);
        }
        assert!(replayed.tree.holders_nested.load(Relaxed));
        assert_eq!(replayed.dump::<WorkerId>(), original.dump::<WorkerId>());

        let first = crate::compute_seq_hashes(&[LocalBlockHash(1)])[0].0;
        // A replayed claim on a parent the worker holds, lasting no longer: still nested.
        store(&replayed, 2, Some(first), &[(7, Some(50)), (8, Some(40))]);
        assert!(replayed.tree.holders_nested.load(Relaxed));
        // One outliving the block before it in the event, or the parent: no longer.
        let outliving = engine(&clock);
        record(&outliving, 1, &[1]);
        store(&outliving, 1, Some(first), &[(7, Some(50)), (8, Some(60))]);
        assert!(!outliving.tree.holders_nested.load(Relaxed));
        let above_parent = engine(&clock);
        record(&above_parent, 1, &[1]);
        clock.advance(Duration::from_secs(5));
        store(&above_parent, 1, Some(first), &[(7, Some(100))]);
        assert!(!above_parent.tree.holders_nested.load(Relaxed));
        // A parent the worker does not hold, and an exact claim.
        let orphan = engine(&clock);
        record(&orphan, 1, &[1]);
        store(&orphan, 2, Some(first), &[(7, Some(10))]);
        assert!(!orphan.tree.holders_nested.load(Relaxed));
    }

    /// One `Removed` event of `worker` for the blocks whose tokens hashes chain to
    /// `blocks` from the root (their sequence hashes: this index's own).
    fn remove(engine: &Core, worker: WorkerId, chain: &[u64], at: usize) {
        let local: Vec<LocalBlockHash> = chain.iter().map(|&b| LocalBlockHash(b)).collect();
        let seq = crate::compute_seq_hashes(&local);
        engine.apply_event(&RouterEvent {
            worker_id: worker,
            event_id: 0,
            data: KvCacheEventData::Removed(KvCacheRemoveData {
                block_hashes: vec![seq[at]],
            }),
        });
    }

    fn seq_of(chain: &[u64]) -> Vec<SequenceHash> {
        let local: Vec<LocalBlockHash> = chain.iter().map(|&b| LocalBlockHash(b)).collect();
        crate::compute_seq_hashes(&local)
    }

    fn nested(engine: &Core) -> bool {
        engine.tree.holders_nested.load(Relaxed)
    }

    #[test]
    fn exact_events_keep_finds_galloping_while_each_slot_holds_a_prefix() {
        let clock = Arc::new(ManualClock::new());
        let s = seq_of(&[1, 2, 3, 4])
            .iter()
            .map(|h| h.0)
            .collect::<Vec<_>>();
        // Exact chains from the root and below a block the worker stored exactly, as an
        // engine stores them; evicted leaves first, as an LRU engine evicts.
        let index = engine(&clock);
        store(&index, 1, None, &[(1, None), (2, None)]);
        store(&index, 1, Some(s[1]), &[(3, None), (4, None)]);
        store(&index, 2, None, &[(1, None)]);
        record(&index, 2, &[1, 2]); // a decision, as long as the exact claim below it
        assert!(nested(&index));
        assert!(
            !index.tree.makes_runs.load(Relaxed),
            "exact events stop runs"
        );
        remove(&index, 1, &[1, 2, 3, 4], 3);
        remove(&index, 1, &[1, 2, 3, 4], 2);
        assert!(nested(&index));
        let found = |index: &Core| {
            let mut scores = crate::OverlapScores::<WorkerId>::default();
            let seq = seq_of(&[1, 2, 3, 4]);
            index.find_into(crate::tree::HashedQuery::Seq(&seq), &mut scores);
            let mut v: Vec<(WorkerId, u32)> = scores.scores.into_iter().collect();
            v.sort_unstable();
            v
        };
        assert_eq!(found(&index), [(1, 2), (2, 2)]);

        // A block removed above an exact child the worker still holds: a gap.
        let gap = engine(&clock);
        store(&gap, 1, None, &[(1, None), (2, None), (3, None)]);
        remove(&gap, 1, &[1, 2, 3], 1);
        assert!(!nested(&gap));
        assert_eq!(found(&gap), [(1, 1)], "the walk stops at the gap");
        assert!(gap.workers.exact_chain_bytes() > 0);
        remove(&gap, 1, &[1, 2, 3], 2);
        assert_eq!(gap.workers.exact_chain_bytes(), 0, "emptied once not read");

        // One whose approximate claim was live: decisions may hold blocks below it.
        let live = engine(&clock);
        store(&live, 1, None, &[(1, None)]);
        record(&live, 1, &[1, 2]);
        remove(&live, 1, &[1], 0);
        assert!(!nested(&live));
        // Expired, no decision below it is live either.
        let expired = engine(&clock);
        store(&expired, 1, None, &[(1, None)]);
        record(&expired, 1, &[1, 2]);
        clock.advance(Duration::from_secs(200));
        remove(&expired, 1, &[1], 0);
        assert!(nested(&expired));

        // An exact chain below a block the worker holds only approximately (whose claim
        // ends while the exact ones below stay), or does not hold, or a chain mixing
        // exact and approximate claims: no longer nested.
        let below_approx = engine(&clock);
        record(&below_approx, 1, &[1]);
        store(&below_approx, 1, Some(s[0]), &[(2, None)]);
        assert!(!nested(&below_approx));
        let orphan = engine(&clock);
        store(&orphan, 2, None, &[(1, None)]);
        store(&orphan, 1, Some(s[0]), &[(2, None)]);
        assert!(!nested(&orphan));
        let mixed = engine(&clock);
        store(&mixed, 1, None, &[(1, None), (2, Some(10))]);
        assert!(!nested(&mixed));
    }
}
