//! The find against a block-by-block oracle on shapes made of several runs, where it
//! decides whole runs from the span their heads record, settles workers at the head of the
//! run that the query's last block ends, and prefetches the probes ahead.

use std::collections::BTreeMap;

use super::*;
use crate::tree::node::Kind;
use crate::tree::run::run_at;

/// Every slot is a live worker of its own number, with no entries counted.
struct AllAlive;

impl SlotOwners for AllAlive {
    fn alive<W: WorkerKey>(&self, slot: Slot) -> Option<W> {
        Some(W::from_parts(u64::from(slot), 0))
    }
    fn alive_with_entries<W: WorkerKey>(&self, slot: Slot) -> Option<(W, usize)> {
        Some((W::from_parts(u64::from(slot), 0), 0))
    }
}

/// A find's answer, worker by worker.
#[derive(Default)]
struct Answer(BTreeMap<u64, u32>);

impl ScoreSink<u64> for Answer {
    fn begin(&mut self) {
        self.0.clear();
    }
    fn reserve(&mut self, _: usize) {}
    fn report(&mut self, worker: u64, score: u32, _: usize) {
        assert!(self.0.insert(worker, score).is_none(), "{worker} twice");
    }
}

/// The blocks of a prompt: `len` blocks whose local hashes are `base + 0..len`.
fn prompt(base: u64, len: u64) -> (Vec<LocalBlockHash>, Vec<SequenceHash>) {
    let local: Vec<LocalBlockHash> = (base..base + len).map(LocalBlockHash).collect();
    let seq = crate::compute_seq_hashes(&local);
    (local, seq)
}

/// What a find must answer, block by block: each slot's leading blocks held live.
fn oracle(tree: &Tree, seq: &[SequenceHash], slots: u32, now: u64) -> BTreeMap<u64, u32> {
    let guard = crossbeam_epoch::pin();
    (0..slots)
        .filter_map(|slot| {
            let held = seq
                .iter()
                .take_while(|s| tree.holds_live(**s, slot, now, &guard))
                .count() as u32;
            (held > 0).then_some((u64::from(slot), held))
        })
        .collect()
}

fn find(tree: &Tree, query: Query<'_>, now: u64) -> BTreeMap<u64, u32> {
    let guard = crossbeam_epoch::pin();
    let mut answer = Answer::default();
    tree.find_into(query, now, &AllAlive, &guard, &mut answer);
    answer.0
}

/// Every head records its run's length and last sequence hash, as the run has them.
fn assert_spans(tree: &Tree) -> usize {
    let guard = crossbeam_epoch::pin();
    let mut heads = 0;
    tree.nodes.for_each(|_, node| {
        if let Kind::Head(run) = node.kind() {
            // SAFETY: read under the shard's read lock (`for_each`), with `guard` pinned:
            // the head and so its run are in the map.
            let r = unsafe { run_at(run, &guard) };
            let span = node.run_span();
            assert_eq!((span.len, span.tail), (r.len(), r.tail()));
            heads += 1;
        }
    });
    heads
}

/// Workers holding nested prefixes of one prompt: runs of shrinking holder sets, single
/// blocks between some of them, and queries that end at, inside and past each run.
#[test]
fn finds_across_runs_match_the_oracle() {
    let tree = Tree::new();
    let guard = crossbeam_epoch::pin();
    let (local, seq) = prompt(1, 40);
    // Slot k holds the first `ends[k]` blocks: the holder set shrinks at blocks 4, 9, 10,
    // 25 and 26 (each decision's new blocks: a block, then a run of the rest), and slot 6
    // alone holds a different branch from block 9 on.
    let ends = [4, 9, 10, 25, 26, 40];
    for (slot, &end) in ends.iter().enumerate() {
        tree.record(slot as u32, (&local[..end], &seq[..end]), 100, true, &guard);
    }
    let (mut branch_local, _) = prompt(1000, 20);
    branch_local.splice(0..0, local[..9].iter().copied());
    let branch_seq = crate::compute_seq_hashes(&branch_local);
    tree.record(6, (&branch_local, &branch_seq), 100, true, &guard);
    assert!(
        assert_spans(&tree) >= 4,
        "runs at every stretch of two blocks or more"
    );
    let (other_local, _) = prompt(5000, 10);
    for query in [&seq[..], &branch_seq[..]] {
        for end in 1..=query.len() {
            let q = &query[..end];
            let expected = oracle(&tree, q, 8, 50);
            assert_eq!(find(&tree, Query::Seq(q), 50), expected, "blocks ..{end}");
            // The same query from local hashes, chained as far as the probes need.
            let local_q: Vec<LocalBlockHash> = if query.as_ptr() == seq.as_ptr() {
                local[..end].to_vec()
            } else {
                branch_local[..end].to_vec()
            };
            assert_eq!(find(&tree, Query::Local(&local_q), 50), expected);
            // Past what anyone holds: the answer stays.
            let mut longer = local_q.clone();
            longer.extend_from_slice(&other_local);
            let longer_seq = crate::compute_seq_hashes(&longer);
            assert_eq!(find(&tree, Query::Seq(&longer_seq), 50), expected);
        }
    }
    // Expired claims read as absent in every run.
    assert!(find(&tree, Query::Seq(&seq), 100).is_empty());
}

/// Cuts (a second holder on part of a run) leave heads whose spans match their runs, and
/// finds through the pieces match the oracle.
#[test]
fn cut_runs_keep_their_spans_and_answers() {
    let tree = Tree::new();
    let guard = crossbeam_epoch::pin();
    let (local, seq) = prompt(7, 64);
    tree.record(0, (&local, &seq), 100, true, &guard);
    assert_eq!(assert_spans(&tree), 1);
    for (slot, end) in [(1, 50), (2, 13), (3, 31), (4, 2), (5, 63)] {
        tree.record(
            slot,
            (&local[..end], &seq[..end]),
            100 + u64::from(slot),
            true,
            &guard,
        );
        assert_spans(&tree);
        for n in [1, 2, 12, 13, 14, 30, 31, 32, 49, 50, 51, 62, 63, 64] {
            let q = &seq[..n];
            assert_eq!(find(&tree, Query::Seq(q), 99), oracle(&tree, q, 6, 99));
        }
    }
    // Slot 5's claims outlive the others: its whole run from 50 on, the others' are gone.
    let late = find(&tree, Query::Seq(&seq), 104);
    assert_eq!(late, BTreeMap::from([(5, 63)]));
}
