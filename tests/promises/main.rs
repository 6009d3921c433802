//! Behavioural promises of the documentation (README.md, docs/design.md, the rustdoc of
//! the public API) that no other test asserted: one promise per test, each naming the
//! sentence it checks. Time is driven by manual clocks (or a test clock of its own where
//! a reading beyond what `ManualClock` can show is needed), never by sleeping.

#[path = "../support/mod.rs"]
mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::replication::{Action, Applied, MAX_BLOCKS};
use approx_kv_index::*;

use support::index::tokens;

const TTL: Duration = Duration::from_secs(10);
const NS: Duration = Duration::from_nanos(1);
/// A wall-clock origin for the sharing tests (only differences matter).
const EPOCH: Duration = Duration::from_secs(1_700_000_000);

mod sharing;
mod ttl;

// Helpers shared by the modules.

fn score<W: WorkerKey>(index: &ApproxKvIndexer<W>, tokens: &[u32], worker: W) -> Option<u32> {
    index
        .find_matches_for_request(tokens)
        .scores
        .get(&worker)
        .copied()
}
