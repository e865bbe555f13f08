//! [`BufferOps`]: buffers of any [`Scalar`] and their host transfers.

use crate::Result;
use bytemuck::Pod;

/// Plain-old-data a buffer can hold: elements and `u32`.
pub trait Scalar: Pod + Send + Sync + std::fmt::Debug + PartialEq + 'static {}
impl<T: Pod + Send + Sync + std::fmt::Debug + PartialEq + 'static> Scalar for T {}

/// Device buffers: allocation and host transfer.
pub trait BufferOps {
    /// A buffer of `T` in the backend's memory.
    type Buffer<T: Scalar>: Send + Sync;
    /// The backend's name, used in errors and benchmark rows.
    fn name(&self) -> &'static str;
    /// Copies host data to a new device buffer.
    ///
    /// # Errors
    /// [`Error::Device`](crate::Error::Device) if the device fails.
    fn upload<T: Scalar>(&self, data: &[T]) -> Result<Self::Buffer<T>>;
    /// Copies a device buffer to the host.
    ///
    /// # Errors
    /// [`Error::Device`](crate::Error::Device) if the device fails.
    fn download<T: Scalar>(&self, buf: &Self::Buffer<T>) -> Result<Vec<T>>;
    /// A new buffer of `len` zero bytes-patterns (`0` / `+0.0`).
    ///
    /// # Errors
    /// [`Error::Device`](crate::Error::Device) if the device fails.
    fn zeros<T: Scalar>(&self, len: usize) -> Result<Self::Buffer<T>>;
    /// Number of items in a buffer.
    fn len<T: Scalar>(&self, buf: &Self::Buffer<T>) -> usize;
}
