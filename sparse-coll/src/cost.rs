//! The cost model, with every paper's formula: the model itself
//! ([`Cost`], [`Bounds`], the alpha-beta time, the logarithms) and the
//! dense baselines (ring, recursive doubling, Rabenseifner, Bruck) are
//! `sparse_core::cost`'s, re-exported here; each sparse
//! algorithm's formula from its paper is defined in that algorithm's file,
//! beside the collective it describes and the cost it predicts, and
//! re-exported here for callers that want the bare formula (tests, tables):
//!
//! - SparDL's Table 1: [`topk_a`], [`topk_dsa`], [`gtopk`], [`ok_topk`],
//!   SparDL's Eq. 3, 5 and 6 ([`spardl`], [`spardl_rsag`],
//!   [`spardl_bsag`]);
//! - SparCML: [`ssar_recursive_double`], [`ssar_split_allgather`],
//!   [`dsar_split_allgather`], and its lower bounds (Lemmas 5.1-5.2,
//!   [`sparse_allreduce_lower_bound`], [`dsar_lower_bound`]) in the
//!   split-allgather file, whose algorithms meet them;
//! - RedSync's Eq. 1 ([`redsync_sparse_time`]) with TopkA, the
//!   allgather-based synchronisation it times, and its Eq. 2
//!   ([`redsync_dense_time`], the dense allreduce it weighs TopkA against);
//! - Zen's Eq. 1 ([`zen_balanced_parallelism`]) with Zen's Balanced
//!   Parallelism, its Eq. 2 ([`zen_hierarchical_centralization`]) with
//!   SparCML's recursive doubling, which Zen's Table 3 classifies as its
//!   Hierarchical Centralization.
//!
//! Units as `sparse_core::cost`'s: rounds and 32-bit words received per
//! rank, a sparse element two words.

pub use crate::algorithms::gtopk::gtopk;
pub use crate::algorithms::ok_topk::ok_topk;
pub use crate::algorithms::spardl::{spardl, spardl_bsag, spardl_rsag};
pub use crate::algorithms::split_allgather::{
    dsar_lower_bound, dsar_split_allgather, sparse_allreduce_lower_bound, ssar_split_allgather,
};
pub use crate::algorithms::ssar::{ssar_recursive_double, zen_hierarchical_centralization};
pub use crate::algorithms::topk_a::{redsync_dense_time, redsync_sparse_time, topk_a};
pub use crate::algorithms::topk_dsa::topk_dsa;
pub use crate::algorithms::zen::zen_balanced_parallelism;
pub use sparse_core::cost::*;
