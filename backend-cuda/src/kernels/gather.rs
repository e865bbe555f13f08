//! `out[j] = x[indices[j]]`. An index at or past `len` gives 0 and is
//! recorded in the backend's fault words ([`super::record_fault`]). And
//! the sample of [`sparse_core::SelectOps::gather_sampled`], its positions
//! drawn in the kernel.

use super::{counter_u32, mul_hi, record_fault};
use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

#[cube(launch_unchecked)]
pub(crate) fn gather(
    x: &[u32],
    indices: &[u32],
    out: &mut [u32],
    len: u32,
    fault: &mut [Atomic<u32>],
) {
    let j = ABSOLUTE_POS;
    if j < out.len() {
        let i = indices[j];
        if i < len {
            out[j] = x[i as usize];
        } else {
            out[j] = 0u32;
            record_fault(fault, j as u32, i, len);
        }
    }
}

/// Launches [`gather`] on `cubes` cubes of [`super::UNITS`] units.
pub(crate) fn launch_gather(
    client: &Client,
    cubes: CubeCount,
    x: &CubeBuffer<u32>,
    indices: &CubeBuffer<u32>,
    out: &CubeBuffer<u32>,
    fault: &CubeBuffer<u32>,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe {
        launch_kernel!(
            gather,
            client,
            cubes,
            [x, indices, out],
            x.len as u32,
            fault.arg()
        )
    }
}

/// `out[j] = x[(counter_u32(j) * len) >> 32]`: the positions of
/// [`sparse_core::backend::sample_position`], drawn where they are read
/// (always inside `x`: `len >= 1`).
#[cube(launch_unchecked)]
pub(crate) fn gather_sampled(x: &[u32], out: &mut [u32], len: u32, key0: u32, key1: u32) {
    let j = ABSOLUTE_POS;
    if j < out.len() {
        let p = mul_hi(counter_u32(j as u32, key0, key1), len);
        out[j] = x[p as usize];
    }
}

/// Launches [`gather_sampled`] on `cubes` cubes of [`super::UNITS`] units.
pub(crate) fn launch_gather_sampled(
    client: &Client,
    cubes: CubeCount,
    x: &CubeBuffer<u32>,
    out: &CubeBuffer<u32>,
    keys: [u32; 2],
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`); each position is below `x.len` (the high word
    // of `draw * len` with `draw < 2^32`), and the kernel bounds `j` by
    // `out`'s length.
    unsafe {
        launch_kernel!(
            gather_sampled,
            client,
            cubes,
            [x, out],
            x.len as u32,
            keys[0],
            keys[1]
        )
    }
}
