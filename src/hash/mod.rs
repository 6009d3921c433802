//! Block and sequence hashing, bit-for-bit compatible with `dynamo-kv-router` 1.6.1.
//!
//! A prompt is cut into full blocks of `block_size` tokens (a partial trailing block is
//! dropped). Each block gets a [`LocalBlockHash`]: xxh3-64 with seed 1337 over the
//! little-endian bytes of its tokens. Blocks are then chained into [`SequenceHash`]es:
//! `seq[0] = local[0]` and `seq[i] = xxh3_64_with_seed(le(seq[i-1]) ‖ le(local[i]), 1337)`,
//! so a sequence hash names a block *and its whole prefix*.

use xxhash_rust::xxh3::xxh3_64_with_seed;

mod blocks;
mod lanes;
mod prompt;

pub(crate) use blocks::{block_hashes_into, prompt_hashes_into, seq_hashes_into};
pub(crate) use lanes::chain_each_into;
pub use prompt::PromptHashes;

/// The seed Dynamo uses for every block and sequence hash.
pub const XXH3_SEED: u64 = 1337;

/// The hash of one block's tokens alone (position-independent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LocalBlockHash(pub u64);

/// The hash of a block together with every block before it: the key of a radix-tree node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SequenceHash(pub u64);

/// Hashes each full block of `tokens` (a partial trailing block is ignored).
///
/// A `block_size` of 0 yields no blocks.
///
/// ```
/// use approx_kv_index::{compute_block_hash_for_seq, LocalBlockHash};
/// let hashes = compute_block_hash_for_seq(&[1, 2, 3, 4, 5, 6], 4);
/// assert_eq!(hashes.len(), 1); // tokens 5 and 6 do not fill a block
/// assert_eq!(hashes, compute_block_hash_for_seq(&[1, 2, 3, 4], 4));
/// ```
pub fn compute_block_hash_for_seq(tokens: &[u32], block_size: u32) -> Vec<LocalBlockHash> {
    compute_block_hash_for_seq_salted(tokens, block_size, HashSalt::NONE)
}

/// Keeps the blocks of different LoRA adapters or cache namespaces (tenants) apart: the
/// same tokens hash differently under different salts, so they never match each other.
///
/// Compatible with Dynamo: the local-hash seed becomes `1337 + xxh3_64_with_seed(lora_name, 0)`,
/// plus `xxh3_64_with_seed(cache_namespace, 1)` when a namespace is given (wrapping adds);
/// empty strings count as absent. Sequence hashes keep seed 1337 (they chain salted local
/// hashes, so they differ too).
///
/// ```
/// use approx_kv_index::{compute_block_hash_for_seq, compute_block_hash_for_seq_salted, HashSalt};
/// let tokens = [1, 2, 3, 4];
/// let plain = compute_block_hash_for_seq(&tokens, 4);
/// assert_eq!(compute_block_hash_for_seq_salted(&tokens, 4, HashSalt::NONE), plain);
/// assert_eq!(compute_block_hash_for_seq_salted(&tokens, 4, HashSalt::new(Some(""), None)), plain);
/// let lora = HashSalt::new(Some("my-lora"), None);
/// assert_ne!(compute_block_hash_for_seq_salted(&tokens, 4, lora), plain);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HashSalt {
    seed: u64,
}

impl HashSalt {
    /// No adapter, no namespace: Dynamo's plain hashes.
    pub const NONE: HashSalt = HashSalt { seed: XXH3_SEED };

    /// The salt of a LoRA adapter and/or a cache namespace.
    pub fn new(lora_name: Option<&str>, cache_namespace: Option<&str>) -> Self {
        let mut seed = XXH3_SEED;
        if let Some(lora) = lora_name.filter(|s| !s.is_empty()) {
            seed = seed.wrapping_add(xxh3_64_with_seed(lora.as_bytes(), 0));
        }
        if let Some(namespace) = cache_namespace.filter(|s| !s.is_empty()) {
            seed = seed.wrapping_add(xxh3_64_with_seed(namespace.as_bytes(), 1));
        }
        Self { seed }
    }

    /// The xxh3 seed used for local block hashes.
    pub fn seed(&self) -> u64 {
        self.seed
    }
}

impl Default for HashSalt {
    fn default() -> Self {
        Self::NONE
    }
}

