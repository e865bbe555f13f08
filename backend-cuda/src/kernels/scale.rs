//! `x = a x`.

use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

#[cube(launch_unchecked)]
pub(crate) fn scale(a: f32, x: &mut [f32]) {
    let i = ABSOLUTE_POS;
    if i < x.len() {
        x[i] = a * x[i];
    }
}

/// Launches [`scale`] on `cubes` cubes of [`super::UNITS`] units.
pub(crate) fn launch_scale(client: &Client, cubes: CubeCount, a: f32, x: &CubeBuffer<f32>) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe { launch_kernel!(scale, client, cubes, [], a, x.arg()) }
}
