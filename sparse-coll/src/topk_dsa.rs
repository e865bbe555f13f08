//! TopkDSA (Renggli et al., as SparDL's Table 1 and experiments run it).

use crate::Transport;
use crate::sparse::{Id, Reduced};
use crate::split_allgather::{Gather, Phase, split_allgather};
use sparse_core::{Element, Result, SparseVec};

/// TopkDSA, the dynamic sparse allreduce of Renggli et al. (SparCML) as
/// SparDL's Table 1 and experiments run it: the split phase of
/// [`crate::ssar_split_allgather`] (`P - 1` direct steps; each owner sums its
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
/// # Errors
/// [`sparse_core::Error::Disagreement`], transport errors, [`sparse_core::Error::Corrupt`].
pub fn topk_dsa<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
) -> Result<Reduced<E>> {
    split_allgather(t, v, Phase::Sparse, Gather::RecursiveDoubling, Id::TopkDsa)
}
