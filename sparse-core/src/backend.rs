//! The backend traits: the device primitives every backend implements.
//!
//! One trait per concern, gathered by [`Backend<E>`](Backend), which every
//! type implementing all of them for the element type `E` gets by a blanket
//! impl:
//! - element-free: [`BufferOps`] (buffers of any [`Scalar`]) and
//!   [`IndexOps`] (operations on `u32` indices only);
//! - per element type: [`ReduceOps<E>`](ReduceOps), [`SelectOps<E>`](SelectOps),
//!   [`DenseOps<E>`](DenseOps), [`HashOps<E>`](HashOps) and
//!   [`CodecOps<E>`](CodecOps).
//!
//! A backend implements the element traits for exactly the element types
//! its primitives support (`backend-cpu`: `f32`, `f64`, `f16`, `bf16`;
//! `backend-cuda`: `f32`), so using an unsupported type is a compile error.
//! Selection algorithms (`sparse-select`) and optimizers (`residual-sgd`) are
//! written over these primitives only (`B: Backend<E>`), so they run
//! unchanged on every backend and element type it implements.
//! `docs/adding-a-backend.md` lists what a new backend implements and how
//! it runs the shared suites.
//!
//! Contract shared by all backends:
//! - primitives that compare magnitudes (`max_abs`, `mean_abs`,
//!   `count_above`, `compact_above`, `topk_*`) return
//!   [`Error::NonFinite`] with the lowest offending index if the input holds
//!   NaN; infinities are ordinary (largest) magnitudes;
//! - selections return indices in increasing order, values alongside;
//! - exact top-k breaks ties by index: among equal keys the lower index wins;
//! - integer outputs are identical on every backend; float reductions agree
//!   within the tolerance each test states.

use crate::hash::HierarchicalHash;
use crate::qsgd::QsgdParams;
use crate::{Element, Error, Result};
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
    /// [`Error::Device`] if the device fails.
    fn upload<T: Scalar>(&self, data: &[T]) -> Result<Self::Buffer<T>>;
    /// Copies a device buffer to the host.
    ///
    /// # Errors
    /// [`Error::Device`] if the device fails.
    fn download<T: Scalar>(&self, buf: &Self::Buffer<T>) -> Result<Vec<T>>;
    /// A new buffer of `len` zero bytes-patterns (`0` / `+0.0`).
    ///
    /// # Errors
    /// [`Error::Device`] if the device fails.
    fn zeros<T: Scalar>(&self, len: usize) -> Result<Self::Buffer<T>>;
    /// Number of items in a buffer.
    fn len<T: Scalar>(&self, buf: &Self::Buffer<T>) -> usize;
}

/// Operations on `u32` index buffers only: no element type involved.
pub trait IndexOps: BufferOps {
    /// `src[positions[j]]` for every `j`: maps positions within a selection
    /// (a compaction of its values) back to the selection's indices, so a
    /// selector can refine a candidate set without another pass over `x`.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for a position past `src`, as
    /// [`SelectOps::gather`].
    fn gather_indices(
        &self,
        src: &Self::Buffer<u32>,
        positions: &Self::Buffer<u32>,
    ) -> Result<Self::Buffer<u32>>;
    /// The bitmap of `indices` over `lo..lo + len`, in the layout of
    /// [`crate::encoding::bits_from_indices`].
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] if an index is outside the range.
    fn bitmap_encode(
        &self,
        indices: &Self::Buffer<u32>,
        lo: u32,
        len: usize,
    ) -> Result<Self::Buffer<u32>>;
    /// The increasing indices of the set bits below `len`, offset by `lo`.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] if `words` is not `ceil(len / 32)` long.
    fn bitmap_decode(
        &self,
        words: &Self::Buffer<u32>,
        lo: u32,
        len: usize,
    ) -> Result<Self::Buffer<u32>>;
}

