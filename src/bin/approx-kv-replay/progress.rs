//! A one-line progress bar on stderr, redrawn with `\r`.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::args;

/// Progress of the runs: which run, and requests done in it.
#[derive(Debug)]
pub struct Bar {
    enabled: bool,
    runs: usize,
    total: usize,
    /// Requests routed in the current run; bumped by the routing threads.
    pub done: AtomicUsize,
}

/// How often the bar is redrawn.
pub const REDRAW: Duration = Duration::from_millis(100);

impl Bar {
    /// A bar for `runs` runs of `total` requests each.
    pub fn new(mode: args::Progress, runs: usize, total: usize) -> Self {
        let enabled = match mode {
            args::Progress::On => true,
            args::Progress::Off => false,
            args::Progress::Auto => std::io::stderr().is_terminal(),
        };
        Self {
            enabled,
            runs,
            total,
            done: AtomicUsize::new(0),
        }
    }

    /// Whether anything is drawn.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Draws the line for run `run` (0-based) named `name`, started at `start`.
    pub fn draw(&self, run: usize, name: &str, start: Instant) {
        if !self.enabled {
            return;
        }
        let done = self.done.load(Ordering::Relaxed).min(self.total);
        let frac = done as f64 / self.total.max(1) as f64;
        const WIDTH: usize = 30;
        let filled = (frac * WIDTH as f64) as usize;
        let bar: String = (0..WIDTH)
            .map(|i| if i < filled { '#' } else { '.' })
            .collect();
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r[{}/{}] {name:<18} [{bar}] {done}/{} {:5.1}% {:6.1}s ",
            run + 1,
            self.runs,
            self.total,
            frac * 100.0,
            start.elapsed().as_secs_f64(),
        );
        let _ = err.flush();
    }

    /// Clears the line at the end.
    pub fn finish(&self) {
        if self.enabled {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r{:100}\r", "");
            let _ = err.flush();
        }
    }
}
