//! The life of the sweeper thread: with the real clock it reclaims without being asked;
//! dropping indexes leaks no thread; every call is safe after `shutdown`.

use std::thread;
use std::time::{Duration, Instant};

use approx_kv_index::*;

use crate::support::index::{thread_count, tokens};

/// With the real clock and background sweeper, memory comes back on its own. Real time
/// is needed here, so the bounds are generous: a TTL of half a second, so that the count
/// right after recording holds even if this thread is descheduled for a while, and 20 s
/// for the sweeper.
#[test]
fn background_sweeper_reclaims_without_being_asked() {
    let index = ApproxKvIndexer::builder()
        .block_size(4)
        .ttl(Duration::from_millis(500))
        .tick(Duration::from_millis(5))
        .build()
        .unwrap();
    for w in 0..10 {
        index.process_routing_decision_for_request(&tokens(w * 100, 40), u64::from(w));
    }
    assert_eq!(index.stats().entries, 100);
    let deadline = Instant::now() + Duration::from_secs(20);
    while index.stats().entries > 0 {
        assert!(
            Instant::now() < deadline,
            "sweeper did not reclaim: {:?}",
            index.stats()
        );
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(index.stats().nodes, 0);
    assert_eq!(index.stats().expirations, 100);
}

#[test]
fn dropping_two_hundred_indexers_leaks_no_thread() {
    let before = thread_count();
    for _ in 0..200 {
        let index = ApproxKvIndexer::new(4, Duration::from_secs(1)).unwrap();
        index.process_routing_decision_for_request(&tokens(0, 8), 1);
    }
    // Other tests of this binary may run threads concurrently: allow for them, but 200
    // leaked sweepers would show.
    let after = thread_count();
    assert!(
        after < before + 50,
        "threads before {before}, after {after}"
    );
}

#[test]
fn every_call_is_safe_after_shutdown() {
    let index = ApproxKvIndexer::new(4, Duration::from_secs(60)).unwrap();
    index.shutdown();
    index.shutdown();
    index.process_routing_decision_for_request(&tokens(0, 8), 1);
    assert_eq!(index.find_matches_for_request(&tokens(0, 8)).scores[&1], 2);
    index.remove_worker(1);
    assert!(index.dump_events().is_empty());
    assert_eq!(
        index.sweep_expired(),
        2,
        "the removed worker's entries, purged"
    );
    assert_eq!(index.sweep_expired(), 0);
    let _ = index.stats();
    drop(index); // Drop after shutdown joins nothing twice
}
