//! The one deterministic generator of the workspace: splitmix64 (Steele, Lea and Flood,
//! 2014), for the library's stress test and benches, the comparison bench and the replay
//! tool.
//!
//! It is kept here rather than taken from a crate because the published figures
//! (`docs/replay.md`, `docs/benchmarks.md`) were produced with exactly these streams: the
//! tokens of a trace block are [`splitmix64`] (benches, comparison) or [`mix64`] (replay)
//! of their position, and the replay's random policy draws with [`SplitMix64::below`].
//! `fastrand` (wyrand) or `rand_xoshiro` would change every one of those numbers, and
//! neither exposes the stateless mix that the token mapping needs.

/// The splitmix64 finalizer: a bijective mix of all 64 bits.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The golden-ratio increment of splitmix64.
pub const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The first output of a splitmix64 generator seeded with `x`: a well-mixed, stateless
/// function of `x` (`SplitMix64(x).next_u64()`).
#[inline]
pub fn splitmix64(x: u64) -> u64 {
    mix64(x.wrapping_add(GOLDEN))
}

/// The splitmix64 generator; the field is its state, so `SplitMix64(seed)` seeds it.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix64(self.0)
    }

    /// A number in `0..n` (`n > 0`), by multiply-shift (bias below 2^-32 for small `n`).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_deterministic_and_in_range() {
        let (mut a, mut b) = (SplitMix64::new(7), SplitMix64::new(7));
        let xs: Vec<u64> = (0..1000).map(|_| a.below(8)).collect();
        assert!(xs.iter().all(|&x| x < 8));
        assert_eq!(xs, (0..1000).map(|_| b.below(8)).collect::<Vec<_>>());
        assert!((0..8).all(|k| xs.contains(&k)));
    }

    #[test]
    fn matches_the_reference_stream() {
        // splitmix64 seeded with 0: the reference outputs of the published algorithm.
        let mut r = SplitMix64(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
    }
}
