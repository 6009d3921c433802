//! Promises about sharing decisions between replicas (the rustdoc of `replication`,
//! `sharing`, `Builder`'s sharing settings and `apply_decision`, and docs/design.md
//! "Sharing decisions between replicas") that no other test asserted: one promise per
//! test, each quoting the sentence it checks. Time is driven by manual clocks, never by
//! sleeping.

mod support;

use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::replication::{
    Action, Applied, Decision, DecodeError, LagHistogram, MAX_BLOCKS, MAX_ENCODED_LEN, VERSION,
};
use approx_kv_index::*;
use proptest::prelude::*;
use xxhash_rust::xxh3::xxh3_64;

const TTL: Duration = Duration::from_secs(10);
/// A wall-clock origin (only differences matter).
const EPOCH: Duration = Duration::from_secs(1_700_000_000);
const NS: Duration = Duration::from_nanos(1);
/// The fixed part of an encoding: magic, version, kind, origin, seq, time, worker, rank,
/// block count (src/replication/codec.rs, format version 1).
const HEADER: usize = 4 + 1 + 1 + 8 + 8 + 8 + 8 + 4 + 4;

fn manual(at: Duration) -> Arc<ManualClock> {
    let clock = Arc::new(ManualClock::new());
    clock.set(at);
    clock
}

/// A block-size-1 replica whose index clock and wall clock are both `clock`.
fn replica_on(id: u64, clock: &Arc<ManualClock>) -> Builder {
    support::index::sharing_replica(id, clock, TTL)
}

