//! What one (block, worker) entry claims: whether a KV event stored the block (*exact*, no
//! TTL) and until when a routing decision says it is probably cached (*approximate*).
//!
//! Times are the index's nanoseconds, the whole `u64` range: the clock's reading, so any
//! value a [`Clock`](crate::Clock) can give up to 2^64 - 1 ns (about 584 years) works. An
//! approximate expiry of 0 means "no approximate claim" (it is never after any `now`).
//!
//! In a [`Holder`](super::Holder) the two parts are separate atomics: a reader loads both,
//! and every in-place change (a refresh raising the expiry, a `Stored` event setting the
//! exact bit, a walk clearing an ended approximate claim of an exact entry) keeps the entry
//! live or leaves it live, so a reader that sees one part old and the other new still gets
//! the liveness of a state the entry was in.

/// The index's last instant: its clock stops here (a reading past it is taken as it), and
/// every approximate expiry a decision gets is at most this ([`expiry_after`]). Claims
/// saturated here read as expired once the clock reaches it.
pub(crate) const LAST_INSTANT: u64 = u64::MAX - 1;

/// The approximate claim of a running request's pinned block (`core/pins.rs`): after every
/// instant, so live at every reading, and later than every decision's expiry, which is at
/// most [`LAST_INSTANT`].
pub(crate) const PIN: u64 = u64::MAX;

/// The expiry of a claim made at `now` for `ttl` nanoseconds: `now + ttl`, or
/// [`LAST_INSTANT`] if that is later (never [`PIN`]).
#[inline]
pub(crate) fn expiry_after(now: u64, ttl: u64) -> u64 {
    now.saturating_add(ttl).min(LAST_INSTANT)
}

/// One entry's claim, as a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Claim {
    /// A KV event said the worker stores the block, until a `Removed` event says otherwise.
    pub(crate) exact: bool,
    /// The expiry of the latest routing decision that covered the block; 0 if none.
    pub(crate) expiry: u64,
}

impl Claim {
    /// An approximate claim expiring at `expiry`.
    #[inline]
    pub(crate) const fn approx(expiry: u64) -> Self {
        Self {
            exact: false,
            expiry,
        }
    }

    /// An exact claim, with no approximate part.
    pub(crate) const EXACT: Self = Self {
        exact: true,
        expiry: 0,
    };

    /// Whether the entry reports the block as held at `now`. (An index whose TTL means
    /// "never" reads at `now = 0`, so every approximate claim is live.)
    #[inline]
    pub(crate) fn live(self, now: u64) -> bool {
        self.exact || self.expiry > now
    }

    /// Both claims together: exact if either is, the later expiry.
    #[cfg(test)]
    pub(crate) fn merged(self, other: Self) -> Self {
        Self {
            exact: self.exact || other.exact,
            expiry: self.expiry.max(other.expiry),
        }
    }

    /// Whether there is nothing to store.
    #[inline]
    pub(crate) fn is_none(self) -> bool {
        !self.exact && self.expiry == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_combine_as_documented() {
        assert!(!Claim::default().live(0));
        assert!(Claim::EXACT.live(u64::MAX));
        assert!(Claim::approx(10).live(9) && !Claim::approx(10).live(10));
        assert!(Claim::approx(u64::MAX).live(u64::MAX - 1));
        assert!(!Claim::approx(u64::MAX).live(u64::MAX));
        // Decisions saturate one before the pins, which outlive the clock's last instant.
        assert_eq!(expiry_after(LAST_INSTANT - 5, 3), LAST_INSTANT - 2);
        assert_eq!(expiry_after(LAST_INSTANT - 5, u64::MAX), LAST_INSTANT);
        assert_eq!(expiry_after(LAST_INSTANT, 1), LAST_INSTANT);
        assert!(!Claim::approx(expiry_after(LAST_INSTANT, 9)).live(LAST_INSTANT));
        assert!(Claim::approx(PIN).live(LAST_INSTANT));
        let both = Claim::EXACT.merged(Claim::approx(9));
        assert_eq!(
            both,
            Claim {
                exact: true,
                expiry: 9
            }
        );
        assert_eq!(Claim::approx(9).merged(Claim::approx(5)), Claim::approx(9));
        assert!(Claim::default().is_none() && !Claim::approx(1).is_none());
    }
}
