//! Property tests: random operation sequences run on an index and on the sequential
//! reference model (`tests/support/model.rs`) with one `ManualClock`; after every step
//! every find, the dump and the stats must agree with the model (`tests/support/harness.rs`).
//!
//! Case counts are modest so `cargo test` stays fast; raise them with `PROPTEST_CASES`.

mod support;

use std::time::Duration;

use approx_kv_index::{
    compute_block_hash_for_seq, compute_seq_hashes, LocalBlockHash, SequenceHash, WorkerId,
};
use proptest::prelude::*;
use support::harness::{Harness, Op, Settings};
use support::proptest_config::config;

/// A few workers and the extreme id.
fn worker() -> impl Strategy<Value = WorkerId> {
    prop_oneof![4 => 0u64..4, 1 => Just(u64::MAX)]
}

/// Three prompts sharing prefixes of 4 and 8 tokens.
const PROMPTS: [[u32; 20]; 3] = [
    [0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1],
    [0, 1, 2, 0, 1, 2, 0, 1, 1, 1, 0, 0, 2, 2, 1, 1, 0, 0, 2, 2],
    [0, 1, 2, 0, 2, 2, 2, 0, 0, 0, 1, 1, 1, 2, 2, 2, 0, 0, 0, 1],
];

/// Prompts over a 3-token alphabet, so they share prefixes often; half of them prefixes
/// of [`PROMPTS`], so that decisions, events and finds meet on long shared prefixes (an
/// exact block below a decision's, a hole in the middle of a worker's chain).
fn tokens() -> impl Strategy<Value = Vec<u32>> {
    prop_oneof![
        prop::collection::vec(0u32..3, 0..20),
        (0usize..3, 0usize..=20).prop_map(|(p, len)| PROMPTS[p][..len].to_vec()),
    ]
}

fn local() -> impl Strategy<Value = Vec<LocalBlockHash>> {
    prop::collection::vec((0u64..6).prop_map(LocalBlockHash), 0..6)
}

/// Sequence hashes: chained from `local` (consistent), or of another length.
fn recorded_hashes() -> impl Strategy<Value = Op> {
    (worker(), local(), 0usize..8, any::<bool>()).prop_map(|(worker, local, len, mismatch)| {
        let mut seq = compute_seq_hashes(&local);
        if mismatch {
            seq.resize(len, SequenceHash(len as u64));
        }
        Op::RecordHashes { worker, local, seq }
    })
}

/// Arbitrary (usually inconsistent) sequence hashes of the same length.
fn garbage_hashes() -> impl Strategy<Value = Op> {
    (worker(), local(), prop::collection::vec(0u64..6, 6)).prop_map(|(worker, local, raw)| {
        let seq = raw[..local.len()]
            .iter()
            .map(|&h| SequenceHash(h))
            .collect();
        Op::RecordHashes { worker, local, seq }
    })
}

/// The blocks `from..to` (clamped) of a prompt: local hashes, sequence hashes, parent.
type Blocks = (Vec<LocalBlockHash>, Vec<SequenceHash>, Option<SequenceHash>);

fn blocks(tokens: &[u32], block_size: u32, from: usize, to: usize) -> Blocks {
    let local = compute_block_hash_for_seq(tokens, block_size);
    let seq = compute_seq_hashes(&local);
    let to = to.min(local.len());
    let from = from.min(to);
    let parent = from.checked_sub(1).map(|i| seq[i]);
    (local[from..to].to_vec(), seq[from..to].to_vec(), parent)
}

/// KV events on blocks of prompts like the recorded ones: `Stored` (a run of a prompt's
/// blocks, chained from the block before), `Removed` (a run), `Cleared`.
fn events(block_size: u32) -> impl Strategy<Value = Op> {
    let run = || (worker(), tokens(), 0usize..8, 0usize..8);
    prop_oneof![
        3 => run().prop_map(move |(worker, tokens, from, to)| {
            let (local, seq, parent) = blocks(&tokens, block_size, from, to);
            Op::Stored { worker, parent, local, seq }
        }),
        3 => run().prop_map(move |(worker, tokens, from, to)| {
            let (_, seq, _) = blocks(&tokens, block_size, from, to);
            Op::Removed { worker, seq }
        }),
        1 => worker().prop_map(Op::Cleared),
    ]
}

