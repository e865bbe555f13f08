//! Exact top-k of every segment of a buffer, the whole radix select on
//! the device (SparDL's block top-k, SparCML's buckets over
//! [`super::short::SHORT`] elements): the select of `air.rs` with a
//! segment dimension, so that one launch per step serves every segment and
//! the host reads back two words per call.
//!
//! Each segment has a record of [`SG_WORDS`] words in `seg`, written by
//! the host: its histogram row, its k, its output offset (the sum of the
//! ks before it, which the host knows), its range of collection tiles,
//! and the walk's state, which the choice kernels carry from level to
//! level ([`SG_PREFIX`]..[`SG_TAKE`]). The key's 32 bits split into three
//! digits, bits 31..21 (11), 20..10 (11) and 9..0 (10); per level:
//! 1. [`seg_histogram`] (a pass): each cube counts its tile's digit (of the
//!    keys with the prefix chosen so far) in shared memory and adds the
//!    non-zero bins to its segment's row of [`BINS`] counters;
//! 2. [`seg_choose`] (one cube per selecting segment): the digit holding
//!    the segment's k-th key, the count still needed from it, and an early
//!    stop where that digit's bucket is taken whole; then it clears the
//!    row for the next level, so one row a segment serves all three.
//!
//! A segment's k-th key and its tie quota known, [`seg_collect`] (a pass)
//! writes per tile the indices above the key (from the front of the
//! tile's stretch of a scratch buffer as long as the input) and those
//! equal to it (from the back), [`seg_offsets`] (one cube per segment)
//! scans its tiles' counts into output offsets from the segment's own and
//! shares out the tie quota in index order, and [`seg_emit`] merges each
//! tile's two lists into the output. Segments selecting nothing (k = 0) or
//! everything (k = len) start done and go straight to the collection,
//! which counts the NaNs of every segment it covers.
//!
//! No table of the last 21 bits here (`air.rs`' 2^21 counters a search):
//! one per segment would not fit, so the last digit costs a third
//! histogram pass, and a call takes four passes.

use super::air::{find_digit, tile_bases};
use super::{TileLists, UNITS, add_bins, collect_tile, emit_lists, key_of, zeroed_bins};
use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

/// Segment word: the segment's histogram row (selecting segments only).
pub(crate) const SG_ROW: usize = 0;
/// Segment word: its k.
pub(crate) const SG_K: usize = 1;
/// Segment word: its output offset, the sum of the ks before it.
pub(crate) const SG_BASE: usize = 2;
/// Segment word: its first tile in the collection's tile list.
pub(crate) const SG_T0: usize = 3;
/// Segment word: one past its last tile there.
pub(crate) const SG_T1: usize = 4;
/// Segment word: the key bits chosen so far, in place.
pub(crate) const SG_PREFIX: usize = 5;
/// Segment word: keys still to take from the chosen bucket.
pub(crate) const SG_LEFT: usize = 6;
/// Segment word: 1 once the k-th key and its quota are known.
pub(crate) const SG_DONE: usize = 7;
/// Segment word: the k-th key: every key above it is selected.
pub(crate) const SG_KEY: usize = 8;
/// Segment word: how many keys equal to [`SG_KEY`] are selected (the
/// first in index order).
pub(crate) const SG_TAKE: usize = 9;
/// Words of a segment's record.
pub(crate) const SG_WORDS: usize = 10;

/// Global word: NaNs found (by the collection and the short segments'
/// kernel).
pub(crate) const G_NAN: usize = 0;
/// Global word: segments whose selection's length is not their k (a
/// kernel fault).
pub(crate) const G_MISMATCH: usize = 1;
/// Global words, read back once per call.
pub(crate) const G_WORDS: usize = 2;
/// Counters of a histogram row (the widest digit's bins).
pub(crate) const BINS: usize = 2048;

