//! `checkpoint::reshard` onto P' ranks holds memory linear in P' (issue
//! 40, item 9): it saved through a cluster of P' threads whose agreement
//! rounds and file lists grew with P'^2 (811 MiB at P' = 1,024 for a tiny
//! state). The peak of the whole process's live heap (every thread's:
//! `sparse_core::testing::peak` counts one thread's, and the old reshard
//! allocated on P' of them), at P' = 64 and P' = 256, may grow by at most
//! a few KiB per added rank. This file holds one test, so that no other
//! test's allocations count.

mod common;

use common::*;
use residual_sgd::checkpoint;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// A global allocator counting the process's live heap bytes and their
/// peak.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn track(delta: isize) {
    let now = LIVE.fetch_add(delta, Ordering::SeqCst) + delta;
    PEAK.fetch_max(now, Ordering::SeqCst);
}

// SAFETY: forwards to the system allocator; the counters are atomics.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
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

#[global_allocator]
static ALLOC: Counting = Counting;

/// The process's peak live heap above its level at the start while `f`
/// ran.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let out = f();
    let peak = PEAK.load(Ordering::SeqCst) - base;
    (out, peak.max(0) as usize)
}

#[test]
fn reshard_memory_grows_linearly_with_the_new_rank_count() {
    let dir = tmpdir("reshard-memory");
    saved_run(&dir);
    let mut peaks = Vec::new();
    for p_new in [64usize, 256] {
        let dst = dir.join(format!("on-{p_new}"));
        let (m, peak) = peak_of(|| checkpoint::reshard(&dir, p_new, &dst, "step-6"));
        assert_eq!(m.unwrap().ranks, p_new);
        peaks.push(peak);
    }
    // A few KiB per added rank: the manifest's two entries per rank and
    // the file names; the quadratic saves took about 800 bytes per rank
    // per rank (P'^2), 49 MiB more at 256 than at 64.
    let per_rank = (peaks[1].saturating_sub(peaks[0])) / (256 - 64);
    eprintln!("peak at P' = 64 and 256: {peaks:?}, {per_rank} bytes per added rank");
    assert!(
        per_rank <= 4 << 10,
        "peaks {peaks:?}: {per_rank} bytes per added rank"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