fn drain<W: WorkerKey>(from: &ApproxKvIndexer<W>) -> Vec<Decision> {
    let outbox = from.outbox().unwrap();
    std::iter::from_fn(|| outbox.pop()).collect()
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

/// `body` with its xxh3-64 (seed 0) appended, as the format ends.
fn sealed(mut body: Vec<u8>) -> Vec<u8> {
    let sum = xxh3_64(&body);
    body.extend_from_slice(&sum.to_le_bytes());
    body
}

/// The header of format version 1, built by hand from the module docs.
#[allow(clippy::too_many_arguments)]
fn header(
    version: u8,
    kind: u8,
    origin: u64,
    seq: u64,
    at: u64,
    worker: u64,
    rank: u32,
    count: u32,
) -> Vec<u8> {
    let mut out = b"AKVD".to_vec();
    out.extend_from_slice(&[version, kind]);
    out.extend_from_slice(&origin.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&at.to_le_bytes());
    out.extend_from_slice(&worker.to_le_bytes());
    out.extend_from_slice(&rank.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out
}

/// src/replication/codec.rs, module docs: "Format, version 1 (integers little-endian):
/// `b"AKVD"`, version `u8`, kind `u8` (0 route, 1 remove worker, 2 remove key), origin
/// `u64`, seq `u64`, decision time in ns since the Unix epoch `u64`, worker id `u64`, dp
/// rank `u32`, block count `u32` (0 unless a route, at most [`MAX_BLOCKS`]), the blocks'
/// tokens hashes `u64` each; then xxh3-64 (seed 0) of all the bytes before it."; `VERSION`:
/// "The format version this build writes and reads."
#[test]
fn the_encoding_is_the_documented_byte_layout() {
    assert_eq!(VERSION, 1);
    let at = Duration::from_nanos(1_700_000_000_123_456_789);
    let (origin, seq) = (0x0102_0304_0506_0708, 0x1112_1314_1516_1718);
    let cases = [
        (
            Action::Route {
                worker_id: 0x2122_2324_2526_2728,
                dp_rank: 0x3132_3334,
                blocks: vec![LocalBlockHash(0x4142_4344_4546_4748), LocalBlockHash(9)],
            },
            {
                let mut b = header(
                    1,
                    0,
                    origin,
                    seq,
                    1_700_000_000_123_456_789,
                    0x2122_2324_2526_2728,
                    0x3132_3334,
                    2,
                );
                b.extend_from_slice(&0x4142_4344_4546_4748u64.to_le_bytes());
                b.extend_from_slice(&9u64.to_le_bytes());
                b
            },
        ),
        (
            Action::RemoveWorker { worker_id: 77 },
            header(1, 1, origin, seq, 1_700_000_000_123_456_789, 77, 0, 0),
        ),
        (
            Action::RemoveKey {
                worker_id: 78,
                dp_rank: 5,
            },
            header(1, 2, origin, seq, 1_700_000_000_123_456_789, 78, 5, 0),
        ),
    ];
    for (action, body) in cases {
        let d = Decision {
            origin,
            seq,
            decided_at: at,
            action,
        };
        let expected = sealed(body);
        assert_eq!(d.encode(), expected, "{d:?}");
        assert_eq!(Decision::decode(&expected), Ok(d));
    }
}

/// src/replication/codec.rs, `MAX_ENCODED_LEN`: "The longest encoding of a decision: a
/// route of [`MAX_BLOCKS`] blocks (524,342 bytes)."
#[test]
fn max_encoded_len_is_the_documented_number_of_bytes() {
    let longest = Decision {
        action: Action::Route {
            worker_id: 1,
            dp_rank: 0,
            blocks: vec![LocalBlockHash(3); MAX_BLOCKS],
        },
        ..route(1, EPOCH)
    };
    assert_eq!(longest.encode().len(), MAX_ENCODED_LEN);
    assert_eq!(MAX_ENCODED_LEN, 524_342);
}

/// src/replication/codec.rs, `DecodeError::TooLarge`: "Longer than [`MAX_ENCODED_LEN`],
/// or a block count above [`MAX_BLOCKS`]." (the first half: any longer input, whatever its
/// block count says).
#[test]
fn input_longer_than_max_encoded_len_is_too_large() {
    for count in [0u32, 3, MAX_BLOCKS as u32] {
        let mut bytes = header(1, 0, 1, 2, 3, 4, 0, count);
        bytes.resize(MAX_ENCODED_LEN + 1, 0);
        assert_eq!(Decision::decode(&bytes), Err(DecodeError::TooLarge));
    }
    // The longest valid one is still read.
    let mut longest = header(1, 0, 1, 2, 3, 4, 0, MAX_BLOCKS as u32);
    longest.resize(MAX_ENCODED_LEN - 8, 0);
    assert!(Decision::decode(&sealed(longest)).is_ok());
}

/// src/replication/codec.rs, `DecodeError::Malformed`: "The length disagrees with the
/// block count, or the kind is unknown."; module docs: "block count `u32` (0 unless a
/// route ...)". Checked with a valid checksum, so only the kind or count can be at fault.
#[test]
fn an_unknown_kind_or_a_removal_with_blocks_is_malformed_even_when_sealed() {
    for kind in [3u8, 4, 255] {
        let bytes = sealed(header(1, kind, 1, 2, 3, 4, 0, 0));
        assert_eq!(
            Decision::decode(&bytes),
            Err(DecodeError::Malformed),
            "{kind}"
        );
    }
    for kind in [1u8, 2] {
        let mut body = header(1, kind, 1, 2, 3, 4, 0, 1);
        body.extend_from_slice(&7u64.to_le_bytes());
        assert_eq!(
            Decision::decode(&sealed(body)),
            Err(DecodeError::Malformed),
            "{kind}"
        );
    }
    // A length that disagrees with the count, checksum valid.
    let mut body = header(1, 0, 1, 2, 3, 4, 0, 2);
    body.extend_from_slice(&7u64.to_le_bytes());
    assert_eq!(Decision::decode(&sealed(body)), Err(DecodeError::Malformed));
}

/// docs/design.md, Encoding: "decoding checks magic, version, size bound, exact length and
/// checksum before reading" (each check wins over the later ones).
#[test]
fn decoding_checks_magic_version_size_length_and_checksum_in_that_order() {
    // Wrong magic, of any length.
    let mut foreign = header(1, 0, 1, 2, 3, 4, 0, 0);
    foreign[0] = b'X';
    assert_eq!(
        Decision::decode(&sealed(foreign)),
        Err(DecodeError::NotADecision)
    );
    // Another version: neither its size, its length nor its checksum matters.
    let mut future = header(2, 9, 1, 2, 3, 4, 0, u32::MAX);
    future.resize(MAX_ENCODED_LEN + 100, 0xEE);
    assert_eq!(
        Decision::decode(&future),
        Err(DecodeError::UnsupportedVersion(2))
    );
    // Over the size bound by its count, with a length that disagrees and no checksum.
    let mut huge = header(1, 0, 1, 2, 3, 4, 0, MAX_BLOCKS as u32 + 1);
    huge.resize(HEADER + 8 + 8, 0);
    assert_eq!(Decision::decode(&huge), Err(DecodeError::TooLarge));
    // A length that disagrees with the count, and a wrong checksum.
    let mut short = header(1, 0, 1, 2, 3, 4, 0, 2);
    short.resize(HEADER + 8 + 8, 0);
    assert_eq!(Decision::decode(&short), Err(DecodeError::Malformed));
    // Only the checksum wrong.
    let mut altered = sealed(header(1, 1, 1, 2, 3, 4, 0, 0));
    altered[HEADER] ^= 1;
    assert_eq!(Decision::decode(&altered), Err(DecodeError::Corrupted));
}

proptest! {
    /// src/replication/codec.rs, `Decision::decode`: "any other bytes give a
    /// [`DecodeError`], never a panic"; `DecodeError`: "Decoding never panics, whatever
    /// the bytes." Past the magic, the version and the checksum (which random bytes
    /// rarely pass): sealed headers with any kind, count and number of blocks decode to
    /// the decision they describe, or to `Malformed`.
    #[test]
    fn sealed_bytes_of_any_kind_and_count_decode_to_what_they_say_or_an_error(
        kind in 0u8..5,
        count in 0u32..5,
        blocks in prop::collection::vec(any::<u64>(), 0..5),
        fields in (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), any::<u32>()),
    ) {
        let (origin, seq, at, worker, rank) = fields;
        let mut body = header(1, kind, origin, seq, at, worker, rank, count);
        for b in &blocks {
            body.extend_from_slice(&b.to_le_bytes());
        }
        let decoded = Decision::decode(&sealed(body));
        let readable = count as usize == blocks.len() && (kind == 0 || (kind <= 2 && count == 0));
        if !readable {
            prop_assert_eq!(decoded, Err(DecodeError::Malformed));
        } else {
            let action = match kind {
                0 => Action::Route {
                    worker_id: worker,
                    dp_rank: rank,
                    blocks: blocks.iter().copied().map(LocalBlockHash).collect(),
                },
                1 => Action::RemoveWorker { worker_id: worker },
                _ => Action::RemoveKey { worker_id: worker, dp_rank: rank },
            };
            prop_assert_eq!(
                decoded,
                Ok(Decision { origin, seq, decided_at: Duration::from_nanos(at), action })
            );
        }
    }
}

/// src/sharing/decision.rs, `Action::Route`: "Routed a prompt whose full blocks have these
/// tokens hashes (salted, if the request was)"; `process_routing_decision_for_request_salted`:
/// "its blocks only ever match finds with the same [`HashSalt`]" (on the receiver too).
#[test]
fn salted_routes_are_shared_salted_and_match_only_the_same_salt_on_the_receiver() {
    let clock = manual(EPOCH);
    let a = replica_on(1, &clock).block_size(2).build().unwrap();
    let b = replica_on(2, &clock).block_size(2).build().unwrap();
    let salt = HashSalt::new(Some("lora-x"), Some("tenant-a"));
    let tokens = [1, 2, 3, 4];
    a.process_routing_decision_for_request_salted(&tokens, 6, salt);
    let sent = drain(&a);
    assert_eq!(sent.len(), 1);
    let salted = compute_block_hash_for_seq_salted(&tokens, 2, salt);
    assert_ne!(salted, compute_block_hash_for_seq(&tokens, 2));
    assert_eq!(
        sent[0].action,
        Action::Route {
            worker_id: 6,
            dp_rank: 0,
            blocks: salted,
        }
    );
    assert_eq!(b.apply_decision(&sent[0]), Applied::Applied);
    assert_eq!(
        b.find_matches_for_request_salted(&tokens, salt)
            .scores
            .get(&6),
        Some(&2)
    );
    assert!(b.find_matches_for_request(&tokens).scores.is_empty());
    let other = HashSalt::new(Some("lora-x"), Some("tenant-b"));
    assert!(b
        .find_matches_for_request_salted(&tokens, other)
        .scores
        .is_empty());
}

/// src/config.rs, `Builder::share_decisions`: "every local routing decision and worker
/// removal is also queued" (also those recorded from precomputed hashes, which are placed
/// by the chain of their local hashes); `process_routing_decision`: "Slices of different
/// lengths are an error and store nothing" (nor share anything).
#[test]
fn decisions_from_precomputed_hashes_are_shared_and_rejected_ones_are_not() {
    let clock = manual(EPOCH);
    let a = replica_on(1, &clock).build().unwrap();
    let b = replica_on(2, &clock).build().unwrap();
    let local = compute_block_hash_for_seq(&[5, 6, 7], 1);
    let seq = compute_seq_hashes(&local);
    assert!(a.process_routing_decision(3, &local, &seq[..2]).is_err());
    assert_eq!(a.replication_stats().shared, 0);
    assert!(a.outbox().unwrap().is_empty());
    // Sequence hashes that are not the chain: still a decision, shared by its local hashes.
    let bogus = [SequenceHash(1), SequenceHash(2), SequenceHash(3)];
    a.process_routing_decision(3, &local, &bogus).unwrap();
    let sent = drain(&a);
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].action,
        Action::Route {
            worker_id: 3,
            dp_rank: 0,
            blocks: local.clone(),
        }
    );
    assert_eq!(b.apply_decision(&sent[0]), Applied::Applied);
    assert_eq!(b.find_matches(&local).scores.get(&3), Some(&3));
}

