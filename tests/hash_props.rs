//! Properties of block and sequence hashing, against an independent obvious
//! implementation of Dynamo's scheme (xxh3-64, seed 1337, little-endian bytes).
//!
//! Case counts are modest so `cargo test` stays fast; raise them with `PROPTEST_CASES`.

use approx_kv_index::{
    compute_block_hash_for_seq, compute_seq_hashes, LocalBlockHash, SequenceHash, XXH3_SEED,
};
use proptest::prelude::*;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// `PROPTEST_CASES` if set, else `default`.
fn config(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

/// The obvious block hashing: one xxh3 per full block of little-endian token bytes.
fn reference_local(tokens: &[u32], block_size: u32) -> Vec<LocalBlockHash> {
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
fn reference_seq(local: &[LocalBlockHash]) -> Vec<SequenceHash> {
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
