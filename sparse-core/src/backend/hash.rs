//! [`HashOps`]: Zen's hierarchical hash partitioning.

use super::BufferOps;
use crate::hash::{HashPartitions, HierarchicalHash};
use crate::{Element, Result};

/// Zen's hierarchical hash partitioning (Alg. 1) of `(index, E)` pairs.
pub trait HashOps<E: Element>: BufferOps {
    /// Partitions the entries by `h.h0`, placing each through the rehash
    /// functions, the serial overflow area and, if that is full, a fallback
    /// list. Every input entry appears exactly once in the output, in
    /// partition `h0(index)`. Indices must be unique.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) if `indices` and `values` differ in length.
    fn hash_partition(
        &self,
        indices: &Self::Buffer<u32>,
        values: &Self::Buffer<E>,
        h: &HierarchicalHash,
    ) -> Result<HashPartitions<E>>;
}
