//! Exact top-k in three passes over the input, the k-th key found on the
//! device (after AIR top-k, Zhang et al., SC'23): no host round trip
//! between passes.
//!
//! The 32-bit key splits into three digits: bits 31..21 (11), 20..10 (11)
//! and 9..0 (10).
//! 1. [`air_histogram`] level 1 (pass 1): each cube counts its tile's first
//!    digits in a shared histogram and adds the non-zero bins to the global
//!    row; [`air_choose`] (one cube) finds the digit holding the k-th key.
//!    If that digit's bucket is taken whole (its count is what is still
//!    needed), the k-th key is known: an early stop.
//! 2. [`air_histogram`] level 2 (pass 2, skipped on the device after an
//!    early stop): the keys in that bucket only, their second digit in a
//!    shared histogram and their low 21 bits in a global table
//!    ([`TABLE`] counters), so that [`air_choose`] finds the second digit
//!    and then the third from the table's slice for it: the k-th key and
//!    how many of its copies fit, with no third pass over the input (AIR
//!    reads the survivors of its second digit a third time; here the table
//!    holds their last digit already).
//! 3. [`air_collect`] (pass 3): per tile, the indices of the keys above the
//!    k-th key (from the front of the tile's stretch of a scratch buffer)
//!    and of the keys equal to it (from the back), in index order, and the
//!    tile's two counts; [`air_offsets`] (one cube) scans the tiles' counts
//!    into output offsets and each tile's share of the tie quota (ties to
//!    the lower index); [`air_emit`] merges each tile's two lists into the
//!    output in index order and gathers the values. These two read the
//!    counts and the selected indices only.
//!
//! The state words (`st`, [`ST_WORDS`], written by the host with the
//! launches) carry the walk between kernels; the host reads them back
//! once, at the end, for the NaN and infinity counts.

use super::{
    TILE, TileLists, UNITS, add_bins, collect_tile, cube_exclusive_scan, emit_lists, key_of, quota,
    zeroed_bins,
};
use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

/// State word: the key bits chosen so far, in place.
pub(crate) const ST_PREFIX: usize = 0;
/// State word: keys still to take from the chosen bucket.
pub(crate) const ST_LEFT: usize = 1;
/// State word: 1 once the k-th key and its quota are known.
pub(crate) const ST_DONE: usize = 2;
/// State word: the k-th key: every key above it is selected.
pub(crate) const ST_KEY: usize = 3;
/// State word: how many keys equal to [`ST_KEY`] are selected (the first
/// ones in index order).
pub(crate) const ST_TAKE: usize = 4;
/// State word: NaNs found by the collection pass.
pub(crate) const ST_NAN: usize = 5;
/// State word: infinities found by the collection pass.
pub(crate) const ST_INF: usize = 6;
/// State word: how many elements the collection selects (above
/// [`ST_KEY`] plus the quota of its copies), written by [`air_offsets`].
pub(crate) const ST_COUNT: usize = 7;
/// State words.
pub(crate) const ST_WORDS: usize = 8;
/// Bins of the first two digits.
pub(crate) const BINS: usize = 2048;
/// Counters of the table: one per value of the low 21 bits.
pub(crate) const TABLE: usize = 1 << 21;

/// Tie rule of [`air_choose`]: the copies of the k-th key that fit the top
/// k (exact top-k, ties to the lower index).
pub(crate) const TAKE_FIT: u32 = 0;
/// Tie rule: every copy of the k-th key (every element at least the k-th
/// largest); the k-th key itself is always found (no early stop), as the
/// caller returns it.
pub(crate) const TAKE_ALL: u32 = 1;
/// Tie rule: no copy of the k-th key (every element strictly above it);
/// the k-th key itself is always found (no early stop), as a threshold
/// must be.
pub(crate) const TAKE_NONE: u32 = 2;

