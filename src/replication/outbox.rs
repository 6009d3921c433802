//! [`Outbox`]: the bounded queue between recording callers and a transport's publisher.
//! Pushing never waits: when the queue is full the decision is dropped and counted.
//!
//! The queue is a `SegQueue` (segments allocated as decisions arrive, freed as they are
//! taken) bounded by a count of places taken, so its memory follows what is queued: a
//! large capacity costs nothing until it is used. A pusher takes a place before it pushes
//! and a popper frees one only after it popped, so the queue never holds more than
//! `capacity` (loom model `outbox_bound`).

use std::time::Duration;

use crate::sync::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering, SegQueue};

use super::decision::Decision;

/// Decisions of this replica waiting for a transport to publish them.
///
/// Recording callers push without waiting (a full outbox drops the decision and counts
/// it); a publisher thread takes them with [`pop`](Self::pop) and waits for more with
/// [`wait`](Self::wait).
///
/// ```
/// use std::time::Duration;
/// use approx_kv_index::{ApproxKvIndexer, Query};
/// let index = ApproxKvIndexer::builder().block_size(2).share_decisions(1).build()?;
/// index.record(0, Query::tokens(&[1, 2])).unwrap();
/// index.record(0, Query::tokens(&[3, 4])).unwrap(); // the outbox is full: dropped
/// let outbox = index.outbox().unwrap();
/// assert!(outbox.pop().is_some());
/// assert!(outbox.pop().is_none());
/// assert_eq!(outbox.dropped(), 1);
/// assert!(!outbox.wait(Duration::from_millis(1))); // nothing came
/// # Ok::<(), approx_kv_index::ConfigError>(())
/// ```
pub struct Outbox {
    queue: SegQueue<Decision>,
    /// Places taken: decisions queued, or being queued, by pushers that found room.
    taken: AtomicUsize,
    capacity: usize,
    dropped: AtomicU64,
    /// A publisher is (about to be) waiting in `wait`.
    waiting: AtomicBool,
    lock: parking_lot::Mutex<()>,
    ready: parking_lot::Condvar,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("len", &self.len())
            .field("capacity", &self.capacity)
            .field("dropped", &self.dropped())
            .finish_non_exhaustive()
    }
}

impl Outbox {
    /// An outbox holding at most `capacity` decisions (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            queue: SegQueue::new(),
            taken: AtomicUsize::new(0),
            capacity: capacity.max(1),
            dropped: AtomicU64::new(0),
            waiting: AtomicBool::new(false),
            lock: parking_lot::Mutex::new(()),
            ready: parking_lot::Condvar::new(),
        }
    }

    /// Queues a decision, or drops and counts it when full; wakes a waiting publisher.
    pub(crate) fn push(&self, decision: Decision) {
        // A place first: at most `capacity` decisions are ever queued at once.
        if self.taken.fetch_add(1, Ordering::Relaxed) >= self.capacity {
            self.taken.fetch_sub(1, Ordering::Relaxed);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.queue.push(decision);
        // Pairs with the fence in `wait`: either the publisher sees the decision before it
        // sleeps, or this sees it waiting and wakes it.
        fence(Ordering::SeqCst);
        if self.waiting.load(Ordering::Relaxed) {
            let _held = self.lock.lock();
            self.ready.notify_one();
        }
    }

    /// The oldest queued decision, if any.
    pub fn pop(&self) -> Option<Decision> {
        if cfg!(loom_break = "outbox_free_first") {
            // Broken (loom model `outbox_bound`): the place is free before the decision is
            // out, so a pusher may queue one more than the capacity.
            if self.queue.is_empty() {
                return None;
            }
            self.taken.fetch_sub(1, Ordering::Relaxed);
            return self.queue.pop();
        }
        let decision = self.queue.pop()?;
        // Its place is free again only now that it is out.
        self.taken.fetch_sub(1, Ordering::Relaxed);
        Some(decision)
    }

    /// Waits until a decision is queued or `timeout` passes; returns whether one is
    /// queued. For one publisher thread (several waiting at once may wait out the
    /// timeout).
    pub fn wait(&self, timeout: Duration) -> bool {
        if !self.queue.is_empty() {
            return true;
        }
        let mut held = self.lock.lock();
        self.waiting.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.queue.is_empty() {
            let _ = self.ready.wait_for(&mut held, timeout);
        }
        self.waiting.store(false, Ordering::Relaxed);
        !self.queue.is_empty()
    }

    /// Decisions queued now.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// The most decisions it holds at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether no decision is queued.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Decisions dropped because the outbox was full, since creation.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::Action;

    fn removal() -> Decision {
        Decision {
            origin: 0,
            seq: 0,
            decided_at: Duration::ZERO,
            action: Action::RemoveWorker { worker_id: 0 },
        }
    }

    #[test]
    fn it_holds_capacity_decisions_whatever_the_threads_and_frees_places_as_they_are_taken() {
        let outbox = Outbox::new(100);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| (0..1_000).for_each(|_| outbox.push(removal())));
            }
        });
        assert_eq!((outbox.len(), outbox.dropped()), (100, 3_900));
        assert!(outbox.pop().is_some());
        outbox.push(removal());
        outbox.push(removal());
        assert_eq!((outbox.len(), outbox.dropped()), (100, 3_901));
        assert_eq!(std::iter::from_fn(|| outbox.pop()).count(), 100);
    }

    #[test]
    fn a_huge_capacity_allocates_nothing_up_front() {
        let outbox = Outbox::new(usize::MAX);
        assert_eq!(outbox.capacity(), usize::MAX);
        outbox.push(removal());
        assert_eq!(outbox.len(), 1);
        assert_eq!(Outbox::new(0).capacity(), 1);
    }

    #[test]
    fn a_push_wakes_a_waiting_publisher() {
        let outbox = std::sync::Arc::new(Outbox::new(4));
        let waiter = {
            let outbox = outbox.clone();
            std::thread::spawn(move || {
                let start = std::time::Instant::now();
                (outbox.wait(Duration::from_secs(120)), start.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(20)); // let it start waiting (either way works)
        outbox.push(removal());
        let (ready, waited) = waiter.join().unwrap();
        assert!(ready);
        assert!(
            waited < Duration::from_secs(60),
            "woken by the timeout: {waited:?}"
        );
    }
}
