//! Snapshots: arbitrary snapshot contents survive `to_bytes`/`from_bytes` unchanged;
//! altered, truncated or arbitrary bytes are rejected with an error, never a panic; and
//! restoring arbitrary (inconsistent) entries into an index, then using it, never panics.
#![no_main]

use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::{
    ApproxKvIndexer, LocalBlockHash, ManualClock, Query, SequenceHash, Snapshot, SnapshotCapacity,
    SnapshotEntry, SnapshotError, WorkerWithDpRank,
};
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Entry {
    worker: u8,
    rank: u8,
    block: u8,
    parent: u8,
    local: u8,
    depth: u8,
    exact: bool,
    ttl_left: u64,
}

#[derive(Debug, Arbitrary)]
struct Input {
    block_size: u8,
    entries: Vec<Entry>,
    /// Capacities: (worker, rank, blocks).
    capacities: Vec<(u8, u8, u16)>,
    /// Alter one byte of the encoding: (position, xor mask).
    flip: (u16, u8),
    cut: u16,
    raw: Vec<u8>,
    queries: Vec<Vec<u8>>,
    advance: u32,
}

fuzz_target!(|input: Input| {
    let snapshot = Snapshot {
        block_size: u32::from(input.block_size),
        entries: input
            .entries
            .iter()
            .map(|e| SnapshotEntry {
                worker_id: u64::from(e.worker % 4),
                dp_rank: u32::from(e.rank % 2),
                block: SequenceHash(u64::from(e.block % 16)),
                parent: SequenceHash(u64::from(e.parent % 16)),
                local: LocalBlockHash(u64::from(e.local % 16)),
                depth: u32::from(e.depth % 4),
                exact: e.exact,
                ttl_left: Duration::from_nanos(e.ttl_left),
            })
            .collect(),
        capacities: input
            .capacities
            .iter()
            .map(|&(worker, rank, blocks)| SnapshotCapacity {
                worker_id: u64::from(worker % 4),
                dp_rank: u32::from(rank % 2),
                blocks: u64::from(blocks),
            })
            .collect(),
    };

    // Bytes: exact round trip; any alteration or truncation is an error.
    let bytes = snapshot.to_bytes();
    assert_eq!(Snapshot::from_bytes(&bytes).as_ref(), Ok(&snapshot));
    let (pos, mask) = input.flip;
    if mask != 0 {
        let mut altered = bytes.clone();
        altered[usize::from(pos) % bytes.len()] ^= mask;
        assert!(Snapshot::from_bytes(&altered).is_err());
    }
    let cut = usize::from(input.cut) % bytes.len();
    assert!(Snapshot::from_bytes(&bytes[..cut]).is_err());
    if let Err(e) = Snapshot::from_bytes(&input.raw) {
        assert!(!e.to_string().is_empty());
    }

    // Restore into indexes keyed by plain ids and by ranks; use them.
    let clock = Arc::new(ManualClock::new());
    let builder = || {
        ApproxKvIndexer::builder()
            .block_size(1)
            .ttl(Duration::from_nanos(1_000))
            .tick(Duration::from_nanos(7))
            .clock(clock.clone())
            .background_sweeper(false)
    };
    let plain = builder().build().unwrap();
    let ranked = builder().build_for::<WorkerWithDpRank>().unwrap();
    let restored = plain.restore(&snapshot);
    assert_eq!(restored.is_ok(), snapshot.block_size == 1);
    if let Err(e) = restored {
        let want = SnapshotError::BlockSizeMismatch {
            snapshot: snapshot.block_size,
            index: 1,
        };
        assert_eq!(e, want);
    }
    let _ = ranked.restore(&snapshot);
    for q in &input.queries {
        let tokens: Vec<u32> = q.iter().map(|&t| u32::from(t % 16)).collect();
        let found = plain.find(Query::tokens(&tokens));
        assert!(found.scores.values().all(|&s| s as usize <= tokens.len()));
        let found = ranked.find(Query::tokens(&tokens));
        assert!(found.scores.values().all(|&s| s as usize <= tokens.len()));
    }
    let again = plain.snapshot();
    assert_eq!(Snapshot::from_bytes(&again.to_bytes()), Ok(again));
    clock.advance(Duration::from_nanos(u64::from(input.advance)));
    plain.sweep_expired();
    ranked.sweep_expired();
    for w in 0..4 {
        plain.remove_worker(w);
        ranked.remove_worker_key(WorkerWithDpRank::new(w, 0));
        ranked.remove_worker(w);
    }
    plain.sweep_expired();
    ranked.sweep_expired();
    let _ = (plain.dump_events(), ranked.dump_events(), plain.stats());
});
