//! Every find form agrees with `find_matches` (past 64 workers, with expired and removed
//! workers, galloping and walking), `OverlapScores::best`, every form counting as one find,
//! and a find that ends when a claim it already read is refreshed under it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::*;

use super::TTL;
use crate::support::events::{block, stored, stored_ours};
use crate::support::index::{chain, manual_index, score, tokens};

/// Checks that every find form gives `find_matches`' answer for `query` (tokens), and
/// returns it. src/compat.rs: `find_matches_by_sequence`: "Given `compute_seq_hashes(local)`,
/// the answer is `find_matches(local)`'s"; `find_matches_with`: "`visit(worker, score)` is
/// called once for each worker that probably holds a leading run of the query (the workers
/// and scores `find_matches` reports ...)"; the `_into` forms: "cleared first, then filled".
fn all_forms(index: &ApproxKvIndexer, query: &[u32], block_size: u32) -> OverlapScores {
    let (local, seq) = chain(query, block_size);
    let want = index.find_matches(&local);
    assert!(want
        .scores
        .values()
        .all(|&s| s >= 1 && s as usize <= local.len()));
    let scored: HashSet<&WorkerId> = want.scores.keys().collect();
    let sized: HashSet<&WorkerId> = want.tree_sizes.keys().collect();
    assert_eq!(scored, sized);

    let stale = || {
        let mut out = OverlapScores::default();
        out.scores.insert(123_456, 9);
        out.tree_sizes.insert(123_456, 9);
        out
    };
    assert_eq!(index.find_matches_for_request(query), want);
    let mut out = stale();
    index.find_matches_for_request_into(query, &mut out);
    assert_eq!(out, want);
    let mut out = stale();
    index.find_matches_into(&local, &mut out);
    assert_eq!(out, want);
    assert_eq!(index.find_matches_by_sequence(&seq), want);
    let mut out = stale();
    index.find_matches_by_sequence_into(&seq, &mut out);
    assert_eq!(out, want);
    let mut visited: HashMap<WorkerId, u32, FxBuildHasher> = HashMap::default();
    index.find_matches_with(&local, |w, s| {
        assert!(visited.insert(w, s).is_none(), "{w} visited twice");
    });
    assert_eq!(visited, want.scores);
    visited.clear();
    index.find_matches_by_sequence_with(&seq, |w, s| {
        assert!(visited.insert(w, s).is_none(), "{w} visited twice");
    });
    assert_eq!(visited, want.scores);
    want
}

/// The find forms agree with `find_matches` (see `all_forms`), with more than 64 workers on
/// the first block, expired and removed workers, before and after a KV event (which
/// switches finds from galloping to walking: design.md, "Nested holder sets"); and the
/// answers are the right ones.
#[test]
fn every_find_form_agrees_with_find_matches() {
    let (index, clock) = manual_index(2, TTL);
    let prompt = tokens(0, 40); // 20 blocks
    let held = |w: u64| 1 + (w % 20) as u32;
    for w in 0..40u64 {
        index.process_routing_decision_for_request(&prompt[..2 * held(w) as usize], w);
    }
    clock.advance(TTL / 2);
    for w in 40..80u64 {
        index.process_routing_decision_for_request(&prompt[..2 * held(w) as usize], w);
    }
    for w in (0..40u64).filter(|w| w % 3 == 0) {
        index.process_routing_decision_for_request(&prompt, w); // the whole prompt
    }
    clock.advance(TTL / 2); // the other decisions of workers 0..40 expire
    index.remove_worker(45);
    index.remove_worker(46);
    let expected = |w: u64, k: u32| -> Option<u32> {
        match w {
            45 | 46 => None,
            0..=39 if w % 3 == 0 => Some(20.min(k)),
            0..=39 => None,
            _ => Some(held(w).min(k)),
        }
        .filter(|&s| s > 0) // workers with none are absent
    };
    let mut divergent = prompt[..10].to_vec(); // 5 blocks in common
    divergent.extend([999; 10]);
    for walk in [false, true] {
        if walk {
            // Worker 500 stores the first 3 blocks exactly; worker 501 the second block
            // alone (named by our hashes), so it holds no leading run of any query.
            index.apply_event(&stored_ours(500, &prompt[..6], 2, None));
            let (local, seq) = chain(&prompt, 2);
            index.apply_event(&stored(
                501,
                Some(seq[0]),
                vec![block(seq[1], local[1], None)],
            ));
            assert_eq!(index.stats().rejected_events, 0);
        }
        for k in [0u32, 1, 2, 7, 20] {
            let found = all_forms(&index, &prompt[..2 * k as usize], 2);
            for w in 0..80u64 {
                assert_eq!(
                    found.scores.get(&w).copied(),
                    expected(w, k),
                    "worker {w}, {k}"
                );
            }
            assert_eq!(
                found.scores.get(&500).copied(),
                walk.then_some(3.min(k)).filter(|&s| s > 0)
            );
            assert!(!found.scores.contains_key(&501));
        }
        let found = all_forms(&index, &divergent, 2);
        for w in 0..80u64 {
            assert_eq!(found.scores.get(&w).copied(), expected(w, 5), "worker {w}");
        }
    }
}

