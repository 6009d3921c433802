//! Every call racing: records, finds, removals, capacities, requests (begun, reported on,
//! extended by output, finished) and sweeps from four threads on a manual clock, under no
//! cap, a per-worker cap, a global cap, or both; and the same with engines' KV events and
//! restores of the live index's snapshots among them.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use approx_kv_index::*;
use approx_kv_rng::SplitMix64;

use crate::support::events;
use crate::support::traffic::{above_a_gap, next_prompt};

const WORKERS: u64 = 12;
const THREADS: u64 = 4;

/// 400 runs (100 per cap mode) of 4 threads making 1,500 calls each on 12 workers, with
/// prompts sharing prefixes (2-token blocks from 3 values) and a TTL of 400 ns on a clock
/// the calls move: afterwards no worker holds a block whose parent it does not hold, and
/// once every TTL has passed, one sweep leaves no entry, no node and no count.
///
/// The race of a release with a record of its worker (fixed with this test) left a block
/// above a gap in about one run in 20,000, and a purge that ended while a removed worker
/// still held a block left that entry for good in about one run in 50,000 (also fixed;
/// `core::purge`'s unit test plays it in order). The bound allows one failing run, for
/// races rarer still.
#[test]
fn every_call_racing_leaves_no_gap_and_frees_everything_past_the_ttl() {
    at_most_one_of_400_fails(false);
}

/// The same calls with engines' KV events among them (400 runs): `Stored` (exact, no
/// TTL), `Removed` and `Cleared` events race records, requests and removals, and runs
/// are split up once the first exact event stops them; and snapshots of the live index
/// restored into it. Past every TTL the counts are
/// exactly the entries the dump holds (the exact ones), and once every worker is removed
/// one sweep leaves nothing.
#[test]
fn every_call_with_kv_events_keeps_counts_exact_and_frees_everything_removed() {
    at_most_one_of_400_fails(true);
}

/// Runs seeds 0 to 399 (100 per cap mode), with or without `events`: at most one fails.
fn at_most_one_of_400_fails(events: bool) {
    let failed: Vec<String> = (0..400).filter_map(|seed| race(seed, events)).collect();
    assert!(
        failed.len() <= 1,
        "{} of 400 runs: {failed:?}",
        failed.len()
    );
}

