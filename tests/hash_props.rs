//! Properties of block and sequence hashing, against an independent obvious
//! implementation of Dynamo's scheme (xxh3-64, seed 1337, little-endian bytes).
//!
//! Case counts are modest so `cargo test` stays fast; raise them with `PROPTEST_CASES`.

mod support;

use approx_kv_index::{compute_block_hash_for_seq, compute_seq_hashes, LocalBlockHash};
use proptest::prelude::*;
use support::proptest_config::config;
use support::reference_hash::{reference_local, reference_seq};

fn block_size() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 1u32..=8, 1 => Just(16u32), 1 => Just(0u32), 1 => Just(u32::MAX)]
}

proptest! {
    #![proptest_config(config(256))]

    /// Both functions equal the obvious implementation.
    #[test]
    fn equals_reference(tokens in prop::collection::vec(any::<u32>(), 0..100), bs in block_size()) {
        let local = compute_block_hash_for_seq(&tokens, bs);
        prop_assert_eq!(&local, &reference_local(&tokens, bs));
        prop_assert_eq!(compute_seq_hashes(&local), reference_seq(&local));
    }

    /// The hashes of a prefix are a prefix of the hashes (block and sequence).
    #[test]
    fn prefix_stable(tokens in prop::collection::vec(any::<u32>(), 0..100), cut in any::<prop::sample::Index>(), bs in block_size()) {
        let cut = cut.index(tokens.len() + 1);
        let whole = compute_block_hash_for_seq(&tokens, bs);
        let part = compute_block_hash_for_seq(&tokens[..cut], bs);
        prop_assert_eq!(&whole[..part.len()], &part[..]);
        prop_assert_eq!(&compute_seq_hashes(&whole)[..part.len()], &compute_seq_hashes(&part)[..]);
    }

    /// A partial trailing block is never hashed: whatever its tokens, the result is that
    /// of the full blocks alone.
    #[test]
    fn partial_blocks_never_hashed(
        blocks in prop::collection::vec(any::<u32>(), 0..64),
        tail in prop::collection::vec(any::<u32>(), 0..7),
        bs in 1u32..=8,
    ) {
        let full = &blocks[..blocks.len() / bs as usize * bs as usize];
        let tail = &tail[..tail.len().min(bs as usize - 1)];
        let with_tail = [full, tail].concat();
        let local = compute_block_hash_for_seq(full, bs);
        prop_assert_eq!(local.len(), full.len() / bs as usize);
        prop_assert_eq!(compute_block_hash_for_seq(&with_tail, bs), local);
    }

    /// A sequence hash names its whole prefix: changing any earlier block changes it.
    #[test]
    fn sequence_hash_depends_on_every_earlier_block(
        local in prop::collection::vec(any::<u64>(), 1..10),
        at in any::<prop::sample::Index>(),
        flip in 1u64..,
    ) {
        let local: Vec<_> = local.into_iter().map(LocalBlockHash).collect();
        let at = at.index(local.len());
        let mut changed = local.clone();
        changed[at].0 ^= flip;
        let (a, b) = (compute_seq_hashes(&local), compute_seq_hashes(&changed));
        prop_assert_eq!(&a[..at], &b[..at]);
        // xxh3 collisions on these inputs would be a 2^-64 event.
        prop_assert!(a[at..].iter().zip(&b[at..]).all(|(x, y)| x != y));
    }
}