/// src/scores.rs, `OverlapScores::best`: "The worker with the highest score (the lowest
/// key among equals), if any."
#[test]
fn best_is_the_highest_score_and_the_lowest_key_among_equals() {
    let (index, _c) = manual_index(1, TTL);
    assert_eq!(index.find_matches_for_request(&[1, 2]).best(), None);
    for w in [9u64, 5, 3, 12] {
        let len = if w == 12 { 1 } else { 2 };
        index.process_routing_decision_for_request(&[1, 2][..len], w);
    }
    index.process_routing_decision_for_request(&[1, 2, 3], 8);
    assert_eq!(index.find_matches_for_request(&[1, 2]).best(), Some((3, 2)));
    assert_eq!(
        index.find_matches_for_request(&[1, 2, 3]).best(),
        Some((8, 3))
    );
    assert_eq!(index.find_matches_for_request(&[1]).best(), Some((3, 1)));
}

/// src/stats.rs, `IndexStats::finds`: "Finds answered since creation" (every find form is
/// a find); `records`: "Routing decisions recorded since creation".
#[test]
fn every_find_form_counts_as_one_find() {
    let (index, _c) = manual_index(1, TTL);
    index.process_routing_decision_for_request(&[1, 2], 1);
    let (local, seq) = chain(&[1, 2], 1);
    index.process_routing_decision(2, &local, &seq).unwrap();
    assert_eq!(index.stats().records, 2);
    let salt = HashSalt::new(Some("lora"), None);
    let fresh = OverlapScores::default;
    let forms: [(&str, &dyn Fn()); 10] = [
        ("for_request", &|| {
            drop(index.find_matches_for_request(&[1, 2]))
        }),
        ("for_request_salted", &|| {
            drop(index.find_matches_for_request_salted(&[1, 2], salt))
        }),
        ("for_request_into", &|| {
            index.find_matches_for_request_into(&[1, 2], &mut fresh())
        }),
        ("for_request_salted_into", &|| {
            index.find_matches_for_request_salted_into(&[1, 2], salt, &mut fresh())
        }),
        ("find_matches", &|| drop(index.find_matches(&local))),
        ("into", &|| index.find_matches_into(&local, &mut fresh())),
        ("by_sequence", &|| {
            drop(index.find_matches_by_sequence(&seq))
        }),
        ("by_sequence_into", &|| {
            index.find_matches_by_sequence_into(&seq, &mut fresh())
        }),
        ("with", &|| index.find_matches_with(&local, |_, _| {})),
        ("by_sequence_with", &|| {
            index.find_matches_by_sequence_with(&seq, |_, _| {})
        }),
    ];
    for (name, form) in forms {
        let before = index.stats().finds;
        form();
        assert_eq!(index.stats().finds, before + 1, "{name}");
    }
    assert_eq!(index.stats().records, 2, "finds record nothing");
}

