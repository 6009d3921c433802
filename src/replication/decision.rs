//! [`Decision`]: one replica's routing decision (or worker removal), as other replicas
//! receive it.

use std::time::Duration;

use crate::{LocalBlockHash, WorkerId};

/// Identifies one router replica (one index) among those sharing decisions.
pub type ReplicaId = u64;

/// The most blocks one shared routing decision carries (a prompt of 1 Mi tokens at block
/// size 16). A longer prompt's decision is shared as its first `MAX_BLOCKS` blocks, which
/// is still true of the worker: a cached prompt holds its prefixes. This bounds an encoded
/// decision to [`MAX_ENCODED_LEN`](crate::replication::MAX_ENCODED_LEN) bytes.
pub const MAX_BLOCKS: usize = 1 << 16;

/// What a replica did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Routed a prompt whose full blocks have these tokens hashes (salted, if the request
    /// was) to rank `dp_rank` of `worker_id` (rank 0 for plain worker ids).
    Route {
        /// The worker.
        worker_id: WorkerId,
        /// Its data-parallel rank.
        dp_rank: u32,
        /// The tokens hash of each full block, in prompt order (at most [`MAX_BLOCKS`]).
        blocks: Vec<LocalBlockHash>,
    },
    /// Called `remove_worker`: every rank of the worker is forgotten.
    RemoveWorker {
        /// The worker.
        worker_id: WorkerId,
    },
    /// Called `remove_worker_key`: one rank is forgotten.
    RemoveKey {
        /// The worker.
        worker_id: WorkerId,
        /// The rank.
        dp_rank: u32,
    },
    /// Set rank `dp_rank`'s capacity (`set_worker_capacity`, or learned from a report):
    /// blocks, or `None` for unknown.
    SetCapacity {
        /// The worker.
        worker_id: WorkerId,
        /// Its data-parallel rank.
        dp_rank: u32,
        /// The capacity in blocks (at most `u64::MAX - 1`); `None`: unknown.
        capacity: Option<u64>,
    },
    /// A report showed that rank `dp_rank` lost the blocks it last used `used_before`
    /// before the decision, and every block it used no later (`observe_cached`'s loss
    /// rule): the claims of decisions taken that long ago or longer go. For a loss that
    /// only a restart explains, `used_before` reaches just past the request's begin: the
    /// claims taken before it go, its own route stays.
    DropOlder {
        /// The worker.
        worker_id: WorkerId,
        /// Its data-parallel rank.
        dp_rank: u32,
        /// How long before the decision the lost block was last used.
        used_before: Duration,
    },
}

/// A decision one replica took, stamped so that others can apply it once, in order, and
/// date it from when it was taken.
///
/// ```
/// use std::time::Duration;
/// use approx_kv_index::replication::{Action, Decision};
/// let d = Decision {
///     origin: 1,
///     seq: 7,
///     decided_at: Duration::from_secs(1_700_000_000),
///     action: Action::RemoveWorker { worker_id: 3 },
/// };
/// assert_eq!(Decision::decode(&d.encode()), Ok(d));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The replica that took it.
    pub origin: ReplicaId,
    /// Its number among the origin's decisions: each decision gets the next one.
    /// Receivers apply a decision only if its number is above every one they applied from
    /// that origin, so duplicates and replays are harmless.
    pub seq: u64,
    /// Wall-clock time of the decision, since the Unix epoch (the origin's
    /// [`Builder::wall_clock`](crate::Builder::wall_clock)).
    pub decided_at: Duration,
    /// What was decided.
    pub action: Action,
}
