#![doc = include_str!("../README.md")]
//!
//! ## Where things are
//!
//! [`SparseVec`] and [`Stream`]; [`encoding`] (every [`encoding::Encoding`]);
//! [`hash`], [`qsgd`], [`cost`], [`stats`], [`state`], [`budget`]; the
//! [`Backend`] traits; [`Error`] and [`Result`]. Seeded synthetic gradients
//! and test inputs: [`generate`].

pub mod alloc;
pub mod backend;
pub mod budget;
pub mod checks;
pub mod cost;
mod element;
pub mod encoding;
mod error;
pub mod generate;
pub mod hash;
pub mod qsgd;
mod reader;
pub mod sparse;
pub mod state;
pub mod stats;
mod stream;
#[cfg(feature = "testing")]
pub mod testing;
pub mod topk;

pub use backend::{
    Above, Backend, BufferOps, CodecOps, DenseOps, Digit, Extreme, Feedback, HashOps,
    HashPartitions, IndexOps, KeyOrder, ReduceOps, Scalar, SelectOps, Selected,
};
pub use budget::{Budget, Density};
pub use element::{Element, abs_key, exact_difference, signed_key};
pub use error::{Error, Result};
pub use hash::{CounterRng, H0, HierarchicalHash, SplitMix64, UniversalHash};
pub use sparse::SparseVec;
pub use stream::{INDEX_BYTES, Stream, delta};

/// Helpers shared by this crate's unit tests.
#[cfg(test)]
mod testing_support {
    use crate::{Element, SparseVec};
    use rand::{Rng as _, SeedableRng as _};
    use rand_chacha::ChaCha8Rng as Rng;

    /// A vector of dimension `dim` with `nnz` random distinct indices and
    /// non-zero normal values.
    pub fn random_vec<E: Element>(dim: usize, nnz: usize, seed: u64) -> SparseVec<E> {
        let mut rng = Rng::seed_from_u64(seed);
        let mut all: Vec<u32> = (0..dim as u32).collect();
        for i in 0..nnz {
            let j = i + rng.random_range(0..(dim - i) as u64) as usize;
            all.swap(i, j);
        }
        let mut idx = all[..nnz].to_vec();
        idx.sort_unstable();
        let values = (0..nnz)
            .map(|_| {
                let v = E::from_f64_nearest((rng.random::<f64>() - 0.5) * 8.0);
                if v == E::zero() { E::one() } else { v }
            })
            .collect();
        SparseVec::new(dim, idx, values).expect("valid by construction")
    }

    /// Dimensions from 1 to 10^6, nnz from 0 to the dimension.
    pub fn vectors<E: Element>(seed: u64) -> Vec<SparseVec<E>> {
        let mut out = Vec::new();
        for dim in [1usize, 2, 31, 32, 33, 1000, 65_537, 1_000_000] {
            let mut nnzs = vec![0, 1, dim / 1000, dim / 10, dim / 2, dim];
            if dim >= 65_537 {
                nnzs.retain(|&n| n <= dim / 10 || n == dim);
            }
            nnzs.dedup();
            for nnz in nnzs {
                out.push(random_vec(dim, nnz, seed ^ (dim * 31 + nnz) as u64));
            }
        }
        out
    }
}
