//! Pinned blocks: what a running request holds, and what its release leaves.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use approx_kv_index::*;

use crate::support::index::{capped_on, index_with, manual_index, ranked_index, tokens};

const TTL: Duration = Duration::from_secs(60);

fn score<W: WorkerKey>(index: &ApproxKvIndexer<W>, prompt: &[u32], worker: W) -> u32 {
    let found = index.find(Query::tokens(prompt));
    found.scores.get(&worker).copied().unwrap_or(0)
}

#[test]
fn a_running_request_never_expires_and_its_release_starts_one_ttl() {
    let (index, clock) = manual_index(2, TTL);
    let prompt = tokens(0, 8); // 4 blocks
    let request = index.begin_request(1, &prompt);
    assert_eq!((request.predicted_blocks(), request.blocks()), (0, 4));
    assert_eq!(request.worker(), 1);
    clock.advance(TTL * 10);
    index.sweep_expired();
    assert_eq!(score(&index, &prompt, 1), 4, "pinned: no TTL reaches it");
    index.finish_request(request);
    assert_eq!(
        score(&index, &prompt, 1),
        4,
        "released: cached for one more TTL"
    );
    clock.advance(TTL - Duration::from_nanos(1));
    assert_eq!(score(&index, &prompt, 1), 4);
    clock.advance(Duration::from_nanos(1));
    assert_eq!(score(&index, &prompt, 1), 0);
    index.sweep_expired();
    assert_eq!(index.stats().entries, 0, "the release's timer frees them");
}

#[test]
fn dropping_the_handle_releases_as_finishing_does() {
    let (index, clock) = manual_index(1, TTL);
    {
        let _request = index.begin_request(1, &[1, 2, 3]);
        clock.advance(TTL * 2);
        assert_eq!(score(&index, &[1, 2, 3], 1), 3);
    }
    clock.advance(TTL);
    assert_eq!(score(&index, &[1, 2, 3], 1), 0);
}

#[test]
fn predicted_blocks_is_the_depth_before_the_decision() {
    let (index, _clock) = manual_index(1, TTL);
    index.record(5, Query::tokens(&[1, 2])).unwrap();
    index.record(6, Query::tokens(&[1, 2, 3])).unwrap();
    let request = index.begin_request(5, &[1, 2, 3, 4]);
    assert_eq!(request.predicted_blocks(), 2);
    assert_eq!(score(&index, &[1, 2, 3, 4], 5), 4, "recorded by the begin");
    let again = index.begin_request(
        5,
        Query::blocks(&compute_block_hash_for_seq(&[1, 2, 3, 4], 1)),
    );
    assert_eq!(again.predicted_blocks(), 4, "the first request's blocks");
}

/// The begin's prediction follows its worker alone: workers holding more of the prompt,
/// or none of it, change nothing, whether finds gallop or (after an exact event) walk.
#[test]
fn predicted_blocks_is_the_workers_own_depth_among_many_holders() {
    for exact_event in [false, true] {
        let (index, _clock) = manual_index(1, TTL);
        let prompt = tokens(0, 12);
        for (worker, held) in [(1, 12), (2, 3), (3, 7), (4, 12)] {
            index
                .record(worker, Query::tokens(&prompt[..held]))
                .unwrap();
        }
        index.record(5, Query::tokens(&[900, 901])).unwrap(); // none of this prompt
        if exact_event {
            index.apply_event(&crate::support::events::stored_ours(
                6,
                &prompt[..5],
                1,
                None,
            ));
        }
        for (worker, want) in [
            (1, 12),
            (2, 3),
            (3, 7),
            (5, 0),
            (6, if exact_event { 5 } else { 0 }),
            (9, 0),
        ] {
            let request = index.begin_request(worker, &prompt);
            assert_eq!(
                request.predicted_blocks(),
                want,
                "worker {worker}, exact event {exact_event}"
            );
            drop(request);
        }
    }
}

