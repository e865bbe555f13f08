//! `y = a x + y`.

use cubecl::prelude::*;

#[cube(launch_unchecked)]
pub(crate) fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        y[i] = a * x[i] + y[i];
    }
}