/// Level 1: the first digit of every key of the cube's tile. Level 2: for
/// the keys whose first digit is the chosen one, the second digit (row 2)
/// and the low 21 bits (`table`); nothing after an early stop.
#[cube(launch_unchecked)]
pub(crate) fn air_histogram(
    x: &[u32],
    st: &[u32],
    hist: &mut [Atomic<u32>],
    table: &mut [Atomic<u32>],
    #[comptime] level: u32,
    #[comptime] order: u32,
) {
    let local = zeroed_bins(BINS);
    let unit = UNIT_POS as usize;
    let start = CUBE_POS * TILE;
    let mut end = min(start + TILE, x.len());
    let mut want = 0u32;
    if comptime![level == 2] {
        want = st[ST_PREFIX] >> 21u32;
        if st[ST_DONE] != 0u32 {
            end = start;
        }
    }
    // Runs of one table counter (many equal keys) are added at once.
    let mut last = 0u32;
    let mut run = 0u32;
    let mut i = start + unit;
    while i < end {
        let k = key_of(x[i], order);
        if comptime![level == 1] {
            local[(k >> 21u32) as usize].fetch_add(1u32);
        } else if (k >> 21u32) == want {
            local[((k >> 10u32) & 2047u32) as usize].fetch_add(1u32);
            let low = k & 0x1f_ffffu32;
            if run > 0u32 && low != last {
                table[last as usize].fetch_add(run);
                run = 0u32;
            }
            last = low;
            run += 1u32;
        }
        i += UNITS as usize;
    }
    if run > 0u32 {
        table[last as usize].fetch_add(run);
    }
    sync_cube();
    add_bins(&local, hist, comptime![(level as usize - 1) * BINS], BINS);
}

/// The digit of the `bins` counters `h[base..base + bins]` that holds the
/// `left`-th largest key, and how many keys lie in the digits above it,
/// into `found[0]` and `found[1]` (both 0 if none does), for every unit
/// (`h` is only read; mutable as the kernels' buffers are).
/// Every unit of the cube must call it: it synchronizes.
#[cube]
pub(crate) fn find_digit(
    h: &mut [u32],
    base: usize,
    left: u32,
    found: &mut Shared<[u32]>,
    #[comptime] bins: usize,
) {
    let per = comptime![bins / UNITS as usize];
    let top = bins - per * UNIT_POS as usize;
    if UNIT_POS == 0 {
        found[0] = 0u32;
        found[1] = 0u32;
    }
    let mut sum = 0u32;
    for j in 0..per {
        sum += h[base + top - 1 - j];
    }
    let above = cube_exclusive_scan(sum);
    if above < left && left <= above + sum {
        let mut acc = above;
        let mut done = false;
        for j in 0..per {
            let d = top - 1 - j;
            let c = h[base + d];
            if !done && acc + c >= left {
                found[0] = d as u32;
                found[1] = acc;
                done = true;
            }
            if !done {
                acc += c;
            }
        }
    }
    sync_cube();
}

/// One cube: level 1 chooses the first digit from row 1 (and, with the
/// tie `rule` [`TAKE_FIT`], stops early if its bucket is taken whole);
/// level 2 the second from row 2 and the third from the table's slice for
/// it, which gives the k-th key and, by `rule`, how many of its copies are
/// taken. Nothing after the state is done.
#[cube(launch_unchecked)]
pub(crate) fn air_choose(
    st: &mut [u32],
    hist: &mut [u32],
    table: &mut [u32],
    k: u32,
    #[comptime] level: u32,
    #[comptime] rule: u32,
) {
    let mut found = Shared::<[u32]>::new_slice(2usize);
    let done = st[ST_DONE] != 0u32;
    sync_cube();
    if comptime![level == 1] {
        find_digit(hist, 0usize, k, &mut found, BINS);
        if UNIT_POS == 0 && !done {
            let d = found[0];
            let left = k - found[1];
            let lo = d << 21u32;
            st[ST_PREFIX] = lo;
            st[ST_LEFT] = left;
            if comptime![rule == TAKE_FIT] {
                if hist[d as usize] == left {
                    // The bucket is taken whole: every key at or above
                    // its lowest key.
                    st[ST_DONE] = 1u32;
                    if lo > 0u32 {
                        st[ST_KEY] = lo - 1u32;
                        st[ST_TAKE] = 0u32;
                    } else {
                        st[ST_KEY] = 0u32;
                        st[ST_TAKE] = u32::MAX;
                    }
                }
            }
        }
    } else {
        let left = st[ST_LEFT];
        find_digit(hist, BINS, left, &mut found, BINS);
        let d2 = found[0] & 2047u32;
        let left2 = left - found[1];
        sync_cube();
        find_digit(table, (d2 as usize) * 1024, left2, &mut found, 1024usize);
        if UNIT_POS == 0 && !done {
            st[ST_KEY] = st[ST_PREFIX] | (d2 << 10u32) | found[0];
            let mut take = left2 - found[1];
            if comptime![rule == TAKE_ALL] {
                take = u32::MAX;
            }
            if comptime![rule == TAKE_NONE] {
                take = 0u32;
            }
            st[ST_TAKE] = take;
            st[ST_DONE] = 1u32;
        }
    }
}

