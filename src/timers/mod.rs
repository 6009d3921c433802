//! Timers: the hand-over from callers to the timer wheel, the wheel itself (plain data),
//! and the sweeper thread that drives it.
//!
//! A recording caller never touches the wheel: it pushes one [`Timer`] per decision onto a
//! lock-free queue ([`crossbeam_queue::SegQueue`]) and returns. Whoever sweeps (the
//! background thread, or a test calling `sweep_expired`) takes the wheel's lock, moves the
//! queue into the wheel, and takes the due timers out.

pub(crate) mod sweeper;
pub(crate) mod wheel;

use crate::slot::Slot;
use crate::sync::{AtomicUsize, Mutex, Ordering, SegQueue};
use crate::SequenceHash;
use wheel::TimerWheel;

/// One recorded decision waiting to expire: the prompt's last block, the worker slot and
/// the slot's generation when it was scheduled. When it fires, the sweeper walks from
/// `leaf` towards the root, unless the slot has been recycled since (another generation:
/// the registration it was for has no entries left, and the slot's new one is not its to
/// walk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timer {
    pub(crate) leaf: SequenceHash,
    pub(crate) slot: Slot,
    pub(crate) generation: u16,
}

/// The queue callers push to and the wheel sweepers drain into.
pub(crate) struct Timers {
    inbox: SegQueue<(u64, Timer)>,
    wheel: Mutex<Due>,
    /// Batches taken and not yet walked (see [`Batch`]).
    walking: AtomicUsize,
}

/// The wheel, and the timers it already found due that no sweeper has taken yet (a
/// sweeper takes them in bounded batches, so a backlog is shared out, not hoarded).
struct Due {
    wheel: TimerWheel<Timer>,
    ready: std::collections::VecDeque<(u64, Timer)>,
}

/// Due timers taken by one sweeper, with their deadlines, to walk; counted as in flight
/// until dropped, so that [`Timers::wait_for_batches`] can tell when every timer taken so
/// far has been walked.
pub(crate) struct Batch<'a> {
    pub(crate) timers: Vec<(u64, Timer)>,
    /// Whether due timers were left for the next batch.
    pub(crate) more: bool,
    walking: &'a AtomicUsize,
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        self.walking.fetch_sub(1, Ordering::Release);
    }
}

impl Timers {
    /// Heap bytes of one pending timer (deadline and timer, in the queue or a wheel slot).
    pub(crate) const BYTES_PER_TIMER: usize = std::mem::size_of::<(u64, Timer)>();

    pub(crate) fn new(tick_nanos: u64, ttl_nanos: u64) -> Self {
        Self {
            inbox: SegQueue::new(),
            wheel: Mutex::new(Due {
                wheel: TimerWheel::new(tick_nanos, ttl_nanos),
                ready: std::collections::VecDeque::new(),
            }),
            walking: AtomicUsize::new(0),
        }
    }

    /// Hands a timer to the wheel without waiting for anyone.
    #[inline]
    pub(crate) fn schedule(&self, deadline_nanos: u64, timer: Timer) {
        self.inbox.push((deadline_nanos, timer));
    }

    /// Timers queued, in the wheel, or due and not yet taken.
    pub(crate) fn pending(&self) -> usize {
        let due = self.wheel.lock();
        self.inbox.len() + due.wheel.len() + due.ready.len()
    }

    /// Moves queued timers into the wheel, advances it to `now_nanos`, and takes at most
    /// `max` due timers. Concurrent calls take turns (the wheel's lock), so each due timer
    /// is taken exactly once. With `wait == false` this gives up (`None`) instead of
    /// waiting for another thread holding the wheel.
    pub(crate) fn take_due(&self, now_nanos: u64, max: usize, wait: bool) -> Option<Batch<'_>> {
        let mut due = if wait {
            self.wheel.lock()
        } else {
            self.wheel.try_lock()?
        };
        let Due { wheel, ready } = &mut *due;
        while let Some((deadline, timer)) = self.inbox.pop() {
            wheel.schedule(deadline, timer);
        }
        // Always advance: a batch left by a sweeper that read an older clock must not
        // hide what became due since.
        wheel.advance(now_nanos, |deadline, timer| {
            ready.push_back((deadline, timer))
        });
        let take = max.min(ready.len());
        let timers: Vec<_> = ready.drain(..take).collect();
        // Counted before the wheel's lock is released: a sweeper that then finds nothing
        // due and waits for the batches in flight sees this one.
        self.walking.fetch_add(1, Ordering::Relaxed);
        Some(Batch {
            more: !ready.is_empty(),
            timers,
            walking: &self.walking,
        })
    }

    /// Waits until every batch taken so far has been walked (dropped).
    pub(crate) fn wait_for_batches(&self) {
        while self.walking.load(Ordering::Acquire) > 0 {
            crate::sync::yield_now();
        }
    }
}