/// src/replication/mod.rs: "Only the approximate side is shared: exact KV events
/// ([`apply_event`](crate::ApproxKvIndexer::apply_event)) come from the engines, which
/// every replica can subscribe to itself."
#[test]
fn exact_kv_events_are_not_shared() {
    let clock = manual(EPOCH);
    let a = replica_on(1, &clock).build().unwrap();
    let local = compute_block_hash_for_seq(&[1, 2], 1);
    let seq = compute_seq_hashes(&local);
    let blocks = local
        .iter()
        .zip(&seq)
        .map(|(&tokens_hash, &block_hash)| KvCacheStoredBlockData {
            block_hash,
            tokens_hash,
            expires_in: None,
        })
        .collect();
    let events = [
        KvCacheEventData::Stored(KvCacheStoreData {
            parent_hash: None,
            blocks,
        }),
        KvCacheEventData::Removed(KvCacheRemoveData {
            block_hashes: vec![seq[1]],
        }),
        KvCacheEventData::Cleared,
    ];
    for (i, data) in events.into_iter().enumerate() {
        a.apply_event(&RouterEvent {
            worker_id: 9,
            event_id: i as u64,
            data,
        });
        if i == 0 {
            assert_eq!(a.find_matches(&local).scores.get(&9), Some(&2)); // it was applied
        }
    }
    let s = a.replication_stats();
    assert_eq!((s.shared, s.queued, s.dropped), (0, 0, 0));
    // A local decision after them is shared as usual.
    a.process_routing_decision_for_request(&[1, 2], 9);
    assert_eq!(a.replication_stats().shared, 1);
}

