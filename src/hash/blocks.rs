//! Hashing a prompt's full blocks: each block's tokens hash and, in the same pass, the
//! chain of their sequence hashes.
//!
//! Two things make this faster than hashing every block with `xxh3_64_with_seed` and then
//! chaining the hashes (`docs/benchmarks.md`, "Hashing a prompt in one pass"):
//! - xxh3 hashes an input longer than 240 bytes (a block of 61 tokens or more) with a
//!   secret derived from the seed, and `xxh3_64_with_seed` derives it again on every call.
//!   Here it is derived once per prompt (the plain salt's once and for all, as a constant)
//!   and each block is hashed with it: by xxh3's definition that is the same function
//!   (`secret_derivation_is_the_seeded_hash` checks it at every length around the switch).
//! - the chain is serial (each sequence hash needs the one before) while blocks hash
//!   independently: one loop doing both lets the processor overlap the chain's latency
//!   with the next blocks' hashing.

use xxhash_rust::const_xxh3::const_custom_default_secret;
use xxhash_rust::xxh3::{xxh3_64_with_secret, xxh3_64_with_seed};

use super::{HashSalt, LocalBlockHash, SeqChain, SequenceHash, XXH3_SEED};

/// The longest input xxh3 hashes with its seed directly; a longer one with the secret
/// derived from the seed.
const SEEDED_MAX_BYTES: usize = 240;

/// An xxh3 secret derived from a seed.
type Secret = [u8; 192];

/// The secret of the plain salt's seed.
const PLAIN_SECRET: Secret = const_custom_default_secret(XXH3_SEED);

/// Hashes blocks of one size under one salt.
struct BlockHasher {
    seed: u64,
    /// The seed's secret, when blocks are long enough to be hashed with it.
    secret: Option<Secret>,
}

impl BlockHasher {
    fn new(salt: HashSalt, block_size: usize) -> Self {
        let long = block_size.saturating_mul(4) > SEEDED_MAX_BYTES;
        let secret = long.then(|| match salt.seed() {
            XXH3_SEED => PLAIN_SECRET,
            seed => const_custom_default_secret(seed),
        });
        Self {
            seed: salt.seed(),
            secret,
        }
    }

    /// xxh3-64 of `bytes` under the salt's seed.
    #[inline]
    fn hash(&self, bytes: &[u8]) -> LocalBlockHash {
        LocalBlockHash(match &self.secret {
            Some(secret) => xxh3_64_with_secret(bytes, secret),
            None => xxh3_64_with_seed(bytes, self.seed),
        })
    }
}

/// Calls `each` with the tokens hash of every full block of `tokens`, in order.
#[inline]
fn for_each_block(
    tokens: &[u32],
    block_size: u32,
    salt: HashSalt,
    mut each: impl FnMut(LocalBlockHash),
) {
    if block_size == 0 {
        return;
    }
    let hasher = BlockHasher::new(salt, block_size as usize);
    let mut scratch = Vec::new();
    for block in tokens.chunks_exact(block_size as usize) {
        each(hasher.hash(le_bytes(block, &mut scratch)));
    }
}

/// As [`compute_block_hash_for_seq_salted`](super::compute_block_hash_for_seq_salted),
/// into `out` (cleared first; no allocation once it has room, on little-endian targets).
pub(crate) fn block_hashes_into(
    tokens: &[u32],
    block_size: u32,
    salt: HashSalt,
    out: &mut Vec<LocalBlockHash>,
) {
    out.clear();
    out.reserve(blocks_of(tokens, block_size));
    for_each_block(tokens, block_size, salt, |hash| out.push(hash));
}

/// Each full block's tokens hash into `local` and its sequence hash into `seq` (both
/// cleared first), in one pass.
pub(crate) fn prompt_hashes_into(
    tokens: &[u32],
    block_size: u32,
    salt: HashSalt,
    local: &mut Vec<LocalBlockHash>,
    seq: &mut Vec<SequenceHash>,
) {
    local.clear();
    seq.clear();
    let blocks = blocks_of(tokens, block_size);
    local.reserve(blocks);
    seq.reserve(blocks);
    let mut chain = SeqChain::default();
    for_each_block(tokens, block_size, salt, |hash| {
        local.push(hash);
        seq.push(chain.next(hash));
    });
}

/// Each full block's sequence hash into `seq` (cleared first), in one pass with the
/// blocks' tokens hashes, which are not kept (a find's query).
pub(crate) fn seq_hashes_into(
    tokens: &[u32],
    block_size: u32,
    salt: HashSalt,
    seq: &mut Vec<SequenceHash>,
) {
    seq.clear();
    seq.reserve(blocks_of(tokens, block_size));
    let mut chain = SeqChain::default();
    for_each_block(tokens, block_size, salt, |hash| seq.push(chain.next(hash)));
}

