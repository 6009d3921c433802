//! The binary form of a [`Decision`]: compact, versioned, checksummed and bounded.
//!
//! Format, version 2 (integers little-endian):
//! `b"AKVD"`, version `u8`, kind `u8` (0 route, 1 remove worker, 2 remove key, 3 set
//! capacity, 4 drop older claims), origin `u64`, seq `u64`, decision time in ns since the
//! Unix epoch `u64`, worker id `u64`, dp rank `u32`, value count `u32`, the values `u64`
//! each; then xxh3-64 (seed 0) of all the bytes before it. The values: a route's blocks'
//! tokens hashes (at most [`MAX_BLOCKS`]); none for a removal; one for a capacity (the
//! blocks plus one, 0 for unknown) and for a drop (the nanoseconds before the decision
//! that the lost block was last used). Version 1, read too, has kinds 0 to 2 only.

use std::fmt;
use std::time::Duration;

use xxhash_rust::xxh3::xxh3_64;

use super::{Action, Decision, MAX_BLOCKS};
use crate::clock::nanos;
use crate::LocalBlockHash;

const MAGIC: &[u8; 4] = b"AKVD";
/// The format version this build writes (it reads version 1 too).
pub const VERSION: u8 = 2;
const HEADER: usize = 4 + 1 + 1 + 8 + 8 + 8 + 8 + 4 + 4;
const CHECKSUM: usize = 8;
/// The longest encoding of a decision: a route of [`MAX_BLOCKS`] blocks (524,342 bytes).
pub const MAX_ENCODED_LEN: usize = HEADER + 8 * MAX_BLOCKS + CHECKSUM;

/// Why bytes are not a decision. Decoding never panics, whatever the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// Not a decision of this crate (wrong magic), or shorter than the smallest one.
    NotADecision,
    /// Written by a format version this build does not read.
    UnsupportedVersion(u8),
    /// Longer than [`MAX_ENCODED_LEN`], or a block count above [`MAX_BLOCKS`].
    TooLarge,
    /// The length disagrees with the block count, or the kind is unknown.
    Malformed,
    /// The checksum does not match: the bytes were altered.
    Corrupted,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotADecision => f.write_str("not an encoded decision"),
            Self::UnsupportedVersion(v) => write!(f, "unsupported decision format version {v}"),
            Self::TooLarge => f.write_str("decision larger than the format allows"),
            Self::Malformed => f.write_str("malformed decision"),
            Self::Corrupted => f.write_str("decision checksum mismatch"),
        }
    }
}

impl std::error::Error for DecodeError {}

