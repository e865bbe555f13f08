//! [`SelectOps`]: selection primitives, their keys and digits.

use super::{BufferOps, DenseOps, Scalar};
use crate::{Element, Error, Result};

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

/// What [`SelectOps::compact_above_kth_of`] found: DGC's sampled
/// threshold and the elements above it.
pub struct Above<B: BufferOps + ?Sized, E: Scalar> {
    /// The threshold: the `rank`-th largest magnitude key
    /// ([`crate::abs_key`]) of the sample.
    pub key: u64,
    /// How many elements of the input have a magnitude key above it.
    pub count: usize,
    /// Those elements, in index order, where `count` is at most the cap;
    /// `None` past it.
    pub selected: Option<Selected<B, E>>,
}

/// How [`SelectOps::accumulate_topk`] folds a gradient `g` into a
/// residual `v` (error feedback).
pub enum Feedback<'a, B: BufferOps + ?Sized, E: Scalar> {
    /// `v += gain g` (SparCML's top-k SGD: `gain = lr`; RGC without
    /// momentum: 1).
    Plain {
        /// The gradient's factor.
        gain: E,
    },
    /// RedSync's momentum correction: `u = m u + g; v += u`.
    Momentum {
        /// The momentum `u`, updated in place.
        u: &'a mut B::Buffer<E>,
        /// The momentum factor `m`.
        m: E,
    },
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
    /// [`Error::NonFinite`](crate::Error::NonFinite) on NaN; [`Error::InvalidParameter`](crate::Error::InvalidParameter) for a digit
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
    /// [`Error::NonFinite`](crate::Error::NonFinite) on NaN.
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
    /// [`Error::InvalidParameter`](crate::Error::InvalidParameter) if offsets are not increasing from 0 to
    /// the length or `ks` has the wrong length; [`Error::KOutOfRange`](crate::Error::KOutOfRange) if a
    /// segment is shorter than its k; [`Error::NonFinite`](crate::Error::NonFinite) on NaN.
    fn topk_abs_segmented(
        &self,
        x: &Self::Buffer<E>,
        offsets: &[usize],
        ks: &[usize],
    ) -> Result<Selected<Self, E>>;
    /// [`SelectOps::topk_abs_segmented`] over equal buckets: bucket `j`
    /// is `j * bucket..min((j + 1) * bucket, len)` and gives its exact top
    /// `min(per, its length)` by magnitude (ties to the lower index), all
    /// in index order (SparCML's bucket top-k), without a list of offsets.
    ///
    /// The default lays the offsets and ks out on the host and calls
    /// [`SelectOps::topk_abs_segmented`]; `backend-cuda` computes each
    /// bucket's bounds on the device (buckets of at most 2,048: nothing
    /// built on the host, nothing uploaded).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`](crate::Error::InvalidParameter) if
    /// `bucket == 0`; [`Error::NonFinite`](crate::Error::NonFinite) on NaN.
    fn topk_abs_buckets(
        &self,
        x: &Self::Buffer<E>,
        bucket: usize,
        per: usize,
    ) -> Result<Selected<Self, E>> {
        let (offsets, ks) = bucket_plan(self.len(x), bucket, per)?;
        self.topk_abs_segmented(x, &offsets, &ks)
    }
    /// `x[indices[j]]` for every `j` (sampling).
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange) for an index past `x`, from this call or
    /// from the next download (as [`DenseOps::scatter_add`](super::DenseOps::scatter_add)).
    fn gather(&self, x: &Self::Buffer<E>, indices: &Self::Buffer<u32>) -> Result<Self::Buffer<E>>;
    /// A sample of `m` elements of `x` drawn with replacement: `x[p_j]`
    /// for `j` in `0..m`, `p_j = (rng.u32_at(j) * len) >> 32` (the high
    /// word of a 64-bit product) with `rng = CounterRng::new(seed)`
    /// ([`crate::CounterRng`]). The promise is the multiset: the order is
    /// the backend's (DGC's sampled threshold reads only the sample's
    /// `k`-th largest).
    ///
    /// The default draws the positions on the host, sorts them (a gather
    /// in increasing order streams through memory on a CPU) and calls
    /// [`SelectOps::gather`]; `backend-cuda` draws them in the gather
    /// kernel: no host work, no upload.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`](crate::Error::InvalidParameter) where
    /// `x` is empty and `m > 0`, or `len` or `m` exceeds `u32::MAX`
    /// (positions are `u32`).
    fn gather_sampled(&self, x: &Self::Buffer<E>, seed: u64, m: usize) -> Result<Self::Buffer<E>> {
        let n = check_sample(self.len(x), m)?;
        let rng = crate::CounterRng::new(seed);
        let mut positions: Vec<u32> = (0..m as u32)
            .map(|j| sample_position(rng.u32_at(j), n))
            .collect();
        positions.sort_unstable();
        self.gather(x, &self.upload(&positions)?)
    }
    /// Stream compaction: every `i` with `|x_i| > t`, in index order.
    ///
    /// # Errors
    /// [`Error::NonFinite`](crate::Error::NonFinite) on NaN.
    fn compact_above(&self, x: &Self::Buffer<E>, t: E) -> Result<Selected<Self, E>>;
    /// Exact top-k by magnitude; ties go to the lower index.
    ///
    /// # Errors
    /// [`Error::KOutOfRange`](crate::Error::KOutOfRange) if `k > len`; [`Error::NonFinite`](crate::Error::NonFinite) on NaN.
    fn topk_abs(&self, x: &Self::Buffer<E>, k: usize) -> Result<Selected<Self, E>>;
    /// Exact top-k (or low-k) by signed value; ties go to the lower index
    /// (`-0.0` orders below `+0.0`).
    ///
    /// # Errors
    /// [`Error::KOutOfRange`](crate::Error::KOutOfRange) if `k > len`; [`Error::NonFinite`](crate::Error::NonFinite) on NaN.
    fn topk_signed(&self, x: &Self::Buffer<E>, k: usize, end: Extreme)
    -> Result<Selected<Self, E>>;
    /// Every element whose key in `order` is at least the k-th largest
    /// (the exact top k and every other copy of the k-th key), in index
    /// order, and that key: the exact fallback of the threshold selectors
    /// (`sparse-select`), which takes ties whole. `1 <= k <= len`.
    ///
    /// The default composes the primitives: the top k, the smallest of
    /// their keys (a download of the k values), then one compaction. A
    /// backend may find the key on the device (`backend-cuda`: three
    /// passes and one round trip).
    ///
    /// # Errors
    /// [`Error::KOutOfRange`](crate::Error::KOutOfRange) if `k > len`;
    /// [`Error::InvalidParameter`](crate::Error::InvalidParameter) if
    /// `k == 0`; [`Error::NonFinite`](crate::Error::NonFinite) on NaN
    /// (infinities are ordinary keys).
    fn topk_ties(
        &self,
        x: &Self::Buffer<E>,
        order: KeyOrder,
        k: usize,
    ) -> Result<(Selected<Self, E>, u64)> {
        crate::checks::check_k(k, self.len(x))?;
        if k == 0 {
            return Err(Error::invalid(
                "k",
                "topk_ties takes every element at least the k-th largest: k must be at least 1",
            ));
        }
        let top = match order {
            KeyOrder::Abs => self.topk_abs(x, k)?,
            KeyOrder::Signed => self.topk_signed(x, k, Extreme::Largest)?,
            KeyOrder::SignedReversed => self.topk_signed(x, k, Extreme::Smallest)?,
        };
        let key = smallest_key(self, &top.values, order)?;
        Ok((self.compact_key(x, order, key, usize::MAX)?, key))
    }
    /// DGC's sampled threshold applied: the `rank`-th largest magnitude
    /// key of `sample` (`1 <= rank <= sample's length`), and every element
    /// of `x` whose magnitude key is strictly above it, in index order,
    /// returned where there are at most `cap` of them ([`Above`]). Under
    /// the selectors' input contract: NaN or infinity in `x` or `sample`
    /// is [`Error::NonFinite`](crate::Error::NonFinite) (the index named
    /// may be the sample's; `sparse-select` names the input's first).
    ///
    /// The default composes the primitives: the sample's top `rank`, the
    /// smallest of their keys (a download of `rank` values), one
    /// compaction of `x`, and one of the elements that passed above the
    /// largest finite magnitude. A backend may keep the key on the device
    /// (`backend-cuda`: one pass over `x`, one round trip).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`](crate::Error::InvalidParameter) for a
    /// rank outside the sample; [`Error::NonFinite`](crate::Error::NonFinite).
    fn compact_above_kth_of(
        &self,
        x: &Self::Buffer<E>,
        sample: &Self::Buffer<E>,
        rank: usize,
        cap: usize,
    ) -> Result<Above<Self, E>> {
        check_rank(rank, self.len(sample))?;
        let top = self.topk_finite(sample, KeyOrder::Abs, rank)?;
        let key = smallest_key(self, &top.values, KeyOrder::Abs)?;
        let passed = self.compact_key(x, KeyOrder::Abs, key, 0)?;
        // Every infinity is above the (finite) key: among those passed.
        let infinite = self.compact_above(&passed.values, E::max_value())?;
        if self.len(&infinite.indices) > 0 {
            return Err(super::first_non_finite(self, x));
        }
        let count = self.len(&passed.indices);
        Ok(Above {
            key,
            count,
            selected: (count <= cap).then_some(passed),
        })
    }
    /// Error feedback fused with the exact top-k by magnitude: folds `g`
    /// into the residual `v` as `feedback` says, selects the exact top k of
    /// the updated `v` (ties to the lower index, in index order) and takes
    /// them out of it: their entries of `v` become `+0.0`, and the
    /// selection holds their values from before. So `v` before the
    /// selection equals `v` after it plus the selection, exactly (a failed
    /// step restores it by scatter-adding the selection back: `0 + value`).
    ///
    /// [`accumulate_topk_composed`] composes it from the primitives
    /// (`axpy`, `scale`, `topk_abs`, `mask`: `backend-cpu` calls it);
    /// `backend-cuda` accumulates and counts the first digit's histogram
    /// in one pass, three passes over `v` in all and one round trip. The
    /// accumulation rounds as `axpy` does (a backend may fuse the multiply
    /// and the add: exact on dyadic inputs either way). The default, for a
    /// backend that has not chosen, is [`Error::Unsupported`]: it may
    /// call [`accumulate_topk_composed`].
    ///
    /// # Errors
    /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) if `g` or
    /// `u` is not as long as `v`; [`Error::KOutOfRange`](crate::Error::KOutOfRange)
    /// if `k > len` (both before anything changes);
    /// [`Error::NonFinite`](crate::Error::NonFinite) if the updated `v`
    /// holds NaN: then `v` (and `u`) hold the accumulation and nothing is
    /// taken out.
    fn accumulate_topk(
        &self,
        v: &mut Self::Buffer<E>,
        g: &Self::Buffer<E>,
        feedback: Feedback<'_, Self, E>,
        k: usize,
    ) -> Result<Selected<Self, E>> {
        let _ = (v, g, feedback, k);
        Err(Error::Unsupported {
            backend: self.name(),
            what: "accumulate_topk (error feedback fused into the top-k): implement it, \
                   or call sparse_core::backend::accumulate_topk_composed"
                .into(),
        })
    }
    /// Exact top-k in `order` under the selectors' input contract: as
    /// [`SelectOps::topk_abs`] ([`KeyOrder::Abs`]) or
    /// [`SelectOps::topk_signed`] (largest for [`KeyOrder::Signed`],
    /// smallest for [`KeyOrder::SignedReversed`]), except that an infinity
    /// anywhere in `x` is [`Error::NonFinite`](crate::Error::NonFinite) too
    /// (`sparse-select`'s `RadixTopK` calls it, and wraps it in
    /// [`resolve_non_finite_in`](super::resolve_non_finite_in) so that the
    /// index named is the first non-finite one).
    ///
    /// The default composes the primitives: the top-k, then one compaction
    /// above the largest finite magnitude, of the selected values where
    /// they hold every infinity (the magnitude order, `k > 0`), else of
    /// `x`. A backend that sees every key in its top-k anyway (the kernels
    /// of `backend-cuda`) may check on the way instead.
    ///
    /// # Errors
    /// [`Error::KOutOfRange`](crate::Error::KOutOfRange) if `k > len`;
    /// [`Error::NonFinite`](crate::Error::NonFinite) on NaN or infinity.
    fn topk_finite(
        &self,
        x: &Self::Buffer<E>,
        order: KeyOrder,
        k: usize,
    ) -> Result<Selected<Self, E>> {
        let s = match order {
            KeyOrder::Abs => self.topk_abs(x, k)?,
            KeyOrder::Signed => self.topk_signed(x, k, Extreme::Largest)?,
            KeyOrder::SignedReversed => self.topk_signed(x, k, Extreme::Smallest)?,
        };
        let probe = if order == KeyOrder::Abs && k > 0 {
            &s.values
        } else {
            x
        };
        let infinite = self.compact_above(probe, E::max_value())?;
        if self.len(&infinite.indices) > 0 {
            return Err(super::first_non_finite(self, x));
        }
        Ok(s)
    }
}