/// Reductions over `|x|` of elements of type `E`.
pub trait ReduceOps<E: Element>: BufferOps {
    /// `max |x_i|`, or 0 for an empty buffer.
    ///
    /// # Errors
    /// [`Error::NonFinite`] on NaN.
    fn max_abs(&self, x: &Self::Buffer<E>) -> Result<E>;
    /// `sum |x_i| / n`, or 0 for an empty buffer (accumulated at least in
    /// `f32`; backends state their tolerance).
    ///
    /// # Errors
    /// [`Error::NonFinite`] on NaN.
    fn mean_abs(&self, x: &Self::Buffer<E>) -> Result<f64>;
    /// The number of `i` with `|x_i| > t`.
    ///
    /// # Errors
    /// [`Error::NonFinite`] on NaN.
    fn count_above(&self, x: &Self::Buffer<E>, t: E) -> Result<usize>;
    /// `sum x_i^2`, or 0 for an empty buffer: the square of the L2 norm
    /// (DGC's gradient clipping), so a layer's norm needs no download.
    /// `backend-cpu` accumulates in `f64` (exact squares of `f32` and
    /// narrower elements, one rounding per addition); backends that accumulate in `f32` state their tolerance
    /// and the range of `|x_i|` whose squares neither overflow nor
    /// underflow there.
    ///
    /// # Errors
    /// [`Error::NonFinite`] on NaN.
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
}

/// Which end of the signed order a signed top-k takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extreme {
    /// The `k` largest values (top-k).
    Largest,
    /// The `k` smallest values (low-k).
    Smallest,
}

/// A selection on the device: indices in increasing order and their values.
pub struct Selected<B: BufferOps + ?Sized, E: Scalar> {
    /// Selected indices, increasing.
    pub indices: B::Buffer<u32>,
    /// `x[indices[j]]`.
    pub values: B::Buffer<E>,
}

/// Which order-preserving key of an element a key primitive uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOrder {
    /// [`crate::abs_key`]: larger magnitude, larger key.
    Abs,
    /// [`crate::signed_key`]: larger value, larger key.
    Signed,
    /// The complement of [`crate::signed_key`] within the type's width:
    /// smaller value, larger key (for low-k).
    SignedReversed,
}

impl KeyOrder {
    /// The key of `x` in this order; keys use the low `E::BYTES * 8` bits.
    #[inline]
    pub fn key<E: Element>(self, x: E) -> u64 {
        match self {
            KeyOrder::Abs => crate::abs_key(x),
            KeyOrder::Signed => crate::signed_key(x),
            KeyOrder::SignedReversed => {
                let width = E::BYTES * 8;
                let mask = if width == 64 {
                    u64::MAX
                } else {
                    (1u64 << width) - 1
                };
                !crate::signed_key(x) & mask
            }
        }
    }
}

/// A radix digit of the keys: `digit_bits` bits starting `shift` bits from
/// the bottom, counted only over keys whose bits above `shift + digit_bits`
/// equal `prefix` (`prefix` is the key shifted right by
/// `shift + digit_bits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digit {
    /// Position of the digit's lowest bit.
    pub shift: u32,
    /// Width of the digit, 1 to 16 bits.
    pub digit_bits: u32,
    /// Required value of the bits above the digit.
    pub prefix: u64,
}

