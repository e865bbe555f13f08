//! Compaction, pass 2: every element whose key is above its segment's key,
//! and the first `take` (in index order) whose key equals it, written in
//! index order.
//!
//! Each unit owns [`ITEMS`] consecutive elements of its tile. Two cube-wide
//! exclusive scans give each unit its rank among the tile's equal keys
//! (hence how many of its equals fit the quota) and then its output
//! position; the host supplied each tile's rank among its segment's equals
//! and its output offset from pass 1's counts.

use super::count::KeyArgs;
use super::{ITEMS, cube_exclusive_scan, key_of, quota, tally};
use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

/// `tiles[3 t..]` = (start, end, segment); `keys[2 s..]` = (key, take);
/// `bases[2 t..]` = (equal keys of the segment before tile `t`, output
/// offset of tile `t`).
#[cube(launch_unchecked)]
pub(crate) fn compact_keys(
    x: &[u32],
    tiles: &[u32],
    keys: &[u32],
    bases: &[u32],
    out_idx: &mut [u32],
    out_val: &mut [u32],
    #[comptime] order: u32,
) {
    let tile = CUBE_POS;
    let mut lo = 0usize;
    let mut hi = 0usize;
    let mut key = 0u32;
    let mut take = 0u32;
    let mut eq_before = 0u32;
    let mut out_base = 0u32;
    if tile < tiles.len() / 3 {
        let start = tiles[tile * 3] as usize;
        let end = tiles[tile * 3 + 1] as usize;
        let seg = tiles[tile * 3 + 2] as usize;
        key = keys[seg * 2];
        take = keys[seg * 2 + 1];
        eq_before = bases[tile * 2];
        out_base = bases[tile * 2 + 1];
        lo = min(start + UNIT_POS as usize * ITEMS, end);
        hi = min(lo + ITEMS, end);
    }
    let (above, equal, _nan, _inf) = tally(x, lo, hi, key, 1usize, order);
    // Rank of this unit's first equal key within the segment.
    let rank = eq_before + cube_exclusive_scan(equal);
    let taken = quota(take, rank, equal);
    let mut out = out_base + cube_exclusive_scan(above + taken);
    let mut r = rank;
    for i in lo..hi {
        let bits = x[i];
        let k = key_of(bits, order);
        let mut keep = k > key;
        if k == key {
            keep = r < take;
            r += 1;
        }
        if keep {
            out_idx[out as usize] = i as u32;
            out_val[out as usize] = bits;
            out += 1;
        }
    }
}

/// Launches [`compact_keys`] over the tiles, with each tile's `bases`
/// (from the first pass's counts), into `out_idx` and `out_val`.
pub(crate) fn launch_compact_keys(
    client: &Client,
    a: &KeyArgs<'_>,
    bases: &CubeBuffer<u32>,
    out_idx: &CubeBuffer<u32>,
    out_val: &CubeBuffer<u32>,
    order: u32,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe {
        launch_kernel!(
            compact_keys,
            client,
            a.tile_grid(),
            [a.x, a.tiles, a.keys, bases, out_idx, out_val],
            order
        )
    }
}