/// Decisions, finds and `Stored` events on prefixes of [`PROMPTS`] only, clock steps
/// within about a TTL, and dump replays (whose `Stored` events carry TTLs left).
fn stored_and_recorded(block_size: u32, ttl: u64) -> impl Strategy<Value = Op> {
    let shared = || (0usize..3, 0usize..=20).prop_map(|(p, len)| PROMPTS[p][..len].to_vec());
    let run = move || (worker(), shared(), 0usize..8, 0usize..8);
    prop_oneof![
        3 => (worker(), shared()).prop_map(|(worker, tokens)| Op::Record { worker, tokens, salt: 0 }),
        3 => run().prop_map(move |(worker, tokens, from, to)| {
            let (local, seq, parent) = blocks(&tokens, block_size, from, to);
            Op::Stored { worker, parent, local, seq }
        }),
        4 => shared().prop_map(|tokens| Op::Find { tokens, salt: 0 }),
        2 => (0u64..=1500).prop_map(move |permille| Op::Advance(ttl.min(1 << 50) * permille / 1000 + 1)),
        1 => Just(Op::ReplayDump),
        1 => Just(Op::SnapshotRestore),
    ]
}

/// What an engine's KV events look like beside a router's decisions, on prefixes of
/// [`PROMPTS`]: exact `Stored` chains, most from the root and the others below a block the
/// worker may or may not have stored; `Removed` events of one block, a leaf or one with
/// blocks below it; decisions, requests, finds, clock steps, restarts and removals. Many
/// cases keep every worker's entries a prefix of each prompt (finds gallop), the others
/// break it on the way (finds walk): the answers must be the model's either way.
fn engine_events(block_size: u32, ttl: u64) -> impl Strategy<Value = Op> {
    let shared = || (0usize..3, 0usize..=20).prop_map(|(p, len)| PROMPTS[p][..len].to_vec());
    let from = || prop_oneof![3 => Just(0usize), 2 => 0usize..8];
    prop_oneof![
        5 => (worker(), 0usize..3, from(), 0usize..8).prop_map(move |(worker, p, from, len)| {
            let (local, seq, parent) = blocks(&PROMPTS[p], block_size, from, from + len);
            Op::Stored { worker, parent, local, seq }
        }),
        4 => (worker(), 0usize..3, 0usize..8).prop_map(move |(worker, p, at)| {
            let (_, seq, _) = blocks(&PROMPTS[p], block_size, at, at + 1);
            Op::Removed { worker, seq }
        }),
        2 => (worker(), shared()).prop_map(|(worker, tokens)| Op::Record { worker, tokens, salt: 0 }),
        1 => (worker(), shared()).prop_map(|(worker, tokens)| Op::Begin { worker, tokens }),
        1 => any::<usize>().prop_map(|request| Op::Finish { request }),
        5 => shared().prop_map(|tokens| Op::Find { tokens, salt: 0 }),
        2 => (0u64..=1500).prop_map(move |permille| Op::Advance(ttl.min(1 << 50) * permille / 1000 + 1)),
        1 => worker().prop_map(Op::Cleared),
        1 => worker().prop_map(Op::RemoveWorker),
        1 => (worker(), prop_oneof![Just(None), (0usize..6).prop_map(Some)])
            .prop_map(|(worker, capacity)| Op::SetCapacity { worker, capacity }),
        1 => Just(Op::Sweep),
        1 => Just(Op::SnapshotRestore),
    ]
}

/// Prompts of up to 120 blocks (block size 1), prefixes of two that share their first 50:
/// decisions, exact `Stored` chains from the root, `Removed` events of one block, and
/// finds of local hashes, which past 32 blocks gallop from block 0 and chain as they go.
fn long_prompts(ttl: u64) -> impl Strategy<Value = Op> {
    fn long(p: usize, len: usize) -> Vec<u32> {
        (0..len as u32)
            .map(|i| if p == 1 && i >= 50 { 1000 + i } else { i })
            .collect()
    }
    let prefix = || (0usize..2, 0usize..=120).prop_map(|(p, len)| long(p, len));
    prop_oneof![
        4 => (worker(), prefix()).prop_map(|(worker, tokens)| Op::Record { worker, tokens, salt: 0 }),
        2 => (worker(), prefix()).prop_map(|(worker, tokens)| {
            let (local, seq, parent) = blocks(&tokens, 1, 0, tokens.len());
            Op::Stored { worker, parent, local, seq }
        }),
        2 => (worker(), prefix(), 0usize..120).prop_map(|(worker, tokens, at)| {
            let (_, seq, _) = blocks(&tokens, 1, at, at + 1);
            Op::Removed { worker, seq }
        }),
        5 => prefix().prop_map(|tokens| Op::FindHashes {
            local: compute_block_hash_for_seq(&tokens, 1),
        }),
        2 => (0u64..=1500).prop_map(move |permille| Op::Advance(ttl.min(1 << 50) * permille / 1000 + 1)),
        1 => worker().prop_map(Op::RemoveWorker),
    ]
}