#[test]
fn caps_and_capacities_evict_around_pinned_blocks() {
    let clock = Arc::new(ManualClock::new());
    let index = capped_on(&clock, TTL, Some(4), None);
    let running = index.begin_request(1, &tokens(0, 3));
    for start in [100, 200, 300] {
        clock.advance(Duration::from_micros(1));
        index.record(1, Query::tokens(&tokens(start, 1))).unwrap();
    }
    assert_eq!(score(&index, &tokens(0, 3), 1), 3, "the oldest, but pinned");
    assert_eq!(score(&index, &tokens(300, 1), 1), 1);
    assert_eq!(
        score(&index, &tokens(100, 1), 1) + score(&index, &tokens(200, 1), 1),
        0
    );
    assert_eq!(index.worker_entries(1), 4);
    // A capacity lowered below the pinned blocks evicts all else and keeps them.
    index.set_worker_capacity(1, Some(1));
    assert_eq!(score(&index, &tokens(0, 3), 1), 3);
    assert_eq!(index.worker_entries(1), 3);
    index.finish_request(running);
    assert_eq!(
        score(&index, &tokens(0, 3), 1),
        1,
        "released: evicted deepest first"
    );
    index.set_worker_capacity(1, Some(3));
    assert_eq!(
        score(&index, &tokens(0, 3), 1),
        1,
        "a higher capacity brings nothing back"
    );
}

#[test]
fn released_blocks_go_least_recently_released_first() {
    let (index, clock) = index_with(TTL, None, None);
    index.set_worker_capacity(1, Some(100));
    let first = index.begin_request(1, &tokens(0, 2));
    clock.advance(Duration::from_micros(1));
    let second = index.begin_request(1, &tokens(100, 2));
    clock.advance(Duration::from_micros(1));
    // Begun first, released last: it is the more recent.
    index.finish_request(second);
    clock.advance(Duration::from_micros(1));
    index.finish_request(first);
    index.set_worker_capacity(1, Some(2));
    assert_eq!(score(&index, &tokens(0, 2), 1), 2);
    assert_eq!(score(&index, &tokens(100, 2), 1), 0);
}

#[test]
fn a_shared_prefix_stays_pinned_while_any_request_runs() {
    let (index, clock) = index_with(TTL, None, None);
    let long = index.begin_request(1, &tokens(0, 6));
    let short = index.begin_request(1, &tokens(0, 3));
    index.finish_request(long);
    index.set_worker_capacity(1, Some(1));
    assert_eq!(
        score(&index, &tokens(0, 6), 1),
        3,
        "the short request's blocks stay"
    );
    clock.advance(TTL * 3);
    assert_eq!(score(&index, &tokens(0, 6), 1), 3);
    index.finish_request(short);
    assert_eq!(
        score(&index, &tokens(0, 6), 1),
        1,
        "capacity 1: deepest first"
    );
    assert_eq!(index.worker_entries(1), 1);
}

#[test]
fn output_blocks_join_the_request_pinned() {
    let (index, clock) = manual_index(2, TTL);
    let prompt = tokens(0, 4);
    let request = index.begin_request(1, &prompt);
    let mut so_far = prompt.clone();
    so_far.extend(tokens(50, 5)); // 9 tokens: 4 full blocks
    assert_eq!(index.request_output(&request, &so_far), 2);
    assert_eq!(index.request_output(&request, &so_far), 0, "nothing new");
    assert_eq!(
        index.request_output(&request, &tokens(7, 12)),
        0,
        "not its prompt"
    );
    assert_eq!(request.blocks(), 4);
    clock.advance(TTL * 2);
    assert_eq!(score(&index, &so_far, 1), 4);
    drop(request);
    clock.advance(TTL);
    assert_eq!(score(&index, &so_far, 1), 0);
}

#[test]
fn a_removed_workers_handle_changes_nothing() {
    let (index, clock) = manual_index(1, TTL);
    let request = index.begin_request(1, &[1, 2, 3]);
    index.remove_worker(1);
    index.sweep_expired();
    assert_eq!(index.request_output(&request, &[1, 2, 3, 4]), 0);
    assert!(!index.observe_cached(&request, 2));
    // The worker comes back: the old handle neither pins nor releases its new blocks.
    let fresh = index.begin_request(1, &[1, 2, 3]);
    assert_eq!(fresh.predicted_blocks(), 0);
    index.finish_request(request);
    clock.advance(TTL * 2);
    assert_eq!(
        score(&index, &[1, 2, 3], 1),
        3,
        "still pinned by the new request"
    );
    drop(fresh);
    assert_eq!(index.stats().entries, 3);
}

