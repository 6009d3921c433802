//! Snapshot and restore keep TTLs; bad files are clear errors, never panics; restored
//! entries are reclaimed; a restored claim that outlives its parent ends the leading run
//! there; a restored index of decisions answers like the original as claims expire.

use std::time::Duration;

use approx_kv_index::*;

use crate::support::index::{manual_index, tokens};

const TTL: Duration = Duration::from_secs(100);

fn queries() -> Vec<Vec<u32>> {
    vec![
        tokens(0, 16),
        tokens(0, 8),
        tokens(100, 12),
        tokens(200, 4),
        tokens(0, 4),
    ]
}

fn populated() -> (ApproxKvIndexer, std::sync::Arc<ManualClock>) {
    let (index, clock) = manual_index(4, TTL);
    index.process_routing_decision_for_request(&tokens(0, 16), 1);
    clock.advance(Duration::from_secs(30));
    index.process_routing_decision_for_request(&tokens(0, 8), 2);
    index.process_routing_decision_for_request(&tokens(100, 12), 3);
    let local = compute_block_hash_for_seq(&tokens(200, 4), 4);
    let seq = compute_seq_hashes(&local);
    index.apply_event(&RouterEvent {
        worker_id: 4,
        event_id: 0,
        data: KvCacheEventData::Stored(KvCacheStoreData {
            parent_hash: None,
            blocks: vec![KvCacheStoredBlockData {
                block_hash: seq[0],
                tokens_hash: local[0],
                expires_in: None,
            }],
        }),
    });
    index.process_routing_decision_for_request(&tokens(0, 4), 5);
    index.remove_worker(5); // dead workers are not snapshotted
    (index, clock)
}

#[test]
fn restored_index_answers_like_the_original_did() {
    let (index, clock) = populated();
    let snap = index.snapshot();
    let bytes = snap.to_bytes();
    let before: Vec<_> = queries()
        .iter()
        .map(|q| index.find_matches_for_request(q).scores)
        .collect();

    let (fresh, fresh_clock) = manual_index(4, TTL);
    fresh_clock.advance(Duration::from_secs(5_000)); // a different clock origin is fine
    fresh
        .restore(&Snapshot::from_bytes(&bytes).unwrap())
        .unwrap();
    let after: Vec<_> = queries()
        .iter()
        .map(|q| fresh.find_matches_for_request(q).scores)
        .collect();
    assert_eq!(before, after);
    assert_eq!(fresh.snapshot(), snap, "a snapshot round-trips");

    // Remaining TTLs are kept: worker 1's blocks (70 s left) expire before worker 2's (100 s).
    fresh_clock.advance(Duration::from_secs(70));
    let found = fresh.find_matches_for_request(&tokens(0, 16));
    assert!(!found.scores.contains_key(&1));
    assert_eq!(found.scores[&2], 2);
    fresh_clock.advance(Duration::from_secs(30));
    fresh.sweep_expired();
    assert_eq!(
        fresh.find_matches_for_request(&tokens(200, 4)).scores[&4],
        1,
        "exact stays"
    );
    assert_eq!(fresh.stats().entries, 1);
    drop(clock);
}

#[test]
fn entries_in_a_snapshot_describe_ttls_and_exactness() {
    let (index, _clock) = populated();
    let snap = index.snapshot();
    assert_eq!(snap.entries.len(), 4 + 2 + 3 + 1);
    for e in &snap.entries {
        match e.worker_id {
            1 => assert_eq!(e.ttl_left, Duration::from_secs(70)),
            2 | 3 => assert_eq!(e.ttl_left, TTL),
            4 => assert!(e.exact && e.ttl_left.is_zero()),
            other => panic!("unexpected worker {other}"),
        }
    }
}

#[test]
fn bad_bytes_are_clear_errors() {
    let (index, _clock) = populated();
    let bytes = index.snapshot().to_bytes();
    assert_eq!(
        Snapshot::from_bytes(b"").unwrap_err(),
        SnapshotError::NotASnapshot
    );
    assert_eq!(
        Snapshot::from_bytes(b"{\"json\": 1}").unwrap_err(),
        SnapshotError::NotASnapshot
    );
    let mut future = bytes.clone();
    future[8] = 99;
    assert_eq!(
        Snapshot::from_bytes(&future).unwrap_err(),
        SnapshotError::UnsupportedVersion(99)
    );
    for cut in [12, 24, bytes.len() / 2, bytes.len() - 1] {
        let err = Snapshot::from_bytes(&bytes[..cut]).unwrap_err();
        assert!(
            matches!(
                err,
                SnapshotError::Truncated { .. } | SnapshotError::NotASnapshot
            ),
            "cut at {cut}: {err:?}"
        );
    }
    // Every single-bit flip past the header is detected.
    for byte in 24..bytes.len() {
        for bit in 0..8 {
            let mut flipped = bytes.clone();
            flipped[byte] ^= 1 << bit;
            assert!(
                Snapshot::from_bytes(&flipped).is_err(),
                "flip at {byte}:{bit}"
            );
        }
    }
    // A flip in the entry count is a length error, not an allocation of 2^60 entries.
    let mut count = bytes.clone();
    count[23] ^= 0x10;
    assert!(matches!(
        Snapshot::from_bytes(&count),
        Err(SnapshotError::Truncated { .. })
    ));
    assert!(!SnapshotError::Corrupt.to_string().is_empty());
}