/// [`SelectOps::accumulate_topk`] composed from the primitives: the
/// accumulation (`axpy`, and `scale` for the momentum), `topk_abs`, then
/// `mask` at the selected indices. The reference `backend-cpu` uses.
///
/// # Errors
/// As [`SelectOps::accumulate_topk`].
pub fn accumulate_topk_composed<B, E>(
    b: &B,
    v: &mut B::Buffer<E>,
    g: &B::Buffer<E>,
    feedback: Feedback<'_, B, E>,
    k: usize,
) -> Result<Selected<B, E>>
where
    B: SelectOps<E> + DenseOps<E>,
    E: Element,
{
    let n = b.len(v);
    crate::checks::check_len(
        "accumulate_topk: gradient g against residual v",
        n,
        b.len(g),
    )?;
    if let Feedback::Momentum { u, .. } = &feedback {
        crate::checks::check_len(
            "accumulate_topk: momentum u against residual v",
            n,
            b.len(*u),
        )?;
    }
    crate::checks::check_k(k, n)?;
    match feedback {
        Feedback::Plain { gain } => b.axpy(gain, g, v)?,
        Feedback::Momentum { u, m } => {
            b.scale(m, u)?;
            b.axpy(E::one(), g, u)?;
            b.axpy(E::one(), u, v)?;
        }
    }
    let s = b.topk_abs(v, k)?;
    b.mask(v, &s.indices)?;
    Ok(s)
}

