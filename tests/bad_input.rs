//! Bad and extreme input never panics; invalid settings and calls get clear errors.
//!
//! | input | expected |
//! |---|---|
//! | block size 0 | `ConfigError::ZeroBlockSize`; hashing yields no blocks |
//! | zero TTL / zero tick | `ConfigError::ZeroTtl` / `ConfigError::ZeroTick` |
//! | TTL `Duration::MAX` | entries live ~584 years; nothing reclaimed early |
//! | tick longer than TTL, tick `Duration::MAX` | reads exact; drop does not hang |
//! | clock at `Duration::MAX` | records, finds and sweeps do not panic |
//! | worker id `u64::MAX` | an ordinary worker |
//! | empty tokens, block size `u32::MAX` | nothing recorded, empty finds |
//! | 1 M tokens | recorded and found in full |
//! | local/sequence slices of different lengths | `RecordError::LengthMismatch`, nothing stored |
//! | every call after `shutdown` (twice) | works; `sweep_expired` still reclaims |
//! | `remove_worker` of an unknown worker, twice | no-op |
//! | one decision recorded by 16 threads at once | one entry per block |
//! | a first block whose tokens spell another block's chain step (block size 4) | conflated as in Dynamo; finds, expiry, removal, dumps and snapshots work |

use std::sync::{Arc, Barrier};

use std::time::Duration;

use approx_kv_index::*;

const TTL: Duration = Duration::from_secs(10);

fn manual(block_size: u32, ttl: Duration, tick: Duration) -> (ApproxKvIndexer, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let index = ApproxKvIndexer::builder()
        .block_size(block_size)
        .ttl(ttl)
        .tick(tick)
        .clock(clock.clone())
        .background_sweeper(false)
        .build()
        .expect("valid settings");
    (index, clock)
}

fn tokens(n: u32) -> Vec<u32> {
    (0..n).collect()
}

#[test]
fn zero_settings_are_errors() {
    let b = ApproxKvIndexer::builder;
    assert_eq!(
        b().block_size(0).build().err(),
        Some(ConfigError::ZeroBlockSize)
    );
    assert_eq!(
        b().ttl(Duration::ZERO).build().err(),
        Some(ConfigError::ZeroTtl)
    );
    assert_eq!(
        b().tick(Duration::ZERO).build().err(),
        Some(ConfigError::ZeroTick)
    );
    assert_eq!(
        ApproxKvIndexer::new(0, TTL).err(),
        Some(ConfigError::ZeroBlockSize)
    );
    for e in [
        ConfigError::ZeroBlockSize,
        ConfigError::ZeroTtl,
        ConfigError::ZeroTick,
    ] {
        assert!(!e.to_string().is_empty());
    }
    assert!(compute_block_hash_for_seq(&tokens(64), 0).is_empty());
}

#[test]
fn invalid_configuration_is_an_error() {
    let b = || ApproxKvIndexer::builder();
    assert_eq!(
        b().block_size(0).build().unwrap_err(),
        ConfigError::ZeroBlockSize
    );
    assert_eq!(
        b().tick(Duration::ZERO).build().unwrap_err(),
        ConfigError::ZeroTick
    );
    assert_eq!(
        b().ttl(Duration::ZERO).build().unwrap_err(),
        ConfigError::ZeroTtl
    );
    assert!(ApproxKvIndexer::new(0, TTL).is_err());
    assert!(b().ttl(Duration::MAX).tick(Duration::MAX).build().is_ok());
    assert!(!ConfigError::ZeroTick.to_string().is_empty());
}

#[test]
fn longest_ttl_never_expires_early() {
    let (index, clock) = manual(4, Duration::MAX, Duration::from_millis(100));
    index.process_routing_decision_for_request(&tokens(8), 1);
    clock.advance(Duration::from_secs(100 * 365 * 24 * 3600));
    assert_eq!(index.sweep_expired(), 0);
    assert_eq!(index.find_matches_for_request(&tokens(8)).scores[&1], 2);
}

#[test]
fn tick_longer_than_ttl() {
    for tick in [Duration::from_secs(3600), Duration::MAX] {
        let clock = Arc::new(ManualClock::new());
        let index = ApproxKvIndexer::builder()
            .block_size(4)
            .ttl(Duration::from_millis(1))
            .tick(tick)
            .clock(clock.clone())
            .build()
            .unwrap();
        index.process_routing_decision_for_request(&tokens(8), 1);
        assert_eq!(index.find_matches_for_request(&tokens(8)).scores[&1], 2);
        clock.advance(Duration::from_millis(1));
        assert!(index.find_matches_for_request(&tokens(8)).scores.is_empty());
        assert_eq!(index.sweep_expired(), 2);
        drop(index); // joins the sweeper parked for `tick`: must not hang
    }
}

