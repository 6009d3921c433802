//! Applying what the subscriber reads on several threads: each origin's decisions always
//! on the same thread (so in their order), different origins' at once
//! ([`RedisConfig::apply_threads`](super::RedisConfig::apply_threads)).
//!
//! The subscriber applies one share of each read itself and hands each other share to an
//! applier thread through a bounded channel, so a slow applier holds the subscriber back
//! rather than letting decisions pile up.

use std::sync::mpsc::{sync_channel, Receiver, SendError, SyncSender};
use std::sync::Arc;

use crate::replication::Decision;
use crate::{ApproxKvIndexer, WorkerKey};

/// Reads queued per applier thread before the subscriber waits for it.
const QUEUED_READS: usize = 2;

/// The subscriber's side: the applier threads' queues.
pub(super) struct Appliers {
    queues: Vec<SyncSender<Vec<Decision>>>,
}

/// An applier thread's side: its queue.
pub(super) struct Applier(Receiver<Vec<Decision>>);

/// Queues for `threads - 1` applier threads (the subscriber is the first of `threads`).
pub(super) fn appliers(threads: usize) -> (Appliers, Vec<Applier>) {
    let (queues, ends) = (1..threads)
        .map(|_| {
            let (queue, end) = sync_channel(QUEUED_READS);
            (queue, Applier(end))
        })
        .unzip();
    (Appliers { queues }, ends)
}

impl Appliers {
    /// Applies one read's `decisions`: origin `o`'s share on thread `o % threads` (the
    /// subscriber's own when 0), each share in its order. A share whose thread is gone is
    /// applied here.
    pub(super) fn apply<W: WorkerKey>(&self, index: &ApproxKvIndexer<W>, decisions: Vec<Decision>) {
        if self.queues.is_empty() {
            index.apply_decisions(&decisions);
            return;
        }
        let threads = self.queues.len() as u64 + 1;
        let mut shares: Vec<Vec<Decision>> = (0..threads).map(|_| Vec::new()).collect();
        for decision in decisions {
            shares[(decision.origin % threads) as usize].push(decision);
        }
        let mut shares = shares.into_iter();
        let own = shares.next().unwrap_or_default();
        for (queue, share) in self.queues.iter().zip(shares) {
            if share.is_empty() {
                continue;
            }
            if let Err(SendError(share)) = queue.send(share) {
                index.apply_decisions(&share);
            }
        }
        index.apply_decisions(&own);
    }
}

impl Applier {
    /// An applier thread's body: applies each share it is handed, in order, until the
    /// subscriber is gone (a stop ends the subscriber, which drops the queues).
    pub(super) fn run<W: WorkerKey>(self, index: Arc<ApproxKvIndexer<W>>) {
        for share in self.0 {
            index.apply_decisions(&share);
        }
    }
}