/// A `Stored` event from an engine with hashes of its own: arbitrary block hashes (small
/// numbers, so they collide with each other and name parents of later events), and a
/// parent that is one of them (or none).
fn garbage_event() -> impl Strategy<Value = Op> {
    (
        worker(),
        local(),
        prop::collection::vec(0u64..6, 6),
        prop::option::of(0u64..6),
    )
        .prop_map(|(worker, local, raw, parent)| {
            let seq = raw[..local.len()]
                .iter()
                .map(|&h| SequenceHash(h))
                .collect();
            let parent = parent.map(SequenceHash);
            Op::Stored {
                worker,
                parent,
                local,
                seq,
            }
        })
}

/// Request lifecycles: begins on prompts like the recorded ones, output, cached-token
/// reports (some beyond the prompt), finishes; requests are picked by index, modulo
/// those running.
fn requests() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (worker(), tokens()).prop_map(|(worker, tokens)| Op::Begin { worker, tokens }),
        1 => (any::<usize>(), prop::collection::vec(0u32..3, 0..8))
            .prop_map(|(request, more)| Op::Output { request, more }),
        1 => (any::<usize>(), 0usize..24).prop_map(|(request, cached)| Op::Observe { request, cached }),
        2 => any::<usize>().prop_map(|request| Op::Finish { request }),
    ]
}

/// An operation; clock steps are fractions of the TTL, now and then a long leap.
/// `garbage` adds hashes that do not chain; `exact` adds KV events.
fn op(block_size: u32, ttl: u64, garbage: bool, exact: bool) -> impl Strategy<Value = Op> {
    op_with(block_size, ttl, garbage, exact, false)
}

/// As [`op`]; `merge` adds restores of an earlier snapshot into the live index.
fn op_with(
    block_size: u32,
    ttl: u64,
    garbage: bool,
    exact: bool,
    merge: bool,
) -> impl Strategy<Value = Op> {
    let hashes = if garbage {
        prop_oneof![garbage_hashes(), garbage_event()].boxed()
    } else {
        recorded_hashes().boxed()
    };
    let events = if exact {
        events(block_size).boxed()
    } else {
        Just(Op::Sweep).boxed()
    };
    let merges = if merge {
        prop_oneof![Just(Op::SaveSnapshot), Just(Op::RestoreSaved)].boxed()
    } else {
        Just(Op::SaveSnapshot).boxed()
    };
    prop_oneof![
        5 => (worker(), tokens(), 0u8..3).prop_map(|(worker, tokens, salt)| Op::Record { worker, tokens, salt }),
        1 => hashes,
        2 => events,
        5 => (tokens(), 0u8..3).prop_map(|(tokens, salt)| Op::Find { tokens, salt }),
        1 => local().prop_map(|local| Op::FindHashes { local }),
        1 => worker().prop_map(Op::RemoveWorker),
        1 => (worker(), prop_oneof![Just(None), (0usize..6).prop_map(Some)])
            .prop_map(|(worker, capacity)| Op::SetCapacity { worker, capacity }),
        2 => requests(),
        3 => (0u64..=1500).prop_map(move |permille| Op::Advance(ttl.min(1 << 50) * permille / 1000 + permille % 3)),
        1 => prop_oneof![(0u64..1 << 40), Just(1 << 63), (0u64..1 << 62)].prop_map(Op::Advance),
        2 => Just(Op::Sweep),
        1 => Just(Op::Shutdown),
        1 => Just(Op::SnapshotRestore),
        1 => Just(Op::ReplayDump),
        1 => merges,
    ]
}