/// Level 1..3: per tile of `tiles` (`(start, end, segment)` triples), the
/// digit of the level of each key whose higher digits are the segment's
/// prefix, counted into the segment's row of `hist`; nothing for a
/// segment already done.
#[cube(launch_unchecked)]
pub(crate) fn seg_histogram(
    x: &[u32],
    tiles: &[u32],
    seg: &[u32],
    hist: &mut [Atomic<u32>],
    #[comptime] level: u32,
    #[comptime] order: u32,
) {
    let local = zeroed_bins(BINS);
    let unit = UNIT_POS as usize;
    let t = CUBE_POS;
    let valid = t < tiles.len() / 3;
    let mut start = 0usize;
    let mut end = 0usize;
    let mut row = 0usize;
    let mut prefix = 0u32;
    if valid {
        start = tiles[t * 3] as usize;
        end = tiles[t * 3 + 1] as usize;
        let s = tiles[t * 3 + 2] as usize * SG_WORDS;
        row = seg[s + SG_ROW] as usize * BINS;
        prefix = seg[s + SG_PREFIX];
        if seg[s + SG_DONE] != 0u32 {
            end = start;
        }
    }
    let mut i = start + unit;
    while i < end {
        let k = key_of(x[i], order);
        if comptime![level == 1] {
            local[(k >> 21u32) as usize].fetch_add(1u32);
        } else if comptime![level == 2] {
            if (k >> 21u32) == (prefix >> 21u32) {
                local[((k >> 10u32) & 2047u32) as usize].fetch_add(1u32);
            }
        } else if (k >> 10u32) == (prefix >> 10u32) {
            local[(k & 1023u32) as usize].fetch_add(1u32);
        }
        i += UNITS as usize;
    }
    sync_cube();
    if valid {
        add_bins(&local, hist, row, BINS);
    }
}

/// Level 1..3, cube `r` for the selecting segment `rows[r]`, whose row is
/// `r`: the digit of the level holding the segment's k-th key (its
/// `SG_LEFT`-th from the top, `SG_K`-th at level 1) into the prefix, and
/// the count still needed from it; at levels 1 and 2 the early stop where
/// that bucket is taken whole (every key at or above its lowest), at
/// level 3 the k-th key and its tie quota. Then clears the row. Nothing
/// is written for a segment already done.
#[cube(launch_unchecked)]
pub(crate) fn seg_choose(seg: &mut [u32], rows: &[u32], hist: &mut [u32], #[comptime] level: u32) {
    let mut found = Shared::<[u32]>::new_slice(2usize);
    let r = CUBE_POS;
    let valid = r < rows.len();
    let mut s = 0usize;
    let mut base = 0usize;
    let mut done = true;
    let mut left = 0u32;
    if valid {
        s = rows[r] as usize * SG_WORDS;
        base = r * BINS;
        done = seg[s + SG_DONE] != 0u32;
        left = seg[s + SG_LEFT];
        if comptime![level == 1] {
            left = seg[s + SG_K];
        }
    }
    if done {
        // Matches no digit: `found` stays (0, 0).
        left = 0u32;
    }
    find_digit(
        hist,
        base,
        left,
        &mut found,
        comptime![if level == 3 { 1024usize } else { BINS }],
    );
    let d = found[0];
    let rest = left - found[1];
    let count = hist[base + d as usize];
    sync_cube();
    if valid {
        let mut b = UNIT_POS as usize;
        while b < BINS {
            hist[base + b] = 0u32;
            b += UNITS as usize;
        }
    }
    if UNIT_POS == 0 && !done {
        let mut p = d << 21u32;
        if comptime![level == 2] {
            p = seg[s + SG_PREFIX] | (d << 10u32);
        }
        if comptime![level == 3] {
            p = seg[s + SG_PREFIX] | d;
        }
        seg[s + SG_PREFIX] = p;
        seg[s + SG_LEFT] = rest;
        if comptime![level == 3] {
            seg[s + SG_KEY] = p;
            seg[s + SG_TAKE] = rest;
            seg[s + SG_DONE] = 1u32;
        } else if count == rest {
            // The bucket is taken whole: every key above its lowest minus
            // one (every key, where that is 0).
            seg[s + SG_DONE] = 1u32;
            if p > 0u32 {
                seg[s + SG_KEY] = p - 1u32;
                seg[s + SG_TAKE] = 0u32;
            } else {
                seg[s + SG_KEY] = 0u32;
                seg[s + SG_TAKE] = u32::MAX;
            }
        }
    }
}

