//! The find against a block-by-block oracle on shapes made of several runs, where it
//! decides whole runs from the span their heads record, settles workers at the head of the
//! run that the query's last block ends, and prefetches the probes ahead.

use std::collections::BTreeMap;

use super::*;
use crate::slot::AllAlive;
use crate::tree::claim::Claim;
use crate::tree::node::Kind;
use crate::tree::run_alloc::run_at;
use crate::LocalBlockHash;

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
    let guard = tree.writing();
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

fn find(tree: &Tree, query: HashedQuery<'_>, now: u64) -> BTreeMap<u64, u32> {
    let guard = tree.writing();
    let mut answer = Answer::default();
    tree.find_into(query, now, &AllAlive, &guard, &mut answer);
    answer.0
}

/// Every head records its run's length and last sequence hash, as the run has them.
fn assert_spans(tree: &Tree) -> usize {
    let guard = tree.writing();
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
    let tree = Tree::standalone();
    let guard = tree.writing();
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
            assert_eq!(
                find(&tree, HashedQuery::Seq(q), 50),
                expected,
                "blocks ..{end}"
            );
            // The same query from local hashes, chained as far as the probes need.
            let local_q: Vec<LocalBlockHash> = if query.as_ptr() == seq.as_ptr() {
                local[..end].to_vec()
            } else {
                branch_local[..end].to_vec()
            };
            assert_eq!(find(&tree, HashedQuery::Local(&local_q), 50), expected);
            // Past what anyone holds: the answer stays.
            let mut longer = local_q.clone();
            longer.extend_from_slice(&other_local);
            let longer_seq = crate::compute_seq_hashes(&longer);
            assert_eq!(find(&tree, HashedQuery::Seq(&longer_seq), 50), expected);
        }
    }
    // Expired claims read as absent in every run.
    assert!(find(&tree, HashedQuery::Seq(&seq), 100).is_empty());
}

/// Cuts (a second holder on part of a run) leave heads whose spans match their runs, and
/// finds through the pieces match the oracle.
#[test]
fn cut_runs_keep_their_spans_and_answers() {
    let tree = Tree::standalone();
    let guard = tree.writing();
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
            assert_eq!(
                find(&tree, HashedQuery::Seq(q), 99),
                oracle(&tree, q, 6, 99)
            );
        }
    }
    // Slot 5's claims outlive the others: its whole run from 50 on, the others' are gone.
    let late = find(&tree, HashedQuery::Seq(&seq), 104);
    assert_eq!(late, BTreeMap::from([(5, 63)]));
}

/// One step of building holder sets that need not be nested.
#[derive(Debug, Clone)]
enum Build {
    /// A decision: `slot` records the first `end` blocks until `expiry` (runs while finds
    /// gallop, cuts, joins).
    Record { slot: u32, end: usize, expiry: u64 },
    /// A claim on the single block `at` (as a KV event places one): exact, or until
    /// `expiry`. It may sit above a gap, or outlive the claims before it.
    Block {
        slot: u32,
        at: usize,
        exact: bool,
        expiry: u64,
    },
}

fn build_step(blocks: usize) -> impl proptest::strategy::Strategy<Value = Build> {
    use proptest::prelude::*;
    prop_oneof![
        (0..6u32, 1..=blocks, 1..200u64).prop_map(|(slot, end, expiry)| Build::Record {
            slot,
            end,
            expiry
        }),
        (0..6u32, 0..blocks, any::<bool>(), 1..200u64).prop_map(|(slot, at, exact, expiry)| {
            Build::Block {
                slot,
                at,
                exact,
                expiry,
            }
        }),
    ]
}

/// Raises `slot`'s claim on block `at` of the chain to `claim`, and on each block before it
/// to at least an approximate claim ending at 1 (dead at any `now` of the tests but 0), as
/// KV events can: the slot's claim on a block may outlive its claims on the blocks before.
/// The tree stays closed under prefixes (every block's parent has a node), as the core
/// keeps it. Runs are split up first, so that each block has a key of its own.
fn place(
    tree: &Tree,
    (local, seq): (&[LocalBlockHash], &[SequenceHash]),
    slot: u32,
    at: usize,
    claim: Claim,
) {
    let guard = tree.writing();
    tree.split_all(&guard);
    let blocks = (0..=at).map(|i| super::super::Block {
        local: local[i],
        seq: seq[i],
        claim: if i == at { claim } else { Claim::approx(1) },
    });
    tree.upsert_chain(slot, None, blocks, &guard);
}

/// A sink that, at its first report, places an exact claim of (slot, block) as a `Stored`
/// event racing the find would (a claim the find may have read already turns live), then
/// records the answer as `Answer` does.
struct RaisingSink<'t> {
    tree: &'t Tree,
    chain: (&'t [LocalBlockHash], &'t [SequenceHash]),
    raise: Option<(u32, usize)>,
    answer: Answer,
}