/// Block size, TTL and tick (nanoseconds). The 200 µs TTL on a 1 ns tick needs more
/// than the wheel's 64 Ki slots, so the wheel wraps; `u64::MAX` ns is "never" (no timers).
fn settings() -> impl Strategy<Value = (u32, u64, u64)> {
    (
        1u32..=3,
        prop_oneof![
            6 => 1u64..60,
            2 => 1_000u64..100_000,
            1 => Just(200_000u64),
            1 => Just(u64::MAX),
        ],
        prop_oneof![1u64..20, Just(1u64)],
    )
}

fn run(block_size: u32, ttl: u64, tick: u64, background: bool, ops: &[Op]) -> Harness {
    run_capped(block_size, ttl, tick, background, (None, None), ops)
}

/// As [`run`], with caps: (per worker, total).
fn run_capped(
    block_size: u32,
    ttl: u64,
    tick: u64,
    background: bool,
    (per_worker, total): (Option<usize>, Option<usize>),
    ops: &[Op],
) -> Harness {
    let mut h = Harness::with(Settings {
        block_size,
        ttl: Duration::from_nanos(ttl),
        tick: Duration::from_nanos(tick),
        background,
        max_blocks_per_worker: per_worker,
        max_entries: total,
    });
    for op in ops {
        h.apply(op);
    }
    h.finish();
    h
}

/// Settings and a sequence of up to `len` operations.
fn scenario(
    garbage: bool,
    exact: bool,
    len: usize,
) -> impl Strategy<Value = ((u32, u64, u64), Vec<Op>)> {
    settings().prop_flat_map(move |s| {
        let ops = prop::collection::vec(op(s.0, s.1, garbage, exact), 1..len);
        (Just(s), ops)
    })
}

proptest! {
    #![proptest_config(config(64))]

    /// Routing decisions only: every find equals the model's answer; dump and stats agree
    /// with it; after everything expires and is swept the index is empty.
    #[test]
    fn index_matches_model(((block, ttl, tick), ops) in scenario(false, false, 60)) {
        run(block, ttl, tick, false, &ops);
    }

    /// Decisions and exact KV events (`Stored`, `Removed`, `Cleared`) mixed.
    #[test]
    fn index_matches_model_with_kv_events(((block, ttl, tick), ops) in scenario(false, true, 60)) {
        run(block, ttl, tick, false, &ops);
    }

    /// Decisions, `Stored` events (exact, or replayed with a TTL left) and finds on a few
    /// prompts sharing long prefixes, with no `Removed` events: exact blocks land below and
    /// beside approximate ones and outlive them, leaving holes in workers' chains, which
    /// finds must stop at (a find that gallops over a hole answers too long a run).
    #[test]
    fn exact_blocks_below_decisions_end_runs_where_decisions_expire(
        ((block, ttl, tick), ops) in settings().prop_flat_map(|s| {
            let ops = prop::collection::vec(stored_and_recorded(s.0, s.1), 1..40);
            (Just(s), ops)
        })
    ) {
        run(block, ttl, tick, false, &ops);
    }

    /// An engine's exact events beside decisions ([`engine_events`]): while each worker's
    /// entries stay a prefix of every prompt, finds gallop over exact blocks too, and every
    /// answer is the model's, galloping or walking.
    #[test]
    fn finds_over_an_engines_exact_events_match_the_model(
        ((block, ttl, tick), ops) in settings().prop_flat_map(|s| {
            let ops = prop::collection::vec(engine_events(s.0, s.1), 1..50);
            (Just(s), ops)
        })
    ) {
        run(block, ttl, tick, false, &ops);
    }

    /// Long prompts ([`long_prompts`]): finds of local hashes past 32 blocks, galloping from
    /// block 0 through nodes and runs, equal the model's answers.
    #[test]
    fn long_queries_of_local_hashes_match_the_model(
        (ttl, ops) in prop_oneof![Just(30u64), Just(u64::MAX)].prop_flat_map(|ttl| {
            (Just(ttl), prop::collection::vec(long_prompts(ttl), 1..40))
        })
    ) {
        run(1, ttl, 1, false, &ops);
    }

    /// Precomputed hashes and events whose sequence hashes do not chain: decisions are
    /// placed by the chain of their local hashes, so finds, dumps, stats and caps equal the
    /// model's, and everything is reclaimed at the end, as with consistent hashes.
    #[test]
    fn inconsistent_hashes_are_placed_by_the_chain(((block, ttl, tick), ops) in scenario(true, true, 40)) {
        run(block, ttl, tick, false, &ops);
    }

    /// Everything recorded expires and is reclaimed: `stats().entries` returns to 0.
    #[test]
    fn entries_return_to_zero(
        prompts in prop::collection::vec((worker(), tokens()), 1..40),
        removed in prop::collection::vec(worker(), 0..3),
    ) {
        let mut h = Harness::new(2, Duration::from_secs(10), Duration::from_secs(1), false);
        for (i, (worker, tokens)) in prompts.into_iter().enumerate() {
            h.apply(&Op::Record { worker, tokens, salt: 0 });
            h.apply(&Op::Advance(i as u64 * 1_000_000));
        }
        for worker in removed {
            h.apply(&Op::RemoveWorker(worker));
        }
        h.apply(&Op::Advance(10_000_000_000));
        h.apply(&Op::Sweep);
        let stats = h.index.stats();
        prop_assert_eq!((stats.entries, stats.nodes, stats.pending_timers), (0, 0, 0));
    }
}

