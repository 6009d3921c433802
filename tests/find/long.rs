//! Long queries of local hashes (past the 32 blocks a find chains whole to probe the last
//! block first) gallop from block 0 and chain only as far as they probe: they must answer
//! as the same query of sequence hashes does, and as each worker's depth says, whether the
//! blocks are runs (decisions) or nodes of their own (exact events), whole or cut.

use proptest::prelude::*;

use approx_kv_index::*;

use super::TTL;
use crate::support::events::stored_ours;
use crate::support::index::{chain, manual_index, tokens};
use crate::support::proptest_config::config;

const BS: u32 = 2;

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn long_queries_of_local_hashes_answer_as_sequence_hashes_do(
        len in 33usize..150,
        depths in prop::collection::vec((0usize..=150, any::<bool>()), 1..12),
        queries in prop::collection::vec(0usize..=150, 1..6),
    ) {
        let (index, _clock) = manual_index(BS, TTL);
        let prompt = tokens(0, 2 * len as u32);
        for (w, &(depth, exact)) in depths.iter().enumerate() {
            let depth = depth.min(len);
            if depth == 0 {
                continue;
            }
            let blocks = &prompt[..2 * depth];
            if exact {
                index.apply_event(&stored_ours(w as u64, blocks, BS, None));
            } else {
                index.record(w as u64, Query::tokens(blocks)).unwrap();
            }
        }
        for &k in &queries {
            let k = k.min(len);
            let (local, seq) = chain(&prompt[..2 * k], BS);
            let by_local = index.find(Query::blocks(&local)).scores;
            let by_seq = index.find(Query::sequence(&seq)).scores;
            prop_assert_eq!(&by_local, &by_seq, "{} blocks", k);
            for (w, &(depth, _)) in depths.iter().enumerate() {
                let want = depth.min(len).min(k) as u32;
                prop_assert_eq!(
                    by_local.get(&(w as u64)).copied().unwrap_or(0),
                    want,
                    "worker {}, {} blocks",
                    w,
                    k
                );
            }
        }
    }
}

/// A worker's first 20 blocks are nodes (decisions one block longer each time) and the
/// rest one run: a long query of local hashes gallops over the nodes into the run (a probe
/// inside it reads as a miss), bisects back to its head, goes through it, and searches on
/// past it to the query's end.
#[test]
fn a_long_query_of_local_hashes_goes_through_a_run_it_bisected_into() {
    let (index, _clock) = manual_index(BS, TTL);
    let prompt = tokens(0, 2 * 120);
    for k in 1..=20 {
        index.record(1, Query::tokens(&prompt[..2 * k])).unwrap();
    }
    index.record(1, Query::tokens(&prompt[..2 * 100])).unwrap();
    index.record(2, Query::tokens(&prompt[..2 * 60])).unwrap();
    for k in [33usize, 64, 100, 101, 120] {
        let (local, seq) = chain(&prompt[..2 * k], BS);
        let found = index.find(Query::blocks(&local)).scores;
        assert_eq!(found.get(&1), Some(&(k.min(100) as u32)), "{k} blocks");
        assert_eq!(found.get(&2), Some(&(k.min(60) as u32)), "{k} blocks");
        assert_eq!(found, index.find(Query::sequence(&seq)).scores);
    }
}
