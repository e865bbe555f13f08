//! Error feedback fused with the first pass of the exact top-k
//! ([`super::air`]): each cube folds its tile of the gradient into the
//! residual (`v += gain g`, or RGC's `u = m u + g; v += u`) and counts the
//! first digit (bits 31..21) of the updated residual's magnitude keys in a
//! shared histogram, whose non-zero bins it adds to row 1 of the top-k's
//! histogram: the accumulation and the selection's first pass are one
//! read of the arrays.

use super::air::BINS;
use super::{ABS, TILE, UNITS, add_bins, key_of, zeroed_bins};
use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

/// `v[i] += gain g[i]`, or with `momentum` `u[i] = m u[i] + g[i];
/// v[i] += u[i]`, then the first digit of `v[i]`'s magnitude key into
/// `hist[0..BINS]` (zeroed by the caller).
#[cube(launch_unchecked)]
pub(crate) fn feedback_histogram(
    v: &mut [f32],
    g: &[f32],
    u: &mut [f32],
    hist: &mut [Atomic<u32>],
    gain: f32,
    m: f32,
    #[comptime] momentum: bool,
) {
    let local = zeroed_bins(BINS);
    let unit = UNIT_POS as usize;
    let start = CUBE_POS * TILE;
    let end = min(start + TILE, v.len());
    let mut i = start + unit;
    while i < end {
        let mut r = v[i];
        if comptime![momentum] {
            let ui = u[i] * m + g[i];
            u[i] = ui;
            r = r + ui;
        } else {
            r = r + gain * g[i];
        }
        v[i] = r;
        let k = key_of(u32::reinterpret(r), ABS);
        local[(k >> 21u32) as usize].fetch_add(1u32);
        i += UNITS as usize;
    }
    sync_cube();
    add_bins(&local, hist, 0usize, BINS);
}

/// Launches [`feedback_histogram`] over the residual's tiles: `v += gain
/// g`, or with `momentum` (`u` and its factor) RGC's update; without one,
/// `spare` (any buffer but `v` and `g`) is bound in `u`'s place.
pub(crate) fn launch_feedback_histogram(
    client: &Client,
    v: &CubeBuffer<f32>,
    g: &CubeBuffer<f32>,
    hist: &CubeBuffer<u32>,
    gain: f32,
    momentum: Option<(&CubeBuffer<f32>, f32)>,
    spare: &CubeBuffer<f32>,
) {
    let (u, m) = momentum.unwrap_or((spare, 0.0));
    let cubes = super::grid(v.len.div_ceil(TILE));
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`); the caller checked that `g` (and, with
    // `momentum`, `u`) is as long as `v`, the kernel reads and writes them
    // below `v`'s length only, and the histogram at a masked 11-bit digit
    // (`hist` holds at least `BINS` words).
    unsafe {
        launch_kernel!(
            feedback_histogram,
            client,
            cubes,
            [v, g, u, hist],
            gain,
            m,
            momentum.is_some()
        )
    }
}