#[test]
fn another_indexs_handle_and_an_inert_one_change_nothing() {
    let (index, clock) = manual_index(1, TTL);
    let (other, _) = manual_index(1, TTL);
    let foreign = other.begin_request(1, &[1, 2]);
    assert_eq!(index.request_output(&foreign, &[1, 2, 3]), 0);
    assert!(!index.observe_cached(&foreign, 1));
    index.finish_request(foreign); // released in its own index
    assert_eq!(index.stats().entries, 0);

    let seq = compute_seq_hashes(&compute_block_hash_for_seq(&[1, 2], 1));
    index.record(1, Query::tokens(&[1, 2])).unwrap();
    let inert = index.begin_request(1, Query::sequence(&seq));
    assert_eq!((inert.predicted_blocks(), inert.blocks()), (2, 0));
    assert!(!index.observe_cached(&inert, 2));
    drop(inert);
    clock.advance(TTL);
    assert_eq!(score(&index, &[1, 2], 1), 0, "nothing was pinned");

    let outlived = {
        let (gone, _) = manual_index(1, TTL);
        gone.begin_request(1, &[1])
    };
    drop(outlived); // its index is gone: nothing to release, no panic
}

#[test]
fn ranks_are_pinned_apart() {
    let (index, clock) = ranked_index(1, TTL);
    let rank = |r| WorkerWithDpRank::new(3, r);
    let running = index.begin_request(rank(1), &[1, 2]);
    index.record(rank(0), Query::tokens(&[1, 2])).unwrap();
    clock.advance(TTL);
    assert_eq!(score(&index, &[1, 2], rank(1)), 2);
    assert_eq!(score(&index, &[1, 2], rank(0)), 0);
    index.finish_request(running);
}

