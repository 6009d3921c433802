//! Replayable descriptions of the index's state, in the vocabulary of Dynamo's KV events.

use std::time::Duration;

use crate::{LocalBlockHash, SequenceHash, WorkerId, WorkerKey};

/// One event about one worker's cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterEvent<W: WorkerKey = WorkerId> {
    /// The worker (or worker rank) whose cache the event describes.
    pub worker_id: W,
    /// A number increasing within one dump.
    pub event_id: u64,
    /// What happened.
    pub data: KvCacheEventData,
}

/// The kinds of cache event.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KvCacheEventData {
    /// Blocks were stored, each chained to the one before it, the first to `parent_hash`.
    Stored(KvCacheStoreData),
    /// Blocks were evicted from the worker's cache.
    Removed(KvCacheRemoveData),
    /// The worker's whole cache was cleared.
    Cleared,
}

/// Blocks evicted from a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvCacheRemoveData {
    /// The sequence hashes of the evicted blocks.
    pub block_hashes: Vec<SequenceHash>,
}

/// Blocks stored on a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvCacheStoreData {
    /// The sequence hash of the block before the first one; `None` for a prompt's first block.
    pub parent_hash: Option<SequenceHash>,
    /// The blocks, in prompt order.
    pub blocks: Vec<KvCacheStoredBlockData>,
}

/// One stored block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCacheStoredBlockData {
    /// The block's sequence hash (its node in the tree).
    pub block_hash: SequenceHash,
    /// The hash of the block's tokens alone.
    pub tokens_hash: LocalBlockHash,
    /// How long the entry had left to live when dumped (Dynamo's dump drops this; at
    /// least 1 ns for a live approximate claim); `None` for a block stored by an exact KV
    /// event, which lives until removed.
    pub expires_in: Option<Duration>,
}
