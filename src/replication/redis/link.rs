//! What both threads of the transport share: the stop signal, connecting with a timeout,
//! and backing off after failures.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use super::RedisConfig;

/// Tells the threads to stop; waiting on it is how they pause (backoff), so a stop wakes
/// them at once.
#[derive(Default)]
pub(super) struct Stop {
    stopped: parking_lot::Mutex<bool>,
    wake: parking_lot::Condvar,
}

impl Stop {
    pub(super) fn stop(&self) {
        *self.stopped.lock() = true;
        self.wake.notify_all();
    }

    pub(super) fn is_stopped(&self) -> bool {
        *self.stopped.lock()
    }

    /// Waits `pause` or until stopped; returns whether stopped.
    pub(super) fn pause(&self, pause: Duration) -> bool {
        let mut stopped = self.stopped.lock();
        if !*stopped {
            let _ = self.wake.wait_for(&mut stopped, pause);
        }
        *stopped
    }
}

/// A connection to the server, opened on demand and dropped after an error; failed
/// attempts back off exponentially (from `backoff_min` to `backoff_max`).
pub(super) struct Link {
    client: redis::Client,
    config: RedisConfig,
    /// `read_timeout` of the connection: a blocked read gives up after this.
    read_timeout: Duration,
    conn: Option<redis::Connection>,
    backoff: Duration,
    /// Connections lost or refused, counted in the transport's stats.
    reconnects: std::sync::Arc<AtomicU64>,
}

impl Link {
    pub(super) fn new(
        client: redis::Client,
        config: &RedisConfig,
        read_timeout: Duration,
        reconnects: std::sync::Arc<AtomicU64>,
    ) -> Self {
        Self {
            client,
            config: config.clone(),
            read_timeout,
            conn: None,
            backoff: config.backoff_min,
            reconnects,
        }
    }

    /// The open connection, or a new one; `None` after a failed attempt (and its backoff,
    /// cut short by a stop).
    pub(super) fn get(&mut self, stop: &Stop) -> Option<&mut redis::Connection> {
        if self.conn.is_none() {
            match self.open() {
                Ok(conn) => self.conn = Some(conn),
                Err(_) => {
                    self.failed(stop);
                    return None;
                }
            }
        }
        self.conn.as_mut()
    }

    fn open(&self) -> redis::RedisResult<redis::Connection> {
        let conn = self
            .client
            .get_connection_with_timeout(self.config.connect_timeout)?;
        conn.set_read_timeout(Some(self.read_timeout))?;
        conn.set_write_timeout(Some(self.config.connect_timeout))?;
        Ok(conn)
    }

    /// A command worked: the next failure backs off from the start again.
    pub(super) fn worked(&mut self) {
        self.backoff = self.config.backoff_min;
    }

    /// A command or connection failed: drop the connection, count it, back off.
    pub(super) fn failed(&mut self, stop: &Stop) {
        self.conn = None;
        self.reconnects.fetch_add(1, Relaxed);
        stop.pause(self.backoff);
        // At least 1 ms, so zero settings cannot spin on a dead server.
        let floor = Duration::from_millis(1);
        let doubled = self.backoff.saturating_mul(2);
        self.backoff = doubled.clamp(floor, self.config.backoff_max.max(floor));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_within_its_bounds_and_never_spins() {
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        let mut config = RedisConfig::new("redis://127.0.0.1:1");
        config.backoff_min = Duration::ZERO;
        config.backoff_max = Duration::from_millis(4);
        let reconnects = std::sync::Arc::new(AtomicU64::new(0));
        let mut link = Link::new(client, &config, Duration::from_secs(1), reconnects.clone());
        let stop = Stop::default();
        let mut seen = Vec::new();
        for _ in 0..4 {
            link.failed(&stop);
            seen.push(link.backoff);
        }
        let ms = Duration::from_millis;
        assert_eq!(seen, [ms(1), ms(2), ms(4), ms(4)]);
        assert_eq!(reconnects.load(Relaxed), 4);
        link.worked();
        assert_eq!(link.backoff, Duration::ZERO);
        stop.stop();
        assert!(stop.pause(Duration::from_secs(3600))); // a stop ends any pause at once
    }
}
