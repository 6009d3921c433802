//! Errors returned by the index.

use std::fmt;

/// An invalid [`Builder`](crate::Builder) setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `block_size` was 0.
    ZeroBlockSize,
    /// `tick` was zero.
    ZeroTick,
    /// `ttl` was zero: every entry would expire as it is recorded.
    ZeroTtl,
    /// A capacity (`max_blocks_per_worker` or `max_entries`) was zero.
    ZeroCapacity,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConfigError::ZeroBlockSize => "block_size must be at least 1 token",
            ConfigError::ZeroTick => "tick must be longer than zero",
            ConfigError::ZeroTtl => "ttl must be longer than zero",
            ConfigError::ZeroCapacity => "a capacity must be at least one block",
        })
    }
}

impl std::error::Error for ConfigError {}

/// A rejected call; nothing was stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordError {
    /// The local and sequence hash slices had different lengths.
    LengthMismatch {
        /// Number of local block hashes given.
        local: usize,
        /// Number of sequence hashes given.
        seq: usize,
    },
    /// A record was given sequence hashes alone ([`Query::sequence`](crate::Query::sequence)):
    /// the index keeps each block's local hash, to dump, snapshot and share its decisions.
    NoLocalHashes,
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::LengthMismatch { local, seq } => write!(
                f,
                "{local} local block hashes but {seq} sequence hashes: they must pair up"
            ),
            RecordError::NoLocalHashes => f.write_str(
                "a record needs the blocks' local hashes, not their sequence hashes alone",
            ),
        }
    }
}

impl std::error::Error for RecordError {}
