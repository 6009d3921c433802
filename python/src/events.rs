//! KV events in Dynamo's `RouterEvent` JSON shape, as dicts or JSON text:
//!
//! ```text
//! {"worker_id": 3, "event": {"event_id": 7, "dp_rank": 0,
//!   "data": {"stored": {"parent_hash": null, "blocks": [{"block_hash": 11, "tokens_hash": 12}]}}}}
//! {"worker_id": 3, "event": {"event_id": 8, "data": {"removed": {"block_hashes": [11]}}}}
//! {"worker_id": 3, "event": {"event_id": 9, "data": "cleared"}}
//! ```
//!
//! `dp_rank` may be absent (rank 0); other keys (Dynamo's `mm_extra_info`, a `lora_name`)
//! are ignored. A malformed event raises `ValueError` (or `TypeError` for a value of the
//! wrong type) naming what is wrong, and nothing is applied.

use approx_kv_index::{
    KvCacheEventData, KvCacheRemoveData, KvCacheStoreData, KvCacheStoredBlockData, LocalBlockHash,
    RouterEvent, SequenceHash, WorkerWithDpRank,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use crate::args::{type_name, u32_arg, u64_arg};

type Event = RouterEvent<WorkerWithDpRank>;

/// One event: a dict, or JSON text (`str` or `bytes`) of one.
pub(crate) fn event(obj: &Bound<'_, PyAny>) -> PyResult<Event> {
    let obj = parsed(obj)?;
    router_event(&obj)
}

/// Events: JSON text of a list, or any iterable of events (dicts or JSON texts).
pub(crate) fn events(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Event>> {
    let obj = parsed(obj)?;
    if obj.is_instance_of::<PyDict>() {
        return Err(PyTypeError::new_err(
            "apply_events takes a list of events; use apply_event for one",
        ));
    }
    let mut out = Vec::new();
    for (k, item) in obj.try_iter()?.enumerate() {
        let item = item?;
        out.push(event(&item).map_err(|e| at(e, &format!("event {k}"), obj.py()))?);
    }
    Ok(out)
}

/// `obj`, or what JSON text in it (`str`, `bytes`) decodes to.
fn parsed<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<pyo3::types::PyBytes>() {
        let json = obj.py().import("json")?;
        return json
            .call_method1("loads", (obj,))
            .map_err(|e| PyValueError::new_err(format!("not JSON: {e}")));
    }
    Ok(obj.clone())
}

fn router_event(obj: &Bound<'_, PyAny>) -> PyResult<Event> {
    let dict = as_dict(obj, "an event")?;
    let worker = u64_arg(&required(dict, "worker_id", "an event")?, || {
        "worker_id".into()
    })?;
    let inner = required(dict, "event", "an event")?;
    let inner = as_dict(&inner, "\"event\"")?;
    let event_id = match inner.get_item("event_id")? {
        Some(id) if !id.is_none() => u64_arg(&id, || "event_id".into())?,
        _ => 0,
    };
    let rank = match inner.get_item("dp_rank")? {
        Some(r) if !r.is_none() => u32_arg(&r, || "dp_rank".into())?,
        _ => 0,
    };
    let data = data(&required(inner, "data", "\"event\"")?)?;
    Ok(RouterEvent {
        worker_id: WorkerWithDpRank::new(worker, rank),
        event_id,
        data,
    })
}

/// `"cleared"`, `{"stored": {...}}` or `{"removed": {...}}`.
fn data(obj: &Bound<'_, PyAny>) -> PyResult<KvCacheEventData> {
    if let Ok(word) = obj.extract::<String>() {
        return match word.as_str() {
            "cleared" => Ok(KvCacheEventData::Cleared),
            other => Err(PyValueError::new_err(format!(
                "\"data\" must be \"cleared\", {{\"stored\": ..}} or {{\"removed\": ..}}, not {other:?}"
            ))),
        };
    }
    let dict = as_dict(obj, "\"data\"")?;
    if let Some(stored) = dict.get_item("stored")? {
        let stored = as_dict(&stored, "\"stored\"")?;
        let parent_hash = match stored.get_item("parent_hash")? {
            Some(p) if !p.is_none() => Some(SequenceHash(u64_arg(&p, || "parent_hash".into())?)),
            _ => None,
        };
        let blocks = required(stored, "blocks", "\"stored\"")?;
        let blocks = list(&blocks, "\"blocks\"")?
            .iter()
            .enumerate()
            .map(|(k, b)| {
                let block = as_dict(&b, "a stored block")?;
                let hash = |key: &str| -> PyResult<u64> {
                    let v = required(block, key, "a stored block")?;
                    u64_arg(&v, || format!("blocks[{k}].{key}"))
                };
                Ok(KvCacheStoredBlockData {
                    block_hash: SequenceHash(hash("block_hash")?),
                    tokens_hash: LocalBlockHash(hash("tokens_hash")?),
                    expires_in: None,
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(KvCacheEventData::Stored(KvCacheStoreData {
            parent_hash,
            blocks,
        }));
    }
    if let Some(removed) = dict.get_item("removed")? {
        let removed = as_dict(&removed, "\"removed\"")?;
        let hashes = required(removed, "block_hashes", "\"removed\"")?;
        let block_hashes = list(&hashes, "\"block_hashes\"")?
            .iter()
            .enumerate()
            .map(|(k, h)| Ok(SequenceHash(u64_arg(&h, || format!("block_hashes[{k}]"))?)))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(KvCacheEventData::Removed(KvCacheRemoveData {
            block_hashes,
        }));
    }
    Err(PyValueError::new_err(
        "\"data\" must be \"cleared\", {\"stored\": ..} or {\"removed\": ..}",
    ))
}

fn as_dict<'a, 'py>(obj: &'a Bound<'py, PyAny>, what: &str) -> PyResult<&'a Bound<'py, PyDict>> {
    obj.cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err(format!("{what} must be a dict, not {}", type_name(obj))))
}

fn list<'a, 'py>(obj: &'a Bound<'py, PyAny>, what: &str) -> PyResult<&'a Bound<'py, PyList>> {
    obj.cast::<PyList>()
        .map_err(|_| PyTypeError::new_err(format!("{what} must be a list, not {}", type_name(obj))))
}

fn required<'py>(dict: &Bound<'py, PyDict>, key: &str, what: &str) -> PyResult<Bound<'py, PyAny>> {
    dict.get_item(key)?
        .ok_or_else(|| PyValueError::new_err(format!("{what} has no {key:?}")))
}

/// `e` with `place` in front of its message, of the same type.
fn at(e: PyErr, place: &str, py: Python<'_>) -> PyErr {
    let message = format!("{place}: {}", e.value(py));
    if e.is_instance_of::<PyTypeError>(py) {
        PyTypeError::new_err(message)
    } else {
        PyValueError::new_err(message)
    }
}
