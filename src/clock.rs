//! Time sources. The index reads time once per call through a [`Clock`], so tests and
//! fuzzers can drive expiry step by step with a [`ManualClock`] instead of sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A monotonic time source: the time elapsed since an origin of the clock's choosing.
///
/// Implementations must never go backwards, and must not panic: the index reads the clock
/// before a call changes anything, but a request's release that cannot read it never
/// happens (its blocks stay pinned until the worker is removed). They are called once per
/// index call, from any thread.
///
/// **Range.** The index counts time in nanoseconds in a `u64`: every reading from zero to
/// 2^64 - 2 ns (about 584 years) is exact, and a later reading (such as [`ManualClock`]'s
/// last, 2^64 - 1 ns) is taken as 2^64 - 2 ns, the index's last instant, where its time
/// stops. An expiry that would fall past the last instant falls at it; a running request's
/// pinned blocks outlive it. Under caps, decisions are ordered by
/// expiry, so decisions recorded within a TTL of the end (in capacity-only mode, within
/// 2^62 ns) are no longer told apart by age.
pub trait Clock: Send + Sync + 'static {
    /// The time elapsed since this clock's origin.
    fn now(&self) -> Duration;
}

/// The real monotonic clock ([`Instant`]), with its origin at construction.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// Wall-clock time: the time since the Unix epoch ([`SystemTime`](std::time::SystemTime)).
///
/// Replicas date their shared decisions with it (see
/// [`Builder::wall_clock`](crate::Builder::wall_clock)), since their monotonic clocks have
/// origins of their own. Unlike the [`Clock`] contract, it may step back when the system
/// time is set; receivers clamp decisions dated in their future to now. A system time
/// before 1970 reads as zero.
///
/// ```
/// use approx_kv_index::{Clock, UnixClock};
/// assert!(UnixClock.now().as_secs() > 1_600_000_000); // after September 2020
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct UnixClock;

impl Clock for UnixClock {
    fn now(&self) -> Duration {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
    }
}

/// A clock that moves only when told to: for tests, fuzzing and simulations.
///
/// Share it with the index through an [`Arc`](std::sync::Arc) and keep a handle to advance it.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use approx_kv_index::{Clock, ManualClock};
/// let clock = Arc::new(ManualClock::new());
/// clock.advance(Duration::from_secs(3));
/// assert_eq!(clock.now(), Duration::from_secs(3));
/// ```
#[derive(Debug, Default)]
pub struct ManualClock {
    nanos: AtomicU64,
}

impl ManualClock {
    /// A clock standing at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `by` (saturating at 2^64 - 1 ns, about 584 years; the
    /// index's time stops one nanosecond earlier, see [`Clock`]).
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .nanos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_add(by))
            });
    }

    /// Moves the clock to `to`, if that is not in its past (a clock never goes back).
    pub fn set(&self, to: Duration) {
        let to = u64::try_from(to.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_max(to, Ordering::AcqRel);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Acquire))
    }
}

/// Converts a clock reading to the index's internal nanosecond timestamps.
#[inline]
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
