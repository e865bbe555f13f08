//! `x[i] = 0` for every word of a buffer: new buffers cleared on the
//! device, so that `zeros` and the primitives' zeroed counters move no
//! bytes from the host.

use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

#[cube(launch_unchecked)]
pub(crate) fn clear(x: &mut [u32]) {
    let i = ABSOLUTE_POS;
    if i < x.len() {
        x[i] = 0u32;
    }
}

/// Launches [`clear`] over every word of `x` (its whole allocation, the
/// padding of a last partial word included).
pub(crate) fn launch_clear<T>(client: &Client, x: &CubeBuffer<T>) {
    // SAFETY: the buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks every write against
    // that length.
    unsafe { launch_kernel!(clear, client, super::grid(super::cubes_for(x.words)), [x]) }
}