/// The smallest key in `order` of the values of a device buffer (0 if
/// empty): one download.
fn smallest_key<B, E>(b: &B, values: &B::Buffer<E>, order: KeyOrder) -> Result<u64>
where
    B: BufferOps + ?Sized,
    E: Element,
{
    Ok(b.download(values)?
        .into_iter()
        .map(|v| order.key(v))
        .min()
        .unwrap_or(0))
}

/// Checks a rank `1 <= rank <= len` within a sample of `len` elements.
///
/// # Errors
/// [`Error::InvalidParameter`](crate::Error::InvalidParameter).
pub fn check_rank(rank: usize, len: usize) -> Result<()> {
    if rank == 0 || rank > len {
        return Err(Error::invalid(
            "rank",
            format!("{rank} is not within the sample of {len} elements: pass 1 to {len}"),
        ));
    }
    Ok(())
}

/// Checks a digit against the key width of `E`.
///
/// # Errors
/// [`Error::InvalidParameter`](crate::Error::InvalidParameter).
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

/// Position `(draw * n) >> 32` of [`SelectOps::gather_sampled`]: uniform
/// over `0..n` up to the 32-bit draw's granularity.
#[inline]
pub fn sample_position(draw: u32, n: u32) -> u32 {
    ((u64::from(draw) * u64::from(n)) >> 32) as u32
}