/// src/sharing/mod.rs, `ReplicationStats::gaps`: "Decisions of other replicas never
/// received: numbers skipped in an origin's sequence (dropped by a full outbox there, or
/// ...)": a dropped decision still takes its number, so receivers count it.
#[test]
fn decisions_dropped_by_a_full_outbox_at_the_origin_count_as_gaps_on_receivers() {
    let clock = manual(EPOCH);
    let a = replica_on(1, &clock).share_decisions(2).build().unwrap();
    let b = replica_on(2, &clock).build().unwrap();
    for t in 0..5 {
        a.process_routing_decision_for_request(&[t], 0); // 2 queued, 3 dropped
    }
    let mut sent = drain(&a);
    a.process_routing_decision_for_request(&[9], 0);
    sent.extend(drain(&a));
    assert_eq!(sent.len(), 3);
    for d in &sent {
        assert_eq!(b.apply_decision(d), Applied::Applied);
    }
    let (origin, receiver) = (a.replication_stats(), b.replication_stats());
    assert_eq!(origin.dropped, 3);
    assert_eq!((receiver.applied, receiver.gaps), (3, origin.dropped));
}

/// src/replication/apply.rs, `apply_decision`: "a route's blocks expire a TTL after the
/// decision's time (by this index's wall clock: a decision taken 3 s ago expires 3 s
/// before one taken now ...)"; src/config.rs, `Builder::wall_clock`: "The wall clock ...
/// that dates shared decisions and ages received ones". The index's own clock (monotonic,
/// any origin) is not the wall clock: the age is measured on the wall clock and the expiry
/// runs on the index's clock.
#[test]
fn an_applied_decision_is_aged_by_the_wall_clock_and_expires_on_the_index_clock() {
    let mono = manual(Duration::from_secs(5)); // an unrelated origin
    let wall = manual(EPOCH);
    let b = ApproxKvIndexer::builder()
        .block_size(1)
        .ttl(TTL)
        .clock(mono.clone())
        .wall_clock(wall.clone())
        .background_sweeper(false)
        .replica_id(2)
        .build()
        .unwrap();
    let three_s_ago = route(1, EPOCH - Duration::from_secs(3));
    assert_eq!(b.apply_decision(&three_s_ago), Applied::Applied);
    b.process_routing_decision_for_request(&[77], 4); // taken now, on b
    mono.advance(TTL - Duration::from_secs(3) - NS);
    assert_eq!(
        b.find_matches(&[LocalBlockHash(1)]).scores.get(&4),
        Some(&1)
    );
    mono.advance(NS);
    assert!(b.find_matches(&[LocalBlockHash(1)]).scores.is_empty());
    assert_eq!(b.find_matches_for_request(&[77]).scores.get(&4), Some(&1));
    assert_eq!(b.replication_stats().lag_p50.as_secs(), 3);
}