proptest! {
    #![proptest_config(config(64))]

    /// Snapshots restored into the live index later (a merge): the index must hold what
    /// the model says, each restored entry with the TTL it had left counted from the
    /// restore.
    #[test]
        fn restores_merge_like_the_model(
        ((block, ttl, tick), ops) in settings().prop_flat_map(|s| {
            let ops = prop::collection::vec(op_with(s.0, s.1, false, true, true), 1..60);
            (Just(s), ops)
        })
    ) {
        run(block, ttl, tick, false, &ops);
    }
}

/// Found by `restores_merge_like_the_model`: `restore` merges a restored claim with the
/// held one as `c | exact | max(approx(c), approx(r))`; when the restored expiry is the
/// later one, the held expiry's bits are OR-ed into it. Here the entry restored at t=300
/// with 1000 ns left reads live at t=1300 (its expiry became 2045 instead of 1301), and
/// once its timers have fired no timer is left for it: it is never reclaimed.
#[test]
fn restore_into_a_live_index_keeps_ttls() {
    let h = Harness::new(
        1,
        Duration::from_nanos(1000),
        Duration::from_nanos(10),
        false,
    );
    h.index.process_routing_decision_for_request(&[1], 0); // expires at t=1000
    let snapshot = h.index.snapshot(); // 1000 ns left
    h.clock.set(Duration::from_nanos(300));
    h.index.restore(&snapshot).unwrap(); // now expires at t=1300
    h.clock.set(Duration::from_nanos(1300));
    let found = h.index.find_matches_for_request(&[1]);
    h.index.sweep_expired();
    let stats = h.index.stats();
    assert!(
        found.scores.is_empty(),
        "live after its restored TTL: {found:?}"
    );
    assert_eq!(stats.entries, 0, "{stats:?}");
}

/// Caps: none, per worker, global, or both; small enough to bite.
fn caps() -> impl Strategy<Value = (Option<usize>, Option<usize>)> {
    prop_oneof![
        1 => (1usize..12).prop_map(|c| (Some(c), None)),
        1 => (1usize..24).prop_map(|c| (None, Some(c))),
        1 => (1usize..12, 1usize..24).prop_map(|(w, t)| (Some(w), Some(t))),
    ]
}

proptest! {
    #![proptest_config(config(64))]

    /// Every operation (decisions, KV events, removals, snapshots, dump replays, far
    /// clocks) under caps: after every step the index equals the model, which evicts the
    /// least recently recorded decisions deepest first, and no worker nor the index holds
    /// more than its cap beyond exact entries (which no cap evicts).
    #[test]
    fn caps_hold_under_any_sequence(
        ((block, ttl, tick), caps, ops) in settings().prop_flat_map(|s| {
            let ops = prop::collection::vec(op_with(s.0, s.1, false, true, true), 1..60);
            (Just(s), caps(), ops)
        })
    ) {
        run_capped(block, ttl, tick, false, caps, &ops);
    }

    /// Decisions only under caps: also, every live block keeps its prefix (deepest
    /// blocks go first), checked by the harness after every step.
    #[test]
    fn caps_evict_deepest_first(
        ((block, ttl, tick), caps, ops) in settings().prop_flat_map(|s| {
            let ops = prop::collection::vec(op(s.0, s.1, false, false), 1..80);
            (Just(s), caps(), ops)
        })
    ) {
        run_capped(block, ttl, tick, false, caps, &ops);
    }
}

