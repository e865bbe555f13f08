//! [`CodecOps`]: element codecs where the data lives.

use super::BufferOps;
use crate::qsgd::QsgdParams;
use crate::{Element, Result};

/// Element codecs that run where the data lives (the bitmap codec of
/// indices is in [`IndexOps`](super::IndexOps)).
pub trait CodecOps<E: Element>: BufferOps {
    /// QSGD quantization of `x` (see [`crate::qsgd`]): per-bucket scales and
    /// packed code words, bit-identical to [`crate::qsgd::quantize`].
    ///
    /// # Errors
    /// [`Error::NonFinite`](crate::Error::NonFinite) on NaN or infinity.
    fn qsgd_quantize(
        &self,
        x: &Self::Buffer<E>,
        p: &QsgdParams,
        counter_base: u32,
    ) -> Result<(Self::Buffer<E>, Self::Buffer<u32>)>;
    /// QSGD decoding of `n` values.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) if the buffers do not fit `n`.
    fn qsgd_dequantize(
        &self,
        scales: &Self::Buffer<E>,
        words: &Self::Buffer<u32>,
        n: usize,
        p: &QsgdParams,
    ) -> Result<Self::Buffer<E>>;
}
