//! [`ReduceOps`]: reductions over `|x|`.

use super::BufferOps;
use crate::{Element, Result};

/// Reductions over `|x|` of elements of type `E`.
pub trait ReduceOps<E: Element>: BufferOps {
    /// `max |x_i|`, or 0 for an empty buffer.
    ///
    /// # Errors
    /// [`Error::NonFinite`](crate::Error::NonFinite) on NaN.
    fn max_abs(&self, x: &Self::Buffer<E>) -> Result<E>;
    /// `sum |x_i| / n`, or 0 for an empty buffer (accumulated at least in
    /// `f32`; backends state their tolerance).
    ///
    /// # Errors
    /// [`Error::NonFinite`](crate::Error::NonFinite) on NaN.
    fn mean_abs(&self, x: &Self::Buffer<E>) -> Result<f64>;
    /// The number of `i` with `|x_i| > t`.
    ///
    /// # Errors
    /// [`Error::NonFinite`](crate::Error::NonFinite) on NaN.
    fn count_above(&self, x: &Self::Buffer<E>, t: E) -> Result<usize>;
    /// `sum x_i^2`, or 0 for an empty buffer: the square of the L2 norm
    /// (DGC's gradient clipping), so a layer's norm needs no download.
    /// `backend-cpu` accumulates in `f64` (exact squares of `f32` and
    /// narrower elements, one rounding per addition); backends that accumulate in `f32` state their tolerance
    /// and the range of `|x_i|` whose squares neither overflow nor
    /// underflow there.
    ///
    /// # Errors
    /// [`Error::NonFinite`](crate::Error::NonFinite) on NaN.
    fn sum_squares(&self, x: &Self::Buffer<E>) -> Result<f64>;
    /// `(max |x|, mean |x|)`: [`ReduceOps::max_abs`] and
    /// [`ReduceOps::mean_abs`] in one call, which a backend may answer in
    /// one pass (`backend-cpu` does; the default makes both calls).
    ///
    /// # Errors
    /// As [`ReduceOps::max_abs`] and [`ReduceOps::mean_abs`].
    fn abs_stats(&self, x: &Self::Buffer<E>) -> Result<(E, f64)> {
        Ok((self.max_abs(x)?, self.mean_abs(x)?))
    }
    /// [`ReduceOps::count_above`] for each threshold of `ts`, in order,
    /// which a backend may answer in one pass over `x` (`backend-cpu`
    /// does; the default makes one call per threshold).
    ///
    /// # Errors
    /// As [`ReduceOps::count_above`].
    fn count_above_each(&self, x: &Self::Buffer<E>, ts: &[E]) -> Result<Vec<usize>> {
        ts.iter().map(|&t| self.count_above(x, t)).collect()
    }
    /// Whether each buffer of `xs` holds only finite values (no NaN, no
    /// infinity; an empty buffer does), in order: the finite checks of a
    /// step's gradients, which a backend may answer with one round trip
    /// for all of them (`backend-cuda` does: one reduction per buffer,
    /// one readback of all their partial results). The default makes one
    /// [`ReduceOps::max_abs`] call per buffer.
    ///
    /// # Errors
    /// The backend's errors (a NaN or infinity is `false`, not an error).
    fn finite_each(&self, xs: &[&Self::Buffer<E>]) -> Result<Vec<bool>> {
        xs.iter()
            .map(|x| match self.max_abs(x) {
                Ok(m) => Ok(m.is_finite()),
                Err(crate::Error::NonFinite { .. }) => Ok(false),
                Err(e) => Err(e),
            })
            .collect()
    }
}
