//! One radix digit's histogram per segment (MSD radix select): a cube counts
//! its tile into shared memory, then adds the non-zero bins to the
//! segment's row. Digits wider than 11 bits count straight into global
//! memory (their shared table would not fit).

use super::{UNITS, add_bins, is_nan, key_of, zeroed_bins};
use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

/// `tiles[3 t..]` = (start, end, segment); `want[2 s..]` = (active, the
/// required bits above the digit). Counts key `k` of an active segment
/// when `k & hi_mask == want`, in bin `(k >> shift) & (bins - 1)` of row
/// `s` (rows of `bins + 1` entries: the last counts NaNs, of every segment).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn digit_histogram(
    x: &[u32],
    tiles: &[u32],
    want: &[u32],
    hist: &mut [Atomic<u32>],
    hi_mask: u32,
    shift: u32,
    #[comptime] bins: usize,
    #[comptime] order: u32,
    #[comptime] global: bool,
) {
    // Global counting leaves the shared histogram unused: one counter.
    let local = zeroed_bins(comptime![if global { 1usize } else { bins }]);
    let unit = UNIT_POS as usize;
    let tile = CUBE_POS;
    let valid = tile < tiles.len() / 3;
    let mut row = 0usize;
    if valid {
        let start = tiles[tile * 3] as usize;
        let end = tiles[tile * 3 + 1] as usize;
        let seg = tiles[tile * 3 + 2] as usize;
        row = seg * (bins + 1);
        let active = want[seg * 2] != 0u32;
        let w = want[seg * 2 + 1];
        let mut nan = 0u32;
        let mut i = start + unit;
        while i < end {
            let bits = x[i];
            if is_nan(bits) {
                nan += 1;
            }
            let k = key_of(bits, order);
            if active && (k & hi_mask) == w {
                let d = ((k >> shift) as usize) & (bins - 1);
                if comptime![global] {
                    hist[row + d].fetch_add(1u32);
                } else {
                    local[d].fetch_add(1u32);
                }
            }
            i += UNITS as usize;
        }
        if nan > 0 {
            hist[row + bins].fetch_add(nan);
        }
    }
    sync_cube();
    if comptime![!global] {
        if valid {
            add_bins(&local, hist, row, bins);
        }
    }
}

/// One digit's histogram per segment: the input's bits over `tiles`, the
/// segments' `want` pairs, the rows (`2^bits + 1` counters a segment),
/// and the digit: the bits above it that must equal the segment's
/// (`hi_mask`), its `shift` and width `bits`, in key `order`.
pub(crate) struct DigitArgs<'a> {
    pub x: &'a CubeBuffer<u32>,
    pub tiles: &'a CubeBuffer<u32>,
    pub want: &'a CubeBuffer<u32>,
    pub hist: &'a CubeBuffer<u32>,
    pub hi_mask: u32,
    pub shift: u32,
    pub bits: u32,
    pub order: u32,
}

/// Launches [`digit_histogram`] over the tiles, one cube each; digits
/// wider than 11 bits count in global memory.
pub(crate) fn launch_digit_histogram(client: &Client, a: &DigitArgs<'_>) {
    let cubes = super::grid(a.tiles.len / 3);
    let bins = 1usize << a.bits;
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe {
        launch_kernel!(
            digit_histogram,
            client,
            cubes,
            [a.x, a.tiles, a.want, a.hist],
            a.hi_mask,
            a.shift,
            bins,
            a.order,
            a.bits > 11
        )
    }
}