/// Selection primitives over elements of type `E`.
pub trait SelectOps<E: Element>: BufferOps {
    /// Histogram of one radix digit of the keys (MSD radix select, Alabi et
    /// al.): entry `d` counts the elements whose key has bits above the
    /// digit equal to `digit.prefix` and digit value `d`. `2^digit_bits`
    /// entries, returned to the host.
    ///
    /// # Errors
    /// [`Error::NonFinite`] on NaN; [`Error::InvalidParameter`] for a digit
    /// outside the key or wider than 16 bits.
    fn digit_histogram(
        &self,
        x: &Self::Buffer<E>,
        order: KeyOrder,
        digit: Digit,
    ) -> Result<Vec<u32>>;
    /// Compaction by key with a tie quota: every element whose key is above
    /// `key`, plus the first `take_equal` (in index order) whose key equals
    /// it, in index order. With `key` the k-th largest key and `take_equal`
    /// the number of its copies that fit, this is exact top-k with the tie
    /// rule.
    ///
    /// # Errors
    /// [`Error::NonFinite`] on NaN.
    fn compact_key(
        &self,
        x: &Self::Buffer<E>,
        order: KeyOrder,
        key: u64,
        take_equal: usize,
    ) -> Result<Selected<Self, E>>;
    /// Exact top-k by magnitude in each segment `offsets[j]..offsets[j+1]`,
    /// `ks[j]` from segment `j` (ties to the lower index), all in index order
    /// (SparDL's block top-k, SparCML's bucket top-k).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if offsets are not increasing from 0 to
    /// the length or `ks` has the wrong length; [`Error::KOutOfRange`] if a
    /// segment is shorter than its k; [`Error::NonFinite`] on NaN.
    fn topk_abs_segmented(
        &self,
        x: &Self::Buffer<E>,
        offsets: &[usize],
        ks: &[usize],
    ) -> Result<Selected<Self, E>>;
    /// `x[indices[j]]` for every `j` (sampling).
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for an index past `x`, from this call or
    /// from the next download (as [`DenseOps::scatter_add`]).
    fn gather(&self, x: &Self::Buffer<E>, indices: &Self::Buffer<u32>) -> Result<Self::Buffer<E>>;
    /// Stream compaction: every `i` with `|x_i| > t`, in index order.
    ///
    /// # Errors
    /// [`Error::NonFinite`] on NaN.
    fn compact_above(&self, x: &Self::Buffer<E>, t: E) -> Result<Selected<Self, E>>;
    /// Exact top-k by magnitude; ties go to the lower index.
    ///
    /// # Errors
    /// [`Error::KOutOfRange`] if `k > len`; [`Error::NonFinite`] on NaN.
    fn topk_abs(&self, x: &Self::Buffer<E>, k: usize) -> Result<Selected<Self, E>>;
    /// Exact top-k (or low-k) by signed value; ties go to the lower index
    /// (`-0.0` orders below `+0.0`).
    ///
    /// # Errors
    /// [`Error::KOutOfRange`] if `k > len`; [`Error::NonFinite`] on NaN.
    fn topk_signed(&self, x: &Self::Buffer<E>, k: usize, end: Extreme)
    -> Result<Selected<Self, E>>;
}

/// Dense updates of buffers of `E`.
pub trait DenseOps<E: Element>: BufferOps {
    /// `dense[indices[j]] += values[j]`; indices must be unique.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] if `indices` and `values` differ in length;
    /// [`Error::IndexOutOfRange`] for an index past `dense`, from this call
    /// or, on backends that check on the device without waiting for the
    /// device (the kernels of `backend-cuda`), from the next
    /// [`BufferOps::download`]; such indices change nothing, and after the
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
    /// [`Error::LengthMismatch`] if `x` and `y` differ in length.
    fn axpy(&self, a: E, x: &Self::Buffer<E>, y: &mut Self::Buffer<E>) -> Result<()>;
    /// `x = a x`.
    ///
    /// # Errors
    /// [`Error::Device`] if the device fails.
    fn scale(&self, a: E, x: &mut Self::Buffer<E>) -> Result<()>;
}

/// The partitions produced by hierarchical hashing, on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct HashPartitions<E> {
    /// Partition `p` is `indices[offsets[p]..offsets[p + 1]]`.
    pub offsets: Vec<usize>,
    /// Indices grouped by partition; order inside a partition unspecified.
    pub indices: Vec<u32>,
    /// The value of each index.
    pub values: Vec<E>,
    /// Indices written to the serial overflow area.
    pub serial: usize,
    /// Indices that found the overflow area full and went to the fallback
    /// list (still delivered: nothing is dropped).
    pub fallback: usize,
}