/// src/sharing/mod.rs, `ReplicationStats::lag_p50`: "Median time from a decision to its
/// arrival here (wall clocks of both replicas)"; `lag_p99`: "99th percentile of the same";
/// docs/design.md, Lag: "a log-linear histogram (1/8 resolution)".
#[test]
fn lag_percentiles_report_the_median_and_the_slow_tail() {
    let clock = manual(EPOCH);
    let b = replica_on(2, &clock).build().unwrap();
    for seq in 1..=100u64 {
        let age = if seq <= 97 { 1 } else { 5 };
        let d = route(seq, EPOCH - Duration::from_secs(age));
        assert_eq!(b.apply_decision(&d), Applied::Applied);
    }
    let s = b.replication_stats();
    let within = |d: Duration, secs: f64| (secs..=secs * 1.125).contains(&d.as_secs_f64());
    assert!(within(s.lag_p50, 1.0), "{s:?}");
    assert!(within(s.lag_p99, 5.0), "{s:?}");
}

/// docs/design.md, Lag: "Each applied decision's age goes into a log-linear histogram";
/// src/sharing/lag.rs: "how long applied decisions took to arrive". A decision skipped as
/// a TTL old ([`Applied::Expired`]) is not applied, so its age is no sample.
#[test]
fn decisions_skipped_as_expired_do_not_count_in_the_lag() {
    let clock = manual(EPOCH);
    let b = replica_on(2, &clock).build().unwrap();
    assert_eq!(
        b.apply_decision(&route(1, EPOCH - Duration::from_secs(2))),
        Applied::Applied
    );
    assert_eq!(
        b.apply_decision(&route(2, EPOCH - Duration::from_secs(3600))),
        Applied::Expired
    );
    let s = b.replication_stats();
    assert_eq!((s.applied, s.expired), (1, 1));
    assert!(s.lag_p99 <= Duration::from_millis(2250), "{s:?}");
}

