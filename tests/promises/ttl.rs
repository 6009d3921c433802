//! Promises: TTL, refresh, dumps and snapshots of what is live.

use super::*;

/// src/indexer.rs, `process_routing_decision_for_request`: blocks become probably cached
/// "for one TTL (refreshing any it already held)"; design.md, record: a refresh "raise[s]
/// its expiry with an atomic max". A decision applied from another replica, dated 5 s
/// earlier, refreshes nothing backwards: the local, later decision keeps its full TTL.
#[test]
fn an_older_shared_decision_never_shortens_a_later_local_one() {
    let clock = Arc::new(ManualClock::new());
    clock.set(EPOCH);
    let replica = |id: u64| {
        support::index::sharing_replica(id, &clock, TTL)
            .build()
            .unwrap()
    };
    let (a, b) = (replica(1), replica(2));
    a.process_routing_decision_for_request(&[1, 2], 7);
    clock.advance(Duration::from_secs(5));
    b.process_routing_decision_for_request(&[1, 2], 7); // the same route, 5 s later
    let decision = a.outbox().unwrap().pop().unwrap();
    assert_eq!(b.apply_decision(&decision), Applied::Applied);
    clock.set(EPOCH + Duration::from_secs(5) + TTL - NS);
    assert_eq!(
        score(&b, &[1, 2], 7),
        Some(2),
        "a TTL from b's own decision"
    );
    clock.advance(NS);
    assert_eq!(score(&b, &[1, 2], 7), None);
}
