//! TopkA / AGsparse (RedSync sec. 5.3, SparDL Table 1): every rank's
//! selected pairs are allgathered and summed locally.

use crate::Transport;
use crate::algorithm::{Defaults, Params, Registered, SparseAllreduce};
use crate::dense::bruck_allgather;
use crate::plan::{Profile, bytes_cost};
use crate::sparse::{Id, Reduced, enter, put_pairs, read_pairs};
use sparse_core::cost::{self, Cost};
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

/// [`topk_a`] as a [`SparseAllreduce`] (registry name `topk_a`).
#[derive(Debug, Clone, Copy, Default)]
pub struct TopkA;

impl<E: Element> SparseAllreduce<E> for TopkA {
    fn name(&self) -> String {
        "topk_a".into()
    }
    fn lossless(&self) -> bool {
        true
    }
    /// Every other rank's framed pairs, in `ceil(lg P)` rounds.
    fn cost(&self, prof: &Profile) -> Cost {
        let bytes = prof.others() * (4.0 + prof.pair_bytes() * prof.k_avg() as f64);
        bytes_cost(cost::ceil_log2(prof.p) as f64, bytes)
    }
    /// Table 1 with the mean `k`.
    fn paper_cost(&self, prof: &Profile) -> Option<Cost> {
        Some(cost::topk_a(prof.p, prof.k_avg()))
    }
    fn allreduce(&mut self, t: &mut dyn Transport, v: &SparseVec<E>) -> Result<Reduced<E>> {
        topk_a(t, v)
    }
}

impl<E: Element> Registered<E> for TopkA {
    const NAME: &'static str = "topk_a";
    const PARAMS: &'static str = "";
    const HELP: &'static str =
        "allgather of every rank's pairs, summed in rank order (RedSync, SparDL's TopkA); lossless";
    fn build(_: &mut Params, _: Defaults) -> Result<Self> {
        Ok(Self)
    }
}