/// A find ends, and reports a state the index was in, when a claim it already read changes
/// under it. docs/design.md, "Why every find ends": "each turn of the search drops a worker
/// or raises its lower bound, or the find goes on block by block".
///
/// Worker 1's claim on the query's last block has expired (it is still in the tree: no
/// sweep ran) while its claim on the blocks before is live; worker 2 holds the whole query.
/// The find's callback, called for worker 2 while worker 1 is still being searched, records
/// the query for worker 1, which raises worker 1's claim on the last block in place. The
/// galloping search once read that block's holders a second time, found worker 1 there and
/// looped for ever (found on 0cade0c by four recorders and two finders racing).
#[test]
fn a_find_ends_when_a_claim_it_read_is_refreshed_meanwhile() {
    let (index, clock) = manual_index(2, TTL);
    let index = Arc::new(index);
    let prompt = tokens(0, 8); // 4 blocks
    let (local, _) = chain(&prompt, 2);
    index.process_routing_decision_for_request(&prompt, 1);
    index.process_routing_decision_for_request(&prompt, 2);
    clock.advance(TTL / 2);
    index.process_routing_decision_for_request(&prompt[..6], 1);
    clock.advance(Duration::from_secs(1));
    index.process_routing_decision_for_request(&prompt, 2);
    clock.advance(TTL / 2); // worker 1's claim on block 3 expired, its others live
    assert_eq!(score(&index, &prompt, 1u64), Some(3));
    assert_eq!(score(&index, &prompt, 2u64), Some(4));

    let (done, finished) = std::sync::mpsc::channel();
    let finder = {
        let (index, prompt) = (Arc::clone(&index), prompt.clone());
        std::thread::spawn(move || {
            let mut seen = HashMap::new();
            index.find_matches_with(&local, |worker, score| {
                if worker == 2 {
                    index.process_routing_decision_for_request(&prompt, 1);
                }
                seen.insert(worker, score);
            });
            done.send(seen).unwrap();
        })
    };
    // Generous: the find takes microseconds; a find that loops never sends.
    let seen = finished
        .recv_timeout(Duration::from_secs(30))
        .expect("the find never returned");
    finder.join().unwrap();
    assert_eq!(seen.get(&2), Some(&4));
    // Worker 1 is reported as it was before the refresh or after it, nothing else.
    assert!(matches!(seen.get(&1), Some(3 | 4)), "{seen:?}");
    assert_eq!(score(&index, &prompt, 1u64), Some(4));
}

/// src/stats.rs, `IndexStats::records` counts decisions of at least one full block (a
/// `begin_request` is one); `workers` counts every key registered: by a decision of a full
/// block, a capacity, a request (even of no full block) or a `Stored` event.
#[test]
fn records_and_workers_count_what_their_docs_say() {
    let (index, _c) = manual_index(4, TTL);
    index.record(1, Query::tokens(&[1, 2])).unwrap();
    assert_eq!((index.stats().records, index.stats().workers), (0, 0));
    index.record(1, Query::tokens(&[1, 2, 3, 4])).unwrap();
    assert_eq!((index.stats().records, index.stats().workers), (1, 1));
    let request = index.begin_request(2, &[1, 2]);
    assert_eq!((index.stats().records, index.stats().workers), (1, 2));
    index.set_worker_capacity(3, Some(10));
    assert_eq!(index.stats().workers, 3);
    index.finish_request(request);
    let request = index.begin_request(4, &[1, 2, 3, 4]);
    assert_eq!((index.stats().records, index.stats().workers), (2, 4));
    drop(request);
    index.remove_worker(3);
    assert_eq!(index.stats().workers, 3);
}
