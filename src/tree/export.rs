//! Reading the whole tree out (dump, snapshot) and putting entries back (restore).

use crossbeam_epoch::Guard;

use super::claim::Claim;
use super::Tree;
use crate::events::{KvCacheEventData, KvCacheStoreData, KvCacheStoredBlockData, RouterEvent};
use crate::slot::{Slot, SlotOwners};
use crate::{LocalBlockHash, SequenceHash, WorkerKey};

/// One live (block, worker) entry, with what it takes to put it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LiveEntry<W> {
    pub(crate) depth: u32,
    pub(crate) worker: W,
    pub(crate) seq: SequenceHash,
    pub(crate) parent: SequenceHash,
    pub(crate) local: LocalBlockHash,
    /// Whether a KV event stored it (no TTL).
    pub(crate) exact: bool,
    /// Nanoseconds left on its approximate claim (0 if none).
    pub(crate) ttl_left: u64,
}

/// The instant a read of the whole tree is taken at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadAt {
    /// Entries are live if their claim is live at this time (0 when the TTL means never).
    pub(crate) live: u64,
    /// The clock, which TTLs left are counted from.
    pub(crate) clock: u64,
}

/// The nanoseconds left on `c`'s approximate claim at `at`: 0 if it has none live then,
/// at least 1 if it has. With a TTL that means never (`at.live` is 0), a claim handed out
/// more than 2^62 ns before the clock reading is still live; it keeps 1 ns left rather
/// than none, so that a restore or a replay of the dump puts it back.
fn ttl_left(c: Claim, at: ReadAt) -> u64 {
    if c.expiry > at.live {
        c.expiry.saturating_sub(at.clock).max(1)
    } else {
        0
    }
}

impl Tree {
    /// Every live entry of a live worker, parents first (by depth), then by worker and
    /// block. Reads shard after shard: not a snapshot while callers run.
    pub(crate) fn live_entries<W: WorkerKey>(
        &self,
        at: ReadAt,
        workers: &impl SlotOwners,
        guard: &Guard,
    ) -> Vec<LiveEntry<W>> {
        let mut rows = Vec::new();
        for node in self.nodes.iter() {
            for holder in node.holders(guard).iter() {
                let c = holder.claim();
                if !c.live(at.live) {
                    continue;
                }
                if let Some(worker) = workers.alive::<W>(holder.slot()) {
                    rows.push(LiveEntry {
                        depth: node.depth(),
                        worker,
                        seq: SequenceHash(*node.key()),
                        parent: node.parent,
                        local: node.local,
                        exact: c.exact,
                        ttl_left: ttl_left(c, at),
                    });
                }
            }
        }
        rows.sort_unstable_by_key(|r| (r.depth, r.worker, r.seq));
        rows
    }

    /// Every live entry as a one-block `Stored` event, parents first: exact entries with
    /// no `expires_in`, approximate ones with their TTL left.
    pub(crate) fn dump<W: WorkerKey>(
        &self,
        at: ReadAt,
        workers: &impl SlotOwners,
        guard: &Guard,
    ) -> Vec<RouterEvent<W>> {
        let rows = self.live_entries::<W>(at, workers, guard);
        rows.into_iter()
            .zip(0u64..)
            .map(|(row, event_id)| RouterEvent {
                worker_id: row.worker,
                event_id,
                data: KvCacheEventData::Stored(KvCacheStoreData {
                    parent_hash: (row.depth > 0).then_some(row.parent),
                    blocks: vec![KvCacheStoredBlockData {
                        block_hash: row.seq,
                        tokens_hash: row.local,
                        expires_in: (!row.exact)
                            .then(|| std::time::Duration::from_nanos(row.ttl_left)),
                    }],
                }),
            })
            .collect()
    }

    /// Puts one entry back with the given claim (merged into an existing one), at the
    /// parent and depth the row names. Returns whether an entry was added.
    pub(crate) fn restore_entry(
        &self,
        slot: Slot,
        row: &LiveEntry<impl Sized>,
        claim: Claim,
        guard: &Guard,
    ) -> bool {
        self.not_nested();
        self.upsert_locked(
            slot, row.seq, row.parent, row.local, row.depth, claim, guard,
        )
    }
}