/// [`SelectOps::gather_sampled`]'s checks: `len` and `m` fit `u32`, and an
/// empty input gives an empty sample only. Returns `len` as `u32`.
///
/// # Errors
/// [`Error::InvalidParameter`] otherwise.
pub fn check_sample(len: usize, m: usize) -> Result<u32> {
    let n = u32::try_from(len).map_err(|_| {
        Error::invalid(
            "gather_sampled",
            format!("{len} elements: more than u32::MAX"),
        )
    })?;
    if u32::try_from(m).is_err() || (n == 0 && m > 0) {
        return Err(Error::invalid(
            "gather_sampled",
            format!(
                "a sample of {m} from {len} elements (at most u32::MAX, and none from nothing)"
            ),
        ));
    }
    Ok(n)
}

/// The offsets and ks of [`SelectOps::topk_abs_buckets`] over `len`
/// elements: buckets of `bucket` (the last shorter), `min(per, length)`
/// from each.
///
/// # Errors
/// [`Error::InvalidParameter`] if `bucket == 0`.
pub fn bucket_plan(len: usize, bucket: usize, per: usize) -> Result<(Vec<usize>, Vec<usize>)> {
    if bucket == 0 {
        return Err(Error::invalid("bucket", "must be at least 1"));
    }
    let mut offsets: Vec<usize> = (0..len).step_by(bucket).collect();
    offsets.push(len);
    let ks = offsets.windows(2).map(|w| per.min(w[1] - w[0])).collect();
    Ok((offsets, ks))
}
