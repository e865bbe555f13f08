//! Exact top-k by radix select (RedSync sec. 5.2, after Alabi et al.): the
//! k-th largest key is found digit by digit from the most significant, with
//! one histogram per digit, then one compaction takes every element above it
//! and, in index order, as many of its ties as fit. [`RadixTopK`] narrows
//! the input after the first digit (see `top_k`), so it reads the input
//! twice.

use crate::{Selection, Selector, check_k, empty, selection};
use sparse_core::backend::{check_finite_buffer, first_non_finite};
use sparse_core::topk::{narrowing_sample, sample_rank};
use sparse_core::{Backend, Digit, Element, KeyOrder, Result, Selected};

/// Bits per radix digit: 2^11 counters stay in L1 on the CPU and in shared
/// memory on a GPU; three passes cover an `f32` key.
pub const DIGIT_BITS: u32 = 11;

/// The k-th largest key of `x` in `order` (`1 <= k <= n`) and how many of
/// its copies belong to the top k (`k` minus the number of larger keys).
///
/// # Errors
/// Backend errors (NaN); [`sparse_core::Error::NonFinite`] for infinity when
/// `order` is [`KeyOrder::Abs`].
pub fn kth_key<B: Backend<E>, E: Element>(
    b: &B,
    x: &B::Buffer<E>,
    order: KeyOrder,
    k: usize,
) -> Result<(u64, usize)> {
    debug_assert!(k >= 1);
    let first = first_histogram(b, x, order)?;
    kth_from(b, x, order, k, first)
}

/// The histogram of the most significant digit of the keys, with the
/// infinity check of the magnitude order.
fn first_histogram<B: Backend<E>, E: Element>(
    b: &B,
    x: &B::Buffer<E>,
    order: KeyOrder,
) -> Result<FirstDigit> {
    let width = (E::BYTES * 8) as u32;
    // The magnitude key's top bit is always clear: its first digit sits
    // just below it and is one bit wider.
    let (top, bits) = if order == KeyOrder::Abs {
        (width - 1, DIGIT_BITS + 1)
    } else {
        (width, DIGIT_BITS)
    };
    let shift = top - bits;
    let hist = b.digit_histogram(
        x,
        order,
        Digit {
            shift,
            digit_bits: bits,
            prefix: 0,
        },
    )?;
    if order == KeyOrder::Abs {
        // Infinity is the only key above the largest finite one; it shows
        // in this first histogram at no extra pass. Its key is the largest
        // finite key plus one: in the next digit unless the bits below
        // `shift` do not separate them (f64).
        let max_finite = order.key(E::max_value());
        let d_max = (max_finite >> shift) as usize;
        let above: u32 = hist[d_max + 1..].iter().sum();
        let shared = (max_finite + 1) >> shift == max_finite >> shift;
        if above > 0 || (shared && hist[d_max] > 0 && b.count_above(x, E::max_value())? > 0) {
            return Err(first_non_finite(b, x));
        }
    }
    Ok(FirstDigit { hist, shift })
}

/// The first digit's histogram and where the digit sits.
struct FirstDigit {
    hist: Vec<u32>,
    shift: u32,
}

/// The digit of `hist` that holds the `remaining`-th largest key, and how
/// many keys lie in the digits above it.
fn boundary(hist: &[u32], remaining: usize) -> (usize, usize) {
    let mut above = 0usize;
    for d in (0..hist.len()).rev() {
        if above + hist[d] as usize >= remaining {
            return (d, above);
        }
        above += hist[d] as usize;
    }
    (0, above)
}

/// Radix select from the first histogram on: `(key, take)`.
fn kth_from<B: Backend<E>, E: Element>(
    b: &B,
    x: &B::Buffer<E>,
    order: KeyOrder,
    k: usize,
    first: FirstDigit,
) -> Result<(u64, usize)> {
    let (chosen, above) = boundary(&first.hist, k);
    let mut remaining = k - above;
    let mut prefix = chosen as u64;
    let mut top = first.shift;
    while top > 0 {
        let bits = DIGIT_BITS.min(top);
        let shift = top - bits;
        let hist = b.digit_histogram(
            x,
            order,
            Digit {
                shift,
                digit_bits: bits,
                prefix,
            },
        )?;
        let (d, cum) = boundary(&hist, remaining);
        remaining -= cum;
        prefix = (prefix << bits) | d as u64;
        top = shift;
    }
    Ok((prefix, remaining))
}

/// Exact top-k of `x` in `order` (`1 <= k <= n`), ties to the lower index,
/// plus the k-th largest key; with `all_ties`, every copy of the k-th key
/// is taken instead of the ones that fit.
///
/// Two passes over `x` when the first digit narrows the input: its
/// histogram locates the k-th key's bucket, one compaction takes every key
/// at or above that bucket (for a gradient, a few times k), and the rest
/// of the radix select and the final compaction run on those candidates
/// only, whose positions [`sparse_core::SelectOps::gather_indices`] maps
/// back. A bucket too heavy to narrow (more than a quarter of the input,
/// as with many equal keys) continues digit by digit over `x`.
pub(crate) fn top_k<B: Backend<E>, E: Element>(
    b: &B,
    x: &B::Buffer<E>,
    order: KeyOrder,
    k: usize,
    all_ties: bool,
) -> Result<(Selected<B, E>, u64)> {
    debug_assert!(k >= 1);
    let n = b.len(x);
    if let Some(c) = sampled_candidates(b, x, order, k)?
        && b.len(&c.indices) >= k
    {
        // An infinity or NaN among the candidates is reported with its
        // index in `x`.
        return refine(b, &c, order, k, all_ties).map_err(|e| in_input(b, x, e));
    }
    let first = first_histogram(b, x, order)?;
    let (chosen, above) = boundary(&first.hist, k);
    let candidates = above + first.hist[chosen] as usize;
    if chosen > 0 && candidates <= n / 4 {
        let lower = (chosen as u64) << first.shift;
        let c = b.compact_key(x, order, lower - 1, 0)?;
        return refine(b, &c, order, k, all_ties);
    }
    let (key, take) = kth_from(b, x, order, k, first)?;
    let take = if all_ties { usize::MAX } else { take };
    Ok((b.compact_key(x, order, key, take)?, key))
}