/// As [`compute_block_hash_for_seq`], under a [`HashSalt`] (LoRA adapter, namespace).
pub fn compute_block_hash_for_seq_salted(
    tokens: &[u32],
    block_size: u32,
    salt: HashSalt,
) -> Vec<LocalBlockHash> {
    let mut out = Vec::new();
    block_hashes_into(tokens, block_size, salt, &mut out);
    out
}

/// Chains local block hashes into sequence hashes.
///
/// ```
/// use approx_kv_index::{compute_seq_hashes, LocalBlockHash};
/// let seq = compute_seq_hashes(&[LocalBlockHash(7), LocalBlockHash(9)]);
/// assert_eq!(seq[0].0, 7); // the first block's sequence hash is its local hash
/// assert_ne!(seq[1].0, 9);
/// ```
pub fn compute_seq_hashes(local: &[LocalBlockHash]) -> Vec<SequenceHash> {
    let mut out = Vec::with_capacity(local.len());
    let mut chain = SeqChain::default();
    out.extend(local.iter().map(|&l| chain.next(l)));
    out
}

/// `None` if `seq` is the chain of `local` (what [`compute_seq_hashes`] makes of it), else
/// that chain. Hashes each block once, and again only after a mismatch.
pub(crate) fn rechain(local: &[LocalBlockHash], seq: &[SequenceHash]) -> Option<Vec<SequenceHash>> {
    let mut chain = SeqChain::default();
    let is_chain =
        seq.len() == local.len() && local.iter().zip(seq).all(|(&l, &q)| chain.next(l) == q);
    (!is_chain).then(|| compute_seq_hashes(local))
}

/// Computes sequence hashes one block at a time, so a walk can stop early without
/// hashing the rest of the query.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SeqChain {
    prev: Option<SequenceHash>,
}

impl SeqChain {
    /// A chain continuing after the block `parent` (`None`: starting at the root).
    #[inline]
    pub(crate) fn after(parent: Option<SequenceHash>) -> Self {
        Self { prev: parent }
    }

    /// The sequence hash of the next block, given its local hash.
    #[inline]
    pub(crate) fn next(&mut self, local: LocalBlockHash) -> SequenceHash {
        let seq = match self.prev {
            None => SequenceHash(local.0),
            Some(prev) => {
                let mut bytes = [0u8; 16];
                bytes[..8].copy_from_slice(&prev.0.to_le_bytes());
                bytes[8..].copy_from_slice(&local.0.to_le_bytes());
                SequenceHash(xxh3_64_with_seed(&bytes, XXH3_SEED))
            }
        };
        self.prev = Some(seq);
        seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_size_zero_yields_nothing() {
        assert!(compute_block_hash_for_seq(&[1, 2, 3], 0).is_empty());
    }

    #[test]
    fn a_chain_is_recognised_block_by_block() {
        let local = compute_block_hash_for_seq(&(0..64).collect::<Vec<_>>(), 8);
        let seq = compute_seq_hashes(&local);
        assert_eq!(rechain(&local, &seq), None);
        assert_eq!(rechain(&[], &[]), None);
        // Any one hash changed, a block missing on either side, or another prompt's
        // chain: not the chain, which is then computed.
        for i in 0..seq.len() {
            let mut wrong = seq.clone();
            wrong[i].0 ^= 1;
            assert_eq!(
                rechain(&local, &wrong).as_deref(),
                Some(&seq[..]),
                "block {i}"
            );
            let mut wrong_local = local.clone();
            wrong_local[i].0 ^= 1;
            let chain = compute_seq_hashes(&wrong_local);
            assert_eq!(
                rechain(&wrong_local, &seq).as_deref(),
                Some(&chain[..]),
                "block {i}"
            );
        }
        assert_eq!(rechain(&local, &seq[1..]).as_deref(), Some(&seq[..]));
        assert_eq!(
            rechain(&local[1..], &seq[1..]),
            Some(compute_seq_hashes(&local[1..]))
        );
        assert_eq!(rechain(&local, &[]).as_deref(), Some(&seq[..]));
        assert_eq!(rechain(&[], &seq), Some(Vec::new()));
    }

    #[test]
    fn chain_matches_batch() {
        let local = compute_block_hash_for_seq(&(0..64).collect::<Vec<_>>(), 8);
        let batch = compute_seq_hashes(&local);
        let mut chain = SeqChain::default();
        let stepwise: Vec<_> = local.iter().map(|&l| chain.next(l)).collect();
        assert_eq!(batch, stepwise);
    }
}
