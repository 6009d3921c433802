//! Indexes and inputs the tests build: manual-clock indexes (plain, capped, sharing their
//! decisions), prompts, and a thread count for leak checks.

use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::{ApproxKvIndexer, Builder, ManualClock};

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
