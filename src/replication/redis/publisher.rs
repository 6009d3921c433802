//! The publisher thread: drains the index's outbox into the stream with `XADD`, trimming
//! it as it goes.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

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
    while !stop.is_stopped() {
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
