//! One radix digit's histogram per segment (MSD radix select): a cube counts
//! its tile into shared memory, then adds the non-zero bins to the
//! segment's row. Digits wider than 11 bits count straight into global
//! memory (their shared table would not fit).

use super::{UNITS, is_nan, key_of};
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
    let local = Shared::<[Atomic<u32>]>::new_slice(comptime![if global { 1usize } else { bins }]);
    let unit = UNIT_POS as usize;
    if comptime![!global] {
        let mut b = unit;
        while b < bins {
            local[b].store(0u32);
            b += UNITS as usize;
        }
    }
    sync_cube();
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
            let mut b = unit;
            while b < bins {
                let c = local[b].load();
                if c > 0 {
                    hist[row + b].fetch_add(c);
                }
                b += UNITS as usize;
            }
        }
    }
}

/// Launches [`digit_histogram`] on `cubes` cubes of [`super::UNITS`] units.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_digit_histogram(
    client: &Client,
    cubes: CubeCount,
    x: &CubeBuffer<u32>,
    tiles: &CubeBuffer<u32>,
    want: &CubeBuffer<u32>,
    hist: &CubeBuffer<u32>,
    hi_mask: u32,
    shift: u32,
    bins: usize,
    order: u32,
    global: bool,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe {
        digit_histogram::launch_unchecked(
            client,
            cubes,
            super::cube_dim(),
            x.arg(),
            tiles.arg(),
            want.arg(),
            hist.arg(),
            hi_mask,
            shift,
            bins,
            order,
            global,
        );
    }
}