/// Pass 3: per tile, the indices of the keys above the k-th key (from the
/// front of the tile's stretch of `tmp`) and of those equal to it (from
/// the back), in index order; `counts[2 t..]` = (above, equal); NaNs and
/// infinities into the state.
#[cube(launch_unchecked)]
pub(crate) fn air_collect(
    x: &[u32],
    st: &mut [Atomic<u32>],
    tmp: &mut [u32],
    counts: &mut [u32],
    #[comptime] order: u32,
) {
    let tile = CUBE_POS;
    let start = tile * TILE;
    let end = min(start + TILE, x.len());
    let key = st[ST_KEY].load();
    let (a, e, nan, inf) = collect_tile(x, tmp, start, end, start + TILE, key, order);
    if UNIT_POS == UNITS - 1 && start < x.len() {
        counts[tile * 2] = a;
        counts[tile * 2 + 1] = e;
    }
    if nan > 0u32 {
        st[ST_NAN].fetch_add(nan);
    }
    if inf > 0u32 {
        st[ST_INF].fetch_add(inf);
    }
}

/// One cube: from the tiles' counts, `bases[2 t..]` = (output offset of
/// tile `t`, how many of its equal keys are taken: the quota left after
/// the tiles before it), and the total into [`ST_COUNT`]; each unit scans
/// `per` consecutive tiles.
#[cube(launch_unchecked)]
pub(crate) fn air_offsets(st: &mut [u32], counts: &[u32], bases: &mut [u32], tiles: u32, per: u32) {
    let take = st[ST_TAKE];
    let first = min(UNIT_POS * per, tiles);
    let last = min(first + per, tiles);
    let base = tile_bases(counts, bases, first, last, take, 0u32);
    // The last unit's tiles (none, if they ran out) end the output.
    if UNIT_POS == UNITS - 1 {
        st[ST_COUNT] = base;
    }
}

/// The scan of [`air_offsets`] and the segmented select's offsets: each
/// unit of the cube holds the consecutive tiles `first..last` (in unit
/// order), `take` equal keys are taken in all; `bases[2 t..]` = (`start`
/// plus the output offset of tile `t`, how many of its equal keys are
/// taken). Returns the offset after the unit's last tile, without
/// `start` (the last unit's: the output's length). Every unit of the cube
/// must call it: it synchronizes.
#[cube]
pub(crate) fn tile_bases(
    counts: &[u32],
    bases: &mut [u32],
    first: u32,
    last: u32,
    take: u32,
    start: u32,
) -> u32 {
    let mut eq = 0u32;
    for t in first..last {
        eq += counts[t as usize * 2 + 1];
    }
    let mut eq_before = cube_exclusive_scan(eq);
    let mut out = 0u32;
    for t in first..last {
        let e = counts[t as usize * 2 + 1];
        let q = quota(take, eq_before, e);
        eq_before += e;
        out += counts[t as usize * 2] + q;
    }
    let mut base = cube_exclusive_scan(out);
    eq_before = cube_exclusive_scan(eq);
    for t in first..last {
        let e = counts[t as usize * 2 + 1];
        let q = quota(take, eq_before, e);
        eq_before += e;
        bases[t as usize * 2] = start + base;
        bases[t as usize * 2 + 1] = q;
        base += counts[t as usize * 2] + q;
    }
    base
}

