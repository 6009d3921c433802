//! The index's side of sharing: applying other replicas' decisions, and reading the
//! outbox and counters.

use super::{Action, Applied, Decision, Outbox, ReplicationStats};
use crate::clock::nanos;
use crate::hash::{chain_each_into, compute_seq_hashes};
use crate::{ApproxKvIndexer, LocalBlockHash, SequenceHash, WorkerKey};

impl<W: WorkerKey> ApproxKvIndexer<W> {
    /// Applies another replica's [`Decision`] as if this index had taken it when it was
    /// taken: a route's blocks expire a TTL after the decision's time (by this index's
    /// wall clock: a decision taken 3 s ago expires 3 s before one taken now; one dated in
    /// the future counts as taken now; one a TTL old or more is skipped), under the same
    /// caps as local decisions; removals remove. Idempotent: a decision whose sequence
    /// number is not above every one applied from its origin is skipped, as are this
    /// replica's own (those it took since it was built: a replica restarted with the same
    /// [`replica_id`](crate::Builder::replica_id) applies what it decided before, as
    /// replayed by a transport). Blocks are placed by the chain of their tokens hashes (as
    /// [`compute_seq_hashes`]), which is what finds look up.
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
        let mut outcome = Applied::OwnOrigin;
        self.replication.apply_each(
            std::slice::from_ref(decision),
            |_, action, age| self.apply_action(action, age, None),
            |o| outcome = o,
        );
        outcome
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
        // A few at a time, so that their chains are still in cache when recorded.
        const GROUP: usize = 16;
        let mut chains = Vec::with_capacity(GROUP);
        let mut blocks: Vec<&[LocalBlockHash]> = Vec::with_capacity(GROUP);
        let mut outcomes = Vec::with_capacity(decisions.len());
        for group in decisions.chunks(GROUP) {
            // This replica's own decisions (every replica reads its own back from a
            // shared stream) are skipped: nothing to chain.
            blocks.clear();
            blocks.extend(group.iter().map(|decision| {
                if self.replication.is_own(decision) {
                    &[][..]
                } else {
                    route_blocks(decision)
                }
            }));
            chain_each_into(&blocks, &mut chains);
            self.replication.apply_each(
                group,
                |k, action, age| self.apply_action(action, age, Some(&chains[k])),
                |o| outcomes.push(o),
            );
        }
        outcomes
    }

    /// Applies one decision's action, `age` old; `chained`: its route's sequence hashes,
    /// if already chained.
    fn apply_action(
        &self,
        action: &Action,
        age: std::time::Duration,
        chained: Option<&[SequenceHash]>,
    ) -> Applied {
        match action {
            Action::Route {
                worker_id,
                dp_rank,
                blocks,
            } => {
                let key = W::from_parts(*worker_id, *dp_rank);
                let chain;
                let seq = match chained {
                    Some(seq) => seq,
                    None => {
                        chain = compute_seq_hashes(blocks);
                        &chain
                    }
                };
                if self.inner.record_dated(key, blocks, seq, nanos(age)) {
                    Applied::Applied
                } else {
                    Applied::Expired
                }
            }
            Action::RemoveWorker { worker_id } => {
                self.inner.workers.remove(*worker_id);
                Applied::Applied
            }
            Action::RemoveKey { worker_id, dp_rank } => {
                self.inner
                    .workers
                    .remove_rank(W::from_parts(*worker_id, *dp_rank));
                Applied::Applied
            }
        }
    }

    /// The queue of this replica's decisions waiting to be published, when decisions are
    /// shared ([`Builder::share_decisions`](crate::Builder::share_decisions)); for
    /// transports.
    pub fn outbox(&self) -> Option<&Outbox> {
        self.replication.outbox()
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

/// A route's blocks; none for a removal.
fn route_blocks(decision: &Decision) -> &[LocalBlockHash] {
    match &decision.action {
        Action::Route { blocks, .. } => blocks,
        Action::RemoveWorker { .. } | Action::RemoveKey { .. } => &[],
    }
}
