//! Snapshot and restore that keep TTLs, so a router restart does not forget every
//! worker's cache.
//!
//! A [`Snapshot`] lists every live (block, worker) entry with its parent, whether a KV
//! event stored it, and the TTL it had left. [`Snapshot::to_bytes`] writes a compact,
//! versioned binary form with a checksum; [`Snapshot::from_bytes`] rejects a truncated,
//! corrupted or foreign file with a [`SnapshotError`], never a panic. With the `serde`
//! feature the types also implement `Serialize`/`Deserialize` for any other format.
//!
//! Format, version 2 (all integers little-endian):
//! `b"AKVISNAP"`, version `u32`, block size `u32`, entry count `u64`, then per entry
//! worker id `u64`, dp rank `u32`, block `u64`, parent `u64`, local `u64`, depth `u32`,
//! flags `u8` (bit 0: exact), TTL left in ns `u64`; then capacity count `u64`, then per
//! capacity worker id `u64`, dp rank `u32`, blocks `u64`; then xxh3-64 (seed 0) of all
//! the bytes before it. Version 1, read too, is the same without the capacities.

use std::fmt;
use std::time::Duration;

use xxhash_rust::xxh3::xxh3_64;

use crate::{LocalBlockHash, SequenceHash, WorkerId};

const MAGIC: &[u8; 8] = b"AKVISNAP";
const VERSION: u32 = 2;
const HEADER: usize = 8 + 4 + 4 + 8;
const ENTRY: usize = 8 + 4 + 8 + 8 + 8 + 4 + 1 + 8;
const CAPACITY: usize = 8 + 4 + 8;
const CHECKSUM: usize = 8;

/// The live state of an index at one instant, with remaining TTLs.
///
/// ```
/// use std::time::Duration;
/// use approx_kv_index::{ApproxKvIndexer, Query, Snapshot};
/// let index = ApproxKvIndexer::new(2, Duration::from_secs(60))?;
/// index.record(7, Query::tokens(&[1, 2, 3, 4])).unwrap();
/// let bytes = index.snapshot().to_bytes();
///
/// let restarted = ApproxKvIndexer::new(2, Duration::from_secs(60))?;
/// restarted.restore(&Snapshot::from_bytes(&bytes).unwrap()).unwrap();
/// assert_eq!(restarted.find(Query::tokens(&[1, 2, 3, 4])).scores[&7], 2);
/// # Ok::<(), approx_kv_index::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Snapshot {
    /// Tokens per block of the index it was taken from (restore checks it).
    pub block_size: u32,
    /// The live entries, parents before children.
    pub entries: Vec<SnapshotEntry>,
    /// The capacities of registered workers that had one (set, or learned from reports),
    /// by worker and rank.
    pub capacities: Vec<SnapshotCapacity>,
}

/// A worker's capacity in a [`Snapshot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SnapshotCapacity {
    /// The worker.
    pub worker_id: WorkerId,
    /// Its data-parallel rank (0 for plain ids).
    pub dp_rank: u32,
    /// Its capacity in blocks.
    pub blocks: u64,
}

/// One live (block, worker) entry of a [`Snapshot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SnapshotEntry {
    /// The worker.
    pub worker_id: WorkerId,
    /// Its data-parallel rank (0 for plain ids).
    pub dp_rank: u32,
    /// The block's sequence hash.
    pub block: SequenceHash,
    /// The parent block's sequence hash (meaningless when `depth == 0`).
    pub parent: SequenceHash,
    /// The hash of the block's own tokens.
    pub local: LocalBlockHash,
    /// Position in the prompt (0 for a first block).
    pub depth: u32,
    /// Stored by an exact KV event (no TTL).
    pub exact: bool,
    /// What was left of the approximate claim's TTL: zero if there was none live, at
    /// least 1 ns if there was (with a TTL that means never, a claim more than 2^62 ns
    /// old is live with its expiry past: it keeps 1 ns, so that a restore puts it back).
    pub ttl_left: Duration,
}

/// Why a snapshot could not be read or restored.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The bytes do not start like a snapshot of this crate.
    NotASnapshot,
    /// Written by a format version this build does not read.
    UnsupportedVersion(u32),
    /// Shorter (or longer) than its header says.
    Truncated {
        /// Bytes expected from the header (where the bytes end before the capacity count,
        /// the fewest the header allows: no capacity; `usize::MAX` for counts no file can
        /// hold).
        expected: usize,
        /// Bytes present.
        actual: usize,
    },
    /// The checksum does not match: the bytes were altered.
    Corrupt,
    /// The snapshot's block size differs from the index's.
    BlockSizeMismatch {
        /// Block size in the snapshot.
        snapshot: u32,
        /// Block size of the index being restored into.
        index: u32,
    },
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotASnapshot => f.write_str("not an approx-kv-index snapshot"),
            Self::UnsupportedVersion(v) => write!(f, "unsupported snapshot version {v}"),
            Self::Truncated { expected, actual } => {
                write!(f, "snapshot has {actual} bytes, its header says {expected}")
            }
            Self::Corrupt => f.write_str("snapshot checksum mismatch: the file is corrupt"),
            Self::BlockSizeMismatch { snapshot, index } => write!(
                f,
                "snapshot block size {snapshot} differs from the index's {index}"
            ),
        }
    }
}