impl ScoreSink<u64> for RaisingSink<'_> {
    fn begin(&mut self) {
        self.answer.begin();
    }
    fn reserve(&mut self, _: usize) {}
    fn report(&mut self, worker: u64, score: u32, entries: usize) {
        if let Some((slot, at)) = self.raise.take() {
            place(self.tree, self.chain, slot, at, Claim::EXACT);
        }
        self.answer.report(worker, score, entries);
    }
}

/// Whatever the holder sets look like, and whatever changes under a find, the galloping
/// find ends (each turn drops a worker or raises its lower bound, else it walks on:
/// design.md, "Why every find ends") and never reports more than a worker holds: each
/// reported `(worker, d)` holds block 0 and block `d - 1`. Where the sets are nested, it
/// answers as the block-by-block oracle; the walk always does. The cases run on a thread of
/// their own, so a find that never ends fails the test (after a generous bound) instead of
/// hanging it.
#[test]
fn finds_end_and_report_only_held_depths_on_any_holder_sets() {
    use proptest::test_runner::{Config, TestRunner};
    let cases = (
        2..24usize,
        proptest::collection::vec(build_step(24), 1..24),
        proptest::option::of(0..6u32),
        0..200u64,
    );
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut runner = TestRunner::new(Config::with_cases(256));
        let result = runner.run(&cases, |(blocks, steps, raise, now)| {
            finds_end_on(blocks, &steps, raise, now)
        });
        let _ = done.send(result.map_err(|e| e.to_string()));
    });
    let result = finished
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("a find never returned");
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// One case of `finds_end_and_report_only_held_depths_on_any_holder_sets`.
fn finds_end_on(
    blocks: usize,
    steps: &[Build],
    raise: Option<u32>,
    now: u64,
) -> Result<(), proptest::test_runner::TestCaseError> {
    let tree = Tree::standalone();
    let guard = tree.writing();
    let (local, seq) = prompt(1, blocks as u64);
    for step in steps {
        match *step {
            Build::Record { slot, end, expiry } => {
                let end = end.min(blocks);
                tree.record(slot, (&local[..end], &seq[..end]), expiry, false, &guard);
            }
            Build::Block {
                slot,
                at,
                exact,
                expiry,
            } => {
                let claim = if exact {
                    Claim::EXACT
                } else {
                    Claim::approx(expiry)
                };
                place(&tree, (&local, &seq), slot, at.min(blocks - 1), claim);
            }
        }
    }
    // Splitting runs up for single blocks leaves the flag as it was: finds gallop.
    proptest::prop_assert!(tree
        .holders_nested
        .load(std::sync::atomic::Ordering::Relaxed));
    // Longest query first: each find may see its query's last block turn live for `raise`.
    for end in (1..=blocks).rev() {
        let q = &seq[..end];
        let before = oracle(&tree, q, 6, now);
        let mut sink = RaisingSink {
            tree: &tree,
            chain: (&local, &seq),
            raise: raise.map(|slot| (slot, end - 1)),
            answer: Answer::default(),
        };
        tree.find_into(HashedQuery::Seq(q), now, &AllAlive, &guard, &mut sink);
        let after = oracle(&tree, q, 6, now);
        for (&worker, &d) in &sink.answer.0 {
            let slot = worker as u32;
            proptest::prop_assert!(d >= 1 && d as usize <= end, "{worker}: {d} of {end}");
            proptest::prop_assert!(tree.holds_live(q[0], slot, now, &guard));
            proptest::prop_assert!(
                tree.holds_live(q[d as usize - 1], slot, now, &guard),
                "{worker} reported {d}, block {} not held",
                d - 1
            );
        }
        // Nothing changed under the find and every slot holds a prefix of the query:
        // exactly the oracle.
        let everyone_nested = (0..6u32).all(|s| {
            let held: Vec<bool> = q
                .iter()
                .map(|b| tree.holds_live(*b, s, now, &guard))
                .collect();
            held.windows(2).all(|w| w[0] || !w[1])
        });
        if before == after && everyone_nested {
            proptest::prop_assert_eq!(&sink.answer.0, &after);
        }
        // The block-by-block walk matches the oracle whatever the sets.
        tree.holders_nested
            .store(false, std::sync::atomic::Ordering::Relaxed);
        proptest::prop_assert_eq!(find(&tree, HashedQuery::Seq(q), now), after.clone());
        let local_q = &local[..end];
        proptest::prop_assert_eq!(find(&tree, HashedQuery::Local(local_q), now), after);
        tree.holders_nested
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(())
}
