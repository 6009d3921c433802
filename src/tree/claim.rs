//! What one (block, worker) entry claims, packed in one `u64` so it can change atomically.
//!
//! - bit 63, `EXACT`: a KV event said the worker stores the block (no TTL), until a
//!   `Removed` event says otherwise;
//! - bits 0..63, the *approximate* claim: the expiry (index nanoseconds) of the latest
//!   routing decision that covered the block; 0 when there is none, [`KILLED`] when a
//!   `Removed` event ended it before its timer fired.
//!
//! An entry is live at `now` if it is exact or its approximate expiry is after `now`. The
//! index's internal time is always at least 1, so `0` and `KILLED` are never live.

/// Set while a KV event says the block is stored.
pub(crate) const EXACT: u64 = 1 << 63;
/// The approximate expiry bits.
pub(crate) const APPROX: u64 = EXACT - 1;
/// An approximate claim ended by an event; its timer's walk will still remove it.
pub(crate) const KILLED: u64 = 1;
/// The latest approximate expiry that can be stored.
pub(crate) const MAX_EXPIRY: u64 = APPROX;

/// The approximate expiry part of a claim.
#[inline]
pub(crate) fn approx(claim: u64) -> u64 {
    claim & APPROX
}

/// Whether a claim reports the block as held at `now` (`now >= 1`).
#[inline]
pub(crate) fn live(claim: u64, now: u64) -> bool {
    claim & EXACT != 0 || approx(claim) > now
}

/// The claim raised by a routing decision expiring at `expiry`: the exact bit is kept and
/// the approximate expiry only moves later.
#[inline]
pub(crate) fn refreshed(claim: u64, expiry: u64) -> u64 {
    (claim & EXACT) | approx(claim).max(expiry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_combine_as_documented() {
        assert!(!live(0, 1));
        assert!(!live(KILLED, 1));
        assert!(live(EXACT, u64::MAX));
        assert!(live(10, 9) && !live(10, 10));
        assert_eq!(refreshed(EXACT | 5, 9), EXACT | 9);
        assert_eq!(refreshed(9, 5), 9);
    }
}
