//! The outbox's bound: recording callers push decisions while a publisher pops them.
//!
//! A pusher takes a place (`taken`, an atomic count) before it pushes, and gives it back
//! if there was none; a popper frees a place only after its decision is out of the queue.
//! The queue, a `crossbeam_queue::SegQueue` in the crate, is a loom mutex over a deque
//! here (`crate::sync`).
//!
//! Proves: with capacity 1, one decision queued, two pushers and a popper, the queue never
//! holds two decisions, and every decision is popped, still queued, or dropped and counted.
//!
//! Can fail: with `--cfg loom_break="outbox_free_first"` (the popper frees the place before
//! it pops) loom finds "two decisions queued at capacity 1": a pusher takes the freed place
//! and pushes while the popped decision is still in the queue.

use loom::sync::Arc;
use loom::thread;

use crate::replication::{Action, Decision, Outbox};

fn removal(worker_id: u64) -> Decision {
    Decision {
        origin: 0,
        seq: worker_id,
        decided_at: std::time::Duration::ZERO,
        action: Action::RemoveWorker { worker_id },
    }
}

#[test]
fn pushes_racing_a_pop_never_exceed_the_capacity() {
    loom::model(|| {
        let outbox = Arc::new(Outbox::new(1));
        outbox.push(removal(0)); // full
        let pushers: Vec<_> = (1..=2)
            .map(|worker| {
                let outbox = outbox.clone();
                thread::spawn(move || {
                    outbox.push(removal(worker));
                    assert!(outbox.len() <= 1, "two decisions queued at capacity 1");
                })
            })
            .collect();
        let popped = outbox.pop().is_some();
        for pusher in pushers {
            pusher.join().unwrap();
        }
        let queued = outbox.len();
        assert!(queued <= 1, "two decisions queued at capacity 1");
        assert_eq!(usize::from(popped) + queued + outbox.dropped() as usize, 3);
    });
}
