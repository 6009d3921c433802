//! A per-thread buffer reused from call to call, so a warm call allocates nothing.

use std::cell::RefCell;
use std::thread::LocalKey;

/// Runs `f` on this thread's buffer `key`, or on a fresh one where that is unavailable (in
/// use by a call further up this thread's stack, or the thread is being torn down): never
/// a panic. The buffer keeps whatever `f` left in it.
pub(crate) fn with_thread_buffer<T: Default + 'static, R>(
    key: &'static LocalKey<RefCell<T>>,
    f: impl FnOnce(&mut T) -> R,
) -> R {
    let mut f = Some(f);
    let reused = key.try_with(|cell| {
        cell.try_borrow_mut()
            .ok()
            .map(|mut buffer| (f.take().expect("called once"))(&mut buffer))
    });
    match reused {
        Ok(Some(r)) => r,
        _ => (f.take().expect("called once"))(&mut T::default()),
    }
}