/// Found by the caps property test: an eviction that stops for lack of budget removes
/// the deepest blocks of a decision and keeps the rest; the decision's timer then starts
/// its walk at the leaf node, which is gone, and stops at once, while the log entry that
/// could resume the walk is pruned as expired. The remaining blocks are never reclaimed,
/// and they count against the cap forever.
#[test]
fn caps_do_not_leak_partly_evicted_decisions() {
    for (per_worker, total) in [(None, Some(1)), (Some(1), None)] {
        let mut h = Harness::with(Settings {
            block_size: 1,
            ttl: Duration::from_nanos(1_000),
            tick: Duration::from_nanos(10),
            background: false,
            max_blocks_per_worker: per_worker,
            max_entries: total,
        });
        // 2 blocks over a cap of 1
        h.apply(&Op::Record {
            worker: 0,
            tokens: vec![1, 2],
            salt: 0,
        });
        assert_eq!(h.index.stats().entries, 1);
        h.apply(&Op::Advance(1_000));
        h.apply(&Op::Sweep);
        let stats = h.index.stats();
        assert_eq!((stats.entries, stats.nodes), (0, 0), "{stats:?}");
    }
}

proptest! {
    #![proptest_config(config(8))]

    /// As `index_matches_model_with_kv_events`, with the background sweeper reclaiming
    /// concurrently (1 ms real ticks on the manual clock): reads stay exact, stats within
    /// bounds.
    #[test]
    fn index_matches_model_with_background_sweeper(
        ops in prop::collection::vec(op(2, 5_000_000, false, true), 1..60)
    ) {
        // Caps read entry counts, which a background sweeper changes on its own time (as
        // the capped tests, these run without one): no capacities here.
        let ops: Vec<Op> = ops
            .into_iter()
            .filter(|op| !matches!(op, Op::SetCapacity { .. }))
            .collect();
        run(2, 5_000_000, 1_000_000, true, &ops);
    }
}

/// A fleet's operations: worker ids over 0..300, so slots cross the key table's segments
/// (64 and 192 slots) and holder arrays grow to tens of holders; removals (dead slots,
/// recycled ones) among them; finds from tokens and from hashes (every form: maps and
/// callbacks).
fn fleet_op(ttl: u64) -> impl Strategy<Value = Op> {
    let fleet = || 0u64..300;
    prop_oneof![
        10 => (fleet(), tokens()).prop_map(|(worker, tokens)| Op::Record { worker, tokens, salt: 0 }),
        2 => (fleet(), local()).prop_map(|(worker, local)| {
            let seq = compute_seq_hashes(&local);
            Op::RecordHashes { worker, local, seq }
        }),
        3 => tokens().prop_map(|tokens| Op::Find { tokens, salt: 0 }),
        2 => local().prop_map(|local| Op::FindHashes { local }),
        2 => fleet().prop_map(Op::RemoveWorker),
        2 => (0u64..=1500).prop_map(move |permille| Op::Advance(ttl * permille / 1000)),
        1 => Just(Op::Sweep),
    ]
}

proptest! {
    #![proptest_config(config(32))]

    /// Decisions of a fleet of 300 workers on shared prompts, with removals: every find
    /// (by tokens, by local or sequence hashes, into maps or callbacks) equals the model's.
    #[test]
    fn fleets_match_the_model(
        (ttl, ops) in (1u64..60).prop_flat_map(|ttl| (Just(ttl), prop::collection::vec(fleet_op(ttl), 1..400)))
    ) {
        run(1, ttl, 1, false, &ops);
    }
}

