//! The engines' KV events (`--events LAG`): what each simulated engine stores, evicts and
//! clears, published as Dynamo's `RouterEvent`s and delivered to the router `LAG` later.
//!
//! The events speak the index's own hashes (the simulated caches hold sequence hashes),
//! cover every request the engines serve (another router's too) and describe each
//! request's net effect on its engine: the prompt blocks it leaves cached (a `Stored` per
//! stretch, chained to the block before), the keys it pushed out that are gone at its end
//! (a `Removed`; decode blocks are never stored, so their removal names a hash the index
//! does not know, which it ignores). A restart is a `Cleared`.

use std::collections::VecDeque;
use std::time::Duration;

use approx_kv_index::{
    KvCacheEventData, KvCacheRemoveData, KvCacheStoreData, KvCacheStoredBlockData, LocalBlockHash,
    RouterEvent, SequenceHash,
};

/// Events waiting for their delivery time, in the order the engines published them.
#[derive(Debug)]
pub struct EventFeed {
    lag_ms: u64,
    next_id: u64,
    pending: VecDeque<(u64, RouterEvent)>,
}

impl EventFeed {
    /// A feed that delivers each event `lag` after it is published.
    pub fn new(lag: Duration) -> Self {
        Self {
            lag_ms: u64::try_from(lag.as_millis()).unwrap_or(u64::MAX),
            next_id: 0,
            pending: VecDeque::new(),
        }
    }

    fn publish(&mut self, worker: usize, at_ms: u64, data: KvCacheEventData) {
        self.next_id += 1;
        let event = RouterEvent {
            worker_id: worker as u64,
            event_id: self.next_id,
            data,
        };
        self.pending
            .push_back((at_ms.saturating_add(self.lag_ms), event));
    }

    /// Worker `worker` cached `blocks` (consecutive, in prompt order) after `parent`.
    pub fn stored(
        &mut self,
        worker: usize,
        at_ms: u64,
        parent: Option<SequenceHash>,
        blocks: impl Iterator<Item = (LocalBlockHash, SequenceHash)>,
    ) {
        let blocks: Vec<KvCacheStoredBlockData> = blocks
            .map(|(tokens_hash, block_hash)| KvCacheStoredBlockData {
                block_hash,
                tokens_hash,
                expires_in: None,
            })
            .collect();
        if !blocks.is_empty() {
            let data = KvCacheStoreData {
                parent_hash: parent,
                blocks,
            };
            self.publish(worker, at_ms, KvCacheEventData::Stored(data));
        }
    }

    /// Worker `worker` evicted `keys`.
    pub fn removed(&mut self, worker: usize, at_ms: u64, keys: &[u64]) {
        if !keys.is_empty() {
            let block_hashes = keys.iter().map(|&k| SequenceHash(k)).collect();
            let data = KvCacheRemoveData { block_hashes };
            self.publish(worker, at_ms, KvCacheEventData::Removed(data));
        }
    }

    /// Worker `worker`'s engine restarted.
    pub fn cleared(&mut self, worker: usize, at_ms: u64) {
        self.publish(worker, at_ms, KvCacheEventData::Cleared);
    }

    /// Takes the events delivered by `now_ms`, in publication order, into `out`.
    pub fn due(&mut self, now_ms: u64, out: &mut Vec<RouterEvent>) {
        while self.pending.front().is_some_and(|(at, _)| *at <= now_ms) {
            if let Some((_, event)) = self.pending.pop_front() {
                out.push(event);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_arrive_after_their_lag_in_order() {
        let mut feed = EventFeed::new(Duration::from_millis(500));
        let blocks = [(LocalBlockHash(1), SequenceHash(11))];
        feed.stored(0, 1000, None, blocks.into_iter());
        feed.stored(1, 1000, None, std::iter::empty()); // nothing stored: no event
        feed.removed(0, 1200, &[11]);
        feed.removed(0, 1200, &[]);
        feed.cleared(2, 1300);
        assert_eq!(
            (feed.pending.len(), feed.next_id),
            (3, 3),
            "3 events published"
        );
        let mut out = Vec::new();
        feed.due(1499, &mut out);
        assert!(out.is_empty());
        feed.due(1700, &mut out);
        assert_eq!(out.len(), 2);
        assert!(matches!(out[0].data, KvCacheEventData::Stored(_)));
        assert!(matches!(out[1].data, KvCacheEventData::Removed(_)));
        assert!(out[0].event_id < out[1].event_id);
        feed.due(u64::MAX, &mut out);
        assert_eq!(out.len(), 3);
        assert_eq!(
            (out[2].worker_id, &out[2].data),
            (2, &KvCacheEventData::Cleared)
        );
    }
}
