//! The one background thread: every tick it runs the sweep it is given, until stopped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;

/// The running sweeper thread, stopped and joined by [`Sweeper::stop`] (idempotent).
#[derive(Debug)]
pub(crate) struct Sweeper {
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Sweeper {
    /// Starts a thread that calls `sweep` every `tick` until stopped. If the operating
    /// system refuses a thread, the sweeper holds none ([`is_running`](Self::is_running)
    /// is false) and the index works without a background thread: recording callers find
    /// the last sweep ever older and reclaim what is due themselves, and `sweep_expired`
    /// reclaims on demand.
    pub(crate) fn spawn(tick: Duration, mut sweep: impl FnMut() + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("approx-kv-sweeper".into())
            .spawn(move || {
                while !flag.load(Ordering::Acquire) {
                    std::thread::park_timeout(tick);
                    if flag.load(Ordering::Acquire) {
                        break;
                    }
                    sweep();
                }
            })
            .ok();
        Self {
            stop,
            thread: Mutex::new(thread),
        }
    }

    /// A sweeper that never runs (for indexes built with the sweeper disabled).
    pub(crate) fn none() -> Self {
        Self {
            stop: Arc::new(AtomicBool::new(true)),
            thread: Mutex::new(None),
        }
    }

    /// Stops the thread and waits for it to finish its current sweep. Idempotent; safe
    /// from any thread except the sweeper itself. Callers at once all return once the
    /// thread has finished: the handle stays locked while the first joins it.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let mut thread = self.thread.lock();
        if let Some(handle) = thread.take() {
            handle.thread().unpark();
            let _ = handle.join();
        }
    }

    /// Whether the thread is running (not while it is being stopped: this never waits
    /// for a stop's join).
    pub(crate) fn is_running(&self) -> bool {
        !self.stop.load(Ordering::Acquire) && self.thread.try_lock().is_some_and(|t| t.is_some())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    #[test]
    fn stops_at_once_all_return_after_the_sweep_in_progress() {
        let (entered, sweeping) = mpsc::channel();
        let gate = Arc::new((Mutex::new(false), parking_lot::Condvar::new()));
        let finished = Arc::new(AtomicBool::new(false));
        let sweeper = {
            let (gate, finished) = (Arc::clone(&gate), Arc::clone(&finished));
            Sweeper::spawn(Duration::from_millis(1), move || {
                let _ = entered.send(());
                let mut open = gate.0.lock();
                while !*open {
                    gate.1.wait(&mut open);
                }
                finished.store(true, Ordering::Release);
            })
        };
        sweeping.recv().unwrap(); // a sweep is in progress, held at the gate
        let (done, returned) = mpsc::channel();
        std::thread::scope(|s| {
            for _ in 0..2 {
                let (done, sweeper, finished) = (done.clone(), &sweeper, &finished);
                s.spawn(move || {
                    sweeper.stop();
                    done.send(finished.load(Ordering::Acquire)).unwrap();
                });
            }
            // Time for a stop that does not wait to return (a wrong pass, never a false
            // failure, if it takes longer).
            let early = returned.recv_timeout(Duration::from_millis(200));
            *gate.0.lock() = true;
            gate.1.notify_all();
            assert!(early.is_err(), "a stop returned during the sweep");
            for _ in 0..2 {
                assert!(
                    returned.recv().unwrap(),
                    "a stop returned before the sweep ended"
                );
            }
        });
        assert!(!sweeper.is_running());
    }
}
