//! [`HashOps`]: Zen's hierarchical hashing, sequentially.

use crate::Cpu;
use sparse_core::{Element, HashOps, HashPartitions, HierarchicalHash, Result};

impl<E: Element> HashOps<E> for Cpu {
    /// [`sparse_core::hash::partition_host`]: the reference every backend
    /// is diffed against.
    fn hash_partition(
        &self,
        indices: &Vec<u32>,
        values: &Vec<E>,
        h: &HierarchicalHash,
    ) -> Result<HashPartitions<E>> {
        sparse_core::hash::partition_host(indices, values, h)
    }
}
