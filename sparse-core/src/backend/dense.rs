//! [`DenseOps`]: dense updates of buffers.

use super::BufferOps;
use crate::{Element, Result};

/// Dense updates of buffers of `E`.
pub trait DenseOps<E: Element>: BufferOps {
    /// `dense[indices[j]] += values[j]`; indices must be unique.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) if `indices` and `values` differ in length;
    /// [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange) for an index past `dense`, from this call
    /// or, on backends that check on the device without waiting for the
    /// device (the kernels of `backend-cuda`), from the next
    /// [`BufferOps::download`](super::BufferOps::download); such indices change nothing, and after the
    /// error the in-range entries of the call may or may not have been
    /// applied.
    fn scatter_add(
        &self,
        dense: &mut Self::Buffer<E>,
        indices: &Self::Buffer<u32>,
        values: &Self::Buffer<E>,
    ) -> Result<()>;
    /// `dense[i] = 0` for every `i` in `indices` (RGC's factor masking).
    ///
    /// # Errors
    /// As [`DenseOps::scatter_add`].
    fn mask(&self, dense: &mut Self::Buffer<E>, indices: &Self::Buffer<u32>) -> Result<()>;
    /// `y = a x + y`.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) if `x` and `y` differ in length.
    fn axpy(&self, a: E, x: &Self::Buffer<E>, y: &mut Self::Buffer<E>) -> Result<()>;
    /// `x = a x`.
    ///
    /// # Errors
    /// [`Error::Device`](crate::Error::Device) if the device fails.
    fn scale(&self, a: E, x: &mut Self::Buffer<E>) -> Result<()>;
}
