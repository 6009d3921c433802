//! # approx-kv-index
//!
//! An **approximate KV-cache index** for LLM routers that call it synchronously from many
//! threads. When a router sends a prompt to worker `W`, `W` probably holds that prompt's
//! KV blocks for a while; the index remembers this for a TTL and answers, for a new
//! prompt, how many *leading* blocks each worker probably holds.
//!
//! ```
//! use std::time::Duration;
//! use approx_kv_index::{ApproxKvIndexer, Query};
//!
//! let index = ApproxKvIndexer::new(4, Duration::from_secs(120))?;
//! let system_prompt: Vec<u32> = (0..8).collect();            // 2 blocks
//! let mut chat = system_prompt.clone();
//! chat.extend([100, 101, 102, 103]);                          // + 1 block
//!
//! index.record(3, Query::tokens(&chat)).unwrap();            // routed to worker 3
//! let found = index.find(Query::tokens(&system_prompt));
//! assert_eq!(found.scores[&3], 2);                            // both blocks probably cached
//! # Ok::<(), approx_kv_index::ConfigError>(())
//! ```
//!
//! One find and one record, by [`Query`] (tokens, salted tokens, local block hashes,
//! sequence hashes, or both): [`ApproxKvIndexer::find`], [`ApproxKvIndexer::find_into`]
//! (into a reused [`OverlapScores`], a closure, or any [`ScoreSink`]) and
//! [`ApproxKvIndexer::record`]. Dynamo's names (`find_matches*`,
//! `process_routing_decision*`) are kept as thin wrappers of them.
//!
//! ## Shape
//! No actor, no channel, no async runtime. A concurrent hash-map radix tree (nodes keyed
//! by sequence hash in a sharded hash map whose finds read without a lock) is updated
//! directly by the callers; node payloads (which workers hold the block, until when) are copy-on-write arrays reclaimed
//! through [`crossbeam_epoch`]. One background thread sweeps expired entries from a timer
//! wheel in coarse ticks; no call ever waits for it (but `sweep_expired`, which waits for a
//! sweep in progress, and `shutdown` or the last drop, which join the thread). See
//! `docs/design.md`.
//!
//! ## Consistency
//! - **Linearizable per (block, worker) entry:** recording, refreshing, expiring and
//!   removing an entry take effect at one instant; a find that starts after a record
//!   returned sees it (read your writes), on any thread.
//! - **Exact expiry for reads:** an entry is live while `now < recorded_at + ttl` by the
//!   index's [`Clock`] (any reading up to 2^64 - 1 ns; a TTL of about 146 years or more
//!   means never); reads check this themselves, so correctness never waits for the
//!   sweeper, which only reclaims memory (within about `ttl + 2 * tick`; recording callers
//!   help when it falls further behind, so memory levels off while the CPU can sustain
//!   the callers). A removed worker's entries are freed by a purge, in the common case
//!   within 16 ticks (`remove_worker`).
//! - **Approximate across blocks:** a find reads blocks one after another without a
//!   snapshot, so a find racing a record of the same prompt may see a prefix of it, and a
//!   find racing an expiry may see it on some blocks and not others.
//! - **`remove_worker`** is linearizable: finds that start after it returns never report
//!   the worker, until a later record registers it again.
//! - **Caps** hold exactly for one writer at a time; with concurrent writers entries may
//!   exceed a cap by the blocks of the writes in flight, and, rarely, stay a few entries
//!   over it once they return, until the worker's next decisions that add entries (each
//!   writer evicts at most twice what it added); exact entries and running requests'
//!   pinned blocks are never evicted (a worker's latest decision or release keeps up to a
//!   cap of blocks beside them), and entries count until the sweeper frees them, so
//!   expired ones may hold a worker above a cap until the next sweep.
//! - [`stats`](ApproxKvIndexer::stats) and [`dump_events`](ApproxKvIndexer::dump_events)
//!   are not snapshots: they read shard after shard while callers run.
//!
//! ## Beyond the basics
//! - **Bounded memory:** [`Builder::max_blocks_per_worker`] and [`Builder::max_entries`]
//!   evict least recently recorded decisions, deepest blocks first, whatever the number of
//!   workers; with `ttl(Duration::MAX)` the index mirrors each worker's LRU cache
//!   (capacity-only mode); [`ApproxKvIndexer::set_worker_capacity`] gives a worker its own
//!   capacity at run time, as its engine reports it.
//! - **Data-parallel ranks:** `ApproxKvIndexer<WorkerWithDpRank>` ([`WorkerWithDpRank`]).
//! - **LoRA and tenant isolation:** [`HashSalt`] and the `*_salted` calls.
//! - **Exact KV events** alongside the approximation, from engines with block hashes of
//!   their own: [`ApproxKvIndexer::apply_event`].
//! - **Snapshot and restore** keeping TTLs and eviction order: [`ApproxKvIndexer::snapshot`],
//!   [`Snapshot`]; or replay [`ApproxKvIndexer::dump_events`] through `apply_event`.
//! - **Router replicas sharing decisions:** [`Builder::share_decisions`],
//!   [`ApproxKvIndexer::apply_decision`] and the [`replication`] module; a Redis Streams
//!   transport with the `redis` feature.
//! - **Observability:** [`ApproxKvIndexer::stats`]; with the `metrics` feature, the same as
//!   `metrics` gauges and counters.
//!
//! ## Hash compatibility
//! Block and sequence hashes equal those of `dynamo-kv-router` 1.6.1
//! ([`compute_block_hash_for_seq`], [`compute_seq_hashes`]), so routers can move over
//! without re-hashing. [`PromptHashes`] computes both in one pass, for a router that
//! hashes each request once ([`Query::prompt`]).
//!
//! ## Cargo features
//! None is on by default: the crate with its defaults depends only on what the index runs
//! on, and no serde, CLI or plotting crate.
//! - **`serde`**: `Serialize`/`Deserialize` for [`Snapshot`], [`SnapshotEntry`],
//!   [`LocalBlockHash`] and [`SequenceHash`] (the binary snapshot format needs no feature).
//! - **`redis`**: `replication::redis` (`RedisSync`), sharing decisions between router replicas
//!   through a Redis stream, on the `redis` crate's synchronous API (MSRV: 1.88 with today's
//!   dependency resolution, see the README).
//! - **`metrics`**: `ApproxKvIndexer::publish_metrics`, and the sweeper publishes
//!   [`IndexStats`] through the `metrics` crate every tick.
//!
//! The replay tool (`approx-kv-replay`) and the comparison with Dynamo are workspace
//! members of their own, not part of this crate.
#![deny(missing_docs)]
#![warn(rust_2018_idioms)]

