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
//! use approx_kv_index::{ApproxKvIndexer, Query};
//! use approx_kv_index::replication::{Applied, Decision};
//!
//! let a = ApproxKvIndexer::builder().block_size(2).replica_id(1).share_decisions(1024).build()?;
//! let b = ApproxKvIndexer::builder().block_size(2).replica_id(2).build()?;
//! a.record(7, Query::tokens(&[1, 2, 3, 4])).unwrap();
//!
//! let bytes = a.outbox().unwrap().pop().unwrap().encode(); // what goes on the wire
//! let decision = Decision::decode(&bytes).unwrap();
//! assert_eq!(b.apply_decision(&decision), Applied::Applied);
//! assert_eq!(b.apply_decision(&decision), Applied::Duplicate);
//! assert_eq!(b.find(Query::tokens(&[1, 2, 3, 4])).scores[&7], 2);
//! # Ok::<(), approx_kv_index::ConfigError>(())
//! ```

mod apply;
mod codec;
mod decision;
mod lag;
mod outbox;
#[cfg(feature = "redis")]
pub mod redis;
mod state;
mod supersede;
mod tally;

pub use codec::{DecodeError, MAX_ENCODED_LEN, VERSION};
pub use decision::{Action, Decision, ReplicaId, MAX_BLOCKS};
pub use lag::LagHistogram;
pub use outbox::Outbox;
pub(crate) use state::Replication;
pub use state::{Applied, ReplicationStats};
pub(crate) use supersede::CapacityOf;
