//! TopkDSA (Renggli et al., as SparDL's Table 1 and experiments run it).

use crate::algorithm::{Catalog, Defaults, Params, Promises, Registered, SparseAllreduce};
use crate::algorithms::split_allgather::{Gather, Phase, split_admit, split_allgather};
use crate::profile::{Profile, bytes_cost};
use crate::{Admission, Entered, Reduced, Transport};
use sparse_core::cost::{self, Cost};
use sparse_core::{Element, Result, SparseVec};

/// TopkDSA, the dynamic sparse allreduce of Renggli et al. (SparCML) as
/// SparDL's Table 1 and experiments run it: the split phase of
/// [`crate::SsarSplitAllgather`] (`P - 1` direct steps; each owner sums its
/// partition), then a recursive-doubling allgather
/// ([`crate::dense::recursive_doubling_allgather`]) of the partitions, each
/// a sparse stream that turns dense past delta, so the allgather moves
/// between `2k (P - 1) / P` and `n (P - 1) / P` words. Lossless.
///
/// Rounds: `(P - 1) + lg P` for a power of two; otherwise MPICH's fold adds
/// two rounds for the folded ranks. Table 1's `P + 2 lg P` also counts the
/// exchange of sizes that `MPI_Allgatherv` needs first; here each block
/// carries its length, so that exchange is not needed.
///
/// Memory per rank: its input split into `P` partitions, the received pieces
/// and the result: `O((4 + E) (nnz + result))` bytes; a partition that fills
/// in past delta travels dense, so at most `n (2 E + 4)` bytes for a dense
/// result (`E` the element's bytes).
///
/// Registry name `topk_dsa`.
///
/// # Errors
/// [`sparse_core::Error::Disagreement`], transport errors, [`sparse_core::Error::Corrupt`].
#[derive(Debug, Clone, Copy, Default)]
pub struct TopkDsa;

/// The registry name, from which the entry id derives.
pub(crate) const NAME: &str = "topk_dsa";

impl<E: Element> SparseAllreduce<E> for TopkDsa {
    fn name(&self) -> String {
        NAME.into()
    }
    fn lossless(&self) -> bool {
        true
    }
    /// The split phase, then every other partition as a stream; a rank
    /// folded out of the recursive doubling (`P` not a power of two) also
    /// receives its partner's partition. `(P - 1)` direct steps plus the
    /// fold's rounds.
    fn cost(&self, prof: &Profile) -> Cost {
        let p = prof.p;
        let part = 4.0 + prof.partition_stream_bytes();
        let folded = if p.is_power_of_two() { 0.0 } else { part };
        let bytes = prof.split_phase_bytes() + prof.others() * part + folded;
        bytes_cost(
            (p - 1) as f64 + crate::algorithms::ssar::fold_rounds(p),
            bytes,
        )
    }
    fn paper_cost(&self, prof: &Profile) -> Option<Cost> {
        Some(prof.within(topk_dsa(prof.p, prof.n, prof.k_avg())))
    }
    fn admit(&mut self, t: &dyn Transport, v: &SparseVec<E>) -> Option<Admission> {
        Some(split_admit(t, v, Phase::Sparse, NAME))
    }
    fn agreed_body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        _: Entered,
        out: &mut Reduced<E>,
    ) -> Result<Result<()>> {
        split_allgather(t, v, Phase::Sparse, Gather::RecursiveDoubling, out).map(Ok)
    }
}

impl<E: Element> Promises<E> for TopkDsa {
    /// `P - 1` direct steps, then the recursive doubling with MPICH's fold.
    fn expected_rounds(&self, p: usize, r: usize) -> Option<u64> {
        Some(p as u64 - 1 + crate::algorithms::ssar::fold_rounds_of(p, r))
    }
    /// The split phase's pieces and the partitions' stream blocks; a rank
    /// folded out receives only the result's blocks, its partner its
    /// partition too.
    fn expected_bytes(&self, ins: &[SparseVec<E>], r: usize) -> Option<u64> {
        let p = ins.len();
        let rem = p - (1usize << p.ilog2());
        let split = crate::algorithms::split_allgather::split_bytes(ins, r, false);
        Some(match (r < 2 * rem, r.is_multiple_of(2)) {
            (true, true) => {
                split + 4 + crate::algorithms::split_allgather::block_bytes(ins, r, false)
            }
            (true, false) => split - 4,
            _ => split,
        })
    }
}

impl<E: Element> Registered<E> for TopkDsa {
    const NAME: &'static str = NAME;
    const LOSSLESS: bool = true;
    const WARM: bool = true;
    const PLANNED: bool = true;
    const PARAMS: &'static str = "";
    const HELP: &'static str =
        "split, then recursive-doubling allgather of dynamic streams (SparDL's TopkDSA); lossless";
    fn build(_: &mut Params, _: Defaults, _: &dyn Catalog<E>) -> Result<Self> {
        Ok(Self)
    }
}

// SparDL's Table 1 formula for TopkDSA.

/// TopkDSA (SparDL Table 1, after Renggli et al.): `P + 2 lg P` rounds,
/// `[4 (P - 1) / P k, (P - 1) / P (2k + n)]` words.
pub fn topk_dsa(p: usize, n: usize, k: usize) -> cost::Bounds {
    let r = p as f64 + 2.0 * cost::ceil_log2(p) as f64;
    cost::Bounds {
        lo: Cost::new(r, 4.0 * crate::profile::frac(p) * k as f64),
        hi: Cost::new(r, crate::profile::frac(p) * (2.0 * k as f64 + n as f64)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spardl_table1_by_hand() {
        // P = 8, k = 100, n = 10_000.
        let dsa = topk_dsa(8, 10_000, 100);
        assert_eq!(dsa.lo, Cost::new(14.0, 350.0)); // 4 * 7/8 * 100
        assert_eq!(dsa.hi, Cost::new(14.0, 8925.0)); // 7/8 * (200 + 10000)
    }
}
