//! What snapshots and dumps hold: the snapshot's documented byte layout (and a file written
//! by hand from it); TTLs left clamped to the restoring index's TTL, and a refused restore
//! changing nothing; data-parallel ranks kept; dumps naming blocks by this index's hashes,
//! never the engines'.

use std::time::Duration;

use approx_kv_index::*;

use crate::support::events::{block, stored, stored_data, stored_ours};
use crate::support::index::{chain, manual_index, ranked_index, score, tokens};

const TTL: Duration = Duration::from_secs(10);
const NS: Duration = Duration::from_nanos(1);

/// src/indexer.rs, `restore`: "each entry comes back with the TTL it had left (at most this
/// index's TTL), counted from now"; "A snapshot of another block size is refused and
/// changes nothing" (here into an index that holds something).
#[test]
fn restore_clamps_the_ttl_left_and_a_refused_restore_changes_nothing() {
    let (original, _c) = manual_index(2, Duration::from_secs(100));
    original.process_routing_decision_for_request(&[1, 2, 3, 4], 1);
    let snap = original.snapshot();
    assert!(snap
        .entries
        .iter()
        .all(|e| e.ttl_left == Duration::from_secs(100)));

    let (short, clock) = manual_index(2, TTL);
    short.process_routing_decision_for_request(&[9, 9], 2);
    short.restore(&snap).unwrap();
    clock.set(TTL - NS);
    assert_eq!(score(&short, &[1, 2, 3, 4], 1), Some(2));
    clock.set(TTL);
    assert_eq!(score(&short, &[1, 2, 3, 4], 1), None, "clamped to the TTL");

    let (other, _c2) = manual_index(4, TTL);
    other.process_routing_decision_for_request(&tokens(0, 8), 3);
    let (dump, stats) = (other.dump_events(), other.stats());
    assert!(matches!(
        other.restore(&snap),
        Err(SnapshotError::BlockSizeMismatch {
            snapshot: 2,
            index: 4
        })
    ));
    assert_eq!(other.dump_events(), dump);
    assert_eq!(other.stats(), stats);
}

