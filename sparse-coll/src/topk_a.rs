//! TopkA / AGsparse (RedSync sec. 5.3, SparDL Table 1): every rank's
//! selected pairs are allgathered and summed locally.

use crate::Transport;
use crate::dense::bruck_allgather;
use crate::sparse::{Id, Reduced, enter, put_pairs, read_pairs};
use sparse_core::{Element, Result, SparseVec};

/// TopkA: each rank's `(indices, values)`, packed behind a 4-byte length
/// (indices then values), is allgathered with Bruck's algorithm (any `P`,
/// `ceil(lg P)` rounds); every rank then sums the `P` vectors in rank order,
/// so the result is bitwise identical everywhere. Lossless. A rank receives
/// `sum over other ranks q of (4 + nnz_q (4 + isize))` bytes: with `k` each,
/// SparDL's `2 (P - 1) k` words plus the framing.
///
/// Memory per rank: the `P` gathered messages and the merged result, about `2
/// (4 + E) K` bytes for `K` entries over all ranks (`E` the element's bytes).
///
/// # Errors
/// [`sparse_core::Error::Disagreement`] if ranks pass different dimensions;
/// transport errors; [`sparse_core::Error::Corrupt`] for malformed messages.
pub fn topk_a<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
) -> Result<Reduced<E>> {
    let start = enter(t, Id::TopkA, v, &[], Ok(()))?;
    let mut packed = Vec::with_capacity(v.nnz() * (4 + E::BYTES));
    put_pairs(&mut packed, v);
    let all = bruck_allgather(t, &packed)?;
    let mut result = SparseVec::zeros(v.dim())?;
    for b in &all {
        // The Bruck frame carries the length: nnz follows from it.
        let part = read_pairs(b, b.len() / (4 + E::BYTES), v.dim(), "topk_a message")?;
        result = result.merge_sum(&part)?;
    }
    Ok(Reduced {
        result,
        dropped: SparseVec::zeros(v.dim())?,
        traffic: t.traffic().since(&start),
    })
}
