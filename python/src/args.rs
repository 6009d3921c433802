//! Converting Python arguments (ids, sizes, durations) with clear errors: a value out of
//! range is a `ValueError`, a value of the wrong type a `TypeError`; nothing panics.

use std::time::Duration;

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;

/// `obj` as an int from 0 to `max`; `what` names it in the error (called only on error).
pub(crate) fn uint(obj: &Bound<'_, PyAny>, max: u64, what: impl Fn() -> String) -> PyResult<u64> {
    uint_in(obj, (0, max), what)
}

/// `obj` as an int from `min` to `max`; `what` names it in the error.
pub(crate) fn uint_in(
    obj: &Bound<'_, PyAny>,
    (min, max): (u64, u64),
    what: impl Fn() -> String,
) -> PyResult<u64> {
    match obj.extract::<u64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        Ok(_) => Err(out_of_range(obj, (min, max), &what())),
        Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => {
            Err(out_of_range(obj, (min, max), &what()))
        }
        Err(_) => Err(PyTypeError::new_err(format!(
            "{} must be an int, not {}",
            what(),
            type_name(obj)
        ))),
    }
}

/// `obj` as a `u32` (a token, a rank).
pub(crate) fn u32_arg(obj: &Bound<'_, PyAny>, what: impl Fn() -> String) -> PyResult<u32> {
    let v = uint(obj, u64::from(u32::MAX), &what)?;
    u32::try_from(v).map_err(|_| out_of_range(obj, (0, u64::from(u32::MAX)), &what()))
}

/// `obj` as a `u64` (a worker id).
pub(crate) fn u64_arg(obj: &Bound<'_, PyAny>, what: impl Fn() -> String) -> PyResult<u64> {
    uint(obj, u64::MAX, what)
}

/// An optional capacity: `None`, or an int from 1 up.
pub(crate) fn capacity(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<usize>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    let v = uint_in(obj, (1, usize::MAX as u64), || what.to_owned())?;
    Ok(Some(v as usize))
}

/// A TTL in seconds: `None` or `inf` mean never (`Duration::MAX`); it must be above 0.
pub(crate) fn ttl(seconds: Option<f64>) -> PyResult<Duration> {
    match seconds {
        None => Ok(Duration::MAX),
        Some(s) if s == f64::INFINITY => Ok(Duration::MAX),
        Some(s) => positive_seconds(s, "ttl"),
    }
}

/// Seconds above 0 as a `Duration` (finite values beyond `Duration`'s range saturate).
pub(crate) fn positive_seconds(s: f64, what: &str) -> PyResult<Duration> {
    if s.is_nan() || s <= 0.0 {
        return Err(PyValueError::new_err(format!(
            "{what} must be a number of seconds above 0, got {s}"
        )));
    }
    Ok(Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX))
}

fn out_of_range(obj: &Bound<'_, PyAny>, (min, max): (u64, u64), what: &str) -> PyErr {
    let shown = obj
        .repr()
        .map_or_else(|_| "?".to_owned(), |r| r.to_string());
    PyValueError::new_err(format!(
        "{what} must be an int from {min} to {max}, got {shown}"
    ))
}

/// The Python type name of `obj`, for messages.
pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string())
}
