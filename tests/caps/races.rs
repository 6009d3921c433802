//! Recorders racing under caps: many threads recording many workers whose prompts share
//! blocks, so that runs are made, joined, cut and split while decisions are evicted.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use approx_kv_index::*;
use approx_kv_rng::SplitMix64;

use crate::support::traffic::{left_broken, record_prompts};

const WORKERS: u64 = 16;
const CAP: usize = 6;

/// Each run: 4 threads record 2,000 prompts each to 16 workers at random (2-token blocks
/// from 3 values, prefixes of earlier prompts extended), every worker capped at 6 blocks,
/// on a never-expiring index. Afterwards no worker may hold a block whose parent it does
/// not hold, and 100 more one-block decisions of each worker, one thread, must leave it
/// exactly its 6 newest (an entry no log names would stay for good).
///
/// Before a run's tail marker went in ahead of its head, a walk arriving at the tail in
/// between stopped there (about 13 runs in 1,500 ended with a block above a gap, 6 with a
/// worker short of its newest); a re-logged rest of a walk cut short, and a recorder
/// overtaken by a later decision of its worker, left others; a walk that met a cut's
/// first piece before its head stopped there (4 runs in 18,000 with a block above a gap;
/// loom model `walk_vs_cut`). Now no run of 24,000 fails; the bound allows one of 600. On
/// the code before these fixes (`a7c6e70`), 9 of 600 failed.
#[test]
fn recorders_of_many_workers_leave_no_block_above_a_gap_nor_past_its_turn() {
    const RUNS: u64 = 600;
    let failed: Vec<String> = (0..RUNS).filter_map(race).collect();
    assert!(
        failed.len() <= 1,
        "{} of {RUNS} runs: {failed:?}",
        failed.len()
    );
}

/// One run (see above): `Some(why)` if it failed.
fn race(seed: u64) -> Option<String> {
    let clock = Arc::new(ManualClock::new());
    let index = ApproxKvIndexer::builder()
        .block_size(2)
        .ttl(Duration::MAX)
        .clock(clock.clone())
        .background_sweeper(false)
        .max_blocks_per_worker(CAP)
        .build()
        .unwrap();
    let index = Arc::new(index);
    let start = Arc::new(Barrier::new(4));
    let recorders: Vec<_> = (0..4u64)
        .map(|t| {
            let (index, start, clock) = (index.clone(), start.clone(), clock.clone());
            thread::spawn(move || {
                let mut rng = SplitMix64::new(seed * 100 + t);
                start.wait();
                record_prompts(&index, &clock, &mut rng, |rng| rng.below(WORKERS));
            })
        })
        .collect();
    recorders.into_iter().for_each(|r| r.join().unwrap());
    left_broken(&index, WORKERS, CAP).map(|why| format!("seed {seed}: {why}"))
}
