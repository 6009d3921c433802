//! What the engine's unit tests share: a small capped index on a manual clock, prompts of
//! one-token blocks, and what worker 1 holds.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use super::Core;
use crate::events::KvCacheEventData;
use crate::{Builder, LocalBlockHash, ManualClock, SequenceHash, WorkerId};

/// A block-size-1 index with a per-worker cap, on a manual clock.
pub(super) fn engine(cap: usize) -> Core {
    let b = Builder::default()
        .block_size(1)
        .ttl(Duration::from_secs(100))
        .clock(Arc::new(ManualClock::new()))
        .background_sweeper(false)
        .max_blocks_per_worker(cap);
    Core::new(&b)
}

/// The hashes of a prompt of one-token blocks.
pub(super) fn chain(blocks: &[u64]) -> (Vec<LocalBlockHash>, Vec<SequenceHash>) {
    let local: Vec<LocalBlockHash> = blocks.iter().map(|&b| LocalBlockHash(b)).collect();
    let seq = crate::compute_seq_hashes(&local);
    (local, seq)
}

/// Records `blocks` for worker 1.
pub(super) fn record(engine: &Core, blocks: &[u64]) {
    let (local, seq) = chain(blocks);
    engine.record(1u64, &local, &seq);
}

/// Worker 1's entries, each block's tokens hash, and whether every one's parent is held
/// too.
pub(super) fn held(engine: &Core) -> (Vec<u64>, bool) {
    let stored: Vec<_> = engine
        .dump::<WorkerId>()
        .into_iter()
        .filter_map(|e| match e.data {
            KvCacheEventData::Stored(d) => Some(d),
            _ => None,
        })
        .collect();
    let keys: HashSet<u64> = stored.iter().map(|d| d.blocks[0].block_hash.0).collect();
    let no_gap = stored
        .iter()
        .all(|d| d.parent_hash.is_none_or(|p| keys.contains(&p.0)));
    let mut blocks: Vec<u64> = stored.iter().map(|d| d.blocks[0].tokens_hash.0).collect();
    blocks.sort_unstable();
    (blocks, no_gap)
}
