//! The `ApproxKvIndexer` Python class: the Rust index keyed by (worker, data-parallel rank).
//! Every method converts its arguments first, then releases the GIL while the index runs.

use std::collections::HashMap;

use approx_kv_index::{ApproxKvIndexer, OverlapScores, Snapshot, WorkerWithDpRank};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::args::{capacity, positive_seconds, u32_arg, u64_arg};
use crate::hashing::block_size_arg;
use crate::prompt::Prompt;
use crate::requests::PyRequestHandle;
use crate::scores::{by_rank, by_worker};

type Index = ApproxKvIndexer<WorkerWithDpRank>;

/// The block size when none is given: 64 tokens (the Rust builder's default is 16).
const DEFAULT_BLOCK_SIZE: u32 = 64;

/// An approximate index of which worker probably caches which prompt prefix, learned from
/// the router's own decisions (see the module docs). Thread-safe: share one index between
/// threads; every call releases the GIL while it runs.
#[pyclass(frozen, name = "ApproxKvIndexer", module = "approx_kv_index")]
pub(crate) struct PyIndexer {
    index: Index,
    ttl: Option<f64>,
}

#[pymethods]
impl PyIndexer {
    #[new]
    // The defaults as Python shows them (`inspect.signature`, `help`): the block size's
    // `None` and the TTL's `Some` are how Rust spells them.
    #[pyo3(
        signature = (block_size=None, ttl=Some(120.0), tick=0.1, max_blocks_per_worker=None, max_entries=None),
        text_signature = "(block_size=64, ttl=120.0, tick=0.1, max_blocks_per_worker=None, max_entries=None)"
    )]
    fn new(
        block_size: Option<&Bound<'_, PyAny>>,
        ttl: Option<f64>,
        tick: f64,
        max_blocks_per_worker: Option<&Bound<'_, PyAny>>,
        max_entries: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut builder = ApproxKvIndexer::builder()
            .block_size(block_size.map_or(Ok(DEFAULT_BLOCK_SIZE), block_size_arg)?)
            .ttl(crate::args::ttl(ttl)?)
            .tick(positive_seconds(tick, "tick")?);
        if let Some(n) = capacity(max_blocks_per_worker, "max_blocks_per_worker")? {
            builder = builder.max_blocks_per_worker(n);
        }
        if let Some(n) = capacity(max_entries, "max_entries")? {
            builder = builder.max_entries(n);
        }
        let index = builder
            .build_for::<WorkerWithDpRank>()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        // A TTL the index takes as never (2^62 ns or more) reads as None.
        let ttl = ttl.filter(|s| s.is_finite() && index.ttl().is_some());
        Ok(Self { index, ttl })
    }

    /// Tokens per block.
    #[getter]
    fn block_size(&self) -> u32 {
        self.index.block_size()
    }

    /// The TTL in seconds, or None for never.
    #[getter]
    fn ttl(&self) -> Option<f64> {
        self.ttl
    }

    /// Records that `worker` (rank `dp_rank`) was chosen for a prompt of `tokens`: its full
    /// blocks become "probably cached" there for one TTL. `lora` salts the hashes, so the
    /// blocks only match finds with the same `lora`.
    #[pyo3(
        signature = (tokens, worker, dp_rank=None, lora=None),
        text_signature = "($self, tokens, worker, dp_rank=0, lora=None)"
    )]
    fn record(
        &self,
        py: Python<'_>,
        tokens: &Bound<'_, PyAny>,
        worker: &Bound<'_, PyAny>,
        dp_rank: Option<&Bound<'_, PyAny>>,
        lora: Option<&str>,
    ) -> PyResult<()> {
        let rank = dp_rank.map_or(Ok(0), |r| u32_arg(r, || "dp_rank".to_owned()))?;
        let key = WorkerWithDpRank::new(u64_arg(worker, || "worker".to_owned())?, rank);
        let prompt = self.prompt(tokens, lora)?;
        // Tokens, and PromptHashes, carry their local hashes: a record of them cannot be
        // refused.
        let recorded = py.detach(|| self.index.record(key, prompt.query()));
        recorded.map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
    }

    /// For each worker that probably holds a prefix of `tokens`, how many leading blocks
    /// (the best of its ranks). Workers with none are absent.
    #[pyo3(signature = (tokens, lora=None))]
    fn find(
        &self,
        py: Python<'_>,
        tokens: &Bound<'_, PyAny>,
        lora: Option<&str>,
    ) -> PyResult<Py<PyDict>> {
        let found = self.scores(py, tokens, lora)?;
        by_worker(py, &found.scores)
    }

    /// As `find`, with the tree sizes: `(scores, tree_sizes)`, where `tree_sizes[w]` is the
    /// blocks worker `w` holds in the whole index (summed over all its ranks, those that
    /// hold none of the prompt included).
    #[pyo3(signature = (tokens, lora=None))]
    fn find_with_sizes(
        &self,
        py: Python<'_>,
        tokens: &Bound<'_, PyAny>,
        lora: Option<&str>,
    ) -> PyResult<(Py<PyDict>, Py<PyDict>)> {
        let prompt = self.prompt(tokens, lora)?;
        let (found, sizes) = py.detach(|| {
            let found = self.index.find(prompt.query());
            let mut workers: Vec<u64> = found.scores.keys().map(|k| k.worker_id).collect();
            workers.sort_unstable();
            workers.dedup();
            let sizes: HashMap<u64, usize> = workers
                .into_iter()
                .map(|w| (w, self.index.worker_entries(w)))
                .collect();
            (found, sizes)
        });
        let size_dict = PyDict::new(py);
        for (worker, size) in sizes {
            size_dict.set_item(worker, size)?;
        }
        Ok((by_worker(py, &found.scores)?, size_dict.unbind()))
    }

    /// As `find_with_sizes`, keyed by `(worker, dp_rank)`: each rank is a cache of its own.
    #[pyo3(signature = (tokens, lora=None))]
    fn find_ranks(
        &self,
        py: Python<'_>,
        tokens: &Bound<'_, PyAny>,
        lora: Option<&str>,
    ) -> PyResult<(Py<PyDict>, Py<PyDict>)> {
        let found = self.scores(py, tokens, lora)?;
        Ok((by_rank(py, &found.scores)?, by_rank(py, &found.tree_sizes)?))
    }

    /// Forgets `worker`: every rank of it, or only `dp_rank` when given. No find reports it
    /// until it is recorded again. Unknown workers are ignored.
    #[pyo3(signature = (worker, dp_rank=None))]
    fn remove_worker(
        &self,
        py: Python<'_>,
        worker: &Bound<'_, PyAny>,
        dp_rank: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let worker = u64_arg(worker, || "worker".to_owned())?;
        match dp_rank.filter(|r| !r.is_none()) {
            None => py.detach(|| self.index.remove_worker(worker)),
            Some(rank) => {
                let key = WorkerWithDpRank::new(worker, u32_arg(rank, || "dp_rank".to_owned())?);
                py.detach(|| self.index.remove_worker_key(key));
            }
        }
        Ok(())
    }

    /// Sets the KV capacity in blocks of `worker` (rank `dp_rank`, default 0), as its
    /// engine reports it: an int from 0 up, or None for unknown. Beyond it, the worker's
    /// least recently recorded decisions are evicted, deepest blocks first; a lower
    /// capacity evicts at once.
    #[pyo3(signature = (worker, capacity, dp_rank=None))]
    fn set_worker_capacity(
        &self,
        py: Python<'_>,
        worker: &Bound<'_, PyAny>,
        capacity: Option<&Bound<'_, PyAny>>,
        dp_rank: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let key = key(worker, dp_rank)?;
        let capacity = match capacity.filter(|c| !c.is_none()) {
            None => None,
            Some(c) => {
                Some(crate::args::uint(c, usize::MAX as u64, || "capacity".into())? as usize)
            }
        };
        py.detach(|| self.index.set_worker_capacity(key, capacity));
        Ok(())
    }

    /// The capacity set for `worker` (rank `dp_rank`, default 0), or None.
    #[pyo3(signature = (worker, dp_rank=None))]
    fn worker_capacity(
        &self,
        py: Python<'_>,
        worker: &Bound<'_, PyAny>,
        dp_rank: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<usize>> {
        let key = key(worker, dp_rank)?;
        Ok(py.detach(|| self.index.worker_capacity(key)))
    }

    /// Applies one KV event from an engine, in Dynamo's `RouterEvent` JSON shape, as a
    /// dict or JSON text (`str` or `bytes`): `{"worker_id", "event": {"event_id", "data":
    /// {"stored": ..} | {"removed": ..} | "cleared", "dp_rank"}}`. `Stored` blocks are held
    /// exactly (no TTL) until removed; `Removed` ends the worker's claims on those blocks,
    /// exact and approximate; `Cleared` forgets that rank. A malformed event raises
    /// ValueError or TypeError and changes nothing.
    fn apply_event(&self, py: Python<'_>, event: &Bound<'_, PyAny>) -> PyResult<()> {
        let event = crate::events::event(event)?;
        py.detach(|| self.index.apply_event(&event));
        Ok(())
    }

    /// Applies events in their order: JSON text of a list, or any iterable of events
    /// (dicts or JSON texts), each as `apply_event` takes it. All are read first: if one
    /// is malformed, the call raises (naming it) and applies none.
    fn apply_events(&self, py: Python<'_>, events: &Bound<'_, PyAny>) -> PyResult<()> {
        let events = crate::events::events(events)?;
        py.detach(|| {
            for event in &events {
                self.index.apply_event(event);
            }
        });
        Ok(())
    }

    /// Begins a request: records that `worker` (rank `dp_rank`) was chosen for `tokens`, as
    /// `record` does, and pins the prompt's full blocks there until the returned handle is
    /// finished (or garbage-collected). `handle.predicted_blocks`: the worker's found depth
    /// for the prompt just before. Arguments as `record` takes them; `(worker, tokens)`
    /// reads the same.
    #[pyo3(
        signature = (tokens, worker, dp_rank=None, lora=None),
        text_signature = "($self, tokens, worker, dp_rank=0, lora=None)"
    )]
    fn begin_request(
        &self,
        py: Python<'_>,
        tokens: &Bound<'_, PyAny>,
        worker: &Bound<'_, PyAny>,
        dp_rank: Option<&Bound<'_, PyAny>>,
        lora: Option<&str>,
    ) -> PyResult<PyRequestHandle> {
        self.begin_request_impl(py, tokens, worker, dp_rank, lora)
    }

    /// Adds a running request's output: `tokens` is its prompt and the output so far (or
    /// their `PromptHashes`); its new full blocks join it, pinned. Returns how many joined.
    fn request_output(
        &self,
        py: Python<'_>,
        handle: &PyRequestHandle,
        tokens: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        self.request_output_impl(py, handle, tokens)
    }

    /// Takes the engine's count of the request's leading prompt tokens found cached, once
    /// per request; returns whether it was taken.
    fn observe_cached(
        &self,
        py: Python<'_>,
        handle: &PyRequestHandle,
        cached_tokens: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.observe_cached_impl(py, handle, cached_tokens)
    }

    /// Finishes a request: its blocks are released and stay cached one TTL from now.
    fn finish_request(&self, py: Python<'_>, handle: &PyRequestHandle) {
        self.finish_request_impl(py, handle);
    }

    /// Each registered (worker, dp_rank)'s reports of cached tokens: a dict from the pair
    /// to a dict of ints `reports`, `predicted_blocks`, `delivered_blocks`.
    fn cache_reports(&self, py: Python<'_>) -> PyResult<Py<PyDict>> {
        self.cache_reports_impl(py)
    }

    /// Sizes and counters, as a dict of ints: entries, nodes, workers, records, finds,
    /// expirations, caller_expirations, evictions, rejected_events, pending_timers,
    /// estimated_bytes, cache_reports, predicted_blocks, delivered_blocks,
    /// dropped_by_reports, capacities_learned. Approximate while other threads call the
    /// index.
    fn stats(&self, py: Python<'_>) -> PyResult<Py<PyDict>> {
        let s = py.detach(|| self.index.stats());
        let dict = PyDict::new(py);
        let counts: [(&str, u64); 16] = [
            ("entries", s.entries as u64),
            ("nodes", s.nodes as u64),
            ("workers", s.workers as u64),
            ("records", s.records),
            ("finds", s.finds),
            ("expirations", s.expirations),
            ("caller_expirations", s.caller_expirations),
            ("evictions", s.evictions),
            ("rejected_events", s.rejected_events),
            ("pending_timers", s.pending_timers as u64),
            ("estimated_bytes", s.estimated_bytes as u64),
            ("cache_reports", s.cache.reports),
            ("predicted_blocks", s.cache.predicted_blocks),
            ("delivered_blocks", s.cache.delivered_blocks),
            ("dropped_by_reports", s.dropped_by_reports),
            ("capacities_learned", s.capacities_learned),
        ];
        for (name, value) in counts {
            dict.set_item(name, value)?;
        }
        Ok(dict.unbind())
    }

    /// The live state with each entry's remaining TTL, in the crate's versioned,
    /// checksummed binary format: `restore` it into a fresh index after a restart.
    fn snapshot<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let bytes = py.detach(|| self.index.snapshot().to_bytes());
        PyBytes::new(py, &bytes)
    }

    /// Loads a `snapshot()` (bytes-like): each entry comes back with the TTL it had left,
    /// merged with what the index holds. Raises ValueError for bytes that are not a
    /// snapshot, are corrupt, or come from an index of another block size.
    fn restore(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let bytes = pyo3::buffer::PyBuffer::<u8>::get(data)
            .map_err(|_| {
                pyo3::exceptions::PyTypeError::new_err(format!(
                    "restore takes bytes from snapshot(), not {}",
                    crate::args::type_name(data)
                ))
            })?
            .to_vec(py)?;
        py.detach(|| {
            let snapshot = Snapshot::from_bytes(&bytes)?;
            self.index.restore(&snapshot)
        })
        .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    fn __repr__(&self) -> String {
        format!(
            "ApproxKvIndexer(block_size={}, ttl={})",
            self.index.block_size(),
            self.ttl
                .map_or_else(|| "None".to_owned(), |s| s.to_string())
        )
    }
}

