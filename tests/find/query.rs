//! The one find and the one record, by [`Query`]: every form of a prompt finds and records

//! the same blocks, rejected records store and share nothing, every kind of sink gets the

//! same answer, and Dynamo's names (`src/compat.rs`) answer as the calls they wrap.

use std::collections::BTreeMap;

use std::sync::Arc;

use std::time::Duration;

use approx_kv_index::*;

const BLOCK: u32 = 4;

/// An index on a clock of its own that stands still: dumps of two indexes compare equal.
fn index() -> ApproxKvIndexer {
    ApproxKvIndexer::builder()
        .block_size(BLOCK)
        .ttl(Duration::from_secs(600))
        .clock(Arc::new(ManualClock::new()))
        .background_sweeper(false)
        .build()
        .unwrap()
}

/// `blocks` full blocks (and two tokens of a partial one) of a prompt family `f`: prompts
/// of one family share their leading blocks.
fn prompt(f: u32, blocks: u32) -> Vec<u32> {
    (0..blocks * BLOCK + 2).map(|t| f * 1_000 + t).collect()
}

fn hashes(tokens: &[u32]) -> (Vec<LocalBlockHash>, Vec<SequenceHash>) {
    let local = compute_block_hash_for_seq(tokens, BLOCK);
    let seq = compute_seq_hashes(&local);
    (local, seq)
}

fn sorted(found: &OverlapScores) -> BTreeMap<u64, (u32, usize)> {
    found
        .scores
        .iter()
        .map(|(&w, &s)| (w, (s, found.tree_sizes[&w])))
        .collect()
}

/// Workers 1..=4 hold ever longer prefixes of family 7; worker 9 another family.
fn loaded() -> ApproxKvIndexer {
    let index = index();
    for w in 1..=4 {
        index
            .record(w, Query::tokens(&prompt(7, w as u32 * 2)))
            .unwrap();
    }
    index.record(9, Query::tokens(&prompt(8, 3))).unwrap();
    index
}

#[test]
fn every_form_of_a_prompt_finds_the_same() {
    let index = loaded();
    for blocks in [0, 1, 2, 5, 8, 12] {
        let tokens = prompt(7, blocks);
        let (local, seq) = hashes(&tokens);
        let by_tokens = sorted(&index.find(Query::tokens(&tokens)));
        assert_eq!(
            by_tokens.len(),
            if blocks == 0 { 0 } else { 4 },
            "{blocks} blocks"
        );
        assert_eq!(sorted(&index.find(Query::blocks(&local))), by_tokens);
        assert_eq!(sorted(&index.find(Query::sequence(&seq))), by_tokens);
        assert_eq!(sorted(&index.find(Query::hashes(&local, &seq))), by_tokens);
        let prompt_hashes = PromptHashes::new(&tokens, BLOCK);
        assert_eq!(
            sorted(&index.find(Query::prompt(&prompt_hashes))),
            by_tokens
        );
        // A find of both forms reads the local hashes only.
        let wrong = vec![SequenceHash(1); seq.len()];
        assert_eq!(
            sorted(&index.find(Query::hashes(&local, &wrong))),
            by_tokens
        );
    }
    let found = index.find(Query::tokens(&prompt(7, 12)));
    let depths: Vec<u32> = (1..=4).map(|w| found.scores[&w]).collect();
    assert_eq!(depths, [2, 4, 6, 8]);
}

#[test]
fn every_form_that_carries_local_hashes_records_the_same() {
    let tokens = prompt(3, 6);
    let (local, seq) = hashes(&tokens);
    let wrong: Vec<SequenceHash> = (0..seq.len() as u64).map(SequenceHash).collect();
    let prompt_hashes = PromptHashes::new(&tokens, BLOCK);
    let forms = [
        Query::tokens(&tokens),
        Query::blocks(&local),
        Query::hashes(&local, &seq),
        Query::hashes(&local, &wrong), // placed by the chain of `local` all the same
        Query::prompt(&prompt_hashes),
        Query::from(&prompt_hashes),
    ];
    let answers: Vec<_> = forms
        .iter()
        .map(|&form| {
            let index = index();
            index.record(5, form).unwrap();
            assert_eq!(index.stats().entries, 6);
            (
                sorted(&index.find(Query::tokens(&tokens))),
                index.dump_events(),
            )
        })
        .collect();
    assert_eq!(answers[0].0[&5], (6, 6));
    for other in &answers[1..] {
        assert_eq!(other, &answers[0]);
    }
}

