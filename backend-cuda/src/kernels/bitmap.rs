//! Bitmap encode and decode.
//!
//! Encoding sets one flag word per position (a plain store, so duplicate
//! indices are harmless), then packs 32 flags per word: the WGSL path has
//! no atomic or. Decoding is a compaction: pass 1 counts each tile's set
//! bits, the host turns the counts into offsets, pass 2 scans the units'
//! counts and writes each set bit's index in order.

use super::{ITEMS, TILE, UNITS, cube_exclusive_scan, cube_reduce};
use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

/// `flags[indices[j] - lo] = 1` (indices checked beforehand).
#[cube(launch_unchecked)]
pub(crate) fn bitmap_flags(indices: &[u32], lo: u32, flags: &mut [u32]) {
    let j = ABSOLUTE_POS;
    if j < indices.len() {
        flags[(indices[j] - lo) as usize] = 1u32;
    }
}

/// Word `w` gets bit `b` when `flags[32 w + b]` is set.
#[cube(launch_unchecked)]
pub(crate) fn bitmap_pack(flags: &[u32], words: &mut [u32]) {
    let w = ABSOLUTE_POS;
    if w < words.len() {
        let mut acc = 0u32;
        for b in 0..32usize {
            let i = w * 32 + b;
            if i < flags.len() {
                if flags[i] != 0u32 {
                    acc |= 1u32 << b as u32;
                }
            }
        }
        words[w] = acc;
    }
}

/// Word `w` with the bits at or past `len` cleared.
#[cube]
fn word_below(words: &[u32], w: usize, len: u32) -> u32 {
    let first = w as u32 * 32u32;
    let mut v = words[w];
    if len - first < 32u32 {
        v &= (1u32 << (len - first)) - 1u32;
    }
    v
}

/// `counts[t]` = the set bits below `len` in tile `t` of [`TILE`] words.
#[cube(launch_unchecked)]
pub(crate) fn bitmap_count(words: &[u32], len: u32, counts: &mut [u32]) {
    let tile = CUBE_POS;
    let start = tile * TILE;
    let end = min(start + TILE, words.len());
    let mut c = 0u32;
    let mut w = start + UNIT_POS as usize;
    while w < end {
        c += word_below(words, w, len).count_ones();
        w += UNITS as usize;
    }
    let total = cube_reduce::<u32>(c, false);
    if UNIT_POS == 0 && start < words.len() {
        counts[tile] = total;
    }
}

/// Writes `lo + position` of every set bit below `len`, in order; tile `t`
/// starts at output `bases[t]`.
#[cube(launch_unchecked)]
pub(crate) fn bitmap_write(words: &[u32], len: u32, lo: u32, bases: &[u32], out: &mut [u32]) {
    let tile = CUBE_POS;
    let start = tile * TILE;
    let mut first = words.len();
    let mut last = words.len();
    let mut base = 0u32;
    if start < words.len() {
        first = min(start + UNIT_POS as usize * ITEMS, words.len());
        last = min(first + ITEMS, words.len());
        base = bases[tile];
    }
    let mut c = 0u32;
    for w in first..last {
        c += word_below(words, w, len).count_ones();
    }
    let mut at = base + cube_exclusive_scan(c);
    for w in first..last {
        let mut m = word_below(words, w, len);
        while m != 0u32 {
            let b = m.trailing_zeros();
            out[at as usize] = lo + w as u32 * 32u32 + b;
            at += 1;
            m &= m - 1u32;
        }
    }
}

/// Launches [`bitmap_flags`] on `cubes` cubes of [`super::UNITS`] units.
pub(crate) fn launch_bitmap_flags(
    client: &Client,
    cubes: CubeCount,
    indices: &CubeBuffer<u32>,
    lo: u32,
    flags: &CubeBuffer<u32>,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe { launch_kernel!(bitmap_flags, client, cubes, [indices], lo, flags.arg()) }
}

/// Launches [`bitmap_pack`] on `cubes` cubes of [`super::UNITS`] units.
pub(crate) fn launch_bitmap_pack(
    client: &Client,
    cubes: CubeCount,
    flags: &CubeBuffer<u32>,
    words: &CubeBuffer<u32>,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe { launch_kernel!(bitmap_pack, client, cubes, [flags, words]) }
}

/// Launches [`bitmap_count`] on `cubes` cubes of [`super::UNITS`] units.
pub(crate) fn launch_bitmap_count(
    client: &Client,
    cubes: CubeCount,
    words: &CubeBuffer<u32>,
    len: u32,
    counts: &CubeBuffer<u32>,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe { launch_kernel!(bitmap_count, client, cubes, [words], len, counts.arg()) }
}

/// Launches [`bitmap_write`] on `cubes` cubes of [`super::UNITS`] units.
pub(crate) fn launch_bitmap_write(
    client: &Client,
    cubes: CubeCount,
    words: &CubeBuffer<u32>,
    len: u32,
    lo: u32,
    bases: &CubeBuffer<u32>,
    out: &CubeBuffer<u32>,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe {
        launch_kernel!(
            bitmap_write,
            client,
            cubes,
            [words],
            len,
            lo,
            bases.arg(),
            out.arg()
        )
    }
}
