#![doc = include_str!("../README.md")]
//!
//! ## Where things are
//!
//! - transports: [`Transport`], [`ThreadCluster`], [`Group`] (a subset of
//!   ranks), the simulated cluster ([`sim`]) and, with the feature `mpi`,
//!   `MpiTransport`; non-blocking calls ([`nonblocking`]): start, compute,
//!   wait;
//! - dense baselines: functions of [`dense`] (they are not sparse
//!   allreduces);
//! - the contract of a sparse allreduce: [`SparseAllreduce`] (name,
//!   lossless, predicted cost for an input's [`Profile`], the call in two
//!   steps, an entry round and a body, with its state across calls),
//!   [`Reduced`], [`agree`];
//! - the algorithms: [`TopkA`], [`TopkDsa`], [`SsarRecursiveDouble`],
//!   [`SsarSplitAllgather`], [`DsarSplitAllgather`],
//!   [`ZenBalancedParallelism`] (Zen's Hierarchical Centralization is
//!   SparCML's recursive doubling, as Zen's Table 3 classifies it),
//!   [`OmniReduceBlocks`], [`Gtopk`], [`OkTopk`], [`Spardl`],
//!   [`SpardlRsag`], [`SpardlBsag`], [`Hierarchical`]; the planner
//!   [`Auto`]; the [`Registry`] of names with parameters
//!   (`spardl_bsag:k=40,d=2`);
//! - the framing a collective of your own needs ([`wire`]); with the
//!   feature `testing`, the collective suite every transport runs
//!   (`testing::collective_suite`).
//!
//! Adding a built-in algorithm is one file (the collective and a type
//! implementing [`SparseAllreduce`] and [`Registered`], with every fact
//! about it) plus one line in [`Registry::builtin`]; the suite,
//! `sparse-bench` and the planner read the algorithms from the registry
//! (`docs/adding-an-algorithm.md`). `examples/custom_scheme.rs` adds one
//! from outside the crate.
//!
//! A dense baseline:
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
//!     let mut spardl = Registry::builtin().build("spardl:k=4", Defaults::lossless())?;
//!     spardl.allreduce(t, &v)
//! });
//! for r in results {
//!     let red = r?;
//!     // result + every rank's dropped = the exact sum (global residual collection).
//!     assert!(red.result.nnz() <= 4);
//! }
//! # Ok::<(), sparse_core::Error>(())
//! ```

// The modules in dependency order: each uses only those above it (and
// `crate::` re-exports of them), so there is no import cycle
// (`scripts/check-structure.py` checks it).
//
// 1. `bytes`: little-endian bytes (the leaf).
// 2. `transport` (`mod.rs`: the trait, traffic, buffer pool, `guard`,
//    `Intercepting`; `ring.rs`: the default dense allreduce;
//    `allgather.rs`: the Bruck allgather; `agree.rs`: the agreement round
//    on it; the transports `thread`, `group`, `mpi`, whose dense allreduce
//    agrees on its length through `agree`).
// 3. `dense`: the dense collectives and allgathers (on 1-2).
// 4. `entry`: the contract (`Reduced`) and the entry round (on 1-3).
// 5. `frame`: sparse pairs, blocks and streams on the wire (on 1);
//    `failure`: failures agreed inside a call's body (on 2).
// 6. `values`: the wire values (on 1, 2, 5).
// 7. `profile`: what the cost model knows of a call (on 6).
// 8. `algorithm`: the `SparseAllreduce` and `Registered` traits,
//    parameters, `Catalog` (on 2, 4, 7).
// 9. `algorithms::*`: one file per built-in algorithm (on 1-8;
//    `topk_dsa` on `split_allgather` and `ssar`, `omnireduce` and `zen` on
//    `push_pull`).
// 10. `plan`: the `Auto` planner (on 2, 4, 7, 8).
// 11. `registry`: names to algorithms (on 8-10).
// 12. `wire` (the public framing for a user's algorithm: re-exports of
//     1, 2, 4, 5 and 6), `nonblocking` (on 2),
//     `sim` (on 2), `testing` (on all).
mod algorithm;
mod algorithms;
mod bytes;
pub mod cost;
pub mod dense;
mod entry;
mod failure;
mod frame;
mod joint;
pub mod nonblocking;
mod plan;
mod profile;
mod registry;
mod scratch;
pub mod sim;
#[cfg(feature = "testing")]
pub mod testing;
mod transport;
mod values;
pub mod wire;

pub use algorithm::{
    Budget, Catalog, Defaults, Facts, Params, Promises, Registered, SparseAllreduce,
};
pub use algorithms::gtopk::Gtopk;
pub use algorithms::hierarchical::Hierarchical;
pub use algorithms::ok_topk::OkTopk;
pub use algorithms::omnireduce::OmniReduceBlocks;
pub use algorithms::spardl::{Spardl, SpardlBsag, SpardlRsag};
pub use algorithms::split_allgather::{DsarSplitAllgather, SsarSplitAllgather};
pub use algorithms::ssar::SsarRecursiveDouble;
pub use algorithms::topk_a::TopkA;
pub use algorithms::topk_dsa::TopkDsa;
pub use algorithms::zen::{
    HostHashing, OnBackend, ZenBalancedParallelism, ZenHashing, ZenStats, zen_pieces,
};
pub use entry::{Admission, Entered, Reduced};
pub use joint::{JointCall, allreduce_jointly};
pub use plan::{AUTO_ALPHA, AUTO_BETA, Auto};
pub use profile::Profile;
pub use registry::{Entry, Registry};
pub use transport::agree::{agree, agree_or_fail};
pub use transport::group::{Group, Members};
#[cfg(feature = "mpi")]
pub use transport::mpi::MpiTransport;
pub use transport::sim::{SimCluster, SimTransport};
pub use transport::thread::{ThreadCluster, ThreadTransport};
pub use transport::wait::{MPI_WAIT_ENV, MpiWait};
pub use transport::{
    BufferPool, Endpoint, EndpointState, Intercept, Intercepting, Traffic, TrafficCounter,
    Transport, guard,
};