/// One run (see above): `Some(why)` if it failed. With `events`, a quarter of the records
/// are engines' KV events instead (no gap check: a `Removed` event may leave exact blocks
/// above a gap, as the engine does).
fn race(seed: u64, events: bool) -> Option<String> {
    let clock = Arc::new(ManualClock::new());
    let mut builder = ApproxKvIndexer::builder()
        .block_size(2)
        .ttl(Duration::from_nanos(400))
        .clock(clock.clone())
        .background_sweeper(false);
    if seed % 2 == 1 {
        builder = builder.max_blocks_per_worker(6);
    }
    if seed % 4 >= 2 {
        builder = builder.max_entries(40);
    }
    let index = Arc::new(builder.build().unwrap());
    let start = Arc::new(Barrier::new(THREADS as usize));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (index, start, clock) = (index.clone(), start.clone(), clock.clone());
            thread::spawn(move || {
                let mut rng = SplitMix64::new(seed * 100 + t);
                start.wait();
                calls(&index, &clock, &mut rng, events);
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    left_behind(&index, &clock, events).map(|why| format!("seed {seed}: {why}"))
}

/// What the run left that it should not have (see the tests), if anything: a block above
/// a gap (without events), then, past every TTL, entries counted that the dump does not
/// hold (or, without events, any node), then, once every worker is removed, anything.
fn left_behind(index: &ApproxKvIndexer, clock: &ManualClock, events: bool) -> Option<String> {
    if let Some(worker) = above_a_gap(index).filter(|_| !events) {
        return Some(format!("worker {worker} holds a block above a gap"));
    }
    clock.advance(Duration::from_secs(3600));
    index.sweep_expired();
    let held = index.dump_events().len(); // one block a dumped event
    let stats = index.stats();
    if stats.entries != held || (!events && stats.nodes != 0) {
        return Some(format!(
            "past every TTL, {} entries counted, {held} held, {} nodes",
            stats.entries, stats.nodes
        ));
    }
    (0..WORKERS).for_each(|w| index.remove_worker(w));
    index.sweep_expired();
    let stats = index.stats();
    let counted: Vec<(u64, usize)> = (0..WORKERS)
        .map(|w| (w, index.worker_entries(w)))
        .filter(|&(_, n)| n > 0)
        .collect();
    (stats.entries != 0 || stats.nodes != 0 || !counted.is_empty()).then(|| {
        format!(
            "every worker removed: {} entries, {} nodes, counted {counted:?}",
            stats.entries, stats.nodes
        )
    })
}

/// 1,500 calls of one thread: records (60%; with `events`, a quarter of them KV events),
/// finds, removals, capacities, requests begun (half of them reported on), extended by
/// output and finished, sweeps, with `events` restores, and clock steps.
fn calls(index: &ApproxKvIndexer, clock: &ManualClock, rng: &mut SplitMix64, events: bool) {
    let mut pool = Vec::new();
    let mut running = Vec::new();
    for _ in 0..1500 {
        let worker = rng.below(WORKERS);
        match rng.below(100) {
            0..=44 => {
                let prompt = next_prompt(rng, &mut pool);
                index.record(worker, Query::tokens(&prompt)).unwrap();
            }
            45..=59 if events => {
                let prompt = next_prompt(rng, &mut pool);
                index.apply_event(&engine_event(worker, &prompt, rng));
            }
            45..=59 => {
                let prompt = next_prompt(rng, &mut pool);
                index.record(worker, Query::tokens(&prompt)).unwrap();
            }
            60..=69 => {
                let prompt = next_prompt(rng, &mut pool);
                let _ = index.find(Query::tokens(&prompt));
            }
            70..=71 => index.remove_worker(worker),
            72..=74 => {
                let capacity = match rng.below(3) {
                    0 => None,
                    c => Some(3 * c as usize),
                };
                index.set_worker_capacity(worker, capacity);
            }
            75..=81 => {
                let prompt = next_prompt(rng, &mut pool);
                let request = index.begin_request(worker, Query::tokens(&prompt));
                if rng.below(2) == 0 {
                    let cached = rng.below(prompt.len() as u64 + 1) as usize;
                    index.observe_cached(&request, cached);
                }
                running.push((request, prompt));
            }
            82..=85 if !running.is_empty() => {
                let i = rng.below(running.len() as u64) as usize;
                index.finish_request(running.swap_remove(i).0);
            }
            86..=87 if !running.is_empty() => {
                let i = rng.below(running.len() as u64) as usize;
                let (request, prompt) = &mut running[i];
                prompt.extend([rng.below(3) as u32, 1001]);
                index.request_output(request, Query::tokens(prompt));
            }
            88..=92 => {
                index.sweep_expired();
            }
            93 if events => {
                // A snapshot of the live index, restored into it (merged with what it holds).
                index.restore(&index.snapshot()).unwrap();
            }
            _ => clock.advance(Duration::from_nanos(1 + rng.below(20))),
        }
        clock.advance(Duration::from_nanos(rng.below(2)));
    }
}

/// What an engine might publish of `prompt` on `worker`: its blocks stored (exact), the
/// blocks from a random one on removed, or (rarely) its whole cache cleared.
fn engine_event(worker: WorkerId, prompt: &[u32], rng: &mut SplitMix64) -> RouterEvent {
    let data = match rng.below(8) {
        0 => KvCacheEventData::Cleared,
        1..=4 => return events::stored_ours(worker, prompt, 2, None),
        _ => {
            let seq = compute_seq_hashes(&compute_block_hash_for_seq(prompt, 2));
            KvCacheEventData::Removed(KvCacheRemoveData {
                block_hashes: seq[rng.below(seq.len() as u64 + 1) as usize..].to_vec(),
            })
        }
    };
    RouterEvent {
        worker_id: worker,
        event_id: 0,
        data,
    }
}