impl<E> HashPartitions<E> {
    /// Number of entries in each partition.
    pub fn sizes(&self) -> Vec<usize> {
        self.offsets.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

/// Zen's hierarchical hash partitioning (Alg. 1) of `(index, E)` pairs.
pub trait HashOps<E: Element>: BufferOps {
    /// Partitions the entries by `h.h0`, placing each through the rehash
    /// functions, the serial overflow area and, if that is full, a fallback
    /// list. Every input entry appears exactly once in the output, in
    /// partition `h0(index)`. Indices must be unique.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] if `indices` and `values` differ in length.
    fn hash_partition(
        &self,
        indices: &Self::Buffer<u32>,
        values: &Self::Buffer<E>,
        h: &HierarchicalHash,
    ) -> Result<HashPartitions<E>>;
}

/// Element codecs that run where the data lives (the bitmap codec of
/// indices is in [`IndexOps`]).
pub trait CodecOps<E: Element>: BufferOps {
    /// QSGD quantization of `x` (see [`crate::qsgd`]): per-bucket scales and
    /// packed code words, bit-identical to [`crate::qsgd::quantize`].
    ///
    /// # Errors
    /// [`Error::NonFinite`] on NaN or infinity.
    fn qsgd_quantize(
        &self,
        x: &Self::Buffer<E>,
        p: &QsgdParams,
        counter_base: u32,
    ) -> Result<(Self::Buffer<E>, Self::Buffer<u32>)>;
    /// QSGD decoding of `n` values.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] if the buffers do not fit `n`.
    fn qsgd_dequantize(
        &self,
        scales: &Self::Buffer<E>,
        words: &Self::Buffer<u32>,
        n: usize,
        p: &QsgdParams,
    ) -> Result<Self::Buffer<E>>;
}

/// Every device primitive for elements of type `E`: implemented
/// automatically for any type that implements [`IndexOps`] and all the
/// element ops traits for `E`. Code generic over backends takes
/// `B: Backend<E>`; a backend is a `Backend<E>` exactly for the element
/// types it implements.
pub trait Backend<E: Element>:
    IndexOps + ReduceOps<E> + SelectOps<E> + DenseOps<E> + HashOps<E> + CodecOps<E>
{
}
impl<E: Element, T> Backend<E> for T where
    T: IndexOps + ReduceOps<E> + SelectOps<E> + DenseOps<E> + HashOps<E> + CodecOps<E>
{
}

/// Checks a digit against the key width of `E`.
///
/// # Errors
/// [`Error::InvalidParameter`].
pub fn check_digit<E: Element>(d: Digit) -> Result<()> {
    let width = (E::BYTES * 8) as u32;
    if d.digit_bits == 0 || d.digit_bits > 16 || d.shift + d.digit_bits > width {
        return Err(Error::invalid(
            "digit",
            format!("{d:?} for {width}-bit keys"),
        ));
    }
    Ok(())
}

/// Checks segment offsets (increasing from 0 to `len`) and per-segment `ks`.
///
/// # Errors
/// [`Error::InvalidParameter`] or [`Error::KOutOfRange`].
pub fn check_segments(offsets: &[usize], ks: &[usize], len: usize) -> Result<()> {
    if offsets.first() != Some(&0)
        || offsets.last() != Some(&len)
        || offsets.windows(2).any(|w| w[1] < w[0])
    {
        return Err(Error::invalid(
            "offsets",
            format!("must increase from 0 to {len}"),
        ));
    }
    if ks.len() + 1 != offsets.len() {
        return Err(Error::invalid(
            "ks",
            format!("{} ks for {} segments", ks.len(), offsets.len() - 1),
        ));
    }
    for (j, &k) in ks.iter().enumerate() {
        check_k(k, offsets[j + 1] - offsets[j])?;
    }
    Ok(())
}

/// Checks that two lengths that must agree do.
///
/// # Errors
/// [`Error::LengthMismatch`] naming `what`.
pub fn check_len(what: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(Error::LengthMismatch {
            what,
            expected,
            got,
        })
    }
}

/// Checks that every value of `x` is finite.
///
/// # Errors
/// [`Error::NonFinite`] with the index of the first NaN or infinity.
pub fn check_finite<E: Element>(x: &[E]) -> Result<()> {
    match x.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(Error::NonFinite { index }),
        None => Ok(()),
    }
}

