//! A counting global allocator: live heap bytes, summed over per-thread stripes so that
//! counting costs one uncontended relaxed add per allocation and does not skew the
//! throughput of whichever subject allocates more.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

const STRIPES: usize = 64;

#[repr(align(128))]
struct Stripe(AtomicIsize);

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: Stripe = Stripe(AtomicIsize::new(0));
static LIVE: [Stripe; STRIPES] = [ZERO; STRIPES];
static NEXT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static MINE: Cell<usize> = const { Cell::new(usize::MAX) };
}

#[inline]
fn add(delta: isize) {
    let stripe = MINE
        .try_with(|m| {
            let mut s = m.get();
            if s == usize::MAX {
                s = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
                m.set(s);
            }
            s
        })
        .unwrap_or(0);
    LIVE[stripe].0.fetch_add(delta, Ordering::Relaxed);
}

/// Live heap bytes now (allocated and not yet freed), over all threads.
pub fn live_bytes() -> isize {
    LIVE.iter().map(|s| s.0.load(Ordering::Relaxed)).sum()
}

/// The system allocator, counting live bytes.
pub struct Counting;

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so it
// upholds `GlobalAlloc`'s contract exactly as `System` does; counting touches no memory
// the caller owns.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged (see the impl's comment).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            add(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            add(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) };
        add(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            add(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// Live bytes once the heap has settled: retired arrays of this crate handed to the epoch
/// collector are freed, and background threads (a dropped Dynamo actor freeing its tree)
/// have stopped freeing, i.e. the count held still for 20 ms (or 2 s passed).
pub fn settled_live_bytes() -> isize {
    let flush = || {
        for _ in 0..256 {
            crossbeam_epoch::pin().flush();
        }
    };
    flush();
    let mut last = live_bytes();
    let mut still = 0;
    for _ in 0..400 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        flush();
        let now = live_bytes();
        still = if now == last { still + 1 } else { 0 };
        last = now;
        if still >= 4 {
            break;
        }
    }
    last
}
