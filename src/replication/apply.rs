//! Applying other replicas' decisions to an index: each once, in order per origin, dated
//! from when it was taken (the public calls are `ApproxKvIndexer::apply_decision` and
//! `apply_decisions`).

use super::{Action, Applied, Decision, Replication};
use crate::clock::nanos;
use crate::core::Core;
use crate::hash::{chain_each_into, compute_seq_hashes};
use crate::{LocalBlockHash, SequenceHash, WorkerKey};

impl Replication {
    /// Applies one decision to `core` (see `ApproxKvIndexer::apply_decision`).
    pub(crate) fn apply_decision<W: WorkerKey>(&self, core: &Core, decision: &Decision) -> Applied {
        let mut outcome = Applied::OwnOrigin;
        self.apply_each(
            std::slice::from_ref(decision),
            |_, action, age| apply_action::<W>(core, action, age, None),
            |o| outcome = o,
        );
        outcome
    }

    /// Applies decisions in their order to `core`, their routes' chains computed a few
    /// at a time (see `ApproxKvIndexer::apply_decisions`).
    pub(crate) fn apply_decisions<W: WorkerKey>(
        &self,
        core: &Core,
        decisions: &[Decision],
    ) -> Vec<Applied> {
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
                if self.is_own(decision) {
                    &[][..]
                } else {
                    route_blocks(decision)
                }
            }));
            chain_each_into(&blocks, &mut chains);
            self.apply_each(
                group,
                |k, action, age| apply_action::<W>(core, action, age, Some(&chains[k])),
                |o| outcomes.push(o),
            );
        }
        outcomes
    }
}

/// Applies one decision's action to `core`, `age` old; `chained`: its route's sequence
/// hashes, if already chained.
fn apply_action<W: WorkerKey>(
    core: &Core,
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
            if core.record_dated(key, blocks, seq, Some(nanos(age))) {
                Applied::Applied
            } else {
                Applied::Expired
            }
        }
        Action::RemoveWorker { worker_id } => {
            core.remove_worker(*worker_id);
            Applied::Applied
        }
        Action::RemoveKey { worker_id, dp_rank } => {
            core.remove_key(W::from_parts(*worker_id, *dp_rank));
            Applied::Applied
        }
        Action::SetCapacity {
            worker_id,
            dp_rank,
            capacity,
        } => {
            let capacity = capacity.map(|c| usize::try_from(c).unwrap_or(usize::MAX));
            core.set_capacity(W::from_parts(*worker_id, *dp_rank), capacity);
            Applied::Applied
        }
        Action::DropOlder {
            worker_id,
            dp_rank,
            used_before,
        } => {
            // Used that long before the decision, which was taken `age` ago.
            let used_before = nanos(*used_before).saturating_add(nanos(age));
            core.drop_older(W::from_parts(*worker_id, *dp_rank), used_before);
            Applied::Applied
        }
    }
}

/// A route's blocks; none for a removal.
fn route_blocks(decision: &Decision) -> &[LocalBlockHash] {
    match &decision.action {
        Action::Route { blocks, .. } => blocks,
        _ => &[],
    }
}
