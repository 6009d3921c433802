//! Dump, snapshot and restore: the live state with each entry's TTL left (as `Stored`
//! events, or as a snapshot), and putting it back so that finds, expiry and eviction go
//! on as they would have in the snapshotted index.

use std::time::Duration;

use crossbeam_epoch as epoch;

use super::Core;
use crate::capacity::Among;
use crate::clock::nanos;
use crate::events::{KvCacheEventData, KvCacheStoreData, KvCacheStoredBlockData, RouterEvent};
use crate::slot::Slot;
use crate::tree::claim::Claim;
use crate::tree::{LiveEntry, Span};
use crate::workers::WriteKind;
use crate::{Snapshot, SnapshotCapacity, SnapshotEntry, SnapshotError, WorkerKey};

impl Core {
    /// Every live entry of a live worker, with its key: parents first (by depth), then by
    /// worker and block. A pinned entry's TTL left is the TTL, or the worker's longest
    /// other TTL left if that is longer.
    fn live_entries<W: WorkerKey>(&self) -> Vec<(W, LiveEntry)> {
        let guard = epoch::pin();
        let rows = self.tree.live_entries(self.read_at(), &guard);
        // A decision taken now outlives the worker's others (with caps its expiry is made
        // later than theirs, by nanoseconds beyond the TTL): so must a pinned block, whose
        // children (decisions recorded below a running request) would outlive it otherwise.
        let mut longest: std::collections::HashMap<Slot, u64> = Default::default();
        for row in rows.iter().filter(|r| r.expiry != super::PIN) {
            let left = longest.entry(row.slot).or_default();
            *left = (*left).max(row.ttl_left);
        }
        // Under the same pin: a slot the tree showed cannot have been recycled yet.
        let mut keyed: Vec<(W, LiveEntry)> = rows
            .into_iter()
            .filter_map(|mut row| {
                if row.expiry == super::PIN {
                    // A running request's block goes out as a decision taken now: handles
                    // do not travel with a dump or a snapshot.
                    let longest = longest.get(&row.slot).copied().unwrap_or(0);
                    row.ttl_left = row.ttl_left.min(self.ttl_nanos).max(longest);
                }
                Some((self.workers.alive::<W>(row.slot)?, row))
            })
            .collect();
        keyed.sort_unstable_by_key(|(worker, row)| (row.depth, *worker, row.seq));
        keyed
    }

    /// Every live entry as a one-block `Stored` event, parents first: exact entries with
    /// no `expires_in`, approximate ones with their TTL left.
    pub(crate) fn dump<W: WorkerKey>(&self) -> Vec<RouterEvent<W>> {
        self.live_entries::<W>()
            .into_iter()
            .zip(0u64..)
            .map(|((worker, row), event_id)| RouterEvent {
                worker_id: worker,
                event_id,
                data: KvCacheEventData::Stored(KvCacheStoreData {
                    parent_hash: (row.depth > 0).then_some(row.parent),
                    blocks: vec![KvCacheStoredBlockData {
                        block_hash: row.seq,
                        tokens_hash: row.local,
                        expires_in: (!row.exact).then(|| Duration::from_nanos(row.ttl_left)),
                    }],
                }),
            })
            .collect()
    }

    pub(crate) fn snapshot<W: WorkerKey>(&self) -> Snapshot {
        Snapshot {
            block_size: self.block_size,
            entries: self
                .live_entries::<W>()
                .into_iter()
                .map(|(worker, r)| SnapshotEntry {
                    worker_id: worker.worker_id(),
                    dp_rank: worker.dp_rank(),
                    block: r.seq,
                    parent: r.parent,
                    local: r.local,
                    depth: r.depth,
                    exact: r.exact,
                    ttl_left: Duration::from_nanos(r.ttl_left),
                })
                .collect(),
            capacities: self.capacities::<W>(),
        }
    }

