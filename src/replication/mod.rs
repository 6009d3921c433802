//! Sharing decisions between router replicas.
//!
//! Each replica's index sees only its own routing decisions. With
//! [`Builder::share_decisions`](crate::Builder::share_decisions), every local decision
//! (and every `remove_worker`) also becomes a [`Decision`] in the index's [`Outbox`], a
//! bounded queue that a transport drains in the background; recording never waits on
//! it. A transport delivers other replicas' decisions to
//! [`ApproxKvIndexer::apply_decision`](crate::ApproxKvIndexer::apply_decision), which
//! applies each once, skips the replica's own, and dates it from when it was taken.
//! The crate's transport is Redis Streams (the `redis` feature); any other can carry
//! [`Decision::encode`]'s bytes.
//!
//! Only the approximate side is shared: exact KV events
//! ([`apply_event`](crate::ApproxKvIndexer::apply_event)) come from the engines, which
//! every replica can subscribe to itself.
//!
//! ```
//! use approx_kv_index::ApproxKvIndexer;
//! use approx_kv_index::replication::{Applied, Decision};
//!
//! let a = ApproxKvIndexer::builder().block_size(2).replica_id(1).share_decisions(1024).build()?;
//! let b = ApproxKvIndexer::builder().block_size(2).replica_id(2).build()?;
//! a.process_routing_decision_for_request(&[1, 2, 3, 4], 7);
//!
//! let bytes = a.outbox().unwrap().pop().unwrap().encode(); // what goes on the wire
//! let decision = Decision::decode(&bytes).unwrap();
//! assert_eq!(b.apply_decision(&decision), Applied::Applied);
//! assert_eq!(b.apply_decision(&decision), Applied::Duplicate);
//! assert_eq!(b.find_matches_for_request(&[1, 2, 3, 4]).scores[&7], 2);
//! # Ok::<(), approx_kv_index::ConfigError>(())
//! ```

mod apply;
mod codec;
mod decision;
mod lag;
mod queue;
#[cfg(feature = "redis")]
pub mod redis;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

pub use codec::{DecodeError, MAX_ENCODED_LEN, VERSION};
pub use decision::{Action, Decision, ReplicaId, MAX_BLOCKS};
pub use lag::LagHistogram;
pub use queue::Outbox;

use crate::clock::{nanos, Clock};
use crate::config::Builder;

/// What [`apply_decision`](crate::ApproxKvIndexer::apply_decision) did with a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Applied to the index.
    Applied,
    /// Not above the highest sequence number applied from its origin: already applied
    /// (or older than one that was).
    Duplicate,
    /// This replica's own decision (taken since this index was built).
    OwnOrigin,
    /// Taken a TTL or more ago: its entries would already have expired.
    Expired,
}

/// Counters of decision sharing, from [`ApproxKvIndexer::replication_stats`](crate::ApproxKvIndexer::replication_stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicationStats {
    /// This replica's id.
    pub replica_id: ReplicaId,
    /// Local decisions handed to the outbox (queued or dropped), since creation.
    pub shared: u64,
    /// Of those, dropped because the outbox was full.
    pub dropped: u64,
    /// Decisions waiting in the outbox now.
    pub queued: usize,
    /// Other replicas' decisions applied.
    pub applied: u64,
    /// Decisions received again (or out of order) and skipped.
    pub duplicates: u64,
    /// Decisions received a TTL or more after they were taken, and skipped.
    pub expired: u64,
    /// Decisions of other replicas never received: numbers skipped in an origin's
    /// sequence (dropped by a full outbox there, or trimmed from a transport's retained
    /// window before this replica read them).
    pub gaps: u64,
    /// Median time from a decision to its arrival here (wall clocks of both replicas).
    pub lag_p50: Duration,
    /// 99th percentile of the same.
    pub lag_p99: Duration,
}

/// The sharing state of one index.
pub(crate) struct Replication {
    origin: ReplicaId,
    wall: Arc<dyn Clock>,
    next_seq: AtomicU64,
    /// The first sequence number of this incarnation: decisions of this origin numbered
    /// below it were taken before a restart, and are applied like anyone's.
    first_seq: u64,
    outbox: Option<Outbox>,
    shared: AtomicU64,
    /// The highest sequence number applied, per origin; held while applying, so one
    /// origin's decisions are applied one at a time, in order.
    applied_seq: parking_lot::Mutex<rustc_hash::FxHashMap<ReplicaId, u64>>,
    applied: AtomicU64,
    duplicates: AtomicU64,
    expired: AtomicU64,
    gaps: AtomicU64,
    lag: LagHistogram,
}

impl Replication {
    pub(crate) fn new(b: &Builder) -> Self {
        let started = nanos(b.wall_clock.now());
        Self {
            origin: b.replica_id.unwrap_or_else(|| random_id(started)),
            wall: Arc::clone(&b.wall_clock),
            // Numbered from the start time, so a restarted replica keeping its id goes on
            // above its old numbers (unless it took more than one decision a nanosecond).
            next_seq: AtomicU64::new(started),
            first_seq: started,
            outbox: b.share_decisions.map(Outbox::new),
            shared: AtomicU64::new(0),
            applied_seq: Default::default(),
            applied: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            gaps: AtomicU64::new(0),
            lag: LagHistogram::default(),
        }
    }

    /// Hands a local action to the outbox, if decisions are shared.
    #[inline]
    pub(crate) fn share(&self, action: impl FnOnce() -> Action) {
        let Some(outbox) = &self.outbox else {
            return;
        };
        self.shared.fetch_add(1, Relaxed);
        outbox.push(Decision {
            origin: self.origin,
            seq: self.next_seq.fetch_add(1, Relaxed),
            decided_at: self.wall.now(),
            action: action(),
        });
    }

    pub(crate) fn stats(&self) -> ReplicationStats {
        ReplicationStats {
            replica_id: self.origin,
            shared: self.shared.load(Relaxed),
            dropped: self.outbox.as_ref().map_or(0, Outbox::dropped),
            queued: self.outbox.as_ref().map_or(0, Outbox::len),
            applied: self.applied.load(Relaxed),
            duplicates: self.duplicates.load(Relaxed),
            expired: self.expired.load(Relaxed),
            gaps: self.gaps.load(Relaxed),
            lag_p50: self.lag.quantile(0.5),
            lag_p99: self.lag.quantile(0.99),
        }
    }
}

/// A replica id nobody chose: the standard library's random hash keys over the time.
fn random_id(started: u64) -> ReplicaId {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one((started, std::process::id()))
}
