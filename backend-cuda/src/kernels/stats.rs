//! `max |x|`, `sum |x|`, `sum x^2`, the count of `|x| > t` and the count of NaNs, one
//! pass: each cube reduces its tile to one partial per statistic, and the
//! host finishes over the partials (the sum in `f64`).

use super::{TILE, UNITS, cube_reduce, is_nan};
use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

/// `parts[5 c..5 c + 5]` = (max magnitude key, count of keys above `tkey`,
/// NaN count, bits of the `f32` sum of `|x|` and of the `f32` sum of `x^2`,
/// NaNs left out) of tile `c`: one buffer, so the host reads the partials
/// back in one transfer.
#[cube(launch_unchecked)]
pub(crate) fn abs_stats(x: &[u32], tkey: u32, parts: &mut [u32]) {
    let tile = CUBE_POS;
    let start = tile * TILE;
    let mut mx = 0u32;
    let mut above = 0u32;
    let mut nan = 0u32;
    let mut sum = 0.0f32;
    let mut squares = 0.0f32;
    let mut i = start + UNIT_POS as usize;
    let end = min(start + TILE, x.len());
    while i < end {
        let bits = x[i];
        let k = bits & 0x7fff_ffffu32;
        if is_nan(bits) {
            nan += 1;
        } else {
            mx = max(mx, k);
            let a = f32::reinterpret(k);
            sum += a;
            squares += a * a;
        }
        if k > tkey {
            above += 1;
        }
        i += UNITS as usize;
    }
    let mx = cube_reduce::<u32>(mx, true);
    let above = cube_reduce::<u32>(above, false);
    let nan = cube_reduce::<u32>(nan, false);
    let sum = cube_reduce::<f32>(sum, false);
    let squares = cube_reduce::<f32>(squares, false);
    if UNIT_POS == 0 && start < x.len() {
        parts[tile * 5] = mx;
        parts[tile * 5 + 1] = above;
        parts[tile * 5 + 2] = nan;
        parts[tile * 5 + 3] = u32::reinterpret(sum);
        parts[tile * 5 + 4] = u32::reinterpret(squares);
    }
}

/// Launches [`abs_stats`] on `cubes` cubes of [`super::UNITS`] units.
pub(crate) fn launch_abs_stats(
    client: &Client,
    cubes: CubeCount,
    x: &CubeBuffer<u32>,
    tkey: u32,
    parts: &CubeBuffer<u32>,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe { launch_kernel!(abs_stats, client, cubes, [x], tkey, parts.arg()) }
}
