//! `dense[indices[j]] = 0` (RGC's factor masking).

use cubecl::prelude::*;

#[cube(launch_unchecked)]
pub(crate) fn mask(dense: &mut [f32], indices: &[u32]) {
    let j = ABSOLUTE_POS;
    if j < indices.len() {
        dense[indices[j] as usize] = 0.0f32;
    }
}
