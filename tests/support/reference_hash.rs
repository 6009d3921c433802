//! The obvious hashing, written independently of the crate: tests and fuzz targets compare
//! the crate's hashes with it. Shared by `tests/hashing.rs` (through `support`) and
//! `fuzz/fuzz_targets/hashing.rs` (through `#[path]`).
#![allow(dead_code)] // each user needs a different part

use approx_kv_index::{LocalBlockHash, SequenceHash, XXH3_SEED};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The obvious block hashing: one xxh3 per full block of little-endian token bytes.
pub fn reference_local(tokens: &[u32], block_size: u32) -> Vec<LocalBlockHash> {
    if block_size == 0 {
        return Vec::new();
    }
    let bs = block_size as usize;
    (0..tokens.len() / bs)
        .map(|i| {
            let bytes: Vec<u8> = tokens[i * bs..(i + 1) * bs]
                .iter()
                .flat_map(|t| t.to_le_bytes())
                .collect();
            LocalBlockHash(xxh3_64_with_seed(&bytes, XXH3_SEED))
        })
        .collect()
}

/// The obvious chain: `seq[0] = local[0]`, `seq[i] = xxh3(le(seq[i-1]) ‖ le(local[i]))`.
pub fn reference_seq(local: &[LocalBlockHash]) -> Vec<SequenceHash> {
    let mut out: Vec<SequenceHash> = Vec::new();
    for l in local {
        let next = match out.last() {
            None => l.0,
            Some(prev) => {
                let bytes = [prev.0.to_le_bytes(), l.0.to_le_bytes()].concat();
                xxh3_64_with_seed(&bytes, XXH3_SEED)
            }
        };
        out.push(SequenceHash(next));
    }
    out
}
