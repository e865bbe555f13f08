//! `dense[indices[j]] += values[j]` for unique indices: one unit per entry,
//! no atomics needed. An index at or past `len` changes nothing and is
//! recorded in the backend's fault words ([`super::record_fault`]).

use super::record_fault;
use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

#[cube(launch_unchecked)]
pub(crate) fn scatter_add(
    dense: &mut [f32],
    indices: &[u32],
    values: &[f32],
    len: u32,
    fault: &mut [Atomic<u32>],
) {
    let j = ABSOLUTE_POS;
    if j < values.len() {
        let i = indices[j];
        if i < len {
            dense[i as usize] = dense[i as usize] + values[j];
        } else {
            record_fault(fault, j as u32, i, len);
        }
    }
}

/// Launches [`scatter_add`] on `cubes` cubes of [`super::UNITS`] units.
pub(crate) fn launch_scatter_add(
    client: &Client,
    cubes: CubeCount,
    dense: &CubeBuffer<f32>,
    indices: &CubeBuffer<u32>,
    values: &CubeBuffer<f32>,
    fault: &CubeBuffer<u32>,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe {
        launch_kernel!(
            scatter_add,
            client,
            cubes,
            [dense, indices, values],
            dense.len as u32,
            fault.arg()
        )
    }
}
