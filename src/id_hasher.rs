//! A fast `BuildHasher` for the index's internal maps keyed by single `u64`s: block hashes
//! (the tree's nodes) and worker ids (the worker registry). Not public: the maps of the
//! public API ([`OverlapScores`](crate::OverlapScores)) use `rustc_hash::FxBuildHasher`,
//! which measured as fast there.

use std::hash::{BuildHasherDefault, Hasher};

/// Hashes one `u64` with the murmur3 finalizer: every output bit depends on every input
/// bit, so both the low bits (bucket index) and the high bits (shard, control byte) of a
/// hash map are well spread, even for small or adversarially chosen keys.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = self.0.rotate_left(29) ^ n;
    }
}

/// The `BuildHasher` of the internal maps keyed by a block hash or a worker id.
pub(crate) type IdBuildHasher = BuildHasherDefault<IdHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

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
}
