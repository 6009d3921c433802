//! The calls of [`ApproxKvIndexer`] for router replicas that share their decisions:
//! applying another replica's decisions, the outbox of this one's, resharing capacities,
//! and the counters (`docs/design.md`, "Sharing decisions").

use super::ApproxKvIndexer;
use crate::replication::{Applied, CapacityOf, Decision, Outbox, ReplicationStats};
use crate::WorkerKey;

impl<W: WorkerKey> ApproxKvIndexer<W> {
    /// Applies another replica's [`Decision`] as if this index had taken it when it was
    /// taken: a route's blocks expire a TTL after the decision's time (by this index's
    /// wall clock: a decision taken 3 s ago expires 3 s before one taken now; one dated in
    /// the future counts as taken now; one a TTL old or more is skipped), under the same
    /// caps as local decisions; removals remove (the worker as it is when the removal
    /// arrives). A decision about a worker taken before its latest removal here or by any
    /// replica, or a capacity set before the key's latest capacity change, changes nothing,
    /// as it would not have in its time (`Applied::Applied`, counted in
    /// [`ReplicationStats::superseded`]): replicas receiving each other's removals and
    /// capacities late end alike. Idempotent: a decision whose sequence
    /// number is not above every one applied from its origin is skipped, as are this
    /// replica's own (those it took since it was built: a replica restarted with the same
    /// [`replica_id`](crate::Builder::replica_id) applies what it decided before, as
    /// replayed by a transport). Blocks are placed by the chain of their tokens hashes (as
    /// [`compute_seq_hashes`](crate::compute_seq_hashes)), which is what finds look up.
    ///
    /// Decisions of one origin are applied one at a time (a lock per origin, held while
    /// one is applied); apply them in their order. Different origins' decisions can be
    /// applied from different threads at once, and do not wait for each other.
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use approx_kv_index::*;
    /// use approx_kv_index::replication::{Action, Applied, Decision};
    /// let wall = Arc::new(ManualClock::new());
    /// wall.set(Duration::from_secs(1_000));
    /// let index = ApproxKvIndexer::builder()
    ///     .block_size(1)
    ///     .ttl(Duration::from_secs(10))
    ///     .wall_clock(wall.clone())
    ///     .build()?;
    /// let taken = |seq: u64, secs_ago: u64| Decision {
    ///     origin: 5,
    ///     seq,
    ///     decided_at: Duration::from_secs(1_000 - secs_ago),
    ///     action: Action::Route { worker_id: 2, dp_rank: 0, blocks: vec![LocalBlockHash(9)] },
    /// };
    /// assert_eq!(index.apply_decision(&taken(1, 10)), Applied::Expired);
    /// assert_eq!(index.apply_decision(&taken(2, 3)), Applied::Applied);
    /// assert_eq!(index.apply_decision(&taken(2, 3)), Applied::Duplicate);
    /// assert_eq!(index.find(Query::blocks(&[LocalBlockHash(9)])).scores[&2], 1);
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn apply_decision(&self, decision: &Decision) -> Applied {
        self.replication.apply_decision::<W>(&self.core, decision)
    }

    /// Applies decisions in their order, each as [`apply_decision`](Self::apply_decision)
    /// does, and returns each one's outcome. Faster per decision than one call each: the
    /// sequence hashes of their routes are chained four at a time (a chain is serial,
    /// chains of different prompts are not), an origin's lock is taken once for a stretch
    /// of its consecutive decisions, and the [counters](Self::replication_stats) are
    /// updated once for several decisions (they are all counted when the call returns).
    /// Transports that read decisions in batches apply them this way.
    ///
    /// ```
    /// use approx_kv_index::*;
    /// use approx_kv_index::replication::{Action, Applied, Decision};
    /// let index = ApproxKvIndexer::builder().block_size(1).build()?;
    /// let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    /// let route = |seq: u64, worker_id: u64| Decision {
    ///     origin: 5,
    ///     seq,
    ///     decided_at: now,
    ///     action: Action::Route { worker_id, dp_rank: 0, blocks: vec![LocalBlockHash(9)] },
    /// };
    /// let outcomes = index.apply_decisions(&[route(1, 2), route(2, 3), route(2, 4)]);
    /// assert_eq!(outcomes, [Applied::Applied, Applied::Applied, Applied::Duplicate]);
    /// assert_eq!(index.find(Query::blocks(&[LocalBlockHash(9)])).scores.len(), 2);
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn apply_decisions(&self, decisions: &[Decision]) -> Vec<Applied> {
        self.replication.apply_decisions::<W>(&self.core, decisions)
    }

    /// The queue of this replica's decisions waiting to be published, when decisions are
    /// shared ([`Builder::share_decisions`](crate::Builder::share_decisions)); for
    /// transports.
    pub fn outbox(&self) -> Option<&Outbox> {
        self.replication.outbox()
    }

    /// Queues every worker capacity this index knows of a change (set here, learned from a
    /// report, or applied from another replica; the key not removed since, and not set by
    /// a [`restore`](Self::restore), whose snapshot does not say when it changed) once
    /// more, as a decision dated when the capacity last changed, when decisions are
    /// shared. For
    /// transports that keep a window of decisions: capacities never expire, so a replica
    /// that joins late learns those changed before the window only if they are shared
    /// again within it (`RedisSync` (feature `redis`) does this every half
    /// window, and every half `MaxLen` of entries published). Receivers apply each as its
    /// first arrival did: the latest change of a key wins, whatever the order. (A change
    /// another replica made is reshared a nanosecond before it, under this replica's id,
    /// so that it never wins over a change made at the same reading; a change made exactly
    /// one nanosecond before it elsewhere may then win on a replica that learns both from
    /// reshares.)
    ///
    /// ```
    /// use approx_kv_index::ApproxKvIndexer;
    /// use approx_kv_index::replication::Action;
    /// let index = ApproxKvIndexer::builder().block_size(2).share_decisions(64).build()?;
    /// index.set_worker_capacity(3, Some(100));
    /// let outbox = index.outbox().unwrap();
    /// let first = outbox.pop().unwrap();
    /// index.reshare_capacities();
    /// let again = outbox.pop().unwrap();
    /// assert_eq!((again.action, again.decided_at), (first.action, first.decided_at));
    /// assert!(again.seq > first.seq);
    /// # Ok::<(), approx_kv_index::ConfigError>(())
    /// ```
    pub fn reshare_capacities(&self) {
        self.replication.reshare_capacities();
    }

    /// Sets again a capacity that another replica changed after a removal here (its
    /// decision arrived first): it outlives the removal.
    pub(crate) fn keep_capacity(&self, ((worker_id, dp_rank), capacity): CapacityOf) {
        let capacity = capacity.map(|c| usize::try_from(c).unwrap_or(usize::MAX));
        self.core
            .set_capacity(W::from_parts(worker_id, dp_rank), capacity);
    }

    /// Counters of decision sharing: decisions shared and dropped, applied and skipped,
    /// and how late they arrived.
    ///
    /// ```
    /// # use approx_kv_index::ApproxKvIndexer;
    /// let index = ApproxKvIndexer::builder().replica_id(3).share_decisions(8).build()?;
    /// index.remove_worker(1);
    /// let stats = index.replication_stats();
    /// assert_eq!((stats.replica_id, stats.shared, stats.queued), (3, 1, 1));
    /// # Ok::<(), approx_kv_index::ConfigError>(())
    /// ```
    pub fn replication_stats(&self) -> ReplicationStats {
        self.replication.stats()
    }
}
