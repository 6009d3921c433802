//! The encoding of a decision: its documented byte layout and longest length, what
//! decoding checks and in which order (magic, version, size, length, checksum, kind and
//! count), and properties: every decision round-trips, any bytes decode to a value or an
//! error, any flipped bit is detected.

use std::time::Duration;

use approx_kv_index::replication::{
    Action, Decision, DecodeError, MAX_BLOCKS, MAX_ENCODED_LEN, VERSION,
};
use approx_kv_index::LocalBlockHash;
use proptest::prelude::*;
use xxhash_rust::xxh3::xxh3_64;

use super::{route, EPOCH};

/// The fixed part of an encoding: magic, version, kind, origin, seq, time, worker, rank,
/// value count (src/replication/codec.rs, format versions 1 and 2).
const HEADER: usize = 4 + 1 + 1 + 8 + 8 + 8 + 8 + 4 + 4;

/// `body` with its xxh3-64 (seed 0) appended, as the format ends.
fn sealed(mut body: Vec<u8>) -> Vec<u8> {
    let sum = xxh3_64(&body);
    body.extend_from_slice(&sum.to_le_bytes());
    body
}

/// The header of an encoding, built by hand from the module docs.
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

/// src/replication/codec.rs, module docs: "Format, version 2 (integers little-endian):
/// `b"AKVD"`, version `u8`, kind `u8` (0 route, 1 remove worker, 2 remove key, 3 set
/// capacity, 4 drop older claims), origin `u64`, seq `u64`, decision time in ns since the
/// Unix epoch `u64`, worker id `u64`, dp rank `u32`, value count `u32`, the values `u64`
/// each; then xxh3-64 (seed 0) of all the bytes before it. The values: a route's blocks'
/// tokens hashes (at most [`MAX_BLOCKS`]); none for a removal; one for a capacity (the
/// blocks plus one, 0 for unknown) and for a drop (the nanoseconds before the decision
/// that the lost block was last used). Version 1, read too, has kinds 0 to 2 only.";
/// `VERSION`: "The format version this build writes (it reads version 1 too)."
#[test]
fn the_encoding_is_the_documented_byte_layout() {
    assert_eq!(VERSION, 2);
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
                    2,
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
            header(2, 1, origin, seq, 1_700_000_000_123_456_789, 77, 0, 0),
        ),
        (
            Action::RemoveKey {
                worker_id: 78,
                dp_rank: 5,
            },
            header(2, 2, origin, seq, 1_700_000_000_123_456_789, 78, 5, 0),
        ),
        (
            Action::SetCapacity {
                worker_id: 79,
                dp_rank: 6,
                capacity: Some(4096),
            },
            {
                let mut b = header(2, 3, origin, seq, 1_700_000_000_123_456_789, 79, 6, 1);
                b.extend_from_slice(&4097u64.to_le_bytes());
                b
            },
        ),
        (
            Action::SetCapacity {
                worker_id: 79,
                dp_rank: 6,
                capacity: None,
            },
            {
                let mut b = header(2, 3, origin, seq, 1_700_000_000_123_456_789, 79, 6, 1);
                b.extend_from_slice(&0u64.to_le_bytes());
                b
            },
        ),
        (
            Action::DropOlder {
                worker_id: 80,
                dp_rank: 7,
                used_before: Duration::from_nanos(123_456),
            },
            {
                let mut b = header(2, 4, origin, seq, 1_700_000_000_123_456_789, 80, 7, 1);
                b.extend_from_slice(&123_456u64.to_le_bytes());
                b
            },
        ),
    ];
    for (action, body) in cases {
        let d = Decision {
            origin,
            seq,
            decided_at: at,
            action,
        };
        let expected = sealed(body.clone());
        assert_eq!(d.encode(), expected, "{d:?}");
        assert_eq!(Decision::decode(&expected), Ok(d.clone()));
        // Version 1 reads the same, for the kinds it has.
        let mut v1 = body;
        v1[4] = 1;
        let want = match d.action {
            Action::SetCapacity { .. } | Action::DropOlder { .. } => Err(DecodeError::Malformed),
            _ => Ok(d),
        };
        assert_eq!(Decision::decode(&sealed(v1)), want);
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
    let mut future = header(3, 9, 1, 2, 3, 4, 0, u32::MAX);
    future.resize(MAX_ENCODED_LEN + 100, 0xEE);
    assert_eq!(
        Decision::decode(&future),
        Err(DecodeError::UnsupportedVersion(3))
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

fn arb_decision() -> impl Strategy<Value = Decision> {
    let action = prop_oneof![
        (
            any::<u64>(),
            any::<u32>(),
            prop::collection::vec(any::<u64>(), 0..40)
        )
            .prop_map(|(w, r, b)| Action::Route {
                worker_id: w,
                dp_rank: r,
                blocks: b.into_iter().map(LocalBlockHash).collect(),
            }),
        any::<u64>().prop_map(|w| Action::RemoveWorker { worker_id: w }),
        (any::<u64>(), any::<u32>()).prop_map(|(w, r)| Action::RemoveKey {
            worker_id: w,
            dp_rank: r
        }),
        (any::<u64>(), any::<u32>(), prop::option::of(0..u64::MAX)).prop_map(|(w, r, c)| {
            Action::SetCapacity {
                worker_id: w,
                dp_rank: r,
                capacity: c,
            }
        }),
        (any::<u64>(), any::<u32>(), any::<u64>()).prop_map(|(w, r, n)| Action::DropOlder {
            worker_id: w,
            dp_rank: r,
            used_before: Duration::from_nanos(n),
        }),
    ];
    (any::<u64>(), any::<u64>(), any::<u64>(), action).prop_map(|(origin, seq, at, action)| {
        Decision {
            origin,
            seq,
            decided_at: Duration::from_nanos(at),
            action,
        }
    })
}

proptest! {
    #[test]
    fn decisions_round_trip(d in arb_decision()) {
        prop_assert_eq!(Decision::decode(&d.encode()), Ok(d));
    }

    #[test]
    fn any_bytes_decode_to_a_value_or_an_error(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = Decision::decode(&bytes);
    }

    #[test]
    fn any_change_to_an_encoding_is_detected(d in arb_decision(), at in any::<prop::sample::Index>(), bit in 0..8u8) {
        let mut bytes = d.encode();
        let i = at.index(bytes.len());
        bytes[i] ^= 1 << bit;
        prop_assert!(Decision::decode(&bytes).is_err());
    }
}

#[test]
fn a_foreign_stream_entry_is_an_error() {
    assert_eq!(Decision::decode(b""), Err(DecodeError::NotADecision));
}
