//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::{ApproxKvIndexer, ManualClock};

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

/// Threads of this process (Linux), for leak checks.
pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

/// `n` tokens starting at `start`.
pub fn tokens(start: u32, n: u32) -> Vec<u32> {
    (start..start + n).collect()
}
