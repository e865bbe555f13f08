//! Counts the indices outside `lo..lo + len`: the device half of every
//! index check (the host names the first offender only when this is
//! non-zero).

use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

#[cube(launch_unchecked)]
pub(crate) fn count_outside(indices: &[u32], lo: u32, len: u32, count: &mut [Atomic<u32>]) {
    let j = ABSOLUTE_POS;
    if j < indices.len() {
        let i = indices[j];
        if i < lo || i - lo >= len {
            count[0].fetch_add(1u32);
        }
    }
}

/// Launches [`count_outside`] on `cubes` cubes of [`super::UNITS`] units.
pub(crate) fn launch_count_outside(
    client: &Client,
    cubes: CubeCount,
    indices: &CubeBuffer<u32>,
    lo: u32,
    len: u32,
    count: &CubeBuffer<u32>,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe {
        launch_kernel!(
            count_outside,
            client,
            cubes,
            [indices],
            lo,
            len,
            count.arg()
        )
    }
}
