//! Sharing decisions between replicas, without a transport; time is driven by manual
//! clocks, never by sleeping. `codec`: the encoding's documented byte layout and what
//! decoding checks, in order. `sharing`: what an index shares (numbering, dates, salted and
//! precomputed routes, no exact events), its outbox, and what receivers count of it.
//! `apply`: applying decisions (each once, aged by the wall clock, expiring on the index
//! clock, under caps and never-TTLs, removals, restarts, gaps, batches). `converge`:
//! replicas that exchange decisions late and in any order end alike (numbering under
//! concurrent recorders, removals and capacity changes ordering older decisions,
//! restarts told from gaps). `lag`: the lag histogram.

#[path = "../support/mod.rs"]
mod support;

mod apply;
mod codec;
mod converge;
mod lag;
mod sharing;

use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::replication::{Action, Decision};
use approx_kv_index::{ApproxKvIndexer, Builder, LocalBlockHash, ManualClock};
use support::index::sharing_replica;

const TTL: Duration = Duration::from_secs(10);
/// A wall-clock origin (only differences matter).
const EPOCH: Duration = Duration::from_secs(1_700_000_000);
const NS: Duration = Duration::from_nanos(1);

/// A replica whose index clock and wall clock are the same manual clock (the wall clock
/// starting at `EPOCH`: only differences matter).
fn replica(id: u64, clock: &Arc<ManualClock>) -> ApproxKvIndexer {
    replica_builder(id, clock).build().unwrap()
}

/// The builder of a `replica`, for tests that change its settings.
fn replica_builder(id: u64, clock: &Arc<ManualClock>) -> Builder {
    sharing_replica(id, clock, TTL)
}

/// A manual clock at `EPOCH`.
fn clock() -> Arc<ManualClock> {
    let clock = Arc::new(ManualClock::new());
    clock.set(EPOCH);
    clock
}

/// A manual clock at `at`.
fn manual(at: Duration) -> Arc<ManualClock> {
    let clock = Arc::new(ManualClock::new());
    clock.set(at);
    clock
}

/// A block-size-1 replica whose index clock and wall clock are both `clock`
/// (`replica_builder`, by the name the sharing and lag tests use).
fn replica_on(id: u64, clock: &Arc<ManualClock>) -> Builder {
    sharing_replica(id, clock, TTL)
}

/// A route of origin 1 to worker 4, of one block named after `seq`.
fn route(seq: u64, decided_at: Duration) -> Decision {
    Decision {
        origin: 1,
        seq,
        decided_at,
        action: Action::Route {
            worker_id: 4,
            dp_rank: 0,
            blocks: vec![LocalBlockHash(seq)],
        },
    }
}
