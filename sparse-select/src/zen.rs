//! Zen's hierarchical hashing (Alg. 1) as a partitioner.

use sparse_core::stats::imbalance_ratio;
use sparse_core::{Backend, Element, HashPartitions, HierarchicalHash, Result};

/// Splits the non-zeros of a gradient into one list per partition (server)
/// with Zen's hierarchical hashing: `h0`, shared by every rank, picks the
/// partition; each rank's own rehash functions place the index in parallel
/// memory, collisions go to the serial overflow area and, if that is full,
/// to a fallback list: nothing is dropped.
#[derive(Debug, Clone)]
pub struct ZenPartitioner {
    /// The hash functions and memory sizes.
    pub hash: HierarchicalHash,
}

/// The partitions of one call, with Zen's push imbalance ratio (Def. 8).
#[derive(Debug, Clone)]
pub struct ZenPartition<E> {
    /// Partitioned entries.
    pub parts: HashPartitions<E>,
    /// `max_j n |I^j| / |I|`: 1 is perfect balance.
    pub imbalance: f64,
}

impl ZenPartitioner {
    /// Zen's defaults for `nnz` non-zeros (`k = 3`, `r1 = 2 nnz`,
    /// `r2 = r1 / 10`); `h0_seed` must be the same on every rank.
    ///
    /// # Errors
    /// As [`HierarchicalHash::with_defaults`].
    pub fn new(h0_seed: u64, rehash_seed: u64, partitions: u32, nnz: usize) -> Result<Self> {
        Ok(Self {
            hash: HierarchicalHash::with_defaults(h0_seed, rehash_seed, partitions, nnz)?,
        })
    }

    /// Partitions the entries (unique indices) on the backend.
    ///
    /// # Errors
    /// Backend errors.
    pub fn partition<B: Backend<E>, E: Element>(
        &self,
        b: &B,
        indices: &B::Buffer<u32>,
        values: &B::Buffer<E>,
    ) -> Result<ZenPartition<E>> {
        let parts = b.hash_partition(indices, values, &self.hash)?;
        let imbalance = imbalance_ratio(&parts.sizes());
        Ok(ZenPartition { parts, imbalance })
    }
}
