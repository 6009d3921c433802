//! A cache prefetch hint: starts loading a line that a later read will need, so that its
//! miss overlaps the work between. A hint only: it reads nothing the program sees, never
//! faults (any address will do), and compiles to nothing off x86-64 or under loom.

/// Starts loading the cache line of `p` into every cache level.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    // SAFETY: `prefetcht0` reads no memory the program sees and never faults, whatever the
    // address (the pointer is not dereferenced).
    unsafe {
        std::arch::x86_64::_mm_prefetch(p.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    let _ = p;
}
