//! A global allocator that counts the live heap bytes of each thread and
//! their peak, for tests that bound what a decoder or a file reader
//! allocates by its input's length (`sparse-core/tests/decode_alloc.rs`,
//! `bench/tests/idx.rs`):
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: sparse_core::testing::peak::PeakAlloc = sparse_core::testing::peak::PeakAlloc;
//! let (out, peak) = sparse_core::testing::peak::peak_during(|| decode(bytes));
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The counting allocator: install it as the test binary's
/// `#[global_allocator]`.
#[derive(Debug)]
pub struct PeakAlloc;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn track(delta: isize) {
    // `try_with`: the thread-local may be gone while a thread exits.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: forwards to the system allocator; the counters touch only
// thread-local cells initialised without allocating.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        track(layout.size() as isize);
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        track(-(layout.size() as isize));
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        track(new_size as isize - layout.size() as isize);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// `f`'s result and the peak of this thread's live heap bytes above the
/// level at the start while it ran (0 unless [`PeakAlloc`] is the global
/// allocator).
pub fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let out = f();
    let peak = PEAK.with(Cell::get);
    (out, (peak - base).max(0) as usize)
}