/// The clock at its very end (~584 years), with the finest and the default tick.
#[test]
fn clock_at_its_maximum() {
    for tick in [Duration::from_millis(100), Duration::from_nanos(2)] {
        let (index, clock) = manual(4, TTL, tick);
        index.process_routing_decision_for_request(&tokens(8), 1);
        clock.set(Duration::MAX);
        index.process_routing_decision_for_request(&tokens(8), 2);
        // Time has stopped at its end: only "no panic" and sane answers are required.
        let found = index.find_matches_for_request(&tokens(8));
        assert!(found.scores.values().all(|&s| s <= 2));
        assert!(!found.scores.contains_key(&1), "recorded 584 years ago");
        index.sweep_expired();
        index.sweep_expired();
        let _ = index.dump_events();
    }
}

/// As above with a 1 ns tick, so the timer wheel's tick number is as large as it gets
/// (no overflow in `advance`).
#[test]
fn clock_at_its_maximum_with_one_nanosecond_tick() {
    let (index, clock) = manual(4, TTL, Duration::from_nanos(1));
    index.process_routing_decision_for_request(&tokens(8), 1);
    clock.set(Duration::MAX);
    index.sweep_expired();
    index.sweep_expired(); // `current + 1` with current == u64::MAX
}

#[test]
fn extreme_worker_ids() {
    let (index, _clock) = manual(4, TTL, Duration::from_millis(100));
    index.process_routing_decision_for_request(&tokens(8), u64::MAX);
    index.process_routing_decision_for_request(&tokens(4), 0);
    let found = index.find_matches_for_request(&tokens(8));
    assert_eq!((found.scores[&u64::MAX], found.scores[&0]), (2, 1));
    index.remove_worker(u64::MAX);
    let found = index.find_matches_for_request(&tokens(8));
    assert_eq!(found.scores.keys().copied().collect::<Vec<_>>(), vec![0]);
}

#[test]
fn empty_and_short_inputs() {
    let (index, _clock) = manual(4, TTL, Duration::from_millis(100));
    index.process_routing_decision_for_request(&[], 1);
    index.process_routing_decision_for_request(&[1, 2, 3], 1); // no full block
    index.process_routing_decision(1, &[], &[]).unwrap();
    assert_eq!((index.stats().entries, index.stats().workers), (0, 0));
    assert!(index.find_matches_for_request(&[]).scores.is_empty());
    assert!(index.find_matches(&[]).scores.is_empty());
    let (huge_block, _clock) = manual(u32::MAX, TTL, Duration::from_millis(100));
    huge_block.process_routing_decision_for_request(&tokens(1000), 1);
    assert!(huge_block
        .find_matches_for_request(&tokens(1000))
        .scores
        .is_empty());
    assert_eq!(huge_block.stats().entries, 0);
}