/// Regression (found by `index_matches_model_with_kv_events`, fixed in 39c02a3): a
/// removed worker whose slot had exact entries was queued for a purge by slot number; the
/// slot, having no entries left, was recycled at once, and the purge then deleted the
/// entries of the worker that got it.
#[test]
fn purge_does_not_hit_a_recycled_slot() {
    use approx_kv_index::{KvCacheEventData, KvCacheStoreData, RouterEvent};
    let h = Harness::new(1, Duration::from_secs(10), Duration::from_secs(1), false);
    let empty_store = KvCacheEventData::Stored(KvCacheStoreData {
        parent_hash: None,
        blocks: Vec::new(),
    });
    h.index.apply_event(&RouterEvent {
        worker_id: 3,
        event_id: 0,
        data: empty_store,
    });
    h.index.remove_worker(3); // no entries: the slot is recycled once the epoch moves on
    for _ in 0..1_000 {
        h.index.find_matches(&[]); // each find pins the epoch, which runs deferred work
    }
    h.index.process_routing_decision_for_request(&[1, 2], 2); // likely takes the slot
    h.index.sweep_expired();
    let found = h.index.find_matches_for_request(&[1, 2]);
    assert_eq!(
        found.scores.get(&2),
        Some(&2),
        "worker 2's fresh decision is gone"
    );
}

/// With a cap, every decision of a worker gets a distinct expiry (to order evictions),
/// made by adding nanoseconds. Decisions recorded in the same nanosecond then outlive the
/// TTL by up to one nanosecond each (the contract allows up to a tick): three decisions at
/// t = 0 are live at exactly t + ttl (some of them) and dead a tick later.
#[test]
fn ttl_stretches_by_nanoseconds_only_with_caps() {
    use approx_kv_index::{ApproxKvIndexer, ManualClock};
    let clock = std::sync::Arc::new(ManualClock::new());
    let index = ApproxKvIndexer::builder()
        .block_size(1)
        .ttl(Duration::from_secs(10))
        .tick(Duration::from_millis(1))
        .max_blocks_per_worker(100)
        .clock(clock.clone())
        .background_sweeper(false)
        .build()
        .unwrap();
    for token in 1..=3 {
        index.process_routing_decision_for_request(&[token], 0);
    }
    clock.advance(Duration::from_secs(10) - Duration::from_nanos(1));
    for token in 1..=3 {
        assert!(!index.find_matches_for_request(&[token]).scores.is_empty());
    }
    clock.advance(Duration::from_millis(1));
    for token in 1..=3 {
        let found = index.find_matches_for_request(&[token]);
        assert!(
            found.scores.is_empty(),
            "token {token} recorded at 0 is live a tick past the TTL"
        );
    }
}

/// Found by the caps property test: a restored claim equal to the claim its entry already
/// had (the same worker's later decision, on a still clock) was logged before that decision
/// and evicted first, for its block only, leaving the decision's deeper blocks without
/// their prefix. Such a claim now gets no walk of its own (the decision's covers it).
#[test]
fn a_restored_claim_equal_to_a_held_one_is_not_evicted_before_its_children() {
    let ops = [
        Op::Record {
            worker: 2,
            tokens: vec![0],
            salt: 1,
        },
        Op::SaveSnapshot,
        Op::RemoveWorker(2),
        Op::Record {
            worker: 2,
            tokens: vec![0; 7],
            salt: 1,
        },
        Op::RestoreSaved,
        Op::Record {
            worker: 0,
            tokens: vec![0; 3],
            salt: 0,
        },
    ];
    let h = run_capped(1, 200_000, 1, false, (None, Some(10)), &ops);
    assert!(h.model.evictions() > 0, "the cap evicted");
}

/// Found by the caps property test (when other threads moved the epoch on): a removed
/// worker's slot, its entries all evicted, was recycled for the next new worker while
/// timers of its evicted decisions were still pending; they fired on the new registration
/// (removed too, so every entry of it went), freeing entries that its own timers were to
/// free later. Timers now carry the slot's generation, like logged decisions.
#[test]
fn timers_of_a_recycled_slot_leave_its_next_registration_alone() {
    let record = |worker, tokens: &[u32], salt| Op::Record {
        worker,
        tokens: tokens.to_vec(),
        salt,
    };
    let ops = [
        record(0, &[0, 1, 2, 0, 2, 2, 2, 0, 0, 0, 1, 1, 1, 2, 2, 2, 0], 0),
        Op::RemoveWorker(0),
        record(3, &[0, 1, 2, 0, 1, 2, 0, 1], 0),
        record(
            1,
            &[1, 2, 0, 1, 1, 1, 0, 0, 0, 2, 0, 1, 2, 1, 1, 0, 2, 1],
            2,
        ),
        Op::Advance(89_047),
        record(9, &[0, 1, 2, 0, 1, 2, 0, 1, 2], 0),
        Op::RemoveWorker(9),
        Op::Sweep,
    ];
    // Recycling waits for the epoch: keep it moving, as other threads do.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mover = std::thread::spawn({
        let stop = stop.clone();
        move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                crossbeam_epoch::pin().flush();
            }
        }
    });
    let h = run_capped(1, 82_756, 1, false, (None, Some(9)), &ops);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    mover.join().expect("no panic");
    assert!(h.model.evictions() > 0, "the cap evicted");
}

