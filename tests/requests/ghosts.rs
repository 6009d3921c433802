//! Ghosts: blocks a worker's capacity evicted that its engine still delivers raise the
//! capacity (`src/core/learn.rs`), and every other worker's still on the same capacity
//! that no report has taught.

use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::*;

use crate::support::index::{index_with, score_or_zero, tokens};

const TTL: Duration = Duration::from_secs(60);

#[test]
fn ghosts_of_blocks_the_capacity_evicted_raise_it() {
    let (index, clock) = index_with(TTL, None, None);
    index.set_worker_capacity(1, Some(4));
    index.record(1, Query::tokens(&tokens(0, 4))).unwrap();
    clock.advance(Duration::from_micros(1));
    index.record(1, Query::tokens(&tokens(100, 2))).unwrap(); // evicts 2 of [0..4)
    assert_eq!(score_or_zero(&index, &tokens(0, 4), 1), 2);
    let request = index.begin_request(1, &tokens(0, 4));
    assert_eq!(request.predicted_blocks(), 2);
    // The engine still had all four: the two evicted blocks were ghosts.
    assert!(index.observe_cached(&request, 4));
    assert_eq!(
        index.worker_capacity(1),
        Some(8),
        "doubled: 4 + max(2 hits, 4)"
    );
    assert_eq!(index.stats().capacities_learned, 1);
    // The request's pins took the capacity of 4 before the report: [100, 102) went,
    // and is a ghost in turn.
    assert_eq!(score_or_zero(&index, &tokens(100, 2), 1), 0);
    drop(request);
    assert_eq!(score_or_zero(&index, &tokens(0, 4), 1), 4);
    let other = index.begin_request(1, &tokens(100, 2));
    assert!(index.observe_cached(&other, 2));
    assert_eq!(
        index.worker_capacity(1),
        Some(8),
        "6 blocks held and 1 evicted since: a capacity of 8 would have kept them"
    );
    assert_eq!(index.stats().capacities_learned, 1);
}

#[test]
fn blocks_never_evicted_are_no_ghosts() {
    let (index, _clock) = index_with(TTL, None, None);
    index.set_worker_capacity(1, Some(4));
    let request = index.begin_request(1, &tokens(0, 4)); // nothing predicted
    assert!(index.observe_cached(&request, 4)); // another router's traffic, say
    assert_eq!(index.worker_capacity(1), Some(4));
}

/// Worker `worker`, at capacity `cap`, holds a prompt of `cap` blocks from `base` on;
/// two blocks of another prompt evict two of them; the engine delivers the whole prompt.
fn ghost_hit(index: &ApproxKvIndexer, clock: &Arc<ManualClock>, worker: u64, base: u32, cap: u32) {
    index
        .record(worker, Query::tokens(&tokens(base, cap)))
        .unwrap();
    clock.advance(Duration::from_micros(1));
    index
        .record(worker, Query::tokens(&tokens(base + 1000, 2)))
        .unwrap();
    let request = index.begin_request(worker, &tokens(base, cap));
    assert_eq!(request.predicted_blocks(), cap as usize - 2);
    assert!(index.observe_cached(&request, cap as usize));
}

#[test]
fn a_ghost_hit_raises_every_worker_on_the_same_untaught_capacity() {
    let (index, clock) = index_with(TTL, None, None);
    for worker in [1, 2, 3] {
        index.set_worker_capacity(worker, Some(4));
    }
    index.set_worker_capacity(4, Some(5));
    // Worker 5's capacity of 4 is taught: a loss well inside 5, which dropped most of
    // its claims, lowered it by an eighth.
    index.set_worker_capacity(5, Some(5));
    index.record(5, Query::tokens(&tokens(700, 2))).unwrap();
    clock.advance(Duration::from_micros(1));
    index.record(5, Query::tokens(&tokens(500, 1))).unwrap();
    let lost = index.begin_request(5, &tokens(500, 1));
    assert!(index.observe_cached(&lost, 0));
    assert_eq!(index.worker_capacity(5), Some(4));
    index.record(6, Query::tokens(&tokens(600, 1))).unwrap(); // no capacity
    let learned = index.stats().capacities_learned;

    ghost_hit(&index, &clock, 1, 100, 4);
    let capacities = || {
        (1..=6)
            .map(|w| index.worker_capacity(w))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        capacities(),
        [Some(8), Some(8), Some(8), Some(5), Some(4), None],
        "1 learned 8; 2 and 3 were on its 4; 4 on another; 5's was taught"
    );
    assert_eq!(index.stats().capacities_learned, learned + 3);

    // A capacity a caller sets is untaught again; 1's, taught, stays.
    index.set_worker_capacity(5, Some(8));
    ghost_hit(&index, &clock, 2, 200, 8);
    assert_eq!(
        capacities(),
        [Some(8), Some(16), Some(16), Some(5), Some(16), None]
    );
}

#[test]
fn a_ghost_hit_raises_peers_on_the_per_worker_cap_too() {
    let (index, clock) = index_with(TTL, Some(4), None);
    index.record(2, Query::tokens(&tokens(200, 1))).unwrap();
    index.set_worker_capacity(3, Some(6));
    ghost_hit(&index, &clock, 1, 100, 4);
    assert_eq!(index.worker_capacity(1), Some(8));
    assert_eq!(
        index.worker_capacity(2),
        Some(8),
        "on the cap of 4 as 1 was"
    );
    assert_eq!(index.worker_capacity(3), Some(6));
}