/// src/snapshot.rs, module docs: "Format, version 1 (all integers little-endian):
/// `b"AKVISNAP"`, version `u32`, block size `u32`, entry count `u64`, then per entry worker
/// id `u64`, dp rank `u32`, block `u64`, parent `u64`, local `u64`, depth `u32`, flags `u8`
/// (bit 0: exact), TTL left in ns `u64`; then xxh3-64 (seed 0) of all the bytes before
/// it"; `Snapshot::entries`: "parents before children"; `SnapshotEntry::ttl_left`: "zero if
/// there was none"; `dp_rank`: "0 for plain ids"; `SnapshotError::Truncated`: "Shorter (or
/// longer) than its header says".
#[test]
fn snapshot_bytes_follow_the_documented_format() {
    let (index, clock) = manual_index(2, TTL);
    index.process_routing_decision_for_request(&tokens(0, 8), 7);
    index.process_routing_decision_for_request(&tokens(0, 4), 8);
    clock.advance(Duration::from_secs(3));
    index.apply_event(&stored_ours(9, &tokens(100, 2), 2, None));
    let snap = index.snapshot();
    assert_eq!(snap.entries.len(), 4 + 2 + 1);
    for (i, e) in snap.entries.iter().enumerate() {
        assert_eq!(e.dp_rank, 0);
        if e.depth > 0 {
            assert!(
                snap.entries[..i]
                    .iter()
                    .any(|p| p.worker_id == e.worker_id && p.block == e.parent),
                "parent of entry {i} listed before it"
            );
        }
        let want_left = if e.exact {
            Duration::ZERO
        } else {
            TTL - Duration::from_secs(3)
        };
        assert_eq!(e.ttl_left, want_left);
    }

    let bytes = snap.to_bytes();
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    const ENTRY: usize = 8 + 4 + 8 + 8 + 8 + 4 + 1 + 8;
    assert_eq!(&bytes[..8], b"AKVISNAP");
    assert_eq!((u32_at(8), u32_at(12), u64_at(16)), (2, 2, 7));
    assert_eq!(bytes.len(), 24 + ENTRY * 7 + 8 + 8);
    assert_eq!(u64_at(24 + ENTRY * 7), 0, "no capacities");
    for (i, e) in snap.entries.iter().enumerate() {
        let at = 24 + ENTRY * i;
        assert_eq!(u64_at(at), e.worker_id);
        assert_eq!(u32_at(at + 8), e.dp_rank);
        assert_eq!(u64_at(at + 12), e.block.0);
        assert_eq!(u64_at(at + 20), e.parent.0);
        assert_eq!(u64_at(at + 28), e.local.0);
        assert_eq!(u32_at(at + 36), e.depth);
        assert_eq!(bytes[at + 40], u8::from(e.exact));
        assert_eq!(u64_at(at + 41), e.ttl_left.as_nanos() as u64);
    }
    let body = bytes.len() - 8;
    assert_eq!(
        u64_at(body),
        xxhash_rust::xxh3::xxh3_64(&bytes[..body]),
        "checksum"
    );

    // A file written by hand from the description reads back as what it describes.
    let entry = SnapshotEntry {
        worker_id: 5,
        dp_rank: 2,
        block: SequenceHash(11),
        parent: SequenceHash(10),
        local: LocalBlockHash(12),
        depth: 1,
        exact: true,
        ttl_left: Duration::from_nanos(1234),
    };
    let by_hand_version = |version: u32, flags: u8, extra: &[u8]| {
        let mut b = Vec::new();
        b.extend_from_slice(b"AKVISNAP");
        b.extend_from_slice(&version.to_le_bytes());
        b.extend_from_slice(&16u32.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&5u64.to_le_bytes());
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(&11u64.to_le_bytes());
        b.extend_from_slice(&10u64.to_le_bytes());
        b.extend_from_slice(&12u64.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.push(flags);
        b.extend_from_slice(&1234u64.to_le_bytes());
        b.extend_from_slice(extra);
        let sum = xxhash_rust::xxh3::xxh3_64(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b
    };
    // Version 1 with these flags (and `extra` bytes after the entry).
    let by_hand = |flags: u8, extra: &[u8]| by_hand_version(1, flags, extra);
    // Version 2, flags 1, `capacities` after the entry.
    let by_hand_v2 = |capacities: &[u8]| by_hand_version(2, 1, capacities);
    let want = Snapshot {
        block_size: 16,
        entries: vec![entry],
        capacities: vec![],
    };
    // Version 1, read still: no capacities.
    assert_eq!(Snapshot::from_bytes(&by_hand(1, &[])), Ok(want.clone()));
    // Version 2: a capacity count, then each capacity.
    let mut capacity = Vec::new();
    capacity.extend_from_slice(&1u64.to_le_bytes());
    capacity.extend_from_slice(&5u64.to_le_bytes());
    capacity.extend_from_slice(&2u32.to_le_bytes());
    capacity.extend_from_slice(&4096u64.to_le_bytes());
    let with_capacity = Snapshot {
        capacities: vec![SnapshotCapacity {
            worker_id: 5,
            dp_rank: 2,
            blocks: 4096,
        }],
        ..want.clone()
    };
    assert_eq!(with_capacity.to_bytes(), by_hand_v2(&capacity));
    assert_eq!(
        Snapshot::from_bytes(&by_hand_v2(&capacity)),
        Ok(with_capacity)
    );
    assert_eq!(want.to_bytes(), by_hand_v2(&0u64.to_le_bytes()));
    assert!(matches!(
        Snapshot::from_bytes(&by_hand_v2(&capacity[..12])),
        Err(SnapshotError::Truncated { .. })
    ));
    assert!(matches!(
        Snapshot::from_bytes(&by_hand_version(3, 1, &[])),
        Err(SnapshotError::UnsupportedVersion(3))
    ));
    assert!(
        Snapshot::from_bytes(&by_hand(2, &[])).is_err(),
        "flags other than bit 0"
    );
    assert!(matches!(
        Snapshot::from_bytes(&by_hand(1, &[0])),
        Err(SnapshotError::Truncated { .. })
    ));
}

/// src/snapshot.rs, `SnapshotEntry::dp_rank`: "Its data-parallel rank"; src/indexer.rs,
/// `restore`: "Afterwards the index answers every find as the snapshotted one did" (for an
/// index keyed by `WorkerWithDpRank`).
#[test]
fn snapshots_keep_data_parallel_ranks() {
    let (index, _c) = ranked_index(2, TTL);
    let (r0, r1) = (WorkerWithDpRank::new(7, 0), WorkerWithDpRank::new(7, 1));
    index.process_routing_decision_for_request(&[1, 2, 3, 4], r1);
    index.process_routing_decision_for_request(&[1, 2], r0);
    let snap = index.snapshot();
    let mut keys: Vec<_> = snap
        .entries
        .iter()
        .map(|e| (e.worker_id, e.dp_rank))
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, [(7, 0), (7, 1), (7, 1)]);
    let (restored, _c2) = ranked_index(2, TTL);
    restored
        .restore(&Snapshot::from_bytes(&snap.to_bytes()).unwrap())
        .unwrap();
    let found = restored.find_matches_for_request(&[1, 2, 3, 4]);
    assert_eq!(found, index.find_matches_for_request(&[1, 2, 3, 4]));
    assert_eq!((found.scores[&r0], found.scores[&r1]), (1, 2));
    restored.remove_worker_key(r1);
    assert_eq!(score(&restored, &[1, 2, 3, 4], r0), Some(1));
    assert_eq!(score(&restored, &[1, 2, 3, 4], r1), None);
}

/// src/indexer.rs, `dump_events`: "blocks and parents named by this index's sequence
/// hashes ... Engine hashes are not dumped"; src/events.rs, `RouterEvent::event_id`: "A
/// number increasing within one dump"; replaying the dump "rebuilds the state".
#[test]
fn dumps_name_blocks_by_this_index_hashes_never_the_engines() {
    let (index, _c) = manual_index(1, TTL);
    let (local, seq) = chain(&[1, 2, 3], 1);
    let engine: Vec<_> = (0..3)
        .map(|i| block(SequenceHash(0xA1 + i as u64), local[i], None))
        .collect();
    index.apply_event(&stored(4, None, engine));
    let dump = index.dump_events();
    assert_eq!(dump.len(), 3);
    for (i, e) in dump.iter().enumerate() {
        let data = stored_data(e);
        assert_eq!(data.blocks.len(), 1);
        let b = data.blocks[0];
        assert_eq!(
            (b.block_hash, b.tokens_hash, b.expires_in),
            (seq[i], local[i], None)
        );
        assert_eq!(data.parent_hash, i.checked_sub(1).map(|p| seq[p]));
        if i > 0 {
            assert!(e.event_id > dump[i - 1].event_id, "event ids increase");
        }
    }
    let (replayed, _c2) = manual_index(1, TTL);
    for e in &dump {
        replayed.apply_event(e);
    }
    assert_eq!(replayed.stats().rejected_events, 0);
    assert_eq!(score(&replayed, &[1, 2, 3], 4), Some(3));
    assert_eq!(replayed.dump_events(), dump);
}

/// src/snapshot.rs, `SnapshotError::Truncated::expected`: "Bytes expected from the header".
/// A file cut inside its entries, before the capacity count, expects at least the entries,
/// the count and the checksum (it said `usize::MAX`, found by an audit).
#[test]
fn a_file_cut_inside_its_entries_reports_the_length_its_header_gives() {
    let (index, _clock) = manual_index(2, Duration::from_secs(60));
    index.record(1, Query::tokens(&tokens(0, 6))).unwrap();
    let bytes = index.snapshot().to_bytes();
    let whole = bytes.len();
    for cut in [whole - 30, 40] {
        assert_eq!(
            Snapshot::from_bytes(&bytes[..cut]),
            Err(SnapshotError::Truncated {
                expected: whole,
                actual: cut
            })
        );
    }
}
