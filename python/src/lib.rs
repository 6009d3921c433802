//! Python binding of `approx-kv-index` (PyO3, abi3 wheels for CPython 3.11+).
//!
//! The module `approx_kv_index` holds the class `ApproxKvIndexer` (the index keyed by
//! worker id and data-parallel rank), `RequestHandle`, `PromptHashes` (a prompt hashed
//! once) and the hash functions `compute_block_hashes` and `compute_seq_hashes`. Every
//! call reads its arguments, then releases the GIL while the Rust code runs, so router
//! threads may run the index at the same time. Bad input raises `ValueError` or
//! `TypeError`. Install with `pip install ./python`; see `docs/python.md`.

mod args;
mod events;
mod hashing;
mod indexer;
mod prompt;
mod requests;
mod scores;
mod tokens;

use pyo3::prelude::*;

/// An approximate KV-cache index for LLM routers (Rust, through PyO3): which worker
/// probably caches which prompt prefix, learned from the router's own decisions.
#[pymodule(name = "approx_kv_index")]
fn approx_kv_index_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<indexer::PyIndexer>()?;
    m.add_class::<requests::PyRequestHandle>()?;
    m.add_class::<prompt::PyPromptHashes>()?;
    m.add_function(wrap_pyfunction!(hashing::compute_block_hashes, m)?)?;
    m.add_function(wrap_pyfunction!(hashing::compute_seq_hashes, m)?)?;
    Ok(())
}