/// Found by the model property test at 5,000 cases: a sweep took a removed worker's first
/// block and left its second (a later decision's, not yet due) above the gap; the next
/// decision through that prefix inserted its new blocks as one run over the block left
/// there, which then counted twice in `stats().nodes`.
#[test]
fn a_run_inserted_over_a_block_left_above_a_gap_counts_it_once() {
    let record = |worker, tokens: &[u32]| Op::Record {
        worker,
        tokens: tokens.to_vec(),
        salt: 2,
    };
    let ops = [
        record(u64::MAX, &[0, 0]),
        Op::Advance(3),
        record(u64::MAX, &[0, 1]),
        Op::RemoveWorker(u64::MAX),
        Op::Advance(4),
        Op::Sweep,
        record(0, &[0, 1, 2]),
    ];
    run(1, 7, 1, false, &ops);
}

/// Found by `learning_props` at 3,000 cases: a record copying block 0's holder array left
/// the removed workers 1 and 3 out; worker 2's capacity then evicted block 0, its last
/// holder, leaving worker 1's entry on block 1 above the gap; worker 0's decision through
/// that prefix laid a run over it, and block 1 counted twice in `stats().nodes` until the
/// purge took worker 1's entry (`IndexStats::nodes` says so; the harness allows it).
#[test]
fn a_run_laid_over_a_removed_workers_block_counts_it_twice_until_the_purge() {
    let record = |worker, tokens: &[u32]| Op::Record {
        worker,
        tokens: tokens.to_vec(),
        salt: 0,
    };
    let ops = [
        record(1, &[0, 1]),
        record(3, &[0]),
        Op::RemoveWorker(1),
        Op::SetCapacity {
            worker: 2,
            capacity: Some(4),
        },
        Op::RemoveWorker(3),
        record(2, &[0]),
        record(2, &[100, 101, 102, 103]),
        record(0, &[0, 1, 2]),
    ];
    let mut h = Harness::new(1, Duration::from_millis(1), Duration::from_micros(1), false);
    for op in &ops {
        h.apply(op);
    }
    let stats = h.index.stats();
    assert_eq!((stats.entries, stats.nodes), (8, 8), "block 1 twice");
    h.apply(&Op::Sweep);
    let stats = h.index.stats();
    assert_eq!((stats.entries, stats.nodes), (7, 7), "the purge took it");
}

/// Found by `learning_props` at 20,000 cases: worker 0's begin laid a run over the head of
/// removed worker 3's run (left above a gap), and its next record split worker 3's run; that
/// split met worker 0's tail marker inside its blocks and split worker 0's run, which met
/// worker 3's head and split worker 3's run again, placing its blocks twice and counting
/// seven of its entries as held twice: `entries` fell 7 below the tree until the purge.
#[test]
fn a_split_nested_in_its_own_run_places_its_blocks_once() {
    let t = |start: u32, n: u32| (start..start + n).collect::<Vec<u32>>();
    let record = |worker, tokens: Vec<u32>| Op::Record {
        worker,
        tokens,
        salt: 0,
    };
    let ops = [
        Op::Begin {
            worker: 1,
            tokens: vec![0],
        },
        Op::Begin {
            worker: 3,
            tokens: t(0, 10),
        },
        Op::RemoveWorker(3),
        Op::Finish { request: 0 },
        Op::SetCapacity {
            worker: 1,
            capacity: Some(2),
        },
        record(0, vec![0]),
        record(1, t(100, 2)),
        record(0, t(100, 3)),
        Op::Begin {
            worker: 0,
            tokens: t(0, 9),
        },
        record(0, t(0, 10)),
    ];
    let h = run_capped(1, 1_000_000, 1_000, false, (Some(3), None), &ops);
    assert_eq!(h.model.stored_count(None), 0);
}
