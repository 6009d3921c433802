//! The subscriber thread: replays the stream's retained window, then tails it with
//! blocking `XREAD`s, applying the decisions of each read to the index as one batch (or,
//! with several apply threads, one batch per thread: `appliers.rs`). After a lost
//! connection it resumes from the last entry it read.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use redis::Value;

use super::appliers::Appliers;
use super::link::{Link, Stop};
use super::{RedisConfig, FIELD};
use crate::replication::Decision;
use crate::{ApproxKvIndexer, WorkerKey};

pub(super) struct Counters {
    /// Entries that are not decisions this build reads (skipped).
    pub(super) rejected: Arc<AtomicU64>,
}

pub(super) fn run<W: WorkerKey>(
    index: Arc<ApproxKvIndexer<W>>,
    config: RedisConfig,
    mut link: Link,
    stop: Arc<Stop>,
    counters: Counters,
    appliers: Appliers,
) {
    // "0-0": everything the stream retains, so a replica that joins late starts warm.
    let mut last_id = String::from("0-0");
    // Redis refuses a BLOCK past its clock's range (2^63 - 1 ms in all).
    let block_ms = config.read_block.as_millis().clamp(1, 1 << 62).to_string();
    // Redis takes a COUNT up to 2^63 - 1 (and refuses the command above).
    let count = config.batch.min(i64::MAX as usize).to_string();
    while !stop.is_stopped() {
        let Some(conn) = link.get(&stop) else {
            continue;
        };
        let reply = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(&count)
            .arg("BLOCK")
            .arg(&block_ms)
            .arg("STREAMS")
            .arg(&config.stream)
            .arg(&last_id)
            .query::<Value>(conn);
        let Ok(reply) = reply else {
            link.failed(&stop);
            continue;
        };
        link.worked();
        let Some(entries) = stream_entries(reply) else {
            continue; // timed out with nothing new (or a reply of no known shape)
        };
        let mut decisions = Vec::with_capacity(entries.len());
        for entry in entries {
            let Some((id, payload)) = entry_parts(entry) else {
                counters.rejected.fetch_add(1, Relaxed);
                continue;
            };
            if let Some(id) = id {
                last_id = id;
            }
            match payload.map(|p| Decision::decode(&p)) {
                Some(Ok(decision)) => decisions.push(decision),
                _ => {
                    counters.rejected.fetch_add(1, Relaxed);
                }
            }
        }
        // One batch (per apply thread): their chains are hashed together.
        appliers.apply(&index, decisions);
    }
}

/// The entries of an `XREAD` reply for one stream: `[[name, [entry, ...]]]`, or nil.
fn stream_entries(reply: Value) -> Option<Vec<Value>> {
    let Value::Array(mut streams) = reply else {
        return None;
    };
    let Value::Array(mut stream) = streams.pop()? else {
        return None;
    };
    match stream.pop()? {
        Value::Array(entries) => Some(entries),
        _ => None,
    }
}

/// An entry `[id, [field, value, ...]]`: its id, and the value of [`FIELD`] if present.
/// `None` for an entry of no known shape.
fn entry_parts(entry: Value) -> Option<(Option<String>, Option<Vec<u8>>)> {
    let Value::Array(parts) = entry else {
        return None;
    };
    let mut parts = parts.into_iter();
    let id = match parts.next()? {
        Value::BulkString(id) => String::from_utf8(id).ok(),
        Value::SimpleString(id) => Some(id),
        _ => None,
    };
    let Some(Value::Array(fields)) = parts.next() else {
        return Some((id, None));
    };
    let mut payload = None;
    let mut fields = fields.into_iter();
    while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
        if let (Value::BulkString(name), Value::BulkString(value)) = (name, value) {
            if name == FIELD.as_bytes() {
                payload = Some(value);
            }
        }
    }
    Some((id, payload))
}