/// Per tile of `tiles`: the indices of the keys above its segment's k-th
/// key, from the front of the tile's stretch `tmp[start..end]`, and of
/// those equal to it, from the back, in index order;
/// `counts[2 t..]` = (above, equal); NaNs into `g`.
#[cube(launch_unchecked)]
pub(crate) fn seg_collect(
    x: &[u32],
    tiles: &[u32],
    seg: &[u32],
    tmp: &mut [u32],
    counts: &mut [u32],
    g: &mut [Atomic<u32>],
    #[comptime] order: u32,
) {
    let t = CUBE_POS;
    let valid = t < tiles.len() / 3;
    let mut start = 0usize;
    let mut end = 0usize;
    let mut key = 0u32;
    if valid {
        start = tiles[t * 3] as usize;
        end = tiles[t * 3 + 1] as usize;
        key = seg[tiles[t * 3 + 2] as usize * SG_WORDS + SG_KEY];
    }
    let (a, e, nan, _inf) = collect_tile(x, tmp, start, end, end, key, order);
    if UNIT_POS == UNITS - 1 && valid {
        counts[t * 2] = a;
        counts[t * 2 + 1] = e;
    }
    if nan > 0u32 {
        g[G_NAN].fetch_add(nan);
    }
}

/// Cube `c` for segment `segs[c]`: its tiles' counts scanned into
/// `bases[2 t..]` = (output offset of tile `t`, from the segment's
/// `SG_BASE`; how many of its equal keys are taken, the quota left after
/// the segment's tiles before it); a selection whose length is not the
/// segment's k counts in `g[G_MISMATCH]`. Each unit scans consecutive
/// tiles.
// `div_ceil` is host Rust; the device language has the division.
#[allow(clippy::manual_div_ceil)]
#[cube(launch_unchecked)]
pub(crate) fn seg_offsets(
    seg: &[u32],
    segs: &[u32],
    counts: &[u32],
    bases: &mut [u32],
    g: &mut [Atomic<u32>],
) {
    let c = CUBE_POS;
    let valid = c < segs.len();
    let mut t0 = 0u32;
    let mut t1 = 0u32;
    let mut take = 0u32;
    let mut start = 0u32;
    let mut k = 0u32;
    if valid {
        let s = segs[c] as usize * SG_WORDS;
        t0 = seg[s + SG_T0];
        t1 = seg[s + SG_T1];
        take = seg[s + SG_TAKE];
        start = seg[s + SG_BASE];
        k = seg[s + SG_K];
    }
    let per = (t1 - t0 + UNITS - 1u32) / UNITS;
    let first = min(t0 + UNIT_POS * per, t1);
    let last = min(first + per, t1);
    let base = tile_bases(counts, bases, first, last, take, start);
    // The last unit's tiles (none, if they ran out) end the segment.
    if UNIT_POS == UNITS - 1 && valid && base != k {
        g[G_MISMATCH].fetch_add(1u32);
    }
}

/// Per tile: its keys above the k-th key and the first `q` equal to it,
/// merged in index order into the output at the tile's offset, with their
/// values (`x` is only read; mutable as [`super::air::air_emit`]'s, whose
/// merge it shares).
#[cube(launch_unchecked)]
pub(crate) fn seg_emit(
    x: &mut [u32],
    tiles: &[u32],
    tmp: &[u32],
    counts: &[u32],
    bases: &[u32],
    out_idx: &mut [u32],
    out_val: &mut [u32],
) {
    let t = CUBE_POS;
    if t < tiles.len() / 3 {
        let lists = TileLists {
            start: tiles[t * 3] as usize,
            back: tiles[t * 3 + 1] as usize - 1,
            above: counts[t * 2],
            q: bases[t * 2 + 1],
            base: bases[t * 2],
        };
        emit_lists(x, tmp, &lists, out_idx, out_val, false);
    }
}

