//! A prompt hashed once: the `PromptHashes` class, and `Prompt`, what the `tokens`
//! argument of `record`, `find`, `find_with_sizes`, `find_ranks`, `begin_request` and
//! `request_output` becomes: tokens to hash (salted by `lora`), or a `PromptHashes` made beforehand.

use approx_kv_index::{HashSalt, PromptHashes, Query};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::hashing::block_size_arg;
use crate::tokens::tokens;

/// A prompt's block hashes, made once: for a router that finds and then records (or
/// begins a request) with the same prompt, so its tokens are converted and hashed once.
/// `PromptHashes(tokens, block_size, lora=None)`: `tokens` as every method takes them,
/// `block_size` the index's, `lora` salts them as `record(.., lora=..)` does. Pass it as
/// the `tokens` argument (with no `lora`: it carries its salt). Releases the GIL while
/// hashing.
#[pyclass(frozen, name = "PromptHashes", module = "approx_kv_index")]
pub(crate) struct PyPromptHashes {
    hashes: PromptHashes,
    block_size: u32,
    salt: HashSalt,
}

#[pymethods]
impl PyPromptHashes {
    #[new]
    #[pyo3(signature = (tokens, block_size, lora=None))]
    fn new(
        py: Python<'_>,
        tokens: &Bound<'_, PyAny>,
        block_size: &Bound<'_, PyAny>,
        lora: Option<&str>,
    ) -> PyResult<Self> {
        let block_size = block_size_arg(block_size)?;
        let tokens = self::tokens(tokens)?;
        let salt = HashSalt::new(lora, None);
        let hashes = py.detach(|| PromptHashes::salted(&tokens, block_size, salt));
        Ok(Self {
            hashes,
            block_size,
            salt,
        })
    }

    /// Tokens per block, as given.
    #[getter]
    fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Each full block's local hash, as `compute_block_hashes` gives them.
    #[getter]
    fn local(&self) -> Vec<u64> {
        self.hashes.local().iter().map(|h| h.0).collect()
    }

    /// Each full block's sequence hash, as `compute_seq_hashes` gives them.
    #[getter]
    fn seq(&self) -> Vec<u64> {
        self.hashes.seq().iter().map(|h| h.0).collect()
    }

    /// The number of full blocks.
    fn __len__(&self) -> usize {
        self.hashes.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "PromptHashes(blocks={}, block_size={})",
            self.hashes.len(),
            self.block_size
        )
    }
}

/// A method's prompt argument.
pub(crate) enum Prompt {
    /// Tokens, hashed by the call under the salt.
    Tokens(Vec<u32>, HashSalt),
    /// Hashes made beforehand (they carry their salt).
    Hashes(Py<PyPromptHashes>),
}

impl Prompt {
    /// `obj` as the prompt of a call on an index of `block_size`: a `PromptHashes` of that
    /// block size, with `lora` None; or tokens, salted by `lora`.
    pub(crate) fn from_arg(
        obj: &Bound<'_, PyAny>,
        lora: Option<&str>,
        block_size: u32,
    ) -> PyResult<Self> {
        let Ok(hashes) = obj.cast::<PyPromptHashes>() else {
            return Ok(Prompt::Tokens(tokens(obj)?, HashSalt::new(lora, None)));
        };
        let made = hashes.get();
        if made.block_size != block_size {
            return Err(PyValueError::new_err(format!(
                "PromptHashes of block size {}, but the index's block size is {block_size}",
                made.block_size
            )));
        }
        if lora.is_some() {
            return Err(PyValueError::new_err(
                "lora salts tokens: PromptHashes carry the salt they were made with",
            ));
        }
        Ok(Prompt::Hashes(hashes.clone().unbind()))
    }

    /// The prompt as a query: the tokens under their salt, or the hashes as they are.
    pub(crate) fn query(&self) -> Query<'_> {
        match self {
            Prompt::Tokens(tokens, salt) => Query::salted_tokens(tokens, *salt),
            Prompt::Hashes(hashes) => Query::prompt(&hashes.get().hashes),
        }
    }

    /// The salt its blocks are hashed under (a request's output is hashed under it too).
    pub(crate) fn salt(&self) -> HashSalt {
        match self {
            Prompt::Tokens(_, salt) => *salt,
            Prompt::Hashes(hashes) => hashes.get().salt,
        }
    }
}