/// src/sharing/lag.rs, `LagHistogram::record`: "Counts one duration (durations past 2^64
/// µs count as that)."
#[test]
fn durations_past_the_histograms_range_count_as_its_top() {
    let h = LagHistogram::default();
    h.record(Duration::MAX);
    h.record(Duration::from_micros(u64::MAX) + Duration::from_secs(1));
    assert_eq!(h.count(), 2);
    assert_eq!(h.quantile(0.5), Duration::from_micros(u64::MAX));
    h.record(Duration::from_micros(3));
    assert_eq!(h.quantile(0.0), Duration::from_micros(3));
}

/// src/sharing/lag.rs, `LagHistogram::quantile`: "The duration below which a fraction `q`
/// (clamped to 0..=1) of those counted fall, rounded up to its bucket's top".
#[test]
fn quantiles_clamp_their_fraction_and_round_up_to_a_bucket_top() {
    let h = LagHistogram::default();
    for ms in [2u64, 40, 900] {
        h.record(Duration::from_millis(ms));
    }
    assert_eq!(h.quantile(-3.0), h.quantile(0.0));
    assert_eq!(h.quantile(7.0), h.quantile(1.0));
    let (low, high) = (h.quantile(0.0), h.quantile(1.0));
    assert!(
        low >= Duration::from_millis(2) && low <= Duration::from_micros(2_250),
        "{low:?}"
    );
    assert!(
        high >= Duration::from_millis(900) && high <= Duration::from_micros(1_012_500),
        "{high:?}"
    );
    let mid = h.quantile(0.5);
    assert!(
        mid >= Duration::from_millis(40) && mid <= Duration::from_millis(45),
        "{mid:?}"
    );
}

/// src/sharing/queue.rs, `Outbox::wait`: "Waits until a decision is queued or `timeout`
/// passes; returns whether one is queued." With one already queued there is nothing to
/// wait for: it returns at once, whatever the timeout.
#[test]
fn wait_returns_at_once_when_a_decision_is_already_queued() {
    let index = Arc::new(
        ApproxKvIndexer::builder()
            .block_size(1)
            .background_sweeper(false)
            .share_decisions(4)
            .build()
            .unwrap(),
    );
    index.remove_worker(1);
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = {
        let index = index.clone();
        std::thread::spawn(move || {
            let ready = index.outbox().unwrap().wait(Duration::from_secs(3600));
            let _ = tx.send(ready);
        })
    };
    // A generous bound for a thread to run, far below the hour a timeout would take.
    assert_eq!(rx.recv_timeout(Duration::from_secs(60)), Ok(true));
    waiter.join().unwrap();
    assert_eq!(index.outbox().unwrap().len(), 1); // waiting takes nothing
}

/// src/sharing/mod.rs, `ReplicationStats::applied`: "Other replicas' decisions applied";
/// `Applied::Applied`: "Applied to the index." Removals are decisions too: applied, counted,
/// and numbered like routes (a replayed removal is a duplicate).
#[test]
fn applied_removals_are_counted_and_deduplicated_like_routes() {
    let clock = manual(EPOCH);
    let a = replica_on(1, &clock).build().unwrap();
    let b = replica_on(2, &clock).build().unwrap();
    a.process_routing_decision_for_request(&[1], 5);
    a.remove_worker(5);
    let sent = drain(&a);
    for d in &sent {
        assert_eq!(b.apply_decision(d), Applied::Applied);
    }
    assert!(b.find_matches_for_request(&[1]).scores.is_empty());
    b.process_routing_decision_for_request(&[1], 5); // b routes there again
    assert_eq!(b.apply_decision(&sent[1]), Applied::Duplicate); // the replay removes nothing
    assert_eq!(b.find_matches_for_request(&[1]).scores.get(&5), Some(&1));
    let s = b.replication_stats();
    assert_eq!((s.applied, s.duplicates), (2, 1));
}
