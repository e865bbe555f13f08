//! Compaction, pass 1: per tile, how many keys are above the segment's key,
//! how many equal it, and how many elements are NaN.

use super::{UNITS, is_nan, key_of};
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
        let mut above = 0u32;
        let mut equal = 0u32;
        let mut nan = 0u32;
        let mut i = start + UNIT_POS as usize;
        while i < end {
            let bits = x[i];
            let k = key_of(bits, order);
            if k > key {
                above += 1;
            }
            if k == key {
                equal += 1;
            }
            if is_nan(bits) {
                nan += 1;
            }
            i += UNITS as usize;
        }
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

/// Launches [`count_keys`] on `cubes` cubes of [`super::UNITS`] units.
pub(crate) fn launch_count_keys(
    client: &Client,
    cubes: CubeCount,
    x: &CubeBuffer<u32>,
    tiles: &CubeBuffer<u32>,
    keys: &CubeBuffer<u32>,
    counts: &CubeBuffer<u32>,
    order: u32,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe {
        count_keys::launch_unchecked(
            client,
            cubes,
            super::cube_dim(),
            x.arg(),
            tiles.arg(),
            keys.arg(),
            counts.arg(),
            order,
        );
    }
}