/// How many full blocks `tokens` has (none at block size 0).
fn blocks_of(tokens: &[u32], block_size: u32) -> usize {
    tokens.len().checked_div(block_size as usize).unwrap_or(0)
}

/// The little-endian bytes of `tokens`.
#[inline]
fn le_bytes<'a>(tokens: &'a [u32], scratch: &'a mut Vec<u8>) -> &'a [u8] {
    #[cfg(target_endian = "little")]
    {
        let _ = scratch;
        // SAFETY: `u32` has no padding and every byte pattern is a valid `u8`; the byte
        // slice covers exactly the memory of `tokens` (len * 4 bytes, alignment 1 <= 4) and
        // lives no longer than the borrow of `tokens`. On a little-endian target these are
        // the little-endian bytes of the tokens.
        unsafe {
            std::slice::from_raw_parts(tokens.as_ptr().cast::<u8>(), std::mem::size_of_val(tokens))
        }
    }
    #[cfg(not(target_endian = "little"))]
    {
        le_bytes_copied(tokens, scratch)
    }
}

/// The little-endian bytes of `tokens`, copied into `scratch` (big-endian targets).
#[cfg_attr(target_endian = "little", allow(dead_code))]
fn le_bytes_copied<'a>(tokens: &[u32], scratch: &'a mut Vec<u8>) -> &'a [u8] {
    scratch.clear();
    scratch.extend(tokens.iter().flat_map(|t| t.to_le_bytes()));
    scratch
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{compute_seq_hashes, HashSalt};

    /// The seeded hash, block by block, as Dynamo computes it.
    fn seeded(tokens: &[u32], block_size: usize, seed: u64) -> Vec<LocalBlockHash> {
        tokens
            .chunks_exact(block_size)
            .map(|b| {
                let bytes: Vec<u8> = b.iter().flat_map(|t| t.to_le_bytes()).collect();
                LocalBlockHash(xxh3_64_with_seed(&bytes, seed))
            })
            .collect()
    }

    #[test]
    fn secret_derivation_is_the_seeded_hash() {
        let tokens: Vec<u32> = (0..2_000u32)
            .map(|t| t.wrapping_mul(2_654_435_761))
            .collect();
        let salts = [
            HashSalt::NONE,
            HashSalt::new(Some("lora"), None),
            HashSalt::new(None, Some("tenant")),
        ];
        for salt in salts {
            for block_size in (1..=70).chain([128, 129, 512]) {
                let mut local = Vec::new();
                block_hashes_into(&tokens, block_size, salt, &mut local);
                let expected = seeded(&tokens, block_size as usize, salt.seed());
                assert_eq!(local, expected, "block size {block_size}, {salt:?}");
            }
        }
    }

    #[test]
    fn tokens_are_read_as_little_endian_bytes_either_way() {
        let tokens = [0x0403_0201u32, 0xdead_beef, 0];
        let mut scratch = vec![9; 40];
        let copied = le_bytes_copied(&tokens, &mut scratch).to_vec();
        assert_eq!(copied[..4], [1, 2, 3, 4]);
        assert_eq!(le_bytes(&tokens, &mut Vec::new()), copied);
    }

    #[test]
    fn one_pass_gives_the_blocks_and_their_chain() {
        let tokens: Vec<u32> = (0..1_000).collect();
        for block_size in [1, 16, 60, 61, 64, 1_001] {
            let (mut local, mut seq) = (vec![LocalBlockHash(1)], Vec::new());
            prompt_hashes_into(&tokens, block_size, HashSalt::NONE, &mut local, &mut seq);
            assert_eq!(local, seeded(&tokens, block_size as usize, XXH3_SEED));
            assert_eq!(seq, compute_seq_hashes(&local));
        }
        let (mut local, mut seq) = (Vec::new(), Vec::new());
        prompt_hashes_into(&tokens, 0, HashSalt::NONE, &mut local, &mut seq);
        assert!(local.is_empty() && seq.is_empty());
        for block_size in [0, 1, 61, 1_001] {
            let mut only_seq = vec![SequenceHash(5)];
            seq_hashes_into(&tokens, block_size, HashSalt::NONE, &mut only_seq);
            prompt_hashes_into(&tokens, block_size, HashSalt::NONE, &mut local, &mut seq);
            assert_eq!(only_seq, seq);
        }
    }
}
