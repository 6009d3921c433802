//! A hashed timer wheel as plain data: no thread, no clock, no locks.
//!
//! Time is cut into ticks of `tick` nanoseconds. An item due at `deadline` goes into the
//! slot of tick `ceil(deadline / tick)`; the slot count is a power of two, so the slot is
//! `tick & mask`. Items further out than one revolution share a slot with nearer ones and
//! are kept (not fired) until a visit finds them due. An occupancy bitmap lets `advance`
//! skip empty slots, and an advance across more than a whole revolution visits each
//! occupied slot once, so a long pause costs O(slots + items), not O(elapsed ticks).

/// The wheel. `T` is what fires (for the index: a prompt's leaf block and a worker slot).
#[derive(Debug)]
pub(crate) struct TimerWheel<T> {
    tick_nanos: u64,
    slots: Box<[Vec<(u64, T)>]>,
    occupied: Box<[u64]>,
    /// The last tick processed: every item due at or before its start has fired.
    current: u64,
    len: usize,
}

/// Bounds on the slot count: at least a word of the bitmap, at most 4 Ki slots (96 KiB of
/// empty slots; timers further out than a revolution are visited once per revolution).
const MIN_SLOTS: u64 = 64;
const MAX_SLOTS: u64 = 1 << 12;

impl<T> TimerWheel<T> {
    /// A wheel of `tick_nanos`-long ticks, sized so that items due within `horizon_nanos`
    /// of now fit in one revolution (within the slot bounds). `tick_nanos` must be > 0.
    pub(crate) fn new(tick_nanos: u64, horizon_nanos: u64) -> Self {
        let tick_nanos = tick_nanos.max(1);
        let wanted = (horizon_nanos / tick_nanos).saturating_add(2);
        let count = wanted.clamp(MIN_SLOTS, MAX_SLOTS).next_power_of_two() as usize;
        Self {
            tick_nanos,
            slots: (0..count).map(|_| Vec::new()).collect(),
            occupied: vec![0; count / 64].into_boxed_slice(),
            current: 0,
            len: 0,
        }
    }

    /// Items scheduled and not yet fired.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Schedules `item` to fire at the first advance whose `now >= deadline_nanos`.
    pub(crate) fn schedule(&mut self, deadline_nanos: u64, item: T) {
        let tick = deadline_nanos
            .div_ceil(self.tick_nanos)
            .max(self.current.saturating_add(1));
        let slot = self.slot_of(tick);
        self.slots[slot].push((deadline_nanos, item));
        self.occupied[slot / 64] |= 1 << (slot % 64);
        self.len += 1;
    }

    /// Moves time to `now_nanos`, handing every item due by then to `fire`: those of the
    /// ticks that ended, and the due ones of the tick in progress, so an advance is exact.
    /// `fire` gets each item's deadline with it. Any `now_nanos` up to `u64::MAX` works.
    pub(crate) fn advance(&mut self, now_nanos: u64, mut fire: impl FnMut(u64, T)) {
        let target = now_nanos / self.tick_nanos;
        let span = target.saturating_sub(self.current);
        if span >= self.slots.len() as u64 - 1 {
            for slot in 0..self.slots.len() {
                self.visit(slot, now_nanos, &mut fire);
            }
        } else {
            for tick in self.current.saturating_add(1)..=target.saturating_add(1) {
                self.visit(self.slot_of(tick), now_nanos, &mut fire);
            }
        }
        self.current = self.current.max(target);
    }

    #[inline]
    fn slot_of(&self, tick: u64) -> usize {
        (tick & (self.slots.len() as u64 - 1)) as usize
    }

    fn visit(&mut self, slot: usize, now_nanos: u64, fire: &mut impl FnMut(u64, T)) {
        if self.occupied[slot / 64] & (1 << (slot % 64)) == 0 {
            return;
        }
        let items = &mut self.slots[slot];
        let mut i = 0;
        while i < items.len() {
            if items[i].0 <= now_nanos {
                let (deadline, item) = items.swap_remove(i);
                self.len -= 1;
                fire(deadline, item);
            } else {
                i += 1;
            }
        }
        if items.is_empty() {
            self.occupied[slot / 64] &= !(1 << (slot % 64));
            if items.capacity() > 64 {
                items.shrink_to(8);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fired(wheel: &mut TimerWheel<u32>, now: u64) -> Vec<u32> {
        let mut out = Vec::new();
        wheel.advance(now, |_, x| out.push(x));
        out.sort_unstable();
        out
    }

    #[test]
    fn fires_exactly_when_due() {
        let mut w = TimerWheel::new(10, 1_000);
        w.schedule(25, 1);
        w.schedule(30, 2);
        assert_eq!(fired(&mut w, 20), Vec::<u32>::new());
        assert_eq!(fired(&mut w, 24), Vec::<u32>::new());
        assert_eq!(fired(&mut w, 27), vec![1]); // due within the tick in progress
        assert_eq!(fired(&mut w, 30), vec![2]);
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn far_items_wait_for_their_revolution() {
        let mut w = TimerWheel::new(1, 10); // 64 slots
        w.schedule(5, 1);
        w.schedule(5 + 64, 2); // same slot, next revolution
        assert_eq!(fired(&mut w, 5), vec![1]);
        assert_eq!(fired(&mut w, 68), Vec::<u32>::new());
        assert_eq!(fired(&mut w, 69), vec![2]);
    }

    #[test]
    fn long_jump_visits_everything_once() {
        let mut w = TimerWheel::new(1, 10);
        for i in 0..1_000u32 {
            w.schedule(u64::from(i) * 7, i);
        }
        let all = fired(&mut w, 1_000_000);
        assert_eq!(all, (0..1_000).collect::<Vec<_>>());
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn the_end_of_time_is_reached_without_overflow() {
        let mut w = TimerWheel::new(1, 10);
        w.schedule(u64::MAX - 3, 1);
        w.schedule(u64::MAX, 2);
        assert_eq!(fired(&mut w, u64::MAX - 4), Vec::<u32>::new());
        assert_eq!(fired(&mut w, u64::MAX - 1), vec![1]);
        assert_eq!(fired(&mut w, u64::MAX), vec![2]);
        assert_eq!(fired(&mut w, u64::MAX), Vec::<u32>::new());
    }

    #[test]
    fn past_deadlines_fire_on_next_advance() {
        let mut w = TimerWheel::new(10, 100);
        w.advance(500, |_, _: u32| unreachable!());
        w.schedule(100, 7); // already past
        assert_eq!(fired(&mut w, 510), vec![7]);
    }
}
