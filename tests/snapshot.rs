//! Snapshot and restore keep TTLs; bad files are clear errors, never panics.

mod common;

use std::time::Duration;

use approx_kv_index::*;
use common::{manual_index, tokens};

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
