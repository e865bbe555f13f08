//! `dense[indices[j]] = 0` (RGC's factor masking). An index at or past
//! `len` changes nothing and is recorded in the backend's fault words
//! ([`super::record_fault`]).

use super::record_fault;
use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

#[cube(launch_unchecked)]
pub(crate) fn mask(dense: &mut [f32], indices: &[u32], len: u32, fault: &mut [Atomic<u32>]) {
    let j = ABSOLUTE_POS;
    if j < indices.len() {
        let i = indices[j];
        if i < len {
            dense[i as usize] = 0.0f32;
        } else {
            record_fault(fault, j as u32, i, len);
        }
    }
}

/// Launches [`mask`] on `cubes` cubes of [`super::UNITS`] units.
pub(crate) fn launch_mask(
    client: &Client,
    cubes: CubeCount,
    dense: &CubeBuffer<f32>,
    indices: &CubeBuffer<u32>,
    fault: &CubeBuffer<u32>,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe {
        launch_kernel!(
            mask,
            client,
            cubes,
            [dense, indices],
            dense.len as u32,
            fault.arg()
        )
    }
}