mod capacity;
mod clock;
mod compat;
mod config;
mod core;
mod error;
mod events;
mod hash;
mod id_hasher;
mod indexer;
#[cfg(all(loom, test))]
mod loom_models;
mod prefetch;
mod query;
pub mod replication;
mod request;
mod scores;
mod slot;
mod snapshot;
mod stats;
mod sync;
mod thread_buffer;
mod timers;
mod tree;
mod worker_key;
mod workers;

/// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// Identifies an inference worker.
pub type WorkerId = u64;

pub use clock::{Clock, ManualClock, SystemClock, UnixClock};
pub use config::{Builder, DEFAULT_BLOCK_SIZE, DEFAULT_TICK, DEFAULT_TTL};
pub use error::{ConfigError, RecordError};
pub use events::{
    KvCacheEventData, KvCacheRemoveData, KvCacheStoreData, KvCacheStoredBlockData, RouterEvent,
};
pub use hash::{
    compute_block_hash_for_seq, compute_block_hash_for_seq_salted, compute_seq_hashes, HashSalt,
    LocalBlockHash, PromptHashes, SequenceHash, XXH3_SEED,
};
pub use indexer::ApproxKvIndexer;
pub use query::Query;
pub use request::RequestHandle;
/// The hasher of [`OverlapScores`]' maps (re-exported from `rustc-hash`).
pub use rustc_hash::FxBuildHasher;
pub use scores::{OverlapScores, ScoreSink};
pub use snapshot::{Snapshot, SnapshotCapacity, SnapshotEntry, SnapshotError};
pub use stats::{CacheReport, IndexStats};
pub use worker_key::{WorkerKey, WorkerWithDpRank};
