//! Reading the whole tree out as plain rows (for dumps and snapshots) and putting entries
//! back (restore). Rows name slots: the core turns them into worker keys and events.

use super::Writing;
use crossbeam_epoch::Guard;

use super::claim::Claim;
use super::node::Kind;
use super::record::BlockAt;
use super::{node, run_alloc, Tree};
use crate::slot::Slot;
use crate::{LocalBlockHash, SequenceHash};

/// One live (block, slot) entry, with what it takes to put it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LiveEntry {
    pub(crate) depth: u32,
    pub(crate) slot: Slot,
    pub(crate) seq: SequenceHash,
    pub(crate) parent: SequenceHash,
    pub(crate) local: LocalBlockHash,
    /// Whether a KV event stored it (no TTL).
    pub(crate) exact: bool,
    /// Nanoseconds left on its approximate claim (0 if none).
    pub(crate) ttl_left: u64,
    /// Its approximate claim's expiry (0 if none).
    pub(crate) expiry: u64,
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
    /// [`live_entries`](Self::live_entries) with the turn of splits and cuts held, so that
    /// no run's blocks move between nodes while the shards are read: every entry that
    /// lives through the scan is in it (a cut places a run's second piece at a key the
    /// scan may have read already, then shortens the run at one it reads later). Cuts and
    /// splits wait for the scan.
    pub(crate) fn live_entries_unmoved(&self, at: ReadAt, guard: &Guard) -> Vec<LiveEntry> {
        let _turn = self.splitting.lock();
        self.live_entries(at, guard)
    }

    /// Every live entry, each once, in no particular order; dead slots' too (the caller
    /// knows which slots are live, and must ask under `guard`, before a dead slot can be
    /// recycled). Reads shard after shard: not a snapshot while callers run.
    pub(crate) fn live_entries(&self, at: ReadAt, guard: &Guard) -> Vec<LiveEntry> {
        let mut rows = Vec::new();
        self.nodes.for_each(|key, node| {
            let run = match node.kind() {
                Kind::Block => None,
                // SAFETY: read from a head under the shard lock, with `guard` pinned.
                Kind::Head(run) => Some(unsafe { run_alloc::run_at(run, guard) }),
                Kind::Tail { .. } => return,
            };
            for holder in node.holders(guard).iter() {
                let c = holder.claim();
                if !c.live(at.live) {
                    continue;
                }
                let row = |depth, seq, parent, local| LiveEntry {
                    depth,
                    slot: holder.slot(),
                    seq: SequenceHash(seq),
                    parent,
                    local: LocalBlockHash(local),
                    exact: c.exact,
                    ttl_left: ttl_left(c, at),
                    expiry: c.expiry,
                };
                let Some(run) = run else {
                    rows.push(row(node.depth(), key, node.parent(), node.local().0));
                    continue;
                };
                // Every block of a run, each below the one before.
                let (seqs, locals) = (run.seqs(), run.locals());
                for i in 0..run.len() {
                    let parent = if i == 0 {
                        node.parent()
                    } else {
                        SequenceHash(seqs[i - 1])
                    };
                    let depth = node.depth().saturating_add(i as u32).min(node::MAX_DEPTH);
                    rows.push(row(depth, seqs[i], parent, locals[i]));
                }
            }
        });
        // A run being split up shows its blocks both in the run and as nodes.
        rows.sort_unstable_by_key(|r| (r.slot, r.seq, r.depth));
        rows.dedup_by_key(|r| (r.slot, r.seq, r.depth));
        rows
    }

    /// Puts one entry back with the given claim (merged into an existing one), at the
    /// parent and depth the row names. Returns whether an entry was added. Finds go on
    /// galloping only if the entry keeps holder sets nested ([`Tree::note_restore_nesting`]).
    pub(crate) fn restore_entry(
        &self,
        slot: Slot,
        row: &LiveEntry,
        claim: Claim,
        guard: &Writing<'_>,
    ) -> bool {
        // Entries come back by sequence hash: every block must have its key.
        self.split_all(guard);
        self.note_restore_nesting(slot, row, claim, guard);
        let block = BlockAt {
            seq: row.seq,
            parent: row.parent,
            local: row.local,
            depth: row.depth,
        };
        self.upsert_block((slot, claim), block, guard)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{compute_seq_hashes, LocalBlockHash};

    /// Restores `(block, depth, slot, claim)` rows of the chain of local hashes 1..=4 into
    /// a fresh tree; returns whether finds may still gallop. `block` 9 names a block whose
    /// sequence hash is not where the chain puts it.
    fn nested_after(rows: &[(usize, u32, Slot, Claim)]) -> bool {
        let tree = Tree::standalone();
        let guard = tree.writing();
        let local: Vec<LocalBlockHash> = (1..=4).map(LocalBlockHash).collect();
        let seq = compute_seq_hashes(&local);
        for &(i, depth, slot, claim) in rows {
            let (block, k) = if i == 9 {
                (SequenceHash(99), 1)
            } else {
                (seq[i], i)
            };
            let row = LiveEntry {
                depth,
                slot,
                seq: block,
                parent: if k == 0 { SequenceHash(0) } else { seq[k - 1] },
                local: local[k],
                exact: claim.exact,
                ttl_left: 0,
                expiry: claim.expiry,
            };
            tree.restore_entry(slot, &row, claim, &guard);
        }
        tree.holders_nested
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    #[test]
    fn restores_keep_finds_galloping_only_while_holder_sets_stay_nested() {
        let a = Claim::approx;
        // Parents held at least as long as their children, by two slots: nested.
        let chain = [
            (0, 0, 1, a(40)),
            (1, 1, 1, a(30)),
            (2, 2, 1, a(30)),
            (3, 3, 1, a(20)),
        ];
        assert!(nested_after(&chain));
        assert!(nested_after(&[
            chain[0],
            (0, 0, 2, a(9)),
            chain[1],
            (1, 1, 2, a(9))
        ]));
        // A child outliving its parent's claim.
        assert!(!nested_after(&[chain[0], (1, 1, 1, a(41))]));
        // The parent held by another slot only.
        assert!(!nested_after(&[chain[0], (1, 1, 2, a(10))]));
        // No parent at all.
        assert!(!nested_after(&[(1, 1, 1, a(10))]));
        // An exact claim.
        assert!(!nested_after(&[(
            0,
            0,
            1,
            Claim {
                exact: true,
                expiry: 0
            }
        )]));
        // A depth that is not the parent's plus one, or a first block one deeper.
        assert!(!nested_after(&[chain[0], (1, 2, 1, a(10))]));
        assert!(!nested_after(&[(1, 0, 1, a(10))]));
        // A block whose sequence hash is not its parent's chained with its local hash.
        assert!(!nested_after(&[chain[0], (9, 1, 1, a(10))]));
        // A second claim merged into an existing one is checked as merged.
        assert!(!nested_after(&[chain[0], chain[1], (1, 1, 1, a(45))]));
        assert!(nested_after(&[chain[0], chain[1], (1, 1, 1, a(35))]));
    }
}
