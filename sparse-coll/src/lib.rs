//! # sparse-coll
//!
//! Collectives generic over a small [`Transport`] trait (rank, size, send,
//! receive, and an exchange whose target and source may differ), with
//! traffic counted per rank. This first part holds the transport, the
//! embedded thread transport ([`ThreadCluster`]) and the dense baselines
//! ([`dense`]); the sparse allreduces of the papers come next (issue 4).
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

pub mod dense;
mod thread;
mod transport;

pub use thread::{ThreadCluster, ThreadTransport};
pub use transport::{Traffic, TrafficCounter, Transport};
