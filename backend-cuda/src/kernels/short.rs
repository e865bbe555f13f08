//! The top-k keys of many short segments in one launch (SparCML's buckets
//! of 512): one cube per segment holds the segment's keys in shared memory
//! and runs the whole MSD radix select there, four 8-bit digits, so that no
//! histogram leaves the chip. The multi-segment select of
//! [`super::histogram`] reads back one row of 257 counts per segment and
//! digit; with 2^15 buckets that was 34 MB a digit, and bucket top-k of
//! 2^24 elements took 450 ms on an H100 where block top-k took 0.8 ms.

use super::{UNITS, cube_exclusive_scan, is_nan, key_of};
use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

/// The longest segment [`short_topk_keys`] takes: its keys fill 8 KiB of
/// shared memory, beside 2 KiB of histogram and scan, within the 16 KiB
/// WGSL guarantees.
pub(crate) const SHORT: usize = 2048;

/// `segs[3 j..]` = (start, end, k) of segment `j`, with `0 < k < end -
/// start <= SHORT`. Writes `out[2 j..]` = (the k-th largest key of the
/// segment in `order`, how many of its copies the top k take), as
/// [`crate::ops`]'s `radix` derives them from the histograms, and counts
/// the NaNs of every segment in `bad[0]`.
#[cube(launch_unchecked)]
pub(crate) fn short_topk_keys(
    x: &[u32],
    segs: &[u32],
    out: &mut [u32],
    bad: &mut [Atomic<u32>],
    #[comptime] order: u32,
) {
    let mut keys = Shared::<[u32]>::new_slice(SHORT);
    let hist = Shared::<[Atomic<u32>]>::new_slice(UNITS as usize);
    let mut state = Shared::<[u32]>::new_slice(2usize);
    let u = UNIT_POS as usize;
    let s = CUBE_POS;
    let valid = s < segs.len() / 3;
    let mut start = 0usize;
    let mut len = 0usize;
    let mut k = 0u32;
    if valid {
        start = segs[s * 3] as usize;
        len = segs[s * 3 + 1] as usize - start;
        k = segs[s * 3 + 2];
    }
    let mut nan = 0u32;
    let mut i = u;
    while i < len {
        let bits = x[start + i];
        if is_nan(bits) {
            nan += 1;
        }
        keys[i] = key_of(bits, order);
        i += UNITS as usize;
    }
    if nan > 0 {
        bad[0].fetch_add(nan);
    }
    if u == 0 {
        state[0] = 0u32;
        state[1] = k;
    }
    sync_cube();
    #[unroll]
    for pass in 0..4u32 {
        // The digit below the `8 pass` bits already chosen (`prefix`);
        // every shift stays below 32.
        let shift = 24u32 - 8u32 * pass;
        let hi_mask = !(u32::MAX >> (8u32 * pass));
        let prefix = state[0];
        let left = state[1];
        let want = (prefix << 8u32) << shift;
        hist[u].store(0u32);
        sync_cube();
        let mut j = u;
        while j < len {
            let key = keys[j];
            if (key & hi_mask) == want {
                hist[((key >> shift) & 255u32) as usize].fetch_add(1u32);
            }
            j += UNITS as usize;
        }
        sync_cube();
        // Unit u holds bin 255 - u, so the exclusive scan is the count of
        // the bins above it: the chosen digit is the highest bin at which
        // the count from the top reaches `left` (bin 0 if none does, as
        // the host's loop stops there).
        let d = (UNITS - 1u32) - UNIT_POS;
        let c = hist[d as usize].load();
        let above = cube_exclusive_scan(c);
        if above < left && (above + c >= left || d == 0u32) {
            state[0] = (prefix << 8u32) | d;
            state[1] = left - above;
        }
        sync_cube();
    }
    if valid && u == 0 {
        out[s * 2] = state[0];
        out[s * 2 + 1] = state[1];
    }
}

/// Launches [`short_topk_keys`] on `cubes` cubes of [`super::UNITS`] units.
pub(crate) fn launch_short_topk_keys(
    client: &Client,
    cubes: CubeCount,
    x: &CubeBuffer<u32>,
    segs: &CubeBuffer<u32>,
    out: &CubeBuffer<u32>,
    bad: &CubeBuffer<u32>,
    order: u32,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`); the kernel reads `x` only inside the segments
    // its caller derived from `x`'s length, each at most `SHORT` long, and
    // writes `out` at `2 j` and `2 j + 1` for the segments `j` of `segs`,
    // for which `out` has room.
    unsafe {
        short_topk_keys::launch_unchecked(
            client,
            cubes,
            super::cube_dim(),
            x.arg(),
            segs.arg(),
            out.arg(),
            bad.arg(),
            order,
        );
    }
}

// One unit per histogram bin.
const _: () = assert!(UNITS == 256);
