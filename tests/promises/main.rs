//! Behavioural promises of the documentation (README.md, docs/design.md, the rustdoc of
//! the public API) that no other test asserted: one promise per test, each naming the
//! sentence it checks. Time is driven by manual clocks (or a test clock of its own where
//! a reading beyond what `ManualClock` can show is needed), never by sleeping.

#[path = "../support/mod.rs"]
mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::replication::{Action, Applied, MAX_BLOCKS};
use approx_kv_index::*;

use support::index::{manual_index, tokens};

const TTL: Duration = Duration::from_secs(10);
const NS: Duration = Duration::from_nanos(1);
/// A wall-clock origin for the sharing tests (only differences matter).
const EPOCH: Duration = Duration::from_secs(1_700_000_000);

mod events;
mod sharing;
mod snapshot;
mod ttl;

// Helpers shared by the modules.

fn score<W: WorkerKey>(index: &ApproxKvIndexer<W>, tokens: &[u32], worker: W) -> Option<u32> {
    index
        .find_matches_for_request(tokens)
        .scores
        .get(&worker)
        .copied()
}

/// Local and sequence hashes of `tokens`.
fn chain(tokens: &[u32], block_size: u32) -> (Vec<LocalBlockHash>, Vec<SequenceHash>) {
    let local = compute_block_hash_for_seq(tokens, block_size);
    let seq = compute_seq_hashes(&local);
    (local, seq)
}

fn block(
    block_hash: SequenceHash,
    tokens_hash: LocalBlockHash,
    expires_in: Option<Duration>,
) -> KvCacheStoredBlockData {
    KvCacheStoredBlockData {
        block_hash,
        tokens_hash,
        expires_in,
    }
}

fn stored<W: WorkerKey>(
    worker: W,
    parent: Option<SequenceHash>,
    blocks: Vec<KvCacheStoredBlockData>,
) -> RouterEvent<W> {
    RouterEvent {
        worker_id: worker,
        event_id: 0,
        data: KvCacheEventData::Stored(KvCacheStoreData {
            parent_hash: parent,
            blocks,
        }),
    }
}

/// A `Stored` event for `worker` of the whole of `tokens` (block size `bs`), named by this
/// index's own sequence hashes.
fn stored_ours<W: WorkerKey>(
    worker: W,
    tokens: &[u32],
    bs: u32,
    expires_in: Option<Duration>,
) -> RouterEvent<W> {
    let (local, seq) = chain(tokens, bs);
    let blocks = local
        .iter()
        .zip(&seq)
        .map(|(&l, &s)| block(s, l, expires_in))
        .collect();
    stored(worker, None, blocks)
}

fn stored_data<W: WorkerKey>(e: &RouterEvent<W>) -> &KvCacheStoreData {
    match &e.data {
        KvCacheEventData::Stored(d) => d,
        other => panic!("a dump holds only Stored events, got {other:?}"),
    }
}

/// A manual-clock index keyed by data-parallel ranks.
fn ranked_index(
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
