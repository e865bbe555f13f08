//! Counts the indices outside `lo..lo + len`: the device half of every
//! index check (the host names the first offender only when this is
//! non-zero).

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
