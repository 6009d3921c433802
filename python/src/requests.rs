//! Request lifecycles from Python: the `RequestHandle` class, and the bodies of the
//! index's `begin_request`, `request_output`, `observe_cached`, `finish_request` and
//! `cache_reports` (declared with the other methods in `indexer.rs`).

use approx_kv_index::{HashSalt, RequestHandle, WorkerWithDpRank};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::indexer::PyIndexer;
use crate::prompt::Prompt;

/// A request running on a worker, from `ApproxKvIndexer.begin_request`: its blocks stay
/// pinned there (never expired, never evicted) until `finish_request(handle)` or until
/// the handle is garbage-collected. `predicted_blocks`: the worker's found depth for the
/// prompt just before the request.
#[pyclass(frozen, name = "RequestHandle", module = "approx_kv_index")]
pub(crate) struct PyRequestHandle {
    /// `None` once finished.
    handle: std::sync::Mutex<Option<RequestHandle<WorkerWithDpRank>>>,
    predicted: usize,
    key: WorkerWithDpRank,
    salt: HashSalt,
}

impl PyRequestHandle {
    /// The handle, `None` once finished (a poisoned lock still holds it).
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<RequestHandle<WorkerWithDpRank>>> {
        self.handle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[pymethods]
impl PyRequestHandle {
    /// How many leading blocks of the prompt the index believed the worker held just
    /// before the request.
    #[getter]
    fn predicted_blocks(&self) -> usize {
        self.predicted
    }

    /// The request's pinned blocks (prompt and output); 0 once finished.
    #[getter]
    fn blocks(&self) -> usize {
        self.lock().as_ref().map_or(0, RequestHandle::blocks)
    }

    /// The worker id.
    #[getter]
    fn worker(&self) -> u64 {
        self.key.worker_id
    }

    /// The data-parallel rank.
    #[getter]
    fn dp_rank(&self) -> u32 {
        self.key.dp_rank
    }

    /// Whether the request was finished.
    #[getter]
    fn finished(&self) -> bool {
        self.lock().is_none()
    }

    fn __repr__(&self) -> String {
        format!(
            "RequestHandle(worker={}, dp_rank={}, predicted_blocks={}, blocks={})",
            self.key.worker_id,
            self.key.dp_rank,
            self.predicted,
            self.blocks()
        )
    }
}

/// Whether `arg` reads as a worker id rather than tokens: a Python `int`, or an integer
/// scalar such as NumPy's (it has `__index__` and no length, unlike a token array).
fn is_an_id(arg: &Bound<'_, PyAny>) -> bool {
    arg.is_instance_of::<pyo3::types::PyInt>()
        || (arg.hasattr("__index__").unwrap_or(false) && !arg.hasattr("__len__").unwrap_or(true))
}

impl PyIndexer {
    /// The body of `ApproxKvIndexer.begin_request` (`indexer.rs`).
    pub(crate) fn begin_request_impl(
        &self,
        py: Python<'_>,
        tokens: &Bound<'_, PyAny>,
        worker: &Bound<'_, PyAny>,
        dp_rank: Option<&Bound<'_, PyAny>>,
        lora: Option<&str>,
    ) -> PyResult<PyRequestHandle> {
        // `begin_request(worker, tokens)`, the Rust order, reads the same.
        let (tokens, worker) = if is_an_id(tokens) && !is_an_id(worker) {
            (worker, tokens)
        } else {
            (tokens, worker)
        };
        let key = crate::indexer::key(worker, dp_rank)?;
        let prompt = self.prompt(tokens, lora)?;
        let handle = py.detach(|| self.index().begin_request(key, prompt.query()));
        Ok(PyRequestHandle {
            predicted: handle.predicted_blocks(),
            handle: std::sync::Mutex::new(Some(handle)),
            key,
            salt: prompt.salt(),
        })
    }

    /// The body of `ApproxKvIndexer.request_output` (`indexer.rs`).
    pub(crate) fn request_output_impl(
        &self,
        py: Python<'_>,
        handle: &PyRequestHandle,
        tokens: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        // Tokens are hashed under the salt of the request's prompt; `PromptHashes` carry
        // theirs (of another salt, they do not continue the request: nothing joins).
        let prompt = match self.prompt(tokens, None)? {
            Prompt::Tokens(tokens, _) => Prompt::Tokens(tokens, handle.salt),
            hashes => hashes,
        };
        // The handle's lock is taken and dropped with the GIL released: held across
        // `detach`, it would deadlock with a thread that holds the GIL and waits for it
        // (`blocks`, `finished`, another call on the same handle).
        Ok(py.detach(|| {
            let guard = handle.lock();
            guard.as_ref().map_or(0, |request| {
                self.index().request_output(request, prompt.query())
            })
        }))
    }

    /// The body of `ApproxKvIndexer.observe_cached` (`indexer.rs`).
    pub(crate) fn observe_cached_impl(
        &self,
        py: Python<'_>,
        handle: &PyRequestHandle,
        cached_tokens: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let cached =
            crate::args::uint(cached_tokens, usize::MAX as u64, || "cached_tokens".into())?;
        // Locked with the GIL released, as in `request_output_impl`.
        Ok(py.detach(|| {
            let guard = handle.lock();
            guard
                .as_ref()
                .is_some_and(|request| self.index().observe_cached(request, cached as usize))
        }))
    }

    /// The body of `ApproxKvIndexer.finish_request` (`indexer.rs`).
    pub(crate) fn finish_request_impl(&self, py: Python<'_>, handle: &PyRequestHandle) {
        let request = handle.lock().take();
        if let Some(request) = request {
            py.detach(|| self.index().finish_request(request));
        }
    }

    /// The body of `ApproxKvIndexer.cache_reports` (`indexer.rs`).
    pub(crate) fn cache_reports_impl(&self, py: Python<'_>) -> PyResult<Py<PyDict>> {
        let reports = py.detach(|| self.index().cache_reports());
        let dict = PyDict::new(py);
        for (key, report) in reports {
            let row = PyDict::new(py);
            row.set_item("reports", report.reports)?;
            row.set_item("predicted_blocks", report.predicted_blocks)?;
            row.set_item("delivered_blocks", report.delivered_blocks)?;
            dict.set_item((key.worker_id, key.dp_rank), row)?;
        }
        Ok(dict.unbind())
    }
}