#[test]
fn many_threads_pin_and_release_one_prefix() {
    let clock = Arc::new(ManualClock::new());
    let index = Arc::new(capped_on(&clock, TTL, Some(64), None));
    let threads = 8;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads as u32)
        .map(|t| {
            let (index, barrier) = (Arc::clone(&index), Arc::clone(&barrier));
            thread::spawn(move || {
                barrier.wait();
                for round in 0..200u32 {
                    let mut prompt = tokens(0, 8);
                    prompt.extend(tokens(1000 * (t + 1) + round % 7, 3));
                    let request = index.begin_request(1, &prompt);
                    index
                        .record(1, Query::tokens(&tokens(50_000 + t * 1000 + round, 4)))
                        .unwrap();
                    assert_eq!(score(&index, &prompt, 1), prompt.len() as u32);
                    index.finish_request(request);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    // Everything released: the cap holds again once the next decision enforces it.
    index.record(1, Query::tokens(&tokens(90_000, 1))).unwrap();
    assert!(index.worker_entries(1) <= 64, "{}", index.worker_entries(1));
    // Capped decisions get unique expiries, a nanosecond apart: a little past one TTL.
    clock.advance(TTL + Duration::from_millis(1));
    index.sweep_expired();
    let left: Vec<_> = index
        .snapshot()
        .entries
        .iter()
        .map(|e| (e.depth, e.ttl_left))
        .collect();
    assert_eq!(index.stats().entries, 0, "no pin left behind: {left:?}");
}

#[test]
fn a_release_ends_the_pin_on_blocks_the_engine_stores_exactly() {
    let (index, clock) = manual_index(1, TTL);
    let prompt = tokens(0, 5);
    // The engine stores the first three blocks (one run, held exactly); the request
    // pins all five.
    let event = crate::support::events::stored_ours(1, &prompt[..3], 1, None);
    index.apply_event(&event);
    let request = index.begin_request(1, &prompt);
    index.finish_request(request);
    clock.advance(TTL + Duration::from_millis(1));
    index.sweep_expired();
    assert_eq!(
        score(&index, &prompt, 1),
        3,
        "the exact blocks stay, the rest expired"
    );
    let snapshot = index.snapshot();
    assert_eq!(snapshot.entries.len(), 3);
    assert!(
        snapshot
            .entries
            .iter()
            .all(|e| e.exact && e.ttl_left.is_zero()),
        "no approximate claim (a pin) left: {:?}",
        snapshot.entries
    );
}

#[test]
fn a_snapshot_or_dump_takes_pinned_blocks_as_decisions_taken_now() {
    let (index, clock) = manual_index(1, TTL);
    let _running = index.begin_request(1, &[1, 2, 3]);
    clock.advance(TTL * 5);
    let snapshot = index.snapshot();
    assert_eq!(snapshot.entries.len(), 3);
    assert!(snapshot
        .entries
        .iter()
        .all(|e| e.ttl_left == TTL && !e.exact));
    let dump = index.dump_events();
    assert_eq!(dump.len(), 3);
    let (restored, restored_clock) = manual_index(1, TTL);
    restored.restore(&snapshot).unwrap();
    assert_eq!(score(&restored, &[1, 2, 3], 1), 3);
    restored_clock.advance(TTL);
    assert_eq!(score(&restored, &[1, 2, 3], 1), 0, "no pin comes back");
}

#[test]
fn a_cleared_event_fences_the_ranks_running_requests() {
    let (index, clock) = manual_index(1, TTL);
    let old = index.begin_request(1, &[1, 2, 3]);
    index.apply_event(&RouterEvent {
        worker_id: 1,
        event_id: 1,
        data: KvCacheEventData::Cleared,
    });
    assert_eq!(
        score(&index, &[1, 2, 3], 1),
        0,
        "a restart: every claim goes"
    );
    assert_eq!(score(&index, &[1, 2], 1), 0, "a restart: every claim goes");
    let fresh = index.begin_request(1, &[1, 2]);
    assert_eq!(fresh.predicted_blocks(), 0);
    assert_eq!(index.request_output(&old, &[1, 2, 3, 4]), 0);
    assert!(!index.observe_cached(&old, 3));
    index.finish_request(old);
    clock.advance(TTL * 2);
    assert_eq!(
        score(&index, &[1, 2, 3], 1),
        2,
        "the new request's pins stand"
    );
    drop(fresh);
}

#[test]
fn pins_racing_removals_leave_nothing_behind() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let index = Arc::new(manual_index(1, TTL).0);
    let rounds = 3000u64;
    let current = Arc::new(AtomicU64::new(0));
    let pinner = {
        let (index, current) = (Arc::clone(&index), Arc::clone(&current));
        thread::spawn(move || {
            let mut handles = Vec::new();
            for w in 0..rounds {
                current.store(w, Ordering::SeqCst);
                handles.push(index.begin_request(w, &[1, 2, 3, 4]));
            }
            current.store(rounds, Ordering::SeqCst);
            handles
        })
    };
    let remover = {
        let (index, current) = (Arc::clone(&index), Arc::clone(&current));
        thread::spawn(move || loop {
            let w = current.load(Ordering::SeqCst);
            if w >= rounds {
                break;
            }
            index.remove_worker(w);
        })
    };
    remover.join().unwrap();
    let handles = pinner.join().unwrap();
    drop(handles); // removed workers' handles release nothing; the others' blocks stay
    for w in 0..rounds {
        index.remove_worker(w);
    }
    index.sweep_expired();
    assert_eq!(
        index.stats().entries,
        0,
        "every removed worker's pins purged"
    );
}

/// Found by the model: a release whose blocks were mostly held already added one entry,
/// and the caps evicted for that one only, leaving the worker above its cap.
#[test]
fn a_release_makes_room_for_its_blocks_under_a_cap() {
    let clock = Arc::new(ManualClock::new());
    let index = capped_on(&clock, TTL, Some(6), None);
    let running = index.begin_request(1, &[0, 1, 2, 0, 1]);
    index.record(1, Query::tokens(&[1, 0, 0, 0, 0])).unwrap();
    assert_eq!(
        index.worker_entries(1),
        10,
        "five pinned, five fresh: over the cap"
    );
    let event = crate::support::events::stored_ours(1, &[0, 1, 2, 0], 1, None);
    index.apply_event(&event); // held exactly too: no fresh protection any more
    index.finish_request(running);
    assert_eq!(
        index.worker_entries(1),
        6,
        "back within the cap at the release"
    );
}

/// The documented exception to exact caps (design.md, Bounded memory): another request's
/// pins stay, and beside them a release keeps up to a cap of its blocks, the fresh
/// decision, until the worker's next decision or release. (Reported by an audit that read
/// "caps hold exactly for one writer" without the pins.)
#[test]
fn a_release_beside_other_pins_keeps_a_cap_of_its_blocks() {
    let clock = Arc::new(ManualClock::new());
    let index = capped_on(&clock, TTL, Some(3), None);
    let first = index.begin_request(1, &tokens(0, 4));
    clock.advance(Duration::from_micros(1));
    let second = index.begin_request(1, &tokens(10, 4));
    assert_eq!(index.worker_entries(1), 8, "pins are never evicted");
    clock.advance(Duration::from_micros(1));
    index.finish_request(first);
    assert_eq!(
        index.worker_entries(1),
        4 + 3,
        "the pins, and a cap of the release's"
    );
    assert_eq!(
        score(&index, &tokens(0, 4), 1),
        3,
        "its deepest block went first"
    );
    clock.advance(Duration::from_micros(1));
    index.finish_request(second);
    assert_eq!(
        index.worker_entries(1),
        3,
        "within the cap at the last release"
    );
    assert_eq!(
        score(&index, &tokens(0, 4), 1),
        0,
        "the older release went first"
    );
    assert_eq!(score(&index, &tokens(10, 4), 1), 3);
}

/// Found by the model: a `Removed` event on a pinned block scheduled a walk at the pin
/// level, and the release's walk stopped at the gap, leaving the blocks above it pinned
/// for ever.
#[test]
fn a_release_unpins_around_blocks_an_event_removed() {
    let (index, clock) = manual_index(1, TTL);
    let prompt = tokens(0, 6);
    let running = index.begin_request(1, &prompt);
    let (_, seq) = crate::support::index::chain(&prompt, 1);
    index.apply_event(&RouterEvent {
        worker_id: 1,
        event_id: 1,
        data: KvCacheEventData::Removed(KvCacheRemoveData {
            block_hashes: vec![seq[2], seq[4]],
        }),
    });
    assert_eq!(index.stats().pending_timers, 0, "no walk at the pin level");
    assert_eq!(score(&index, &prompt, 1), 2);
    index.finish_request(running);
    clock.advance(TTL + Duration::from_millis(1));
    index.sweep_expired();
    assert_eq!(
        index.stats().entries,
        0,
        "every block above a gap was released too"
    );
}

/// In a tree without runs (after an exact KV event) a release lowers its blocks a chunk at
/// a time: a walk that settled all it was let goes on from the block below, and one stopped
/// by a removed block goes on above it, at and across the chunks' ends.
#[test]
fn a_release_in_a_tree_of_blocks_unpins_every_chunk_around_removed_blocks() {
    let (index, clock) = manual_index(1, TTL);
    index.apply_event(&crate::support::events::stored_ours(
        2,
        &tokens(1000, 3),
        1,
        None,
    ));
    let prompt = tokens(0, 70);
    let running = index.begin_request(1, &prompt);
    let (_, seq) = crate::support::index::chain(&prompt, 1);
    // Blocks next to and across where the 16-block chunks end.
    let removed = [52, 30, 29, 5, 0].map(|i| seq[i]);
    index.apply_event(&RouterEvent {
        worker_id: 1,
        event_id: 1,
        data: KvCacheEventData::Removed(KvCacheRemoveData {
            block_hashes: removed.to_vec(),
        }),
    });
    assert_eq!(index.worker_entries(1), 65);
    index.finish_request(running);
    clock.advance(TTL + Duration::from_millis(1));
    index.sweep_expired();
    assert_eq!(
        index.worker_entries(1),
        0,
        "every block of the request released, and expired a TTL later"
    );
}

/// Found by the model (3,000 cases): a release that took its pinned blocks out, then put
/// them back, left the worker's deeper blocks of another prompt without their prefix for
/// a moment, and the blocks came back as a run over them: finds of that prompt stopped
/// short. Pins are now lowered in place.
#[test]
fn a_release_keeps_the_prefix_of_the_workers_other_blocks() {
    let (index, _clock) = manual_index(1, TTL);
    let recorded = [0, 1, 2, 0, 1, 2, 0, 1, 1, 1];
    let begun = [0, 1, 2, 0, 1, 2, 0, 1, 2, 0];
    index.record(3, Query::tokens(&recorded)).unwrap();
    let request = index.begin_request(3, &begun);
    index.finish_request(request);
    assert_eq!(score(&index, &recorded, 3), 10);
    assert_eq!(score(&index, &begun, 3), 10);
    let again = index.begin_request(3, &recorded);
    assert_eq!(again.predicted_blocks(), 10);
}
