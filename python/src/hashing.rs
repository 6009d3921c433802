//! The hash functions, equal to the Rust crate's (and so to Dynamo's): module functions
//! `compute_block_hashes` and `compute_seq_hashes`.

use approx_kv_index::{compute_block_hash_for_seq_salted, compute_seq_hashes as chain};
use approx_kv_index::{HashSalt, LocalBlockHash};
use pyo3::prelude::*;

use crate::args::u64_arg;
use crate::tokens::tokens;

/// The local hash (xxh3-64) of each full block of `tokens`, bit for bit Dynamo's
/// `compute_block_hash_for_seq`; a partial trailing block is ignored. `lora` and
/// `cache_namespace` salt the hashes as Dynamo does. Releases the GIL while hashing.
#[pyfunction]
#[pyo3(signature = (tokens, block_size, lora=None, cache_namespace=None))]
pub(crate) fn compute_block_hashes(
    py: Python<'_>,
    tokens: &Bound<'_, PyAny>,
    block_size: &Bound<'_, PyAny>,
    lora: Option<&str>,
    cache_namespace: Option<&str>,
) -> PyResult<Vec<u64>> {
    let block_size = block_size_arg(block_size)?;
    let tokens = self::tokens(tokens)?;
    let salt = HashSalt::new(lora, cache_namespace);
    Ok(py.detach(|| {
        compute_block_hash_for_seq_salted(&tokens, block_size, salt)
            .iter()
            .map(|h| h.0)
            .collect()
    }))
}

/// Chains local block hashes into sequence hashes (each names a block and its whole
/// prefix), as Dynamo's `compute_seq_hashes`. Releases the GIL while hashing.
#[pyfunction]
pub(crate) fn compute_seq_hashes(
    py: Python<'_>,
    block_hashes: &Bound<'_, PyAny>,
) -> PyResult<Vec<u64>> {
    let mut local = Vec::with_capacity(block_hashes.len().unwrap_or(0));
    for (i, h) in block_hashes.try_iter()?.enumerate() {
        local.push(LocalBlockHash(u64_arg(&h?, || {
            format!("block_hashes[{i}]")
        })?));
    }
    Ok(py.detach(|| chain(&local).iter().map(|h| h.0).collect()))
}

/// A block size: an int from 1 to 2^32 - 1.
pub(crate) fn block_size_arg(obj: &Bound<'_, PyAny>) -> PyResult<u32> {
    let block_size = crate::args::uint_in(obj, (1, u64::from(u32::MAX)), || "block_size".into())?;
    Ok(block_size as u32)
}
