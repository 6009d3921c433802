//! A use-after-free detector for the models: the test binary's allocator notes when a
//! *watched* address is freed.
//!
//! A reader watches the array it is about to read (the address is taken while the shard
//! lock is still held, so nothing can free it before the watch starts) and asserts, after
//! its reads, that no deallocation covered it. Loom runs all threads of a model on one OS
//! thread, so the state is thread-local: models running in parallel don't see each other.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    static WATCHED: Cell<usize> = const { Cell::new(0) };
    static FREED: Cell<bool> = const { Cell::new(false) };
    /// Deallocations so far, and the last [`RECENT`] of them (start, size), by count.
    static FREES: Cell<usize> = const { Cell::new(0) };
    static LAST_FREED: Cell<[(usize, usize); RECENT]> = const { Cell::new([(0, 0); RECENT]) };
}

/// Deallocations [`freed_since`] can look back on.
const RECENT: usize = 64;

struct Watching;

#[global_allocator]
static ALLOCATOR: Watching = Watching;

// SAFETY: every call is forwarded to `System` unchanged; `dealloc` only reads the
// const-initialised thread-locals first (no allocation, no destructor).
unsafe impl GlobalAlloc for Watching {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System.alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let start = ptr as usize;
        let _ = FREES.try_with(|n| {
            let _ = LAST_FREED.try_with(|last| {
                let mut all = last.get();
                all[n.get() % RECENT] = (start, layout.size());
                last.set(all);
            });
            n.set(n.get() + 1);
        });
        let _ = WATCHED.try_with(|w| {
            let at = w.get();
            if at != 0 && (start..start + layout.size()).contains(&at) {
                let _ = FREED.try_with(|f| f.set(true));
            }
        });
        // SAFETY: the caller's contract is `System.dealloc`'s.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Starts watching `address` (inside the allocation about to be read).
pub(super) fn watch(address: usize) {
    FREED.with(|f| f.set(false));
    WATCHED.with(|w| w.set(address));
}

/// Whether the watched allocation has been freed since [`watch`].
pub(super) fn freed() -> bool {
    FREED.with(Cell::get)
}

/// Stops watching; returns whether the watched allocation was freed meanwhile.
pub(super) fn unwatch() -> bool {
    WATCHED.with(|w| w.set(0));
    FREED.with(|f| f.replace(false))
}

/// A mark to look back from with [`freed_since`]: for an address learnt only later.
pub(super) fn mark() -> usize {
    FREES.with(Cell::get)
}

/// Whether a deallocation since `mark` covered `address`.
pub(super) fn freed_since(mark: usize, address: usize) -> bool {
    let now = FREES.with(Cell::get);
    assert!(now - mark <= RECENT, "more frees than the watch keeps");
    let last = LAST_FREED.with(Cell::get);
    (mark..now).any(|i| {
        let (start, size) = last[i % RECENT];
        (start..start + size).contains(&address)
    })
}