    /// Every live worker's capacity, if it has one, by key.
    fn capacities<W: WorkerKey>(&self) -> Vec<SnapshotCapacity> {
        let mut rows: Vec<(W, usize)> = (0..self.workers.slot_count())
            .filter_map(|slot| Some((self.workers.alive::<W>(slot)?, self.workers.capacity(slot)?)))
            .collect();
        rows.sort_unstable();
        rows.into_iter()
            .map(|(key, blocks)| SnapshotCapacity {
                worker_id: key.worker_id(),
                dp_rank: key.dp_rank(),
                blocks: blocks as u64,
            })
            .collect()
    }

    /// Sets the snapshot's capacities, then puts every entry back, merged with what the
    /// index holds, each approximate claim expiring `ttl_left` (at most the index's TTL)
    /// from now. Each restored approximate
    /// claim gets a walk of its own (a timer, and with caps a log entry in expiry order,
    /// deeper before shallower among equal expiries), so expiry and eviction go on in the
    /// snapshotted index's order; caps are enforced once everything is back.
    pub(crate) fn restore<W: WorkerKey>(&self, snapshot: &Snapshot) -> Result<(), SnapshotError> {
        if snapshot.block_size != self.block_size {
            return Err(SnapshotError::BlockSizeMismatch {
                snapshot: snapshot.block_size,
                index: self.block_size,
            });
        }
        // Capacities first: the entries' evictions then follow them.
        for c in &snapshot.capacities {
            let blocks = usize::try_from(c.blocks).unwrap_or(usize::MAX);
            self.set_capacity(W::from_parts(c.worker_id, c.dp_rank), Some(blocks));
        }
        let now = self.now();
        let guard = self.tree.writing();
        // Entries added per slot, in order of first appearance (caps are enforced per slot
        // in that order once everything is back).
        let mut added_per_slot: Vec<(Slot, usize)> = Vec::new();
        let mut position: std::collections::HashMap<Slot, usize> = Default::default();
        // Parents first (the snapshot's order): among equal expiries, log inserts put the
        // later-inserted (deeper) claim first.
        let mut entries: Vec<&SnapshotEntry> = snapshot.entries.iter().collect();
        entries.sort_by_key(|e| e.depth);
        for e in entries {
            let ttl_left = self.ttl_left_kept(nanos(e.ttl_left));
            let expiry = if ttl_left == 0 {
                0
            } else {
                crate::tree::claim::expiry_after(now, ttl_left)
            };
            let claim = Claim {
                exact: e.exact,
                expiry,
            };
            if claim.is_none() {
                continue; // nothing live to restore
            }
            let Some(slot) = self.workers.resolve(W::from_parts(e.worker_id, e.dp_rank)) else {
                continue;
            };
            let write = if e.exact {
                WriteKind::Exact
            } else {
                WriteKind::Approx
            };
            if !self.workers.begin_write(slot, write) {
                continue; // removed while restoring
            }
            let row = LiveEntry {
                depth: e.depth,
                slot,
                seq: e.block,
                parent: e.parent,
                local: e.local,
                exact: e.exact,
                ttl_left,
                expiry,
            };
            let held = self.tree.claim_of(e.block, slot, &guard).map(|c| c.expiry);
            let added = self.tree.restore_entry(slot, &row, claim, &guard);
            self.workers.adjust_entries(slot, i64::from(added));
            // A claim the entry already had (or outlasted) gets no walk of its own: the
            // walk of the claim it merged into covers it, in its order (a restored claim
            // walked first at an equal expiry would remove a block that the other claim's
            // deeper blocks still need).
            if expiry != 0 && held.map_or(true, |h| h < expiry) {
                let walk = (e.block, expiry, Span::Block);
                self.schedule_walk(slot, walk, Among::First, &guard);
            }
            self.workers.end_write(slot);
            let at = *position.entry(slot).or_insert_with(|| {
                added_per_slot.push((slot, 0));
                added_per_slot.len() - 1
            });
            added_per_slot[at].1 += usize::from(added);
        }
        for (slot, added) in added_per_slot {
            self.enforce_caps(slot, 2 * added, None, &guard);
        }
        Ok(())
    }
}
