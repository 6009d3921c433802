//! The keyed `BuildHasher` of the index's internal maps keyed by single `u64`s: block hashes
//! (the tree's nodes), worker ids (the worker registry) and engine block hashes. Not public:
//! the maps of the public API ([`OverlapScores`](crate::OverlapScores)) use
//! `rustc_hash::FxBuildHasher`, which measured as fast there.
//!
//! **Why keyed.** The node map's keys are sequence hashes: xxh3 with Dynamo's public seed.
//! With a fixed mixer, a client could search for prompts whose keys share the bits that pick
//! a shard and a bucket (about 2^16 tries per block for 16 bits) and pile them into one probe
//! chain, slowing every find and record that passes there. Each map therefore mixes its keys
//! with two secret 64-bit keys drawn when it is built (from the standard library's
//! `RandomState`, which the operating system seeds), so bucket bits cannot be predicted
//! from the keys alone.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

/// Multiplies two words into 128 bits and folds the halves together: every output bit
/// depends on every bit of both inputs.
#[inline(always)]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    (full as u64) ^ ((full >> 64) as u64)
}

/// Hashes one `u64` with two folded multiplications keyed by the map's secret keys.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdHasher {
    state: u64,
    keys: [u64; 2],
}

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        let h = folded_multiply(self.state ^ self.keys[0], 0x9e37_79b9_7f4a_7c15);
        folded_multiply(h ^ self.keys[1], 0xc4ce_b9fe_1a85_ec53)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.state = self.state.rotate_left(8) ^ u64::from(b);
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.state = self.state.rotate_left(29) ^ n;
    }
}

/// The `BuildHasher` of the internal maps keyed by a block hash or a worker id: each value
/// carries its own secret keys (see the module docs), drawn by [`Default::default`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdBuildHasher {
    keys: [u64; 2],
}

impl Default for IdBuildHasher {
    fn default() -> Self {
        if cfg!(loom) {
            // Loom replays each interleaving and needs every run to take the same paths
            // (the same shards): fixed keys under the model checker.
            return Self {
                keys: [0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7345],
            };
        }
        let random = RandomState::new();
        // Two outputs of a freshly, randomly keyed SipHash; odd, so neither is ever zero.
        let keys = [
            random.hash_one(0x5eed_u64) | 1,
            random.hash_one(0xfeed_u64) | 1,
        ];
        Self { keys }
    }
}

impl BuildHasher for IdBuildHasher {
    type Hasher = IdHasher;

    #[inline]
    fn build_hasher(&self) -> IdHasher {
        IdHasher {
            state: 0,
            keys: self.keys,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_keys_spread_over_low_bits() {
        let b = IdBuildHasher::default();
        let buckets: std::collections::HashSet<u64> =
            (0u64..64).map(|k| b.hash_one(k) & 63).collect();
        assert!(
            buckets.len() > 32,
            "only {} of 64 buckets used",
            buckets.len()
        );
    }

    #[test]
    fn each_map_gets_its_own_keys() {
        let (a, b) = (IdBuildHasher::default(), IdBuildHasher::default());
        let differ = (0u64..16)
            .filter(|&k| a.hash_one(k) != b.hash_one(k))
            .count();
        assert_eq!(differ, 16, "two maps placed keys alike");
    }

    #[test]
    fn collisions_found_against_one_map_do_not_carry_over() {
        // What an attacker can do offline against a known mixer: collect keys whose hashes
        // share their low 8 bits (one bucket of 256). Against another map's keys, they
        // spread over the buckets again.
        let (known, other) = (IdBuildHasher::default(), IdBuildHasher::default());
        let crafted: Vec<u64> = (0u64..)
            .filter(|&k| known.hash_one(k) & 255 == 0)
            .take(256)
            .collect();
        let buckets: std::collections::HashSet<u64> =
            crafted.iter().map(|&k| other.hash_one(k) & 255).collect();
        assert!(buckets.len() > 128, "only {} of 256 buckets", buckets.len());
    }

    #[test]
    fn a_key_hashes_alike_through_one_builder() {
        let b = IdBuildHasher::default();
        assert_eq!(b.hash_one(42u64), b.hash_one(42u64));
    }
}
