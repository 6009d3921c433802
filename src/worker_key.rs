//! Worker identity: plain worker ids, or (worker id, data-parallel rank) pairs.

use std::fmt::Debug;
use std::hash::Hash;

use crate::WorkerId;

/// A key identifying one KV cache: a plain [`WorkerId`] (the default), or a
/// [`WorkerWithDpRank`] when a worker runs several data-parallel ranks, each with its own
/// cache. The index is generic over it at no cost to the plain case.
pub trait WorkerKey: Copy + Eq + Hash + Ord + Debug + Send + Sync + 'static {
    /// The worker this cache belongs to ([`remove_worker`] of it removes every rank).
    ///
    /// [`remove_worker`]: crate::ApproxKvIndexer::remove_worker
    fn worker_id(&self) -> WorkerId;
    /// The data-parallel rank within the worker (0 for plain ids).
    fn dp_rank(&self) -> u32;
    /// Rebuilds the key from its parts.
    fn from_parts(worker_id: WorkerId, dp_rank: u32) -> Self;
}

impl WorkerKey for WorkerId {
    #[inline]
    fn worker_id(&self) -> WorkerId {
        *self
    }
    #[inline]
    fn dp_rank(&self) -> u32 {
        0
    }
    #[inline]
    fn from_parts(worker_id: WorkerId, _dp_rank: u32) -> Self {
        worker_id
    }
}

/// A worker's data-parallel rank: Dynamo's identity of one KV cache.
///
/// ```
/// use std::time::Duration;
/// use approx_kv_index::{ApproxKvIndexer, Query, WorkerWithDpRank};
/// let index = ApproxKvIndexer::builder().block_size(2).build_for::<WorkerWithDpRank>()?;
/// let (r0, r1) = (WorkerWithDpRank::new(7, 0), WorkerWithDpRank::new(7, 1));
/// index.record(r0, Query::tokens(&[1, 2])).unwrap();
/// index.record(r1, Query::tokens(&[1, 2, 3, 4])).unwrap();
/// let found = index.find(Query::tokens(&[1, 2, 3, 4]));
/// assert_eq!((found.scores[&r0], found.scores[&r1]), (1, 2));
/// index.remove_worker(7); // every rank of worker 7
/// assert!(index.find(Query::tokens(&[1, 2])).scores.is_empty());
/// # Ok::<(), approx_kv_index::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct WorkerWithDpRank {
    /// The worker.
    pub worker_id: WorkerId,
    /// The data-parallel rank within it.
    pub dp_rank: u32,
}

impl WorkerWithDpRank {
    /// The key of rank `dp_rank` of worker `worker_id`.
    pub fn new(worker_id: WorkerId, dp_rank: u32) -> Self {
        Self { worker_id, dp_rank }
    }
}

impl WorkerKey for WorkerWithDpRank {
    #[inline]
    fn worker_id(&self) -> WorkerId {
        self.worker_id
    }
    #[inline]
    fn dp_rank(&self) -> u32 {
        self.dp_rank
    }
    #[inline]
    fn from_parts(worker_id: WorkerId, dp_rank: u32) -> Self {
        Self { worker_id, dp_rank }
    }
}
