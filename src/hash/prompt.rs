//! [`PromptHashes`]: a prompt's block hashes in both forms, made together by this crate.

use super::{prompt_hashes_into, HashSalt, LocalBlockHash, SequenceHash};

/// A prompt's block hashes in both forms, computed together in one pass over its tokens:
/// for a router that hashes each request once, then finds and records with the hashes.
///
/// Only this crate makes them, so the sequence hashes are always the chain of the local
/// hashes: a record of [`Query::prompt`](crate::Query::prompt) stores them as they are,
/// where a record of [`Query::hashes`](crate::Query::hashes) chains the local hashes
/// again to check the pair (the same hashing as [`compute_seq_hashes`](super::compute_seq_hashes)),
/// and a find probes the sequence hashes, as [`Query::sequence`](crate::Query::sequence)
/// does. The hashes are Dynamo's ([`compute_block_hash_for_seq`](super::compute_block_hash_for_seq)
/// and [`compute_seq_hashes`](super::compute_seq_hashes)); a partial trailing block is ignored.
/// Hash with the index's block size ([`ApproxKvIndexer::block_size`](crate::ApproxKvIndexer::block_size)):
/// blocks of another size are other blocks, as they would be for [`Query::hashes`](crate::Query::hashes).
///
/// ```
/// use approx_kv_index::{compute_block_hash_for_seq, compute_seq_hashes};
/// use approx_kv_index::{ApproxKvIndexer, HashSalt, PromptHashes, Query};
///
/// let index = ApproxKvIndexer::new(4, std::time::Duration::from_secs(60)).unwrap();
/// let tokens: Vec<u32> = (0..10).collect(); // two full blocks of 4 tokens
/// let mut hashes = PromptHashes::new(&tokens, 4);
/// assert_eq!(hashes.local(), compute_block_hash_for_seq(&tokens, 4));
/// assert_eq!(hashes.seq(), compute_seq_hashes(hashes.local()));
///
/// assert!(index.find(Query::prompt(&hashes)).scores.is_empty());
/// index.record(3, Query::prompt(&hashes)).unwrap();
/// assert_eq!(index.find(Query::tokens(&tokens)).scores[&3], 2);
///
/// // The next request, into the same buffers (no allocation once they have room).
/// hashes.rehash(&tokens[..4], 4, HashSalt::NONE);
/// assert_eq!(hashes.len(), 1);
/// assert_eq!(index.find(Query::prompt(&hashes)).scores[&3], 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PromptHashes {
    local: Vec<LocalBlockHash>,
    seq: Vec<SequenceHash>,
}

impl PromptHashes {
    /// The hashes of each full block of `tokens`, with no salt. A `block_size` of 0
    /// yields no blocks.
    pub fn new(tokens: &[u32], block_size: u32) -> Self {
        Self::salted(tokens, block_size, HashSalt::NONE)
    }

    /// The hashes of each full block of `tokens` under a [`HashSalt`] (a LoRA adapter, a
    /// cache namespace), as [`Query::salted_tokens`](crate::Query::salted_tokens) hashes them.
    pub fn salted(tokens: &[u32], block_size: u32, salt: HashSalt) -> Self {
        let mut hashes = Self::default();
        hashes.rehash(tokens, block_size, salt);
        hashes
    }

    /// Replaces these hashes with another prompt's, reusing the buffers.
    pub fn rehash(&mut self, tokens: &[u32], block_size: u32, salt: HashSalt) {
        prompt_hashes_into(tokens, block_size, salt, &mut self.local, &mut self.seq);
    }

    /// Each block's tokens hash.
    pub fn local(&self) -> &[LocalBlockHash] {
        &self.local
    }

    /// Each block's sequence hash (the chain of the local hashes).
    pub fn seq(&self) -> &[SequenceHash] {
        &self.seq
    }

    /// The number of full blocks.
    pub fn len(&self) -> usize {
        self.local.len()
    }

    /// Whether the prompt has no full block.
    pub fn is_empty(&self) -> bool {
        self.local.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{compute_block_hash_for_seq_salted, compute_seq_hashes};

    #[test]
    fn both_forms_are_dynamos_under_any_salt_and_after_a_rehash() {
        let lora = HashSalt::new(Some("adapter"), None);
        let mut hashes = PromptHashes::default();
        assert!(hashes.is_empty());
        for (len, block_size, salt) in [(1_000, 64, HashSalt::NONE), (37, 4, lora), (5, 8, lora)] {
            let tokens: Vec<u32> = (0..len).collect();
            let local = compute_block_hash_for_seq_salted(&tokens, block_size, salt);
            hashes.rehash(&tokens, block_size, salt);
            assert_eq!(hashes.local(), local);
            assert_eq!(hashes.seq(), compute_seq_hashes(&local));
            assert_eq!(hashes.len(), len as usize / block_size as usize);
            assert_eq!(hashes, PromptHashes::salted(&tokens, block_size, salt));
        }
        assert!(PromptHashes::new(&[1, 2, 3], 0).is_empty());
    }
}