/// Per tile: its keys above the k-th key and the first `q` equal to it,
/// merged in index order into the output at the tile's offset, with their
/// values; with `zero`, each selected element of the input becomes `+0.0`
/// once its value is out (the residual's entries taken out).
#[cube(launch_unchecked)]
pub(crate) fn air_emit(
    x: &mut [u32],
    tmp: &[u32],
    counts: &[u32],
    bases: &[u32],
    out_idx: &mut [u32],
    out_val: &mut [u32],
    #[comptime] zero: bool,
) {
    let tile = CUBE_POS;
    if tile < counts.len() / 2 {
        let start = tile * TILE;
        let lists = TileLists {
            start,
            back: start + TILE - 1,
            above: counts[tile * 2],
            q: bases[tile * 2 + 1],
            base: bases[tile * 2],
        };
        emit_lists(x, tmp, &lists, out_idx, out_val, zero);
    }
}

/// The buffers of one top-k: the input's bits, the state words, the two
/// histogram rows, the table, the scratch, the tiles' counts and bases, and
/// the output.
pub(crate) struct AirArgs<'a> {
    pub x: &'a CubeBuffer<u32>,
    pub st: &'a CubeBuffer<u32>,
    pub hist: &'a CubeBuffer<u32>,
    pub table: &'a CubeBuffer<u32>,
    pub tmp: &'a CubeBuffer<u32>,
    pub counts: &'a CubeBuffer<u32>,
    pub bases: &'a CubeBuffer<u32>,
    pub out_idx: &'a CubeBuffer<u32>,
    pub out_val: &'a CubeBuffer<u32>,
}

// SAFETY (every launcher below): each buffer argument covers exactly its
// allocation (`CubeBuffer::arg`); the kernels index the input below its
// length, the state below `ST_WORDS`, the rows below `2 BINS`, the table below `TABLE`
// (a masked digit), the scratch below `tiles * TILE`, the counts and
// bases below `2 tiles`, and check every output position against the
// output's length.

impl AirArgs<'_> {
    /// The input's tiles: one cube each.
    fn tile_grid(&self) -> CubeCount {
        super::grid(self.x.len.div_ceil(TILE))
    }
}

/// Launches [`air_histogram`] over the input's tiles.
pub(crate) fn launch_histogram(client: &Client, a: &AirArgs<'_>, level: u32, order: u32) {
    unsafe {
        launch_kernel!(
            air_histogram,
            client,
            a.tile_grid(),
            [a.x, a.st, a.hist, a.table],
            level,
            order
        )
    }
}

/// Launches [`air_choose`] on one cube.
pub(crate) fn launch_choose(client: &Client, a: &AirArgs<'_>, k: u32, level: u32, rule: u32) {
    unsafe {
        launch_kernel!(
            air_choose,
            client,
            super::grid(1),
            [a.st, a.hist, a.table],
            k,
            level,
            rule
        )
    }
}

/// Launches [`air_collect`] over the input's tiles.
pub(crate) fn launch_collect(client: &Client, a: &AirArgs<'_>, order: u32) {
    unsafe {
        launch_kernel!(
            air_collect,
            client,
            a.tile_grid(),
            [a.x, a.st, a.tmp, a.counts],
            order
        )
    }
}

/// Launches [`air_offsets`] on one cube.
pub(crate) fn launch_offsets(client: &Client, a: &AirArgs<'_>) {
    let tiles = a.x.len.div_ceil(TILE);
    let per = tiles.div_ceil(UNITS as usize) as u32;
    unsafe {
        launch_kernel!(
            air_offsets,
            client,
            super::grid(1),
            [a.st, a.counts, a.bases],
            tiles as u32,
            per
        )
    }
}

/// Launches [`air_emit`] over the input's tiles (with `zero`, taking the
/// selected elements out of the input).
pub(crate) fn launch_emit(client: &Client, a: &AirArgs<'_>, zero: bool) {
    unsafe {
        launch_kernel!(
            air_emit,
            client,
            a.tile_grid(),
            [a.x, a.tmp, a.counts, a.bases, a.out_idx, a.out_val],
            zero
        )
    }
}
