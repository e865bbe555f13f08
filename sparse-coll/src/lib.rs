//! # sparse-coll
//!
//! Collectives generic over a small [`Transport`] trait (rank, size, send,
//! receive, and an exchange whose target and source may differ), with
//! traffic counted per rank, and a [`Group`] view of a subset of ranks.
//!
//! - the embedded thread transport ([`ThreadCluster`]) and, with the
//!   feature `mpi`, `MpiTransport` over MPICH;
//! - non-blocking collectives ([`nonblocking`]): start, compute, wait;
//! - dense baselines ([`dense`]): ring, recursive doubling, Rabenseifner,
//!   Bruck and recursive-doubling allgather, functions of that module (they
//!   are not sparse allreduces);
//! - the sparse-allreduce contract ([`Reduced`], [`agree`]);
//! - lossless sparse allreduces: TopkA ([`TopkA`]), TopkDSA ([`TopkDsa`]),
//!   SparCML's SSAR_Recursive_double, SSAR_Split_allgather and
//!   DSAR_Split_allgather ([`SsarRecursiveDouble`],
//!   [`SsarSplitAllgather`], [`DsarSplitAllgather`]; QSGD makes the last
//!   lossy), Zen's Balanced Parallelism ([`ZenBalancedParallelism`]; its
//!   Hierarchical Centralization is SparCML's recursive doubling, as Zen's
//!   Table 3 classifies it) and the OmniReduce-style block baseline
//!   ([`OmniReduceBlocks`]);
//! - lossy ones, which return what they cut in `dropped`: gTopk
//!   ([`Gtopk`]), Ok-Topk ([`OkTopk`]), SparDL ([`Spardl`]) and SparDL with
//!   R-SAG ([`SpardlRsag`]) or B-SAG ([`SpardlBsag`]);
//! - one way to call all of them: the object-safe [`SparseAllreduce`]
//!   (name, lossless, predicted cost for an input's [`Profile`], the call
//!   in two steps, an entry round and a body, with its state across calls;
//!   `allreduce` and `allreduce_into`), a [`Registry`] of names with parameters
//!   (`spardl_bsag:k=40,d=2`) that a user's own algorithms join, and the
//!   [`Auto`] planner over any of them;
//! - the framing a collective of your own needs ([`wire`]).
//!
//! Adding a built-in algorithm is one file (the collective and a type
//! implementing [`SparseAllreduce`] and [`Registered`]) plus one line in
//! [`Registry::builtin`]; the suite, `sparse-bench` and the planner read the
//! algorithms from the registry. `examples/custom_scheme.rs` adds one from
//! outside the crate.
//! - with the feature `testing`, the collective suite every transport runs
//!   (`testing::collective_suite`).
//!
//! ```
//! use sparse_coll::{ThreadCluster, Transport, dense};
//!
//! let results = ThreadCluster::new(3).run(|t| {
//!     let mine = vec![t.rank() as f32 + 1.0; 4];
//!     dense::ring_allreduce(t, &mine)
//! });
//! for r in results {
//!     assert_eq!(r?, vec![6.0; 4]);
//! }
//! # Ok::<(), sparse_core::Error>(())
//! ```

//! Any algorithm by name, with the state it keeps across calls:
//!
//! ```
//! use sparse_coll::{Defaults, Registry, ThreadCluster, Transport};
//! use sparse_core::SparseVec;
//!
//! // Four ranks, each with two entries of a 1000-dimensional gradient.
//! let results = ThreadCluster::new(4).run(|t| {
//!     let r = t.rank() as u32;
//!     let v = SparseVec::new(1000, vec![r, 500 + r], vec![1.0f32, 2.0])?;
//!     let mut spardl = Registry::builtin().build("spardl:k=4", Defaults { k: 0 })?;
//!     spardl.allreduce(t, &v)
//! });
//! for r in results {
//!     let red = r?;
//!     // result + every rank's dropped = the exact sum (global residual collection).
//!     assert!(red.result.nnz() <= 4);
//! }
//! # Ok::<(), sparse_core::Error>(())
//! ```

mod algorithm;
pub mod dense;
mod group;
mod gtopk;
#[cfg(feature = "mpi")]
mod mpi_transport;
pub mod nonblocking;
mod ok_topk;
mod omnireduce;
mod plan;
mod push_pull;
mod spardl;
pub mod sparse;
mod split_allgather;
mod ssar;
#[cfg(feature = "testing")]
pub mod testing;
mod thread;
mod topk_a;
mod topk_dsa;
mod transport;
mod values;
pub mod wire;
mod zen;

pub use algorithm::{Catalog, Defaults, Entry, Params, Registered, Registry, SparseAllreduce};
pub use group::{Group, Members};
pub use gtopk::Gtopk;
#[cfg(feature = "mpi")]
pub use mpi_transport::MpiTransport;
pub use ok_topk::OkTopk;
pub use omnireduce::OmniReduceBlocks;
pub use plan::{AUTO_ALPHA, AUTO_BETA, Auto, Profile};
pub use spardl::{Spardl, SpardlBsag, SpardlRsag};
pub use sparse::{Entered, Reduced, agree, agree_or_fail};
pub use split_allgather::{DsarSplitAllgather, SsarSplitAllgather};
pub use ssar::SsarRecursiveDouble;
pub use thread::{ThreadCluster, ThreadTransport};
pub use topk_a::TopkA;
pub use topk_dsa::TopkDsa;
pub use transport::{
    BufferPool, Intercept, Intercepting, Traffic, TrafficCounter, Transport, guard,
};
pub use zen::{ZenBalancedParallelism, ZenStats, zen_pieces};