/// The buffers of a segmented select: the input's bits, the segments'
/// records, the histogram tiles (those of the selecting segments) and
/// rows with their segments, the collection tiles and segments, the
/// scratch (as long as the input), the tiles' counts and bases, the global
/// words and the output.
pub(crate) struct SegArgs<'a> {
    pub x: &'a CubeBuffer<u32>,
    pub seg: &'a CubeBuffer<u32>,
    pub hist_tiles: &'a CubeBuffer<u32>,
    pub hist: &'a CubeBuffer<u32>,
    pub rows: &'a CubeBuffer<u32>,
    pub tiles: &'a CubeBuffer<u32>,
    pub segs: &'a CubeBuffer<u32>,
    pub tmp: &'a CubeBuffer<u32>,
    pub counts: &'a CubeBuffer<u32>,
    pub bases: &'a CubeBuffer<u32>,
    pub g: &'a CubeBuffer<u32>,
    pub out_idx: &'a CubeBuffer<u32>,
    pub out_val: &'a CubeBuffer<u32>,
}

// SAFETY (every launcher below): each buffer argument covers exactly its
// allocation (`CubeBuffer::arg`); the host builds the tile lists from the
// segment offsets it checked against the input's length, so the kernels
// index the input and the scratch (as long as the input) below that
// length; the records below `SG_WORDS` times the segments, which the
// tiles, rows and segment lists name; the rows below `BINS` times the
// rows (a masked digit); the counts and bases below twice the collection
// tiles; every output position is checked against the output's length;
// the cubes past a list's end touch nothing but the first row, which
// exists where the choice is launched.

/// Launches [`seg_histogram`] of `level` over the histogram tiles.
pub(crate) fn launch_histogram(client: &Client, a: &SegArgs<'_>, level: u32, order: u32) {
    let cubes = super::grid(a.hist_tiles.len / 3);
    unsafe {
        launch_kernel!(
            seg_histogram,
            client,
            cubes,
            [a.x, a.hist_tiles, a.seg, a.hist],
            level,
            order
        )
    }
}

/// Launches [`seg_choose`] of `level`, one cube per histogram row.
pub(crate) fn launch_choose(client: &Client, a: &SegArgs<'_>, level: u32) {
    let cubes = super::grid(a.rows.len);
    unsafe { launch_kernel!(seg_choose, client, cubes, [a.seg, a.rows, a.hist], level) }
}

/// Launches [`seg_collect`] over the collection tiles.
pub(crate) fn launch_collect(client: &Client, a: &SegArgs<'_>, order: u32) {
    unsafe {
        launch_kernel!(
            seg_collect,
            client,
            a.tile_grid(),
            [a.x, a.tiles, a.seg, a.tmp, a.counts, a.g],
            order
        )
    }
}

/// Launches [`seg_offsets`], one cube per collection segment.
pub(crate) fn launch_offsets(client: &Client, a: &SegArgs<'_>) {
    let cubes = super::grid(a.segs.len);
    unsafe {
        launch_kernel!(
            seg_offsets,
            client,
            cubes,
            [a.seg, a.segs, a.counts, a.bases, a.g]
        )
    }
}

/// Launches [`seg_emit`] over the collection tiles.
pub(crate) fn launch_emit(client: &Client, a: &SegArgs<'_>) {
    unsafe {
        launch_kernel!(
            seg_emit,
            client,
            a.tile_grid(),
            [a.x, a.tiles, a.tmp, a.counts, a.bases, a.out_idx, a.out_val]
        )
    }
}

impl SegArgs<'_> {
    /// The collection tiles: one cube each.
    fn tile_grid(&self) -> CubeCount {
        super::grid(self.tiles.len / 3)
    }
}
