//! A ghost hit raising another worker's capacity (`Workers::raise_untaught_capacity`, from
//! `core/learn.rs`) racing a caller's `set_worker_capacity` of that worker.
//!
//! The raise reads the worker's capacity, then sets the capacity learned if it is still
//! the one read. One thread raises worker 7 from the 4 it read to 8; another sets 6.
//!
//! Proves: the caller's set wins in every interleaving (the capacity ends at 6, as the
//! caller reads it back at once), because the raise is a compare-and-swap from the value
//! read, and the set a swap (both read-modify-writes, so each reads what the other wrote
//! before it).
//!
//! Can fail: with `--cfg loom_break="raise_unchecked"` (the raise compares with a load and
//! then stores) loom finds "a caller's set lost to a raise".

use loom::thread;

use crate::workers::Workers;

#[test]
fn a_raise_never_overwrites_a_callers_set() {
    super::model(|| {
        let workers = Workers::new(Default::default());
        let slot = workers.resolve(7u64).unwrap();
        workers.set_capacity(slot, Some(4));
        let caller = {
            let workers = workers.clone();
            thread::spawn(move || {
                workers.set_capacity(slot, Some(6));
                workers.capacity(slot)
            })
        };
        workers.raise_untaught_capacity(slot, Some(4), 8);
        let read_back = caller.join().unwrap();
        for capacity in [read_back, workers.capacity(slot)] {
            assert_eq!(capacity, Some(6), "a caller's set lost to a raise");
        }
    });
}
