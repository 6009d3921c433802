//! Racing traffic for the caps' race tests: prompts that share prefixes (2-token blocks
//! from 3 values, so that runs are made, joined, cut and split all the time), and the
//! checks that such a race left every worker whole.

use std::collections::HashSet;
use std::time::Duration;

use approx_kv_index::*;
use approx_kv_rng::SplitMix64;

/// The next prompt: a block-aligned prefix of one of `pool`'s, extended by up to 6 blocks
/// (`[v, 1000]`, `v` from 3 values); kept in `pool` while it holds fewer than 32.
pub fn next_prompt(rng: &mut SplitMix64, pool: &mut Vec<Vec<u32>>) -> Vec<u32> {
    let mut prompt = match pool.len() {
        0 => Vec::new(),
        n => {
            let base = &pool[rng.below(n as u64) as usize];
            base[..2 * rng.below(base.len() as u64 / 2 + 1) as usize].to_vec()
        }
    };
    for _ in 0..rng.below(7) {
        prompt.extend([rng.below(3) as u32, 1000]);
    }
    if pool.len() < 32 {
        pool.push(prompt.clone());
    }
    prompt
}

/// Records 2,000 such prompts (a clock tick of 1 to 3 ns after each), each to the worker
/// `worker` picks.
pub fn record_prompts(
    index: &ApproxKvIndexer,
    clock: &ManualClock,
    rng: &mut SplitMix64,
    mut worker: impl FnMut(&mut SplitMix64) -> WorkerId,
) {
    let mut pool = Vec::new();
    for _ in 0..2000 {
        let prompt = next_prompt(rng, &mut pool);
        let key = worker(rng);
        index.record(key, Query::tokens(&prompt)).unwrap();
        clock.advance(Duration::from_nanos(1 + rng.below(3)));
    }
}

/// `Some(why)` if a worker of `workers` holds a block whose parent it does not hold, or,
/// after 100 more one-block decisions of each (one thread), does not hold exactly its
/// `cap` newest: an entry no log names stays for good.
pub fn left_broken(index: &ApproxKvIndexer, workers: u64, cap: usize) -> Option<String> {
    if let Some(worker) = above_a_gap(index) {
        return Some(format!("worker {worker} holds a block above a gap"));
    }
    for worker in 0..workers {
        for i in 0..100u32 {
            index
                .record(worker, Query::tokens(&[60_000 + i, 1]))
                .unwrap();
        }
        let newest = (100 - cap as u32..100)
            .filter(|&i| {
                index
                    .find(Query::tokens(&[60_000 + i, 1]))
                    .scores
                    .contains_key(&worker)
            })
            .count();
        if newest != cap || index.worker_entries(worker) != cap {
            return Some(format!(
                "worker {worker} holds {newest} of its {cap} newest"
            ));
        }
    }
    None
}

/// A worker holding a block whose parent it does not hold, if any (as the dump reports
/// live entries).
pub fn above_a_gap(index: &ApproxKvIndexer) -> Option<u64> {
    let events = index.dump_events();
    let stored = || {
        events.iter().filter_map(|e| match &e.data {
            KvCacheEventData::Stored(d) => Some((e.worker_id, d)),
            _ => None,
        })
    };
    let held: HashSet<(u64, u64)> = stored()
        .flat_map(|(w, d)| d.blocks.iter().map(move |b| (w, b.block_hash.0)))
        .collect();
    stored()
        .find(|(w, d)| d.parent_hash.is_some_and(|p| !held.contains(&(*w, p.0))))
        .map(|(w, _)| w)
}
