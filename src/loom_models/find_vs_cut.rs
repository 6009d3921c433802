//! A find racing the cut of the run it reads.
//!
//! A worker's run of four blocks is cut after two (`Tree::cut`): the second piece's head
//! goes in at block 2's key, the run's tail marker is made the second piece's, and last
//! the run's head is replaced by the first piece's. A find of the run's four blocks reads
//! the head: the whole run, or the first piece, after whose end it probes block 2, where
//! the second piece must already be. Whatever the interleaving, it finds all four blocks
//! held. (The first piece's tail marker, placed first, is not read through: a probe of it
//! before the head names its piece reads as a miss, which a find trusts only next to a
//! block or a run's end it found; see `docs/design.md`, "Cuts".)
//!
//! Checked ordering: the second piece is in place before the head names the first.
//!
//! Can fail: with `--cfg loom_break="cut_head_first"` (the head is replaced first) loom
//! finds the find that stops at the first piece's end: "a find racing a cut lost blocks".
//!
//! A find also probes a run's last block at its tail marker (`Tree::probe`), which names
//! the head whose holders it reads. A probe that read the marker before the cut and the
//! head after it finds the first piece there: it reads the marker again, which names the
//! second piece by then (the cut changes the marker before the head), and reads that
//! piece's holders. Whatever the interleaving, the last block reads as held (second model).
//!
//! Checked ordering: the marker changes before the head. Can fail: with
//! `--cfg loom_break="probe_gives_up_on_moved_head"` (the probe takes the marker's key
//! again only for a block, as it once did) loom finds the probe that reads no holder: "a
//! probe of the last block racing a cut read no holder".
//!
//! A find whose query ends inside the run probes its last block first and finds no key
//! there (inside the run) until the cut places the second piece's head; if it then reads
//! the head after the cut, it is at the first piece's end, next to that miss, which it
//! reads again before it settles the worker there (`Tree::search_turn`). Whatever the
//! interleaving, it finds the worker holding every block of the query (third model).
//!
//! Can fail: with `--cfg loom_break="find_trusts_a_stale_miss"` (no second read) loom
//! finds "a find ending inside a run racing its cut lost its last block".

use super::node::Kind;
use super::run_cut::{race_cut, RunShards, CUT, LEN};
use super::Shard;
use crate::tree::run_alloc::run_at;
use crate::SequenceHash;

const WORKER: u32 = 1;
const EXPIRY: u64 = 10;

/// The blocks a find of the run's hashes `seq` counts from the shards of the head and of
/// block `CUT`, as `Tree::find_into` goes through runs.
fn found(
    head: &Shard,
    at_cut: &Shard,
    seq: &[SequenceHash],
    guard: &crossbeam_epoch::Guard,
) -> usize {
    let through = |shard: &Shard, at: usize| {
        let node = shard.read().unwrap();
        match node.as_ref().map(|n| (n.kind(), n.holders(guard))) {
            Some((Kind::Head(run), holders)) if holders[0].slot() == WORKER => {
                // SAFETY: read from a head under its lock, with `guard` pinned.
                unsafe { run_at(run, guard) }.matched(at, LEN, &mut &seq[..])
            }
            _ => 0,
        }
    };
    let matched = through(head, 0);
    if matched == CUT {
        // The first piece's end: block `CUT` is the next run's head, or a true miss.
        return matched + through(at_cut, CUT);
    }
    matched
}

#[test]
fn find_races_cut() {
    super::model(|| {
        race_cut(WORKER, EXPIRY, |shards, guard| {
            let n = found(&shards.head, &shards.at_cut, &shards.seq, guard);
            assert_eq!(n, LEN, "a find racing a cut lost blocks");
        });
    });
}

/// The holders of the last block, probed at the run's tail marker as `Tree::probe` does.
fn last_block_holders(shards: &RunShards, guard: &crossbeam_epoch::Guard) -> Vec<u32> {
    let read = |shard: &Shard| shard.read().unwrap().as_ref().map(|n| n.kind());
    let mut marker = read(&shards.tail);
    loop {
        let Some(Kind::Tail { head, run }) = marker else {
            return Vec::new();
        };
        let shard = if head == shards.seq[0] {
            &shards.head
        } else {
            &shards.at_cut
        };
        {
            let node = shard.read().unwrap();
            if let Some(n) = node.as_ref().filter(|n| n.kind() == Kind::Head(run)) {
                return n.holders(guard).iter().map(|h| h.slot()).collect();
            }
        }
        let again = read(&shards.tail);
        if again == marker || cfg!(loom_break = "probe_gives_up_on_moved_head") {
            return Vec::new();
        }
        marker = again;
    }
}

#[test]
fn last_block_probe_races_cut() {
    super::model(|| {
        race_cut(WORKER, EXPIRY, |shards, guard| {
            assert_eq!(
                last_block_holders(shards, guard),
                [WORKER],
                "a probe of the last block racing a cut read no holder"
            );
        });
    });
}

/// A find of the run's first `CUT + 1` blocks, as `Tree::find_into` makes it: the last
/// block first (block `CUT`, inside the run until the cut places the second piece's head
/// there), then the head; where the head is the first piece's, the find is at its end,
/// next to a last block it read as no key, and reads that block again
/// (`Tree::search_turn`) before it settles the worker there.
fn found_ending_inside(shards: &RunShards, guard: &crossbeam_epoch::Guard) -> usize {
    let n = CUT + 1;
    let held = |shard: &Shard| {
        let node = shard.read().unwrap();
        node.as_ref()
            .is_some_and(|n| n.holders(guard).iter().any(|h| h.slot() == WORKER))
    };
    if held(&shards.at_cut) {
        return n; // the second piece's head: the worker holds the last block
    }
    let matched = {
        let node = shards.head.read().unwrap();
        match node.as_ref().map(|n| n.kind()) {
            // SAFETY: read from a head under its lock, with `guard` pinned.
            Some(Kind::Head(run)) => {
                unsafe { run_at(run, guard) }.matched(0, n, &mut &shards.seq[..n])
            }
            _ => 0,
        }
    };
    if matched < CUT || matched == n {
        return matched;
    }
    // The first piece's end, next to the last block read as no key before.
    if !cfg!(loom_break = "find_trusts_a_stale_miss") && held(&shards.at_cut) {
        return n;
    }
    matched
}

/// Found by an audit: a worker whose entries never changed was reported one block short
/// by a find whose query ended inside a run that another worker's record cut meanwhile.
///
/// Can fail: with `--cfg loom_break="find_trusts_a_stale_miss"` (no second read) loom finds
/// "a find ending inside a run racing its cut lost its last block".
#[test]
fn find_ending_inside_a_run_races_its_cut() {
    super::model(|| {
        race_cut(WORKER, EXPIRY, |shards, guard| {
            assert_eq!(
                found_ending_inside(shards, guard),
                CUT + 1,
                "a find ending inside a run racing its cut lost its last block"
            );
        });
    });
}
