//! `x = a x`.

use cubecl::prelude::*;

#[cube(launch_unchecked)]
pub(crate) fn scale(a: f32, x: &mut [f32]) {
    let i = ABSOLUTE_POS;
    if i < x.len() {
        x[i] = a * x[i];
    }
}
