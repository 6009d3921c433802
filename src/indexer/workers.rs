//! The calls of [`ApproxKvIndexer`] about workers: their capacities, their removal, and
//! the entries they hold.

use super::ApproxKvIndexer;
use crate::replication::Action;
use crate::{WorkerId, WorkerKey};

impl<W: WorkerKey> ApproxKvIndexer<W> {
    /// Sets `worker`'s KV capacity in blocks, as its engine reports it (vLLM and SGLang
    /// export it), at any time, for any key, recorded or not (an unknown key is registered).
    /// `Some(n)`: the key holds at most `n` blocks: beyond, its least recently recorded
    /// decisions are evicted, deepest blocks first, as under
    /// [`Builder::max_blocks_per_worker`](crate::Builder::max_blocks_per_worker), whose
    /// bound it replaces for this key; a lower capacity evicts at once. `None`: unknown
    /// again; the key runs on the TTL and the index-wide caps. Entries still expire by
    /// the TTL; exact entries (KV events) count and are never evicted.
    ///
    /// The first capacity set on an index without a per-worker cap starts logging
    /// decisions for eviction, and logs what every worker holds then (each place one of
    /// its decisions ended as a decision, its path's expiries made unique: a few
    /// nanoseconds more at most; under [`Builder::max_entries`](crate::Builder::max_entries)
    /// every decision is logged already, and keeps its expiry), so everything is evicted
    /// in order (the first, if other threads are splitting runs meanwhile, waits for their
    /// splits, and they for its reading of the tree). A capacity belongs to the key's
    /// registration:
    /// [`remove_worker`](Self::remove_worker) forgets it. It is shared with the other
    /// replicas (an [`Action::SetCapacity`](crate::replication::Action::SetCapacity)
    /// decision, as are the capacities reports teach) and kept in snapshots.
    ///
    /// ```
    /// use approx_kv_index::{ApproxKvIndexer, Query};
    /// let index = ApproxKvIndexer::new(1, std::time::Duration::from_secs(60)).unwrap();
    /// index.set_worker_capacity(7, Some(4));
    /// index.record(7, Query::tokens(&[1, 2, 3])).unwrap();
    /// index.record(7, Query::tokens(&[9, 8, 7])).unwrap(); // 6 blocks: 2 of the first go
    /// assert_eq!(index.worker_entries(7), 4);
    /// assert_eq!(index.find(Query::tokens(&[1, 2, 3])).scores[&7], 1);
    /// index.set_worker_capacity(7, Some(2)); // lowered: evicts at once, oldest first
    /// assert_eq!(index.worker_entries(7), 2);
    /// assert!(index.find(Query::tokens(&[1])).scores.is_empty());
    /// assert_eq!(index.find(Query::tokens(&[9, 8, 7])).scores[&7], 2);
    /// assert_eq!(index.worker_capacity(7), Some(2));
    /// ```
    pub fn set_worker_capacity(&self, worker: W, capacity: Option<usize>) {
        let action = Action::SetCapacity {
            worker_id: worker.worker_id(),
            dp_rank: worker.dp_rank(),
            capacity: capacity.map(|c| c as u64),
        };
        self.replication.take_keyed(
            action,
            || self.core.set_capacity(worker, capacity),
            |kept| self.keep_capacity(kept),
        );
    }

    /// The capacity set for `worker` with [`set_worker_capacity`](Self::set_worker_capacity),
    /// if any (`None` for an unknown key, a removed one, or a capacity set to unknown).
    pub fn worker_capacity(&self, worker: W) -> Option<usize> {
        self.core.capacity_of(worker)
    }

    /// Forgets `worker`, every data-parallel rank of it: no find reports it until it is
    /// recorded again. O(ranks). Its entries are freed whatever their TTL left, together
    /// with those of every worker removed meanwhile: by the sweeper within two rounds over
    /// the tree, a few shards a tick (16 ticks, 1.6 s at the default tick), or at once by
    /// [`sweep_expired`](Self::sweep_expired); before that, a record that copies a block's holder array leaves the removed workers'
    /// holders out (without [`max_entries`](crate::Builder::max_entries), under which they
    /// count toward the cap until the sweep frees them). So the holders of removed
    /// workers never pile up on shared blocks under churn. Unknown ids are ignored.
    ///
    /// ```
    /// # use approx_kv_index::{ApproxKvIndexer, Query};
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// index.record(4, Query::tokens(&[1, 2])).unwrap();
    /// index.remove_worker(4);
    /// index.remove_worker(12345); // unknown: nothing happens
    /// assert!(index.find(Query::tokens(&[1, 2])).scores.is_empty());
    /// ```
    pub fn remove_worker(&self, worker: WorkerId) {
        let action = Action::RemoveWorker { worker_id: worker };
        self.replication.take_keyed(
            action,
            || self.core.remove_worker(worker),
            |kept| self.keep_capacity(kept),
        );
    }

    /// The (block, worker) entries `worker` holds, all its ranks together (0 for a worker
    /// the index does not know): what [`OverlapScores::tree_sizes`](crate::OverlapScores)
    /// reports for one key, summed over the worker's ranks, including ranks that hold none
    /// of a query. Like `tree_sizes`, it counts entries stored and not yet reclaimed.
    ///
    /// ```
    /// use approx_kv_index::{ApproxKvIndexer, Query, WorkerWithDpRank};
    /// let index = ApproxKvIndexer::builder()
    ///     .block_size(2)
    ///     .build_for::<WorkerWithDpRank>()
    ///     .unwrap();
    /// index.record(WorkerWithDpRank::new(7, 0), Query::tokens(&[1, 2, 3, 4])).unwrap();
    /// index.record(WorkerWithDpRank::new(7, 1), Query::tokens(&[9, 9])).unwrap();
    /// assert_eq!(index.worker_entries(7), 3);
    /// let found = index.find(Query::tokens(&[1, 2]));
    /// assert_eq!(found.tree_sizes[&WorkerWithDpRank::new(7, 0)], 2); // rank 0 only
    /// assert_eq!(index.worker_entries(8), 0);
    /// ```
    pub fn worker_entries(&self, worker: WorkerId) -> usize {
        self.core.worker_entries(worker)
    }

    /// Forgets one key: for [`WorkerWithDpRank`](crate::WorkerWithDpRank), one rank of a
    /// worker (the others stay); for plain ids, the same as
    /// [`remove_worker`](Self::remove_worker).
    pub fn remove_worker_key(&self, worker: W) {
        let action = Action::RemoveKey {
            worker_id: worker.worker_id(),
            dp_rank: worker.dp_rank(),
        };
        self.replication.take_keyed(
            action,
            || self.core.remove_key(worker),
            |kept| self.keep_capacity(kept),
        );
    }
}
