//! Two records racing on one run: a worker joining it while another worker's prompt cuts it.
//!
//! Worker 1's run of four blocks; worker 2's prompt covers it whole, so its record *joins*
//! the run (`Tree::join_run`: under the head's write lock, if the run is live, add the
//! holder on the head); worker 3's prompt leaves it after two blocks, so its record *cuts*
//! it (`Tree::cut`: under the head's write lock, freeze the run and copy its holders; place
//! the second piece's head at block 2's key and make the tail marker the second piece's;
//! replace the head with the first piece's; thaw the pieces). A joiner that finds the run
//! frozen waits for the cut and looks again: then the head is the first piece's, which it
//! joins, and the second piece's head after it. Whatever the interleaving, worker 2 ends up
//! holding all four blocks (both pieces, or the whole run) and worker 1 keeps them.
//!
//! Checked ordering: a join adds its holder only to a *live* run, under the same lock the
//! cut's freeze takes, so the cut either copies the new holder or the join waits for the
//! pieces (`docs/design.md`, "Runs": joins and cuts).
//!
//! Can fail: with `--cfg loom_break="join_frozen"` (the join ignores the frozen state) loom
//! finds the join that lands on the old head after the cut copied its holders and is lost
//! with it: "a join racing a cut was lost".

use super::node::Kind;
use super::run_cut::{race_cut, CUT};
use super::{Claim, Shard};
use crate::tree::run_alloc::run_at;

const OWNER: u32 = 1;
const JOINER: u32 = 2;
const EXPIRY: u64 = 10;

/// The join of the run (or piece) whose head is in `shard`, as `Tree::join_run` does it:
/// the number of blocks joined, or `None` if the run was frozen (waited for: look again).
fn join(shard: &Shard, guard: &crossbeam_epoch::Guard) -> Option<usize> {
    let mut node = shard.write().unwrap();
    let n = node.as_mut().expect("a head is in place");
    let Kind::Head(run) = n.kind() else {
        unreachable!("the shard holds a head");
    };
    // SAFETY: read from a head under its lock, with `guard` pinned.
    let r = unsafe { run_at(run, guard) };
    if !r.is_live() && !cfg!(loom_break = "join_frozen") {
        drop(node);
        r.wait_split();
        return None;
    }
    n.upsert(JOINER, Claim::approx(EXPIRY), guard);
    Some(r.len())
}

/// The slots holding the head in `shard`.
fn holders(shard: &Shard, guard: &crossbeam_epoch::Guard) -> Vec<u32> {
    let node = shard.read().unwrap();
    let n = node.as_ref().expect("a head is in place");
    n.holders(guard).iter().map(|h| h.slot()).collect()
}

#[test]
fn join_races_cut() {
    super::model(|| {
        let shards = race_cut(OWNER, EXPIRY, |shards, guard| {
            let joined = loop {
                if let Some(len) = join(&shards.head, guard) {
                    break len;
                }
            };
            if joined == CUT {
                // The first piece: on to the second's head, in place before the first.
                while join(&shards.at_cut, guard).is_none() {}
            }
        });
        let guard = crossbeam_epoch::pin();
        for shard in [&shards.head, &shards.at_cut] {
            assert_eq!(
                holders(shard, &guard),
                [OWNER, JOINER],
                "a join racing a cut was lost"
            );
        }
    });
}