#[test]
fn a_rejected_record_stores_and_shares_nothing() {
    let index = ApproxKvIndexer::builder()
        .block_size(BLOCK)
        .share_decisions(16)
        .background_sweeper(false)
        .build()
        .unwrap();
    let (local, seq) = hashes(&prompt(1, 3));
    assert_eq!(
        index.record(2, Query::sequence(&seq)),
        Err(RecordError::NoLocalHashes)
    );
    assert_eq!(
        index.record(2, Query::hashes(&local, &seq[..2])),
        Err(RecordError::LengthMismatch { local: 3, seq: 2 })
    );
    assert!(RecordError::NoLocalHashes
        .to_string()
        .contains("local hashes"));
    assert_eq!(index.stats().entries, 0);
    assert!(index.find(Query::blocks(&local)).scores.is_empty());
    assert!(index.outbox().unwrap().is_empty());
    // An empty prompt in any form is a record of nothing, and no error.
    index.record(2, Query::sequence(&[])).unwrap();
    index.record(2, Query::tokens(&[1, 2])).unwrap(); // no full block
    assert_eq!(index.stats().entries, 0);
    assert!(index.outbox().unwrap().is_empty());
    // An accepted record is shared.
    index.record(2, Query::blocks(&local)).unwrap();
    assert_eq!(index.outbox().unwrap().len(), 1);
}

#[test]
fn a_salt_keeps_prompts_apart_in_every_form() {
    let index = index();
    let tokens = prompt(2, 3);
    let lora = HashSalt::new(Some("adapter"), None);
    index
        .record(1, Query::salted_tokens(&tokens, lora))
        .unwrap();
    index.record(2, Query::tokens(&tokens)).unwrap();
    let salted = index.find(Query::salted_tokens(&tokens, lora));
    assert_eq!(sorted(&salted), BTreeMap::from([(1, (3, 3))]));
    let plain = index.find(Query::tokens(&tokens));
    assert_eq!(sorted(&plain), BTreeMap::from([(2, (3, 3))]));
    let other = HashSalt::new(Some("adapter"), Some("tenant"));
    assert!(index
        .find(Query::salted_tokens(&tokens, other))
        .scores
        .is_empty());
    // The salted local hashes a caller computes find the salted record.
    let local = compute_block_hash_for_seq_salted(&tokens, BLOCK, lora);
    assert_eq!(sorted(&index.find(Query::blocks(&local))), sorted(&salted));
    // `Query::tokens` is `salted_tokens` with no salt.
    assert_eq!(
        sorted(&index.find(Query::salted_tokens(&tokens, HashSalt::NONE))),
        sorted(&plain)
    );
}

/// A sink of its own that counts what the find calls, and checks each worker comes once.
#[derive(Default)]
struct Counting {
    wants: bool,
    begins: usize,
    reported: BTreeMap<u64, (u32, usize)>,
}

impl ScoreSink<u64> for Counting {
    fn begin(&mut self) {
        self.begins += 1;
        self.reported.clear();
    }
    fn report(&mut self, worker: u64, score: u32, entries: usize) {
        assert!(score >= 1, "a reported score is at least 1");
        let twice = self.reported.insert(worker, (score, entries));
        assert!(twice.is_none(), "worker {worker} reported twice");
    }
    fn wants_entries(&self) -> bool {
        self.wants
    }
}

#[test]
fn every_sink_gets_the_same_answer() {
    let index = loaded();
    let tokens = prompt(7, 12);
    let want = sorted(&index.find(Query::tokens(&tokens)));
    assert_eq!(want.len(), 4);

    // A reused OverlapScores is cleared first: worker 9's stale score is gone.
    let mut reused = index.find(Query::tokens(&prompt(8, 3)));
    assert!(reused.scores.contains_key(&9));
    index.find_into(Query::tokens(&tokens), &mut reused);
    assert_eq!(sorted(&reused), want);

    let mut called = BTreeMap::new();
    index.find_into(Query::tokens(&tokens), &mut |w, s| {
        assert!(called.insert(w, s).is_none());
    });
    let scores: BTreeMap<u64, u32> = want.iter().map(|(&w, &(s, _))| (w, s)).collect();
    assert_eq!(called, scores);

    for wants in [false, true] {
        let mut own = Counting {
            wants,
            ..Counting::default()
        };
        index.find_into(Query::tokens(&tokens), &mut own);
        index.find_into(Query::tokens(&tokens), &mut own);
        assert_eq!(own.begins, 2);
        let expected: BTreeMap<u64, (u32, usize)> = want
            .iter()
            .map(|(&w, &(s, e))| (w, (s, if wants { e } else { 0 })))
            .collect();
        assert_eq!(own.reported, expected, "wants_entries {wants}");
    }
}

#[test]
fn a_sink_may_call_the_index() {
    let index = loaded();
    let mut inner = Vec::new();
    index.find_into(Query::tokens(&prompt(7, 4)), &mut |w, s| {
        // A find from tokens inside a find from tokens: each hashes into its own buffer.
        let again = index.find(Query::tokens(&prompt(7, s)));
        inner.push((w, s, again.scores[&w]));
        index.record(100 + w, Query::tokens(&prompt(7, 1))).unwrap();
    });
    inner.sort_unstable();
    assert_eq!(inner, [(1, 2, 2), (2, 4, 4), (3, 4, 4), (4, 4, 4)]);
    assert_eq!(index.find(Query::tokens(&prompt(7, 1))).scores.len(), 8);
}

