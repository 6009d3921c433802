//! Shared decisions: any bytes decode to a decision or an error, never a panic; a decoded
//! decision encodes back to the same bytes (the format is canonical); an arbitrary
//! decision round-trips, and any flipped bit of its encoding is an error; applying a
//! decision to an index (plain ids and data-parallel ranks, with a cap), then using the
//! index, never panics, and everything it stored expires with the TTL.
//!
//! A batch of decisions from a few origins, with sequence numbers anywhere in `u64`, applied
//! with `apply_decisions` gives the outcomes, counters and index of applying them one by
//! one.
//!
//! The first byte picks the input's reading: raw bytes to decode (which rarely pass the
//! checksum), a decision built from the bytes (which always does), or a batch built from
//! them.
#![no_main]

use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::replication::{Action, Decision};
use approx_kv_index::{ApproxKvIndexer, LocalBlockHash, ManualClock, Query, WorkerWithDpRank};
use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

fn built(u: &mut Unstructured<'_>) -> Result<(Decision, usize)> {
    let action = match u.int_in_range(0..=4)? {
        0 => Action::Route {
            worker_id: u.int_in_range(0..=3)?,
            dp_rank: u.int_in_range(0..=2)?,
            blocks: (0..u.int_in_range(0..=40)?)
                .map(|_| Ok(LocalBlockHash(u.int_in_range(0..=7)?)))
                .collect::<Result<_>>()?,
        },
        1 => Action::RemoveWorker {
            worker_id: u.int_in_range(0..=3)?,
        },
        2 => Action::RemoveKey {
            worker_id: u.int_in_range(0..=3)?,
            dp_rank: u.int_in_range(0..=2)?,
        },
        3 => Action::SetCapacity {
            worker_id: u.int_in_range(0..=3)?,
            dp_rank: u.int_in_range(0..=2)?,
            capacity: u.arbitrary::<Option<u16>>()?.map(u64::from),
        },
        _ => Action::DropOlder {
            worker_id: u.int_in_range(0..=3)?,
            dp_rank: u.int_in_range(0..=2)?,
            used_before: Duration::from_nanos(u.int_in_range(0..=1 << 40)?),
        },
    };
    let decision = Decision {
        origin: u.arbitrary()?,
        seq: u.arbitrary()?,
        decided_at: Duration::from_nanos(u.arbitrary()?),
        action,
    };
    Ok((decision, u.arbitrary()?))
}

/// The settings of every index here, on `clock`: replica 1 (so origin 1's decisions
/// numbered from the build time on are its own).
fn builder(clock: &Arc<ManualClock>) -> approx_kv_index::Builder {
    clock.set(Duration::from_secs(1_700_000_000));
    ApproxKvIndexer::builder()
        .block_size(1)
        .ttl(Duration::from_secs(60))
        .clock(clock.clone())
        .wall_clock(clock.clone())
        .background_sweeper(false)
        .max_blocks_per_worker(8)
        .replica_id(1)
}

/// Up to 8 built decisions from origins 0 to 2, dated within the TTL or before it.
fn batch(u: &mut Unstructured<'_>) -> Result<Vec<Decision>> {
    (0..u.int_in_range(1..=8)?)
        .map(|_| {
            let (mut decision, _) = built(u)?;
            decision.origin = u.int_in_range(0..=2)?;
            decision.decided_at = Duration::from_secs(1_700_000_000 - u.int_in_range(0..=90)?);
            Ok(decision)
        })
        .collect()
}

/// `apply_decisions` of the batch is `apply_decision` of each, in order.
fn apply_batch(decisions: &[Decision]) {
    let (c1, c2) = (Arc::new(ManualClock::new()), Arc::new(ManualClock::new()));
    let (one_by_one, batched) = (builder(&c1).build().unwrap(), builder(&c2).build().unwrap());
    let outcomes: Vec<_> = decisions
        .iter()
        .map(|d| one_by_one.apply_decision(d))
        .collect();
    assert_eq!(batched.apply_decisions(decisions), outcomes);
    let (a, b) = (batched.replication_stats(), one_by_one.replication_stats());
    assert_eq!(
        (
            a.applied,
            a.duplicates,
            a.expired,
            a.gaps,
            a.restarts,
            a.superseded,
            a.lag_p50,
            a.lag_p99
        ),
        (
            b.applied,
            b.duplicates,
            b.expired,
            b.gaps,
            b.restarts,
            b.superseded,
            b.lag_p50,
            b.lag_p99
        )
    );
    assert_eq!(batched.stats().entries, one_by_one.stats().entries);
}

fn apply(decision: &Decision) {
    let clock = Arc::new(ManualClock::new());
    let builder = builder(&clock);
    let plain = builder.clone().build().unwrap();
    let ranked = builder.build_for::<WorkerWithDpRank>().unwrap();
    plain.apply_decision(decision);
    ranked.apply_decision(decision);
    if let Action::Route { blocks, .. } = &decision.action {
        assert!(plain
            .find(Query::blocks(blocks))
            .scores
            .values()
            .all(|&s| s as usize <= blocks.len()));
        let _ = ranked.find(Query::blocks(blocks));
    }
    clock.advance(Duration::from_secs(61));
    plain.sweep_expired();
    ranked.sweep_expired();
    assert_eq!(plain.stats().entries + ranked.stats().entries, 0);
}

fuzz_target!(|bytes: &[u8]| {
    let Some((&mode, rest)) = bytes.split_first() else {
        return;
    };
    if mode & 3 == 3 {
        if let Ok(decisions) = batch(&mut Unstructured::new(rest)) {
            apply_batch(&decisions);
        }
        return;
    }
    if mode & 1 == 0 {
        if let Ok(decision) = Decision::decode(rest) {
            assert_eq!(decision.encode(), rest);
            apply(&decision);
        }
        return;
    }
    let Ok((decision, flip)) = built(&mut Unstructured::new(rest)) else {
        return;
    };
    let mut encoded = decision.encode();
    assert_eq!(Decision::decode(&encoded).as_ref(), Ok(&decision));
    apply(&decision);
    let at = flip % (encoded.len() * 8);
    encoded[at / 8] ^= 1 << (at % 8);
    assert!(Decision::decode(&encoded).is_err());
});
