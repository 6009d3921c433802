//! The publisher thread: drains the index's outbox into the stream with `XADD`, trimming
//! it as it goes, and shares the index's capacities again each half retention
//! ([`ApproxKvIndexer::reshare_capacities`]), so that they stay in the stream's window.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::link::{Link, Stop};
use super::{RedisConfig, Retention};
use crate::{ApproxKvIndexer, Clock, UnixClock, WorkerKey};

/// How long the publisher waits for a decision before checking for a stop.
const IDLE: Duration = Duration::from_millis(50);

pub(super) fn run<W: WorkerKey>(
    index: Arc<ApproxKvIndexer<W>>,
    config: RedisConfig,
    mut link: Link,
    stop: Arc<Stop>,
    published: Arc<AtomicU64>,
) {
    let Some(outbox) = index.outbox() else {
        return; // nothing to publish: the index does not share decisions
    };
    // Encoded decisions taken from the outbox and not yet on the stream: kept across a
    // failure (at most one batch), so a reconnect publishes them.
    // (Room for a default batch up front: `config.batch` may be any size.)
    let mut batch: Vec<Vec<u8>> = Vec::with_capacity(config.batch.min(512));
    let mut reshare = Reshare::new(&config);
    while !stop.is_stopped() {
        if reshare.is_due(published.load(Relaxed)) {
            index.reshare_capacities();
        }
        while batch.len() < config.batch {
            match outbox.pop() {
                Some(decision) => batch.push(decision.encode()),
                None => break,
            }
        }
        if batch.is_empty() {
            outbox.wait(IDLE);
            continue;
        }
        let Some(conn) = link.get(&stop) else {
            continue;
        };
        match xadd(&config, &batch).query::<()>(conn) {
            Ok(()) => {
                published.fetch_add(batch.len() as u64, Relaxed);
                batch.clear();
                link.worked();
            }
            Err(_) => link.failed(&stop),
        }
    }
}

/// When to share the capacities again: each half of the retention, by time (a window) or
/// by entries published (a length; at least once every `MAX_LEN_PERIOD` too), and never
/// twice within `MIN_PERIOD` (a stream too short for the capacities would otherwise be
/// flooded with them).
struct Reshare {
    period: Duration,
    entries: u64,
    last: Instant,
    published: u64,
}

/// The period of a length-bound stream's reshares, whatever it publishes.
const MAX_LEN_PERIOD: Duration = Duration::from_secs(60);
/// The shortest time between two reshares.
const MIN_PERIOD: Duration = Duration::from_secs(1);

impl Reshare {
    fn new(config: &RedisConfig) -> Self {
        let (period, entries) = match config.retention {
            Some(Retention::Window(window)) => (window / 2, u64::MAX),
            Some(Retention::MaxLen(len)) => (MAX_LEN_PERIOD, (len as u64 / 2).max(1)),
            None => (MAX_LEN_PERIOD, u64::MAX), // `start` resolves it first
        };
        Self {
            period,
            entries,
            last: Instant::now(),
            published: 0,
        }
    }

    /// Whether a reshare is due, `published` entries having been published in all; if
    /// so, it counts from now.
    fn is_due(&mut self, published: u64) -> bool {
        let elapsed = self.last.elapsed();
        let due = elapsed >= MIN_PERIOD
            && (elapsed >= self.period || published.saturating_sub(self.published) >= self.entries);
        if due {
            self.last = Instant::now();
            self.published = published;
        }
        due
    }
}

/// One pipeline of `XADD`s, each trimming the stream to the retention.
fn xadd(config: &RedisConfig, batch: &[Vec<u8>]) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    // `start` resolved the default.
    let trim = match config
        .retention
        .unwrap_or(Retention::MaxLen(super::DEFAULT_MAX_LEN))
    {
        Retention::Window(window) => {
            // Stream ids are the server's milliseconds: keep those younger than the window
            // (by this host's wall clock; "~" lets the server trim whole nodes, cheaply).
            let now = u64::try_from(UnixClock.now().as_millis()).unwrap_or(u64::MAX);
            let cutoff = now.saturating_sub(u64::try_from(window.as_millis()).unwrap_or(u64::MAX));
            ("MINID", cutoff.to_string())
        }
        Retention::MaxLen(len) => ("MAXLEN", len.to_string()),
    };
    for payload in batch {
        pipe.cmd("XADD")
            .arg(&config.stream)
            .arg(trim.0)
            .arg("~")
            .arg(&trim.1)
            .arg("*")
            .arg(super::FIELD)
            .arg(payload.as_slice())
            .ignore();
    }
    pipe
}
