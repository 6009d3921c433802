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
    /// from any thread except the sweeper itself.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let handle = self.thread.lock().take();
        if let Some(handle) = handle {
            handle.thread().unpark();
            let _ = handle.join();
        }
    }

    /// Whether the thread is running.
    pub(crate) fn is_running(&self) -> bool {
        self.thread.lock().is_some()
    }
}
