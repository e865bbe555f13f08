//! `dense[indices[j]] = 0` (RGC's factor masking).

use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

#[cube(launch_unchecked)]
pub(crate) fn mask(dense: &mut [f32], indices: &[u32]) {
    let j = ABSOLUTE_POS;
    if j < indices.len() {
        dense[indices[j] as usize] = 0.0f32;
    }
}

/// Launches [`mask`] on `cubes` cubes of [`super::UNITS`] units.
pub(crate) fn launch_mask(
    client: &Client,
    cubes: CubeCount,
    dense: &CubeBuffer<f32>,
    indices: &CubeBuffer<u32>,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe {
        mask::launch_unchecked(client, cubes, super::cube_dim(), dense.arg(), indices.arg());
    }
}