/// Checks that every element of a device buffer is finite with one
/// reduction on the backend ([`ReduceOps::max_abs`]: a NaN fails it, an
/// infinity is its result), so a buffer that passes never leaves the
/// device; only a failing one is looked into ([`first_non_finite`]).
///
/// # Errors
/// [`Error::NonFinite`] with the index of the first element that is NaN
/// or infinite, as [`check_finite`] names it on the host; the backend's
/// errors.
pub fn check_finite_buffer<B, E>(b: &B, x: &B::Buffer<E>) -> Result<()>
where
    B: ReduceOps<E> + SelectOps<E> + ?Sized,
    E: Element,
{
    match b.max_abs(x) {
        Ok(m) if m.is_finite() => Ok(()),
        Ok(_) => Err(first_non_finite(b, x)),
        Err(e) => Err(resolve_non_finite(b, x, e)),
    }
}

/// The [`Error::NonFinite`] naming the first non-finite element of a
/// buffer known to hold one (the slow path of [`check_finite_buffer`]):
/// the backends' NaN check names the first NaN
/// ([`SelectOps::compact_above`] refuses it), else the compaction of the
/// elements above the largest finite magnitude names the first infinity,
/// so only those indices are read back.
pub fn first_non_finite<B, E>(b: &B, x: &B::Buffer<E>) -> Error
where
    B: SelectOps<E> + ?Sized,
    E: Element,
{
    match first_infinite(b, x) {
        Ok(Some(index)) => Error::NonFinite { index },
        Ok(None) => Error::Device {
            backend: b.name(),
            detail: "a non-finite value was reported that the buffer does not hold".into(),
        },
        Err(e) => e,
    }
}

/// The first element of `x` above the largest finite magnitude, from
/// the compaction of those elements alone (a NaN is the backend's error).
fn first_infinite<B, E>(b: &B, x: &B::Buffer<E>) -> Result<Option<usize>>
where
    B: SelectOps<E> + ?Sized,
    E: Element,
{
    let s = b.compact_above(x, E::max_value())?;
    Ok(b.download(&s.indices)?.first().map(|&i| i as usize))
}

/// The error to report for `e`, raised while reading `x`: a
/// [`Error::NonFinite`] from a backend's NaN check names the first NaN,
/// and an infinity before it is the first non-finite element (as
/// [`check_finite`] names it on the host), looked for in the prefix on
/// this error path only; any other error is `e`. Selectors wrap their
/// result in it ([`resolve_non_finite_in`]) so that every entry point
/// names the same index.
pub fn resolve_non_finite<B, E>(b: &B, x: &B::Buffer<E>, e: Error) -> Error
where
    B: SelectOps<E> + ?Sized,
    E: Element,
{
    let Error::NonFinite { index } = e else {
        return e;
    };
    if index == 0 {
        return e;
    }
    let before = b
        .upload(&(0..index as u32).collect::<Vec<u32>>())
        .and_then(|i| b.gather(x, &i))
        .and_then(|prefix| first_infinite(b, &prefix));
    match before {
        Ok(first) => Error::NonFinite {
            index: first.unwrap_or(index),
        },
        Err(e) => e,
    }
}

/// `r` with its error passed through [`resolve_non_finite`].
///
/// # Errors
/// `r`'s error, resolved.
pub fn resolve_non_finite_in<B, E, T>(b: &B, x: &B::Buffer<E>, r: Result<T>) -> Result<T>
where
    B: SelectOps<E> + ?Sized,
    E: Element,
{
    r.map_err(|e| resolve_non_finite(b, x, e))
}

/// Checks `k <= len`, the shared precondition of the top-k primitives.
///
/// # Errors
/// [`Error::KOutOfRange`].
pub fn check_k(k: usize, len: usize) -> Result<()> {
    if k > len {
        Err(Error::KOutOfRange { k, len })
    } else {
        Ok(())
    }
}
