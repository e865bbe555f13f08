//! `dense[indices[j]] += values[j]` for unique, checked indices: one unit
//! per entry, no atomics needed.

use cubecl::prelude::*;

#[cube(launch_unchecked)]
pub(crate) fn scatter_add(dense: &mut [f32], indices: &[u32], values: &[f32]) {
    let j = ABSOLUTE_POS;
    if j < values.len() {
        let i = indices[j] as usize;
        dense[i] = dense[i] + values[j];
    }
}
