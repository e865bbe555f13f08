//! Compaction, pass 1: per tile, how many keys are above the segment's key,
//! how many equal it, and how many elements are NaN.

use super::{UNITS, tally};
use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

/// `tiles[3 t..3 t + 3]` = (start, end, segment); `keys[2 s]` is segment
/// `s`'s key. Adds to `counts[3 t..3 t + 3]` (zeroed by the caller).
#[cube(launch_unchecked)]
pub(crate) fn count_keys(
    x: &[u32],
    tiles: &[u32],
    keys: &[u32],
    counts: &mut [Atomic<u32>],
    #[comptime] order: u32,
) {
    let tile = CUBE_POS;
    if tile < tiles.len() / 3 {
        let start = tiles[tile * 3] as usize;
        let end = tiles[tile * 3 + 1] as usize;
        let key = keys[tiles[tile * 3 + 2] as usize * 2];
        let from = start + UNIT_POS as usize;
        let (above, equal, nan, _inf) = tally(x, from, end, key, comptime![UNITS as usize], order);
        if above > 0 {
            counts[tile * 3].fetch_add(above);
        }
        if equal > 0 {
            counts[tile * 3 + 1].fetch_add(equal);
        }
        if nan > 0 {
            counts[tile * 3 + 2].fetch_add(nan);
        }
    }
}

/// The buffers both passes of the compaction read: the input's bits, its
/// tiles (`(start, end, segment)` triples, one cube each) and the
/// segments' `(key, take)` pairs.
pub(crate) struct KeyArgs<'a> {
    pub x: &'a CubeBuffer<u32>,
    pub tiles: &'a CubeBuffer<u32>,
    pub keys: &'a CubeBuffer<u32>,
}

impl KeyArgs<'_> {
    /// One cube per tile.
    pub(crate) fn tile_grid(&self) -> CubeCount {
        super::grid(self.tiles.len / 3)
    }
}

/// Launches [`count_keys`] over the tiles, adding to `counts`.
pub(crate) fn launch_count_keys(
    client: &Client,
    a: &KeyArgs<'_>,
    counts: &CubeBuffer<u32>,
    order: u32,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe {
        launch_kernel!(
            count_keys,
            client,
            a.tile_grid(),
            [a.x, a.tiles, a.keys, counts],
            order
        )
    }
}