impl Decision {
    /// The binary form (see the module docs), at most [`MAX_ENCODED_LEN`] bytes: a route
    /// of more than [`MAX_BLOCKS`] blocks is written as its first `MAX_BLOCKS`.
    pub fn encode(&self) -> Vec<u8> {
        let value;
        let (kind, worker, rank, values): (u8, u64, u32, &[LocalBlockHash]) = match &self.action {
            Action::Route {
                worker_id,
                dp_rank,
                blocks,
            } => (
                0,
                *worker_id,
                *dp_rank,
                &blocks[..blocks.len().min(MAX_BLOCKS)],
            ),
            Action::RemoveWorker { worker_id } => (1, *worker_id, 0, &[]),
            Action::RemoveKey { worker_id, dp_rank } => (2, *worker_id, *dp_rank, &[]),
            Action::SetCapacity {
                worker_id,
                dp_rank,
                capacity,
            } => {
                value = [LocalBlockHash(
                    capacity.map_or(0, |c| c.min(u64::MAX - 1) + 1),
                )];
                (3, *worker_id, *dp_rank, &value)
            }
            Action::DropOlder {
                worker_id,
                dp_rank,
                used_before,
            } => {
                value = [LocalBlockHash(nanos(*used_before))];
                (4, *worker_id, *dp_rank, &value)
            }
        };
        let blocks = values;
        let mut out = Vec::with_capacity(HEADER + 8 * blocks.len() + CHECKSUM);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[VERSION, kind]);
        out.extend_from_slice(&self.origin.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&nanos(self.decided_at).to_le_bytes());
        out.extend_from_slice(&worker.to_le_bytes());
        out.extend_from_slice(&rank.to_le_bytes());
        out.extend_from_slice(&(blocks.len() as u32).to_le_bytes());
        for b in blocks {
            out.extend_from_slice(&b.0.to_le_bytes());
        }
        let sum = xxh3_64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// Reads a decision written by [`encode`](Self::encode); any other bytes give a
    /// [`DecodeError`], never a panic.
    ///
    /// ```
    /// use approx_kv_index::replication::{Decision, DecodeError};
    /// assert_eq!(Decision::decode(b"hello"), Err(DecodeError::NotADecision));
    /// ```
    pub fn decode(bytes: &[u8]) -> Result<Decision, DecodeError> {
        if bytes.len() < HEADER + CHECKSUM || &bytes[..4] != MAGIC {
            return Err(DecodeError::NotADecision);
        }
        let version = bytes[4];
        if version != 1 && version != VERSION {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        if bytes.len() > MAX_ENCODED_LEN {
            return Err(DecodeError::TooLarge);
        }
        let mut r = Reader(&bytes[6..]);
        let (origin, seq, at, worker_id, rank, count) = (
            r.u64(),
            r.u64(),
            r.u64(),
            r.u64(),
            r.u32(),
            r.u32() as usize,
        );
        if count > MAX_BLOCKS {
            return Err(DecodeError::TooLarge);
        }
        if bytes.len() != HEADER + 8 * count + CHECKSUM {
            return Err(DecodeError::Malformed);
        }
        let (body, sum) = bytes.split_at(bytes.len() - CHECKSUM);
        if xxh3_64(body).to_le_bytes() != sum {
            return Err(DecodeError::Corrupted);
        }
        let action = match (bytes[5], count) {
            (0, _) => Action::Route {
                worker_id,
                dp_rank: rank,
                blocks: body[HEADER..]
                    .chunks_exact(8)
                    .map(|b| LocalBlockHash(u64::from_le_bytes(b.try_into().unwrap_or_default())))
                    .collect(),
            },
            (1, 0) => Action::RemoveWorker { worker_id },
            (2, 0) => Action::RemoveKey {
                worker_id,
                dp_rank: rank,
            },
            (3, 1) if version >= 2 => Action::SetCapacity {
                worker_id,
                dp_rank: rank,
                capacity: r.u64().checked_sub(1),
            },
            (4, 1) if version >= 2 => Action::DropOlder {
                worker_id,
                dp_rank: rank,
                used_before: Duration::from_nanos(r.u64()),
            },
            _ => return Err(DecodeError::Malformed),
        };
        Ok(Decision {
            origin,
            seq,
            decided_at: Duration::from_nanos(at),
            action,
        })
    }
}

/// Reads little-endian integers from a slice whose length was checked beforehand.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0; N];
        if let Some((head, rest)) = self.0.split_first_chunk::<N>() {
            out = *head;
            self.0 = rest;
        }
        out
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(blocks: usize) -> Decision {
        Decision {
            origin: u64::MAX,
            seq: 42,
            decided_at: Duration::from_nanos(1_700_000_000_123_456_789),
            action: Action::Route {
                worker_id: 9,
                dp_rank: 3,
                blocks: (0..blocks as u64).map(LocalBlockHash).collect(),
            },
        }
    }

    #[test]
    fn every_action_round_trips() {
        for action in [
            route(0).action,
            route(5).action,
            Action::RemoveWorker { worker_id: 1 },
            Action::RemoveKey {
                worker_id: 2,
                dp_rank: 7,
            },
            Action::SetCapacity {
                worker_id: 3,
                dp_rank: 1,
                capacity: Some(u64::MAX - 1),
            },
            Action::SetCapacity {
                worker_id: 3,
                dp_rank: 1,
                capacity: None,
            },
            Action::DropOlder {
                worker_id: 4,
                dp_rank: 0,
                used_before: Duration::from_secs(9),
            },
        ] {
            let d = Decision { action, ..route(0) };
            assert_eq!(Decision::decode(&d.encode()), Ok(d));
        }
    }

    #[test]
    fn long_routes_are_cut_to_the_bound() {
        let bytes = route(MAX_BLOCKS + 10).encode();
        assert_eq!(bytes.len(), MAX_ENCODED_LEN);
        assert_eq!(Decision::decode(&bytes), Ok(route(MAX_BLOCKS)));
    }

    #[test]
    fn altered_bytes_are_errors() {
        let good = route(3).encode();
        let mut flipped = good.clone();
        flipped[HEADER + 2] ^= 1;
        assert_eq!(Decision::decode(&flipped), Err(DecodeError::Corrupted));
        let mut version = good.clone();
        version[4] = 3;
        assert_eq!(
            Decision::decode(&version),
            Err(DecodeError::UnsupportedVersion(3))
        );
        assert_eq!(
            Decision::decode(&good[..good.len() - 1]),
            Err(DecodeError::Malformed)
        );
        let mut huge_count = good.clone();
        huge_count[HEADER - 4..HEADER].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Decision::decode(&huge_count), Err(DecodeError::TooLarge));
        let mut kind = route(0).encode();
        kind[5] = 1; // a removal with the route's checksum: kind is checked after it
        assert_eq!(Decision::decode(&kind), Err(DecodeError::Corrupted));
        for len in 0..good.len() {
            assert!(Decision::decode(&good[..len]).is_err());
        }
    }
}
