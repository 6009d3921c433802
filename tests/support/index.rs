//! Indexes and inputs the tests build: manual-clock indexes (plain, capped, keyed by
//! data-parallel ranks, sharing their decisions), prompts and their hashes, scores, and a
//! thread count for leak checks.

use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::{
    compute_block_hash_for_seq, compute_seq_hashes, ApproxKvIndexer, Builder, LocalBlockHash,
    ManualClock, Query, SequenceHash, WorkerId, WorkerKey, WorkerWithDpRank,
};

/// An index on a manual clock with no background sweeper: fully deterministic.
pub fn manual_index(block_size: u32, ttl: Duration) -> (ApproxKvIndexer, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let index = ApproxKvIndexer::builder()
        .block_size(block_size)
        .ttl(ttl)
        .tick(Duration::from_millis(100))
        .clock(clock.clone())
        .background_sweeper(false)
        .build()
        .expect("valid config");
    (index, clock)
}

/// A block-size-1 index on `clock` with no background sweeper and the given caps.
pub fn capped_on(
    clock: &Arc<ManualClock>,
    ttl: Duration,
    per_worker: Option<usize>,
    total: Option<usize>,
) -> ApproxKvIndexer {
    let mut b = ApproxKvIndexer::builder()
        .block_size(1)
        .ttl(ttl)
        .clock(clock.clone())
        .background_sweeper(false);
    if let Some(cap) = per_worker {
        b = b.max_blocks_per_worker(cap);
    }
    if let Some(cap) = total {
        b = b.max_entries(cap);
    }
    b.build().expect("valid config")
}

/// Threads of this process (Linux), for leak checks.
pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

/// `n` tokens starting at `start`.
pub fn tokens(start: u32, n: u32) -> Vec<u32> {
    (start..start + n).collect()
}

/// Records `worker`'s prompts of `tokens(start, n)` for each `(start, n)`, in turn, the
/// clock a microsecond later after each: each decision is used after the one before.
pub fn record_in_turn(
    index: &ApproxKvIndexer,
    clock: &ManualClock,
    worker: WorkerId,
    prompts: &[(u32, u32)],
) {
    for &(start, n) in prompts {
        index
            .record(worker, Query::tokens(&tokens(start, n)))
            .unwrap();
        clock.advance(Duration::from_micros(1));
    }
}

/// A replica sharing its decisions (an outbox of 1,024): block size 1, `ttl`, `clock` as
/// both its index clock and its wall clock, no background sweeper.
pub fn sharing_replica(id: u64, clock: &Arc<ManualClock>, ttl: Duration) -> Builder {
    ApproxKvIndexer::builder()
        .block_size(1)
        .ttl(ttl)
        .clock(clock.clone())
        .wall_clock(clock.clone())
        .background_sweeper(false)
        .replica_id(id)
        .share_decisions(1024)
}

/// A manual-clock index (no background sweeper) with block size 1 and the given caps.
pub fn index_with(
    ttl: Duration,
    per_worker: Option<usize>,
    total: Option<usize>,
) -> (ApproxKvIndexer, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    (capped_on(&clock, ttl, per_worker, total), clock)
}

/// A manual-clock index keyed by data-parallel ranks.
pub fn ranked_index(
    block_size: u32,
    ttl: Duration,
) -> (ApproxKvIndexer<WorkerWithDpRank>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let index = ApproxKvIndexer::builder()
        .block_size(block_size)
        .ttl(ttl)
        .clock(clock.clone())
        .background_sweeper(false)
        .build_for::<WorkerWithDpRank>()
        .unwrap();
    (index, clock)
}

/// Local and sequence hashes of `tokens`.
pub fn chain(tokens: &[u32], block_size: u32) -> (Vec<LocalBlockHash>, Vec<SequenceHash>) {
    let local = compute_block_hash_for_seq(tokens, block_size);
    let seq = compute_seq_hashes(&local);
    (local, seq)
}

/// `worker`'s score for `tokens`, if it has one.
pub fn score<W: WorkerKey>(index: &ApproxKvIndexer<W>, tokens: &[u32], worker: W) -> Option<u32> {
    index
        .find_matches_for_request(tokens)
        .scores
        .get(&worker)
        .copied()
}

/// `worker`'s score for `tokens`, 0 if it has none.
pub fn score_or_zero(index: &ApproxKvIndexer, tokens: &[u32], worker: WorkerId) -> u32 {
    index
        .find_matches_for_request(tokens)
        .scores
        .get(&worker)
        .copied()
        .unwrap_or(0)
}
