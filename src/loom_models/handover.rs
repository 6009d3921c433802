//! The hand-over from callers to the timer wheel.
//!
//! A caller records a decision (adds its entry), then pushes its timer onto the expiry
//! inbox and returns; two sweeps (the background thread and a `sweep_expired` call) run
//! the real `Timers::take_due` with the walk as `Inner::sweep` does. The inbox, a
//! `crossbeam_queue::SegQueue` in the crate, is a loom mutex over a deque here
//! (crossbeam-queue has no loom support), and the wheel's lock is loom's.
//!
//! Proves: the timer fires exactly once over all sweeps; a sweep that starts after the
//! caller returned has the timer fired and walked by the time it returns (by itself, or by
//! the other sweep, whose batch it waits for); and the entry is reclaimed, never leaked by
//! a timer that fired too early.
//!
//! Checked orderings: `take_due` drains the inbox while it holds the wheel lock and counts
//! its batch as in flight before releasing it, and a record pushes its timer only after its
//! entry is in the tree.
//!
//! Can fail: with `--cfg loom_break="schedule_first"` (the timer is pushed before the
//! entry is added) loom finds "the entry leaked": the walk ran before the entry existed.
//! Draining the inbox before taking the wheel lock in `Timers::take_due` makes loom find
//! "a sweep returned without firing a timer handed over before it started".

use crossbeam_epoch as epoch;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use super::{record, walk, Shard};
use crate::timers::{Timer, Timers};
use crate::SequenceHash;

const WORKER: u32 = 4;
const TICK: u64 = 10;
const DEADLINE: u64 = 20;
const NOW: u64 = 25;

struct World {
    timers: Timers,
    shard: Shard,
    fired: AtomicUsize,
    handed_over: AtomicBool,
}

impl World {
    /// `Inner::sweep`: walk from each due timer's leaf.
    fn sweep(&self) {
        let batch = self.timers.take_due(NOW, usize::MAX, true).expect("waits");
        for &(_, timer) in &batch.timers {
            self.fired.fetch_add(1, Ordering::Relaxed);
            walk(&self.shard, timer.slot, NOW, true, || {}, &epoch::pin());
        }
        drop(batch);
        self.timers.wait_for_batches(); // as `Core::sweep`: batches others took too
    }

    /// `Inner::record`: add the entry, then hand the timer over.
    fn record(&self) {
        let timer = Timer {
            leaf: SequenceHash(0),
            slot: WORKER,
            generation: 0,
        };
        if cfg!(loom_break = "schedule_first") {
            self.timers.schedule(DEADLINE, timer);
        }
        record(&self.shard, WORKER, DEADLINE, &epoch::pin());
        if !cfg!(loom_break = "schedule_first") {
            self.timers.schedule(DEADLINE, timer);
        }
        self.handed_over.store(true, Ordering::Release);
    }
}

#[test]
fn callers_hand_timers_to_concurrent_sweeps() {
    super::model(|| {
        let world = Arc::new(World {
            timers: Timers::new(TICK, 100),
            shard: Shard::new(None),
            fired: AtomicUsize::new(0),
            handed_over: AtomicBool::new(false),
        });
        let spawn = |f: fn(&World)| {
            let world = Arc::clone(&world);
            thread::spawn(move || f(&world))
        };
        let caller = spawn(World::record);
        let background = spawn(World::sweep);
        let manual = spawn(|world| {
            let after_the_caller = world.handed_over.load(Ordering::Acquire);
            world.sweep();
            if after_the_caller {
                assert_eq!(
                    world.fired.load(Ordering::Relaxed),
                    1,
                    "a sweep returned without firing a timer handed over before it started"
                );
            }
        });
        for t in [caller, background, manual] {
            t.join().unwrap();
        }
        world.sweep();
        assert_eq!(world.fired.load(Ordering::Relaxed), 1, "fired once");
        assert_eq!(world.timers.pending(), 0);
        assert!(world.shard.read().unwrap().is_none(), "the entry leaked");
    });
}
