//! A find's answer as Python dicts: keyed by worker id (the best rank) or by
//! `(worker, dp_rank)`.

use std::collections::HashMap;
use std::hash::BuildHasher;

use approx_kv_index::WorkerWithDpRank;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// `{worker_id: value}`: the best of each worker's ranks (for scores, the longest cached
/// prefix on any one of its caches).
pub(crate) fn by_worker<V, S>(
    py: Python<'_>,
    map: &HashMap<WorkerWithDpRank, V, S>,
) -> PyResult<Py<PyDict>>
where
    V: Copy,
    u64: TryFrom<V>,
    S: BuildHasher,
{
    let mut merged: HashMap<u64, u64> = HashMap::with_capacity(map.len());
    for (key, &value) in map {
        let value = wide(value);
        merged
            .entry(key.worker_id)
            .and_modify(|v| *v = (*v).max(value))
            .or_insert(value);
    }
    let dict = PyDict::new(py);
    for (worker, value) in merged {
        dict.set_item(worker, value)?;
    }
    Ok(dict.unbind())
}

/// `{(worker_id, dp_rank): value}`.
pub(crate) fn by_rank<V, S>(
    py: Python<'_>,
    map: &HashMap<WorkerWithDpRank, V, S>,
) -> PyResult<Py<PyDict>>
where
    V: Copy,
    u64: TryFrom<V>,
    S: BuildHasher,
{
    let dict = PyDict::new(py);
    for (key, &value) in map {
        dict.set_item((key.worker_id, key.dp_rank), wide(value))?;
    }
    Ok(dict.unbind())
}

/// A score (`u32`) or a tree size (`usize`) as a `u64`.
fn wide<V>(value: V) -> u64
where
    u64: TryFrom<V>,
{
    u64::try_from(value).unwrap_or(u64::MAX)
}