/// The key of `worker`, rank `dp_rank` (default 0).
pub(crate) fn key(
    worker: &Bound<'_, PyAny>,
    dp_rank: Option<&Bound<'_, PyAny>>,
) -> PyResult<WorkerWithDpRank> {
    let rank = match dp_rank.filter(|r| !r.is_none()) {
        None => 0,
        Some(r) => u32_arg(r, || "dp_rank".to_owned())?,
    };
    Ok(WorkerWithDpRank::new(
        u64_arg(worker, || "worker".to_owned())?,
        rank,
    ))
}

impl PyIndexer {
    /// The Rust index.
    pub(crate) fn index(&self) -> &Index {
        &self.index
    }

    /// Reads `tokens`, then finds without the GIL.
    fn scores(
        &self,
        py: Python<'_>,
        tokens: &Bound<'_, PyAny>,
        lora: Option<&str>,
    ) -> PyResult<OverlapScores<WorkerWithDpRank>> {
        let prompt = self.prompt(tokens, lora)?;
        Ok(py.detach(|| self.index.find(prompt.query())))
    }

    /// A method's `tokens` and `lora` arguments as its prompt (`prompt.rs`).
    pub(crate) fn prompt(&self, tokens: &Bound<'_, PyAny>, lora: Option<&str>) -> PyResult<Prompt> {
        Prompt::from_arg(tokens, lora, self.index.block_size())
    }
}
