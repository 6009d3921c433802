//! Promises: Clocks.

use super::*;

/// src/clock.rs, `ManualClock::set`: "Moves the clock to `to`, if that is not in its past
/// (a clock never goes back)"; `advance`: "saturating at 2^64 - 1 ns".
#[test]
fn a_manual_clock_never_goes_back_and_saturates_at_the_end() {
    let clock = ManualClock::new();
    assert_eq!(clock.now(), Duration::ZERO);
    clock.advance(Duration::from_secs(5));
    clock.set(Duration::from_secs(3));
    assert_eq!(clock.now(), Duration::from_secs(5));
    clock.set(Duration::from_secs(7));
    assert_eq!(clock.now(), Duration::from_secs(7));
    clock.advance(Duration::MAX);
    assert_eq!(clock.now(), Duration::from_nanos(u64::MAX));
    clock.advance(Duration::from_secs(1));
    clock.set(Duration::MAX);
    assert_eq!(clock.now(), Duration::from_nanos(u64::MAX));
}

// ---------------------------------------------------------------------------------------
