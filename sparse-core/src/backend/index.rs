//! [`IndexOps`]: operations on `u32` index buffers.

use super::BufferOps;
use crate::Result;

/// Operations on `u32` index buffers only: no element type involved.
pub trait IndexOps: BufferOps {
    /// `src[positions[j]]` for every `j`: maps positions within a selection
    /// (a compaction of its values) back to the selection's indices, so a
    /// selector can refine a candidate set without another pass over `x`.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange) for a position past `src`, as
    /// [`SelectOps::gather`](super::SelectOps::gather).
    fn gather_indices(
        &self,
        src: &Self::Buffer<u32>,
        positions: &Self::Buffer<u32>,
    ) -> Result<Self::Buffer<u32>>;
    /// The bitmap of `indices` over `lo..lo + len`, in the layout of
    /// [`crate::encoding::bits_from_indices`].
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange) if an index is outside the range.
    fn bitmap_encode(
        &self,
        indices: &Self::Buffer<u32>,
        lo: u32,
        len: usize,
    ) -> Result<Self::Buffer<u32>>;
    /// The increasing indices of the set bits below `len`, offset by `lo`.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) if `words` is not `ceil(len / 32)` long.
    fn bitmap_decode(
        &self,
        words: &Self::Buffer<u32>,
        lo: u32,
        len: usize,
    ) -> Result<Self::Buffer<u32>>;
}