#[test]
fn dynamo_names_answer_as_the_calls_they_wrap() {
    let by_wrappers = index();
    let by_query = index();
    let lora = HashSalt::new(Some("adapter"), None);
    for (w, f, n) in [(1, 1, 3), (2, 1, 5), (3, 2, 2)] {
        let tokens = prompt(f, n);
        let (local, seq) = hashes(&tokens);
        by_wrappers.process_routing_decision_for_request(&tokens, w);
        by_wrappers.process_routing_decision_for_request_salted(&tokens, w + 10, lora);
        by_wrappers
            .process_routing_decision(w + 20, &local, &seq)
            .unwrap();
        by_query.record(w, Query::tokens(&tokens)).unwrap();
        by_query
            .record(w + 10, Query::salted_tokens(&tokens, lora))
            .unwrap();
        by_query
            .record(w + 20, Query::hashes(&local, &seq))
            .unwrap();
    }
    assert_eq!(by_wrappers.dump_events(), by_query.dump_events());
    let (local, seq) = hashes(&prompt(1, 3));
    assert_eq!(
        by_wrappers.process_routing_decision(1, &local, &seq[..1]),
        by_query.record(1, Query::hashes(&local, &seq[..1]))
    );

    let index = by_query;
    for n in [1, 3, 6] {
        let tokens = prompt(1, n);
        let (local, seq) = hashes(&tokens);
        let want = sorted(&index.find(Query::tokens(&tokens)));
        assert!(!want.is_empty());
        assert_eq!(sorted(&index.find_matches_for_request(&tokens)), want);
        assert_eq!(sorted(&index.find_matches(&local)), want);
        assert_eq!(sorted(&index.find_matches_by_sequence(&seq)), want);
        let mut out = OverlapScores::default();
        index.find_matches_for_request_into(&tokens, &mut out);
        assert_eq!(sorted(&out), want);
        index.find_matches_into(&local, &mut out);
        assert_eq!(sorted(&out), want);
        index.find_matches_by_sequence_into(&seq, &mut out);
        assert_eq!(sorted(&out), want);
        let salted = sorted(&index.find(Query::salted_tokens(&tokens, lora)));
        assert!(!salted.is_empty());
        assert_eq!(
            sorted(&index.find_matches_for_request_salted(&tokens, lora)),
            salted
        );
        index.find_matches_for_request_salted_into(&tokens, lora, &mut out);
        assert_eq!(sorted(&out), salted);
        let scores: BTreeMap<u64, u32> = want.iter().map(|(&w, &(s, _))| (w, s)).collect();
        let mut called = BTreeMap::new();
        index.find_matches_with(&local, |w, s| {
            called.insert(w, s);
        });
        assert_eq!(called, scores);
        called.clear();
        index.find_matches_by_sequence_with(&seq, |w, s| {
            called.insert(w, s);
        });
        assert_eq!(called, scores);
    }
}

#[test]
fn queries_work_for_ranked_workers() {
    let index = ApproxKvIndexer::builder()
        .block_size(BLOCK)
        .background_sweeper(false)
        .build_for::<WorkerWithDpRank>()
        .unwrap();
    let tokens = prompt(4, 4);
    let (local, seq) = hashes(&tokens);
    let (a, b) = (WorkerWithDpRank::new(3, 0), WorkerWithDpRank::new(3, 1));
    index.record(a, Query::tokens(&tokens)).unwrap();
    index.record(b, Query::blocks(&local[..2])).unwrap();
    let found = index.find(Query::sequence(&seq));
    assert_eq!((found.scores[&a], found.scores[&b]), (4, 2));
    let mut best = None;
    index.find_into(Query::tokens(&tokens), &mut |w: WorkerWithDpRank, s| {
        best = best.max(Some((s, w.dp_rank)));
    });
    assert_eq!(best, Some((4, 0)));
}

#[test]
fn a_request_begun_from_prompt_hashes_is_the_one_begun_from_tokens() {
    let (tokens, longer) = (prompt(4, 5), prompt(4, 8));
    let answers: Vec<_> = [false, true]
        .into_iter()
        .map(|by_hashes| {
            let index = index();
            index.record(1, Query::tokens(&prompt(4, 3))).unwrap();
            let (hashes, longer_hashes) = (
                PromptHashes::new(&tokens, BLOCK),
                PromptHashes::new(&longer, BLOCK),
            );
            let request = if by_hashes {
                index.begin_request(1, &hashes)
            } else {
                index.begin_request(1, &tokens)
            };
            assert_eq!(request.predicted_blocks(), 3);
            let joined = if by_hashes {
                index.request_output(&request, &longer_hashes)
            } else {
                index.request_output(&request, &longer)
            };
            assert_eq!(joined, 3, "the output's new full blocks join the request");
            let dump = index.dump_events();
            index.finish_request(request);
            (dump, sorted(&index.find(Query::tokens(&longer))))
        })
        .collect();
    assert_eq!(answers[0].1[&1], (8, 8));
    assert_eq!(answers[0], answers[1]);
}
