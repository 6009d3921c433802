//! A galloping find racing a refresh that raises, in place, a claim the find already read.
//!
//! This model runs the real tree (`src/tree/find.rs` over the real map). The query has
//! two blocks, each held by two workers, so each node keeps an array. `REFRESHED`'s claim
//! on the last block has expired at the find's `now` while its claim on the first is live;
//! `WHOLE` holds both. One thread finds; the other records the query for `REFRESHED` again,
//! which raises its claim on the last block in place (an atomic max under the shard read
//! lock: `Node::update_claim`). The find reads the last block's holders once to settle the
//! workers that hold it and keeps the others, then reads the same cells again where its
//! search ends. A refresh between those two reads makes the second keep the worker that
//! the first said misses the block: the search's turn then drops nobody.
//!
//! Checked property: every find ends, and answers a state the tree was in: `WHOLE` holds
//! both blocks, `REFRESHED` one or two (before or after the refresh). Each turn of the
//! search drops a worker or raises its lower bound, else the find goes on block by block
//! (`docs/design.md`, "Why every find ends").
//!
//! Can fail: with `--cfg loom_break="search_unbounded"` (a turn that drops nobody starts
//! the next turn at the same block) the find spins for good in the
//! interleaving where the refresh lands between the two reads; loom reports that the model
//! "exceeded maximum number of branches".

use loom::sync::Arc;
use loom::thread;

use crate::scores::OverlapScores;
use crate::slot::AllAlive;
use crate::tree::claim::Claim;
use crate::tree::{Block, HashedQuery, Tree};
use crate::LocalBlockHash;

const REFRESHED: u32 = 1;
const WHOLE: u32 = 2;
/// When the find reads claims: `REFRESHED`'s claim on the last block ended before it.
const NOW: u64 = 10;
const ENDED: u64 = 5;
const LIVE: u64 = 100;

#[test]
fn find_races_an_in_place_refresh_of_a_claim_it_read() {
    // Bound 2, whatever `LOOM_MAX_PREEMPTIONS` says: at bound 1 loom's bounded search does
    // not schedule the refresh between the find's second and third reads of the cell (32
    // iterations, with or without the break); at 2 it does.
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let _ = crossbeam_epoch::default_collector();
        let local = [LocalBlockHash(1), LocalBlockHash(2)];
        let seq = crate::compute_seq_hashes(&local);
        let seq = [seq[0], seq[1]];
        let blocks = move |first: u64, last: u64| {
            [(0, first), (1, last)].map(|(i, expiry)| Block {
                local: local[i],
                seq: seq[i],
                claim: Claim::approx(expiry),
            })
        };
        let tree = Arc::new(Tree::standalone());
        {
            let guard = tree.writing();
            tree.upsert_chain(REFRESHED, None, blocks(LIVE, ENDED).into_iter(), &guard);
            tree.upsert_chain(WHOLE, None, blocks(LIVE, LIVE).into_iter(), &guard);
        }
        let refresher = {
            let tree = Arc::clone(&tree);
            thread::spawn(move || {
                let guard = tree.writing();
                tree.upsert_chain(REFRESHED, None, blocks(LIVE, LIVE).into_iter(), &guard);
            })
        };
        let mut found = OverlapScores::<u64>::default();
        {
            let guard = crossbeam_epoch::pin();
            tree.find_into(HashedQuery::Seq(&seq), NOW, &AllAlive, &guard, &mut found);
        }
        refresher.join().unwrap();
        assert_eq!(found.scores.get(&u64::from(WHOLE)), Some(&2));
        let refreshed = found.scores.get(&u64::from(REFRESHED));
        assert!(matches!(refreshed, Some(1 | 2)), "{refreshed:?}");
    });
}
