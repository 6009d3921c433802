//! Reading a prompt's tokens from Python into an owned `Vec<u32>`, so that the call can then
//! release the GIL: nothing the index reads can change under it (another thread may write
//! to a NumPy array while the index runs, which would be a data race on borrowed memory).
//!
//! | input | how it is read |
//! |---|---|
//! | a buffer of 4-byte unsigned ints in native byte order (NumPy `uint32`, `array('I')`, `memoryview.cast('I')`) | the buffer protocol, one `memcpy` (strided arrays too) |
//! | `bytes`, `bytearray`, or a `memoryview` of bytes | native-endian 4-byte tokens, as `array('I').tobytes()` writes them; a length that is not a multiple of 4 is a `ValueError` |
//! | a list or tuple of ints | `array('I', tokens)` (a C loop), then one `memcpy`; if it refuses an element, as below to name it |
//! | any other iterable of ints (`range`, generators, NumPy arrays of other integer types or byte order, `uint8` ones and `array('B')` included: one token per element) | element by element: a non-int is a `TypeError`, an int outside 0..=2^32-1 a `ValueError` naming its position |
//! | an array or buffer of more than one dimension (a batch), whatever its dtype | `ValueError` |
//! | `str`, `None`, a number | `TypeError` |

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyByteArray, PyBytes, PyList, PyMemoryView, PyString, PyTuple};

use crate::args::{type_name, u32_arg};

/// The tokens of `obj` (see the module docs for what it may be).
pub(crate) fn tokens(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    let py = obj.py();
    if obj.is_instance_of::<PyString>() || obj.is_none() {
        return Err(not_tokens(obj));
    }
    // Lists and tuples first: asking them for a buffer would raise (and build) an exception.
    // CPython's `array('I', tokens)` converts them in C, about 3x faster than extracting
    // each int through the limited API; only when it refuses an element do we walk the
    // elements ourselves, to name the bad one.
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        // (An empty array has no aligned buffer to give: the walk below reads it.)
        if let Ok(buf) = uint32_array(obj).and_then(|a| PyBuffer::<u32>::get(&a)) {
            return buf.to_vec(py);
        }
        return ints(obj.len()?, obj.try_iter()?);
    }
    match PyBuffer::<u32>::get(obj) {
        Ok(buf) if native_order(buf.format()) => return one_dimensional(&buf)?.to_vec(py),
        Ok(_) => {} // another byte order: read element by element below
        // Raw 4-byte tokens come only as bytes, a bytearray or a memoryview; any other
        // buffer of bytes (a NumPy `uint8` array, `array('B')`) holds one small token per
        // element, read below.
        Err(_) if is_bytes_like(obj) => {
            if let Ok(buf) = PyBuffer::<u8>::get(obj) {
                return from_bytes(&one_dimensional(&buf)?.to_vec(py)?);
            }
        }
        Err(_) => {}
    }
    // An array of any other dtype with a batch dimension is refused as a `uint32` one is
    // (its elements would be rows, not ints).
    if let Some(n) = obj
        .getattr("ndim")
        .ok()
        .and_then(|d| d.extract::<usize>().ok())
    {
        if n > 1 {
            return Err(not_one_dimensional(n));
        }
    }
    let Ok(items) = obj.try_iter() else {
        return Err(not_tokens(obj));
    };
    ints(obj.len().unwrap_or(0), items)
}

/// Whether `obj` is `bytes`, a `bytearray` or a `memoryview`: what holds tokens as raw
/// native-endian bytes.
fn is_bytes_like(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<PyBytes>()
        || obj.is_instance_of::<PyByteArray>()
        || obj.is_instance_of::<PyMemoryView>()
}

/// `array.array('I', obj)`: the ints of a list or tuple as native `unsigned int`s.
fn uint32_array<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    static ARRAY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let py = obj.py();
    let array = ARRAY.get_or_try_init(py, || {
        PyResult::Ok(py.import("array")?.getattr("array")?.unbind())
    })?;
    array.bind(py).call1(("I", obj))
}

/// Python ints, element by element (`len` is a capacity hint).
fn ints<'py>(
    len: usize,
    items: impl Iterator<Item = PyResult<Bound<'py, PyAny>>>,
) -> PyResult<Vec<u32>> {
    let mut out = Vec::with_capacity(len);
    for (i, item) in items.enumerate() {
        out.push(u32_arg(&item?, || format!("tokens[{i}]"))?);
    }
    Ok(out)
}

/// Whether a buffer format's byte order is this machine's (PyO3 accepts `>I` as a `u32`
/// whatever the order, so a big-endian NumPy array would read byte-swapped).
fn native_order(format: &std::ffi::CStr) -> bool {
    match format.to_bytes().first() {
        Some(b'>' | b'!') => cfg!(target_endian = "big"),
        Some(b'<') => cfg!(target_endian = "little"),
        _ => true,
    }
}

/// `buf`, if it has at most one dimension (a 2-D array is not a prompt).
fn one_dimensional<T: pyo3::buffer::Element>(buf: &PyBuffer<T>) -> PyResult<&PyBuffer<T>> {
    match buf.dimensions() {
        0 | 1 => Ok(buf),
        n => Err(not_one_dimensional(n)),
    }
}

fn not_one_dimensional(dimensions: usize) -> PyErr {
    PyValueError::new_err(format!(
        "tokens must be one-dimensional, got a buffer of {dimensions} dimensions"
    ))
}

/// Native-endian 4-byte tokens.
fn from_bytes(bytes: &[u8]) -> PyResult<Vec<u32>> {
    if bytes.len() % 4 != 0 {
        return Err(PyValueError::new_err(format!(
            "tokens as bytes must hold whole 4-byte tokens (native byte order), got {} bytes",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

fn not_tokens(obj: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!(
        "tokens must be a sequence of ints, a uint32 array or bytes, not {}",
        type_name(obj)
    ))
}