impl std::error::Error for SnapshotError {}

impl Snapshot {
    /// The versioned binary form.
    pub fn to_bytes(&self) -> Vec<u8> {
        let len = HEADER + ENTRY * self.entries.len() + 8 + CAPACITY * self.capacities.len();
        let mut out = Vec::with_capacity(len + CHECKSUM);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&self.block_size.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.worker_id.to_le_bytes());
            out.extend_from_slice(&e.dp_rank.to_le_bytes());
            out.extend_from_slice(&e.block.0.to_le_bytes());
            out.extend_from_slice(&e.parent.0.to_le_bytes());
            out.extend_from_slice(&e.local.0.to_le_bytes());
            out.extend_from_slice(&e.depth.to_le_bytes());
            out.push(u8::from(e.exact));
            let left = u64::try_from(e.ttl_left.as_nanos()).unwrap_or(u64::MAX);
            out.extend_from_slice(&left.to_le_bytes());
        }
        out.extend_from_slice(&(self.capacities.len() as u64).to_le_bytes());
        for c in &self.capacities {
            out.extend_from_slice(&c.worker_id.to_le_bytes());
            out.extend_from_slice(&c.dp_rank.to_le_bytes());
            out.extend_from_slice(&c.blocks.to_le_bytes());
        }
        let sum = xxh3_64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// Reads the binary form, checking magic, version, length and checksum.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let mut r = Reader(bytes);
        if r.take(8) != Some(&MAGIC[..]) {
            return Err(SnapshotError::NotASnapshot);
        }
        let version = r.u32().ok_or(SnapshotError::NotASnapshot)?;
        if version != 1 && version != VERSION {
            return Err(SnapshotError::UnsupportedVersion(version));
        }
        let block_size = r.u32().ok_or(SnapshotError::NotASnapshot)?;
        let count = r.u64().ok_or(SnapshotError::NotASnapshot)?;
        let entries_end = usize::try_from(count)
            .ok()
            .and_then(|n| n.checked_mul(ENTRY))
            .and_then(|n| n.checked_add(HEADER))
            .unwrap_or(usize::MAX);
        // Version 2: the capacity count follows the entries (none counted where the
        // bytes end before it: the least the file could hold).
        let capacities = match version {
            1 => Some(0),
            _ => match entries_end
                .checked_add(8)
                .and_then(|end| bytes.get(entries_end..end))
            {
                Some(b) => b
                    .try_into()
                    .ok()
                    .and_then(|b| usize::try_from(u64::from_le_bytes(b)).ok()),
                None => Some(0),
            },
        };
        let expected = capacities
            .and_then(|m| m.checked_mul(CAPACITY))
            .and_then(|n| n.checked_add(if version == 1 { 0 } else { 8 }))
            .and_then(|n| n.checked_add(entries_end))
            .and_then(|n| n.checked_add(CHECKSUM))
            .unwrap_or(usize::MAX);
        if bytes.len() != expected {
            return Err(SnapshotError::Truncated {
                expected,
                actual: bytes.len(),
            });
        }
        let (body, sum) = bytes.split_at(bytes.len() - CHECKSUM);
        if xxh3_64(body).to_le_bytes() != sum {
            return Err(SnapshotError::Corrupt);
        }
        let mut entries = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let entry = (|| {
                Some(SnapshotEntry {
                    worker_id: r.u64()?,
                    dp_rank: r.u32()?,
                    block: SequenceHash(r.u64()?),
                    parent: SequenceHash(r.u64()?),
                    local: LocalBlockHash(r.u64()?),
                    depth: r.u32()?,
                    exact: match r.take(1)?[0] {
                        0 => false,
                        1 => true,
                        _ => return None,
                    },
                    ttl_left: Duration::from_nanos(r.u64()?),
                })
            })();
            entries.push(entry.ok_or(SnapshotError::Corrupt)?);
        }
        let mut capacities = Vec::new();
        if version != 1 {
            let count = r.u64().ok_or(SnapshotError::Corrupt)?;
            for _ in 0..count {
                let capacity = (|| {
                    Some(SnapshotCapacity {
                        worker_id: r.u64()?,
                        dp_rank: r.u32()?,
                        blocks: r.u64()?,
                    })
                })();
                capacities.push(capacity.ok_or(SnapshotError::Corrupt)?);
            }
        }
        Ok(Self {
            block_size,
            entries,
            capacities,
        })
    }
}

/// A cursor over bytes that answers `None` past the end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}
