//! `out[j] = x[indices[j]]` (indices checked beforehand by [`super::outside`]).

use cubecl::prelude::*;

#[cube(launch_unchecked)]
pub(crate) fn gather(x: &[u32], indices: &[u32], out: &mut [u32]) {
    let j = ABSOLUTE_POS;
    if j < out.len() {
        out[j] = x[indices[j] as usize];
    }
}
