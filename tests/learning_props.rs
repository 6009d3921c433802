//! Property tests of what reports teach about capacities, against the reference model
//! (`tests/support/model/requests.rs`): workers with small capacities (some equal, some
//! on the per-worker cap) hold prompts longer than those, so that decisions evict and
//! engines deliver what the index evicted (ghosts). After every step the capacities, the
//! count of capacities learned, the finds and the stats must equal the model's. Workers
//! are removed too, while their requests run.
//!
//! Case counts are modest so `cargo test` stays fast; raise them with `PROPTEST_CASES`.

mod support;

use std::time::Duration;

use approx_kv_index::WorkerId;
use proptest::prelude::*;
use support::harness::{Harness, Op, Settings};
use support::proptest_config::config;

fn worker() -> impl Strategy<Value = WorkerId> {
    0u64..4
}

/// Prompts of two families (no shared prefix between families), 1 to 12 tokens.
fn prompt() -> impl Strategy<Value = Vec<u32>> {
    (0u32..2, 1u32..=12).prop_map(|(family, len)| (family * 100..family * 100 + len).collect())
}

fn op(ttl: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (worker(), prop_oneof![4 => (2usize..8).prop_map(Some), 1 => Just(None)])
            .prop_map(|(worker, capacity)| Op::SetCapacity { worker, capacity }),
        6 => (worker(), prompt()).prop_map(|(worker, tokens)| Op::Record { worker, tokens, salt: 0 }),
        3 => (worker(), prompt()).prop_map(|(worker, tokens)| Op::Begin { worker, tokens }),
        3 => (0usize..2).prop_map(|request| Op::ObserveAll { request }),
        1 => (any::<usize>(), 0usize..12).prop_map(|(request, cached)| Op::Observe { request, cached }),
        3 => (0usize..2).prop_map(|request| Op::Finish { request }),
        1 => prompt().prop_map(|tokens| Op::Find { tokens, salt: 0 }),
        2 => (1u64..=100).prop_map(move |percent| Op::Advance(ttl / 400 * percent)),
        1 => Just(Op::Sweep),
        1 => worker().prop_map(Op::RemoveWorker),
    ]
}

proptest! {
    #![proptest_config(config(64))]

    /// Ghost hits raise a worker's capacity when the blocks held and evicted since show
    /// it short, and raise every other worker on the same capacity that no report taught;
    /// losses teach capacities too. The index learns exactly what the model learns.
    #[test]
    fn capacities_learn_like_the_model(
        block_size in 1u32..=2,
        per_worker in prop_oneof![Just(None), (2usize..6).prop_map(Some)],
        ops in prop::collection::vec(op(1_000_000), 1..80),
    ) {
        let mut h = Harness::with(Settings {
            block_size,
            ttl: Duration::from_nanos(1_000_000),
            tick: Duration::from_nanos(1_000),
            background: false,
            max_blocks_per_worker: per_worker,
            max_entries: None,
        });
        for op in &ops {
            h.apply(op);
        }
        h.finish();
    }
}
