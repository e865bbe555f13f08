//! `y = a x + y`.

use crate::CubeBuffer;
use cubecl::client::Client;
use cubecl::prelude::*;

#[cube(launch_unchecked)]
pub(crate) fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        y[i] = a * x[i] + y[i];
    }
}

/// Launches [`axpy`] on `cubes` cubes of [`super::UNITS`] units.
pub(crate) fn launch_axpy(
    client: &Client,
    cubes: CubeCount,
    a: f32,
    x: &CubeBuffer<f32>,
    y: &CubeBuffer<f32>,
) {
    // SAFETY: every buffer argument covers exactly its allocation
    // (`CubeBuffer::arg`), and the kernel bounds-checks its accesses against
    // those lengths and the offsets its caller derived from them.
    unsafe { launch_kernel!(axpy, client, cubes, [], a, x.arg(), y.arg()) }
}