/// Every element whose key is at least the [`sample_rank`]-th largest key
/// of a [`narrowing_sample`] of `x`: one compaction, usually a little more
/// than k elements. `None` where there is no sample (small inputs) or the
/// rank falls outside it (k near n).
fn sampled_candidates<B: Backend<E>, E: Element>(
    b: &B,
    x: &B::Buffer<E>,
    order: KeyOrder,
    k: usize,
) -> Result<Option<Selected<B, E>>> {
    let Some((sample, r)) = rank_sample(b, x, k)? else {
        return Ok(None);
    };
    let (key, _) = kth_key(b, &sample, order, r).map_err(|e| in_input(b, x, e))?;
    if key == 0 {
        return Ok(None);
    }
    Ok(Some(b.compact_key(x, order, key - 1, 0)?))
}

/// The [`narrowing_sample`] of `x`, gathered on the device, and the
/// [`sample_rank`] within it that bounds the top `k` from below. `None`
/// where there is no sample (small inputs) or the rank falls outside it
/// (k near n).
pub(crate) fn rank_sample<B: Backend<E>, E: Element>(
    b: &B,
    x: &B::Buffer<E>,
    k: usize,
) -> Result<Option<(B::Buffer<E>, usize)>> {
    let n = b.len(x);
    let Some(blocks) = narrowing_sample(n) else {
        return Ok(None);
    };
    let positions: Vec<u32> = blocks.into_iter().flatten().map(|i| i as u32).collect();
    let Some(r) = sample_rank(k, n, positions.len()) else {
        return Ok(None);
    };
    Ok(Some((b.gather(x, &b.upload(&positions)?)?, r)))
}

/// A non-finite error found in a sample or candidate set, re-derived on the
/// input so that its index is the input's.
pub(crate) fn in_input<B: Backend<E>, E: Element>(
    b: &B,
    x: &B::Buffer<E>,
    e: sparse_core::Error,
) -> sparse_core::Error {
    match e {
        sparse_core::Error::NonFinite { .. } => first_non_finite(b, x),
        e => e,
    }
}

/// The top `k` of a candidate set `c` (a selection in index order, at
/// least `k` long) in `order`, without a pass over the input it came from,
/// and the k-th key; with `all_ties` every copy of that key is kept.
pub(crate) fn refine<B: Backend<E>, E: Element>(
    b: &B,
    c: &Selected<B, E>,
    order: KeyOrder,
    k: usize,
    all_ties: bool,
) -> Result<(Selected<B, E>, u64)> {
    let (key, take) = kth_key(b, &c.values, order, k)?;
    let take = if all_ties { usize::MAX } else { take };
    let pos = b.compact_key(&c.values, order, key, take)?;
    let indices = b.gather_indices(&c.indices, &pos.indices)?;
    Ok((
        Selected {
            indices,
            values: pos.values,
        },
        key,
    ))
}

/// Exact top-k by radix select: by magnitude ([`RadixTopK::magnitude`]) or
/// by signed value, largest ([`KeyOrder::Signed`]) or smallest
/// ([`KeyOrder::SignedReversed`]). Ties go to the lower index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RadixTopK {
    /// The order selected in.
    pub order: KeyOrder,
}

impl RadixTopK {
    /// Top-k by magnitude.
    pub fn magnitude() -> Self {
        Self {
            order: KeyOrder::Abs,
        }
    }
}

impl<B: Backend<E>, E: Element> Selector<B, E> for RadixTopK {
    fn name(&self) -> String {
        match self.order {
            KeyOrder::Abs => "radix_topk".into(),
            KeyOrder::Signed => "radix_topk_signed".into(),
            KeyOrder::SignedReversed => "radix_lowk_signed".into(),
        }
    }
    /// In magnitude order: `select` is `topk_finite` by magnitude.
    fn exact_topk_abs(&self) -> bool {
        self.order == KeyOrder::Abs
    }
    fn select(&mut self, b: &B, x: &B::Buffer<E>, k: usize) -> Result<Selection<B, E>> {
        sparse_core::backend::resolve_non_finite_in(
            b,
            x,
            (|| -> Result<Selection<B, E>> {
                check_k(b, x, k)?;
                if k == 0 {
                    check_finite_buffer(b, x)?;
                    return empty(b);
                }
                // The backend's top-k under the selectors' contract (NaN and
                // infinity rejected): on the kernels, three passes over `x`
                // and one round trip; by default the primitives composed.
                Ok(selection(b, b.topk_finite(x, self.order, k)?, None))
            })(),
        )
    }
}
