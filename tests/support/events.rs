//! KV events the tests apply: `Stored` events of blocks named by this index's sequence
//! hashes or by an engine's, `Removed` events, and the data of a dumped event.

use std::time::Duration;

use approx_kv_index::{
    KvCacheEventData, KvCacheRemoveData, KvCacheStoreData, KvCacheStoredBlockData, LocalBlockHash,
    RouterEvent, SequenceHash, WorkerId, WorkerKey,
};

use super::index::chain;

/// A block of a `Stored` event: its name, its tokens hash and its TTL left (`None`:
/// exact).
pub fn block(
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

/// A `Stored` event of `worker`: `blocks` after `parent`.
pub fn stored<W: WorkerKey>(
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
pub fn stored_ours<W: WorkerKey>(
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

/// The data of a dumped event (a dump holds only `Stored` events).
pub fn stored_data<W: WorkerKey>(e: &RouterEvent<W>) -> &KvCacheStoreData {
    match &e.data {
        KvCacheEventData::Stored(d) => d,
        other => panic!("a dump holds only Stored events, got {other:?}"),
    }
}

/// A `Stored` event of exact blocks, each `(tokens hash, block name)`, after `parent`.
pub fn stored_event(worker: WorkerId, parent: Option<u64>, blocks: &[(u64, u64)]) -> RouterEvent {
    let blocks = blocks
        .iter()
        .map(|&(tokens_hash, block_hash)| KvCacheStoredBlockData {
            block_hash: SequenceHash(block_hash),
            tokens_hash: LocalBlockHash(tokens_hash),
            expires_in: None,
        });
    RouterEvent {
        worker_id: worker,
        event_id: 0,
        data: KvCacheEventData::Stored(KvCacheStoreData {
            parent_hash: parent.map(SequenceHash),
            blocks: blocks.collect(),
        }),
    }
}

/// A `Removed` event of the blocks named `hashes`.
pub fn removed_event(worker: WorkerId, hashes: &[u64]) -> RouterEvent {
    RouterEvent {
        worker_id: worker,
        event_id: 0,
        data: KvCacheEventData::Removed(KvCacheRemoveData {
            block_hashes: hashes.iter().map(|&h| SequenceHash(h)).collect(),
        }),
    }
}