#[test]
fn restore_refuses_another_block_size() {
    let (index, _clock) = populated();
    let (other, _c) = manual_index(8, TTL);
    let err = other.restore(&index.snapshot()).unwrap_err();
    assert_eq!(
        err,
        SnapshotError::BlockSizeMismatch {
            snapshot: 4,
            index: 8
        }
    );
    assert_eq!(other.stats().entries, 0);
}

#[test]
fn restored_entries_are_reclaimed_by_the_sweeper() {
    let (index, _clock) = populated();
    let (fresh, clock) = manual_index(4, TTL);
    fresh.restore(&index.snapshot()).unwrap();
    clock.advance(TTL);
    fresh.sweep_expired();
    assert_eq!(fresh.stats().entries, 1, "only the exact entry remains");
    assert_eq!(fresh.stats().nodes, 1);
}

#[cfg(feature = "serde")]
#[test]
fn snapshot_round_trips_through_serde_json() {
    let (index, _clock) = populated();
    let snap = index.snapshot();
    let json = serde_json::to_string(&snap).unwrap();
    assert_eq!(serde_json::from_str::<Snapshot>(&json).unwrap(), snap);
}

/// A snapshot may hold a worker's claim on a block that outlives its claim on the parent
/// (hand-built, or from an index fed KV events). Once the parent expired, the worker's
/// leading run stops there, though it still holds the deeper block: the restored index must
/// not take the worker's holder sets for nested (where holding a block means holding every
/// block before it) and must answer 1, not 3.
#[test]
fn a_restored_claim_outliving_its_parent_ends_the_leading_run_there() {
    let (index, clock) = manual_index(4, TTL);
    let query = tokens(0, 12);
    let local = compute_block_hash_for_seq(&query, 4);
    let seq = compute_seq_hashes(&local);
    let ttl_left = [60, 5, 60];
    let entries = (0..3)
        .map(|i| SnapshotEntry {
            worker_id: 7,
            dp_rank: 0,
            block: seq[i],
            parent: if i == 0 { SequenceHash(0) } else { seq[i - 1] },
            local: local[i],
            depth: i as u32,
            exact: false,
            ttl_left: Duration::from_secs(ttl_left[i]),
        })
        .collect();
    let snapshot = Snapshot {
        block_size: 4,
        entries,
        capacities: vec![],
    };
    index.restore(&snapshot).unwrap();
    assert_eq!(
        index.find_matches_for_request(&query).scores.get(&7),
        Some(&3)
    );
    clock.advance(Duration::from_secs(10));
    assert_eq!(
        index.find_matches_for_request(&query).scores.get(&7),
        Some(&1)
    );
    assert_eq!(
        index.find_matches_by_sequence(&seq).scores.get(&7),
        Some(&1)
    );
    // Decisions recorded afterwards keep it that way: worker 8 holds the whole query.
    index.process_routing_decision_for_request(&query, 8);
    let scores = index.find_matches_for_request(&query).scores;
    assert_eq!((scores.get(&7), scores.get(&8)), (Some(&1), Some(&3)));
}

/// The snapshot of an index that only recorded decisions restores into one whose finds
/// answer as the original's do at every later time, as the claims expire one decision
/// after another (the restored index may go on galloping: see `tree/export.rs`).
#[test]
fn a_restored_index_of_decisions_answers_like_the_original_as_claims_expire() {
    let (original, clock) = manual_index(4, TTL);
    for (i, len) in [16, 8, 12, 4, 16].into_iter().enumerate() {
        original.process_routing_decision_for_request(&tokens(0, len), i as u64 % 3);
        clock.advance(Duration::from_secs(15));
    }
    let (restored, restored_clock) = manual_index(4, TTL);
    restored.restore(&original.snapshot()).unwrap();
    for _ in 0..8 {
        for q in queries() {
            assert_eq!(
                restored.find_matches_for_request(&q).scores,
                original.find_matches_for_request(&q).scores
            );
        }
        clock.advance(Duration::from_secs(10));
        restored_clock.advance(Duration::from_secs(10));
    }
}

/// Found by an audit: under a cap, a worker's decisions at one clock reading get expiries a
/// nanosecond apart past the TTL; a snapshot (or dump) taken at that reading gave them TTLs
/// left above the TTL, which the restore clamped to the TTL, so they tied and the restored
/// index evicted the newer first. The restore now keeps a TTL left up to 1 ms above it.
#[test]
fn a_snapshot_at_the_instant_of_its_decisions_keeps_their_order() {
    let score = |index: &ApproxKvIndexer, prompt: &[u32]| {
        index.find(Query::tokens(prompt)).scores.get(&0).copied()
    };
    for through_a_dump in [false, true] {
        let clock = std::sync::Arc::new(ManualClock::new());
        let capped =
            || crate::support::index::capped_on(&clock, Duration::from_secs(10), Some(4), None);
        let (a, b) = (capped(), capped());
        a.record(0, Query::tokens(&[1, 2])).unwrap();
        a.record(0, Query::tokens(&[3, 4])).unwrap(); // the same reading
        if through_a_dump {
            for event in a.dump_events() {
                b.apply_event(&event);
            }
        } else {
            b.restore(&a.snapshot()).unwrap();
        }
        for index in [&a, &b] {
            index.record(0, Query::tokens(&[5])).unwrap();
        }
        assert_eq!(
            score(&a, &[1, 2]),
            Some(1),
            "the older decision lost a block"
        );
        for prompt in [&[1u32, 2][..], &[3, 4], &[5]] {
            assert_eq!(
                score(&b, prompt),
                score(&a, prompt),
                "{prompt:?}, dump {through_a_dump}"
            );
        }
    }
}
