//! `out[j] = x[indices[j]]` (indices checked beforehand by [`super::outside`]).

use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

#[cube(launch_unchecked)]
pub(crate) fn gather(x: &[u32], indices: &[u32], out: &mut [u32]) {
    let j = ABSOLUTE_POS;
    if j < out.len() {
        out[j] = x[indices[j] as usize];
    }
}

/// Launches [`gather`] on `cubes` cubes of [`super::UNITS`] units.
pub(crate) fn launch_gather(
    client: &Client,
    cubes: CubeCount,
    x: &CubeBuffer<u32>,
    indices: &CubeBuffer<u32>,
    out: &CubeBuffer<u32>,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe {
        gather::launch_unchecked(
            client,
            cubes,
            super::cube_dim(),
            x.arg(),
            indices.arg(),
            out.arg(),
        );
    }
}