#[test]
fn a_million_tokens() {
    let prompt: Vec<u32> = (0..1_000_000u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    for block in [1u32, 16] {
        let (index, clock) = manual(block, TTL, Duration::from_millis(100));
        let blocks = 1_000_000 / block;
        assert!(index.find_matches_for_request(&prompt).scores.is_empty());
        index.process_routing_decision_for_request(&prompt, 7);
        assert_eq!(index.find_matches_for_request(&prompt).scores[&7], blocks);
        assert_eq!(index.stats().entries, blocks as usize);
        clock.advance(TTL);
        assert_eq!(index.sweep_expired(), blocks as usize);
        assert_eq!((index.stats().entries, index.stats().nodes), (0, 0));
    }
}

#[test]
fn mismatched_hash_lengths_are_rejected() {
    let (index, _clock) = manual(4, TTL, Duration::from_millis(100));
    let local = compute_block_hash_for_seq(&tokens(16), 4);
    let seq = compute_seq_hashes(&local);
    for (l, s) in [
        (&local[..], &seq[..3]),
        (&local[..1], &seq[..]),
        (&[][..], &seq[..]),
    ] {
        let err = index.process_routing_decision(3, l, s).unwrap_err();
        let want = RecordError::LengthMismatch {
            local: l.len(),
            seq: s.len(),
        };
        assert_eq!(err, want);
        assert!(err.to_string().contains(&l.len().to_string()), "{err}");
    }
    let stats = index.stats();
    assert_eq!((stats.entries, stats.workers, stats.records), (0, 0, 0));
    assert!(index.find_matches(&local).scores.is_empty());
}

#[test]
fn every_call_works_after_shutdown() {
    let clock = Arc::new(ManualClock::new());
    let index = ApproxKvIndexer::builder()
        .block_size(4)
        .ttl(TTL)
        .clock(clock.clone())
        .build()
        .unwrap();
    index.shutdown();
    index.shutdown();
    index.process_routing_decision_for_request(&tokens(8), 1);
    let local = compute_block_hash_for_seq(&tokens(12), 4);
    index
        .process_routing_decision(2, &local, &compute_seq_hashes(&local))
        .unwrap();
    assert_eq!(index.find_matches_for_request(&tokens(8)).scores[&1], 2);
    assert_eq!(index.find_matches(&local).scores[&2], 3);
    assert_eq!(index.dump_events().len(), 5);
    index.remove_worker(2);
    assert_eq!(index.stats().workers, 1);
    clock.advance(TTL);
    assert_eq!(index.sweep_expired(), 5);
    assert_eq!(index.stats().entries, 0);
    index.shutdown();
}

#[test]
fn removing_unknown_workers_is_a_no_op() {
    let (index, _clock) = manual(4, TTL, Duration::from_millis(100));
    index.remove_worker(42);
    index.process_routing_decision_for_request(&tokens(8), 1);
    let before = index.stats();
    for w in [42, 0, u64::MAX, 2] {
        index.remove_worker(w);
    }
    assert_eq!(index.stats(), before);
    index.remove_worker(1);
    index.remove_worker(1);
    assert_eq!(index.stats().workers, 0);
    assert!(index.find_matches_for_request(&tokens(8)).scores.is_empty());
}

#[test]
fn one_decision_recorded_by_sixteen_threads_at_once() {
    let (index, clock) = manual(4, TTL, Duration::from_millis(100));
    let prompt = tokens(64);
    let barrier = Barrier::new(16);
    std::thread::scope(|s| {
        for _ in 0..16 {
            s.spawn(|| {
                barrier.wait();
                index.process_routing_decision_for_request(&prompt, 5);
            });
        }
    });
    assert_eq!(index.find_matches_for_request(&prompt).scores[&5], 16);
    let stats = index.stats();
    assert_eq!((stats.entries, stats.nodes, stats.workers), (16, 16, 1));
    assert_eq!(index.dump_events().len(), 16);
    clock.advance(TTL);
    assert_eq!(index.sweep_expired(), 16);
    assert_eq!(index.stats().entries, 0);
}

/// At block size 4 a block's tokens hash and a chain step hash the same 16 bytes with the
/// same seed, so a first block whose four tokens spell `(parent, tokens hash)` of a block
/// elsewhere gets that block's sequence hash (docs/design.md, "Collisions"). Crafted so
/// (tokens no tokenizer emits, or precomputed hashes), the two blocks are one to the index,
/// as to Dynamo's, and nothing breaks: finds report what was recorded and nothing once it
/// expired or its worker is gone; dumps and snapshots replay into fresh indexes.
#[test]
fn a_first_block_that_spells_a_chain_step_is_safe() {
    // [lo(3), hi(3), lo(3), hi(3)]: the bytes of the step from sequence hash 3 by tokens
    // hash 3; then an ordinary block.
    let spelled = [3u32, 0, 3, 0, 1, 2, 1, 2];
    let chain = [3, 3, 0, 7].map(LocalBlockHash);
    let diverging = [3, 3, 5].map(LocalBlockHash);
    let seq = compute_seq_hashes(&chain);
    assert_eq!(compute_block_hash_for_seq(&spelled, 4)[0].0, seq[1].0);
    for spelled_first in [true, false] {
        let (index, clock) = manual(4, TTL, Duration::from_millis(100));
        let record = |worker: WorkerId, local: &[LocalBlockHash]| {
            let seq = compute_seq_hashes(local);
            index
                .process_routing_decision(worker, local, &seq)
                .expect("same lengths");
        };
        if spelled_first {
            index.process_routing_decision_for_request(&spelled, 7);
            record(7, &chain);
        } else {
            record(7, &chain);
            index.process_routing_decision_for_request(&spelled, 7);
        }
        // Diverges from the chain where the spelled block's key is taken.
        record(8, &diverging);
        let found = |index: &ApproxKvIndexer| {
            [
                index.find_matches(&chain).scores,
                index.find_matches(&diverging).scores,
                index.find_matches_for_request(&spelled).scores,
            ]
        };
        let [c, d, t] = found(&index);
        assert_eq!(
            (c.get(&7), d.get(&8), t.get(&7)),
            (Some(&4), Some(&3), Some(&2))
        );
        let (events, snapshot) = (index.dump_events(), index.snapshot());
        for from_dump in [true, false] {
            let (other, _) = manual(4, TTL, Duration::from_millis(100));
            if from_dump {
                events.iter().for_each(|e| other.apply_event(e));
            } else {
                other
                    .restore(&snapshot)
                    .expect("a snapshot of the same settings");
            }
            let [c, d, t] = found(&other);
            assert_eq!(
                (c.get(&7), d.get(&8), t.get(&7)),
                (Some(&4), Some(&3), Some(&2))
            );
        }
        clock.advance(TTL);
        index.sweep_expired();
        assert!(
            found(&index).iter().all(|s| s.is_empty()),
            "{spelled_first}"
        );
        record(7, &chain);
        record(8, &diverging);
        index.remove_worker(7);
        index.remove_worker(8);
        assert!(
            found(&index).iter().all(|s| s.is_empty()),
            "{spelled_first}"
        );
        assert_eq!(index.stats().workers, 0);
        clock.advance(TTL);
        index.sweep_expired();
        assert!(index.dump_events().is_empty());
    }
}
