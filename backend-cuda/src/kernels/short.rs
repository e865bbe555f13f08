//! The top-k of many short segments in one launch (SparCML's buckets of
//! 512): one cube per segment holds the segment's keys in shared memory
//! and runs the whole MSD radix select there, four 8-bit digits, so that no
//! histogram leaves the chip; then it writes the segment's top k at the
//! output offset its caller gave it (the sum of the ks before it), so the
//! whole bucket top-k is one launch and one pass. The multi-segment select
//! this replaced read back one row of 257 counts per segment and digit;
//! with 2^15 buckets that was 34 MB a digit, and bucket top-k of 2^24
//! elements took 450 ms on an H100 where block top-k took 0.8 ms. Beside
//! longer segments (`segmented.rs`) it takes the short ones that select.

use super::{UNITS, cube_exclusive_scan, is_nan, key_of, quota};
use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

/// The longest segment [`short_topk_keys`] takes: its keys fill 8 KiB of
/// shared memory, beside 2 KiB of histogram and scan, within the 16 KiB
/// WGSL guarantees.
pub(crate) const SHORT: usize = 2048;

/// `segs[4 j..]` = (start, end, k, base) of segment `j`, with
/// `0 <= k <= end - start <= SHORT` and `base` the number of elements the
/// segments before it select; writes the segment's top k, in index order,
/// to `out[base..base + k]` (indices) and `vals` (their bit patterns):
/// the whole bucket top-k in this one launch. Counts the NaNs of every
/// segment in `bad[0]`.
#[cube(launch_unchecked)]
pub(crate) fn short_topk(
    x: &[u32],
    segs: &[u32],
    out: &mut [u32],
    vals: &mut [u32],
    bad: &mut [Atomic<u32>],
    #[comptime] order: u32,
) {
    let mut keys = Shared::<[u32]>::new_slice(SHORT);
    let hist = Shared::<[Atomic<u32>]>::new_slice(UNITS as usize);
    let mut state = Shared::<[u32]>::new_slice(2usize);
    let stride = 4usize;
    let u = UNIT_POS as usize;
    let s = CUBE_POS;
    let valid = s < segs.len() / stride;
    let mut start = 0usize;
    let mut len = 0usize;
    let mut k = 0u32;
    if valid {
        start = segs[s * stride] as usize;
        len = segs[s * stride + 1] as usize - start;
        k = segs[s * stride + 2];
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
    let mut base = 0u32;
    if valid {
        base = segs[s * stride + 3];
    }
    emit_top(x, &keys, start, len, k, state[0], state[1], base, out, vals);
}

/// The segment's keys above `key` and the first `take` equal to it (none
/// if `k = 0`), in index order, from `out[base]` on: each unit writes its
/// [`PER`] consecutive keys at the place two cube-wide scans give it.
/// Every unit of the cube must call it: it synchronizes.
#[cube]
#[allow(clippy::too_many_arguments)]
fn emit_top(
    x: &[u32],
    keys: &Shared<[u32]>,
    start: usize,
    len: usize,
    k: u32,
    key: u32,
    take: u32,
    base: u32,
    out: &mut [u32],
    vals: &mut [u32],
) {
    // With k = 0 the walk above chose nothing: no key is above u32::MAX
    // (a NaN's magnitude key is below it), and no copy of it is taken.
    let key = select(k == 0u32, u32::MAX, key);
    let take = select(k == 0u32, 0u32, take);
    let lo = min(UNIT_POS as usize * PER, len);
    let hi = min(lo + PER, len);
    let mut above = 0u32;
    let mut equal = 0u32;
    for i in lo..hi {
        let kk = keys[i];
        if kk > key {
            above += 1;
        }
        if kk == key {
            equal += 1;
        }
    }
    let rank = cube_exclusive_scan(equal);
    let taken = quota(take, rank, equal);
    let mut at = base + cube_exclusive_scan(above + taken);
    let mut r = rank;
    for i in lo..hi {
        let kk = keys[i];
        let mut keep = kk > key;
        if kk == key {
            keep = r < take;
            r += 1;
        }
        if keep {
            if (at as usize) < out.len() {
                out[at as usize] = (start + i) as u32;
                vals[at as usize] = x[start + i];
            }
            at += 1;
        }
    }
}

/// Keys each unit emits in [`emit_top`]: a segment's [`SHORT`] over the
/// cube's units.
const PER: usize = SHORT / UNITS as usize;

/// Launches [`short_topk`], one cube per record of `segs` (four words
/// each): the selection into `out` (indices) and `vals` (bit patterns).
pub(crate) fn launch_short_topk(
    client: &Client,
    x: &CubeBuffer<u32>,
    segs: &CubeBuffer<u32>,
    out: &CubeBuffer<u32>,
    vals: &CubeBuffer<u32>,
    bad: &CubeBuffer<u32>,
    order: u32,
) {
    let cubes = super::grid(segs.len / 4);
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`); the kernel reads `x` only inside the segments
    // its caller derived from `x`'s length, each at most `SHORT` long,
    // and checks every output position against `out`'s length (`vals` is
    // as long).
    unsafe { launch_kernel!(short_topk, client, cubes, [x, segs, out, vals, bad], order) }
}

/// The records of [`short_topk`] for equal buckets (SparCML's):
/// `segs[4 j..]` = bucket `j`'s `(start, end, k, base)` over `len`
/// elements, `k = min(per, end - start)`; every bucket before `j` is full,
/// so `base = j * min(per, bucket)`. Laid out on the device: nothing is
/// built on the host or uploaded.
#[cube(launch_unchecked)]
pub(crate) fn bucket_segs(segs: &mut [u32], len: u32, bucket: u32, per: u32) {
    let j = ABSOLUTE_POS;
    if j < segs.len() / 4 {
        let start = j as u32 * bucket;
        let end = min(start + min(bucket, len - start), len);
        segs[j * 4] = start;
        segs[j * 4 + 1] = end;
        segs[j * 4 + 2] = min(per, end - start);
        segs[j * 4 + 3] = j as u32 * min(per, bucket);
    }
}

/// Launches [`bucket_segs`] for `segs.len / 4` buckets.
pub(crate) fn launch_bucket_segs(
    client: &Client,
    segs: &CubeBuffer<u32>,
    len: u32,
    bucket: u32,
    per: u32,
) {
    let cubes = super::grid(super::cubes_for(segs.len / 4));
    // SAFETY: `segs` covers exactly its allocation and the kernel writes
    // only the records below `segs.len / 4`; its caller made that the
    // number of buckets of `len`, so `start < len`.
    unsafe { launch_kernel!(bucket_segs, client, cubes, [segs], len, bucket, per) }
}

// One unit per histogram bin.
const _: () = assert!(UNITS == 256);
