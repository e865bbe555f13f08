//! Exact top-k by radix select (RedSync sec. 5.2, after Alabi et al.): the
//! k-th largest key is found digit by digit from the most significant, with
//! one histogram per digit, then one compaction takes every element above it
//! and, in index order, as many of its ties as fit.

use crate::{Selection, Selector, check_k, empty, first_infinite, selection};
use sparse_core::{Backend, Digit, Element, KeyOrder, Result};

/// Bits per radix digit: 2^11 counters stay in L1 on the CPU and in shared
/// memory on a GPU; three passes cover an `f32` key.
pub const DIGIT_BITS: u32 = 11;

/// The k-th largest key of `x` in `order` (`1 <= k <= n`) and how many of
/// its copies belong to the top k (`k` minus the number of larger keys).
///
/// # Errors
/// Backend errors (NaN); [`sparse_core::Error::NonFinite`] for infinity when
/// `order` is [`KeyOrder::Abs`].
pub fn kth_key<B: Backend, E: Element>(
    b: &B,
    x: &B::Buffer<E>,
    order: KeyOrder,
    k: usize,
) -> Result<(u64, usize)> {
    debug_assert!(k >= 1);
    let width = (E::BYTES * 8) as u32;
    let max_finite = order.key(E::max_value());
    let mut remaining = k;
    let mut prefix = 0u64;
    let mut top = width;
    let mut first = true;
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
        if first && order == KeyOrder::Abs {
            // Infinity is the only key above the largest finite one; it shows
            // in this first histogram at no extra pass.
            // Its key is the largest finite key plus one: in the next digit
            // unless the bits below `shift` do not separate them (f64).
            let d_max = (max_finite >> shift) as usize;
            let above: u32 = hist[d_max + 1..].iter().sum();
            let shared = (max_finite + 1) >> shift == max_finite >> shift;
            if above > 0 || (shared && hist[d_max] > 0 && b.count_above(x, E::max_value())? > 0) {
                return Err(first_infinite(b, x));
            }
            first = false;
        }
        let mut cum = 0usize;
        let mut chosen = 0usize;
        for d in (0..hist.len()).rev() {
            if cum + hist[d] as usize >= remaining {
                chosen = d;
                break;
            }
            cum += hist[d] as usize;
        }
        remaining -= cum;
        prefix = (prefix << bits) | chosen as u64;
        top = shift;
    }
    Ok((prefix, remaining))
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

impl<B: Backend, E: Element> Selector<B, E> for RadixTopK {
    fn name(&self) -> String {
        match self.order {
            KeyOrder::Abs => "radix_topk".into(),
            KeyOrder::Signed => "radix_topk_signed".into(),
            KeyOrder::SignedReversed => "radix_lowk_signed".into(),
        }
    }
    fn select(&mut self, b: &B, x: &B::Buffer<E>, k: usize) -> Result<Selection<B, E>> {
        check_k(b, x, k)?;
        // The magnitude order finds infinities in its first histogram; the
        // signed orders and k = 0 (no histogram) check with one reduction.
        if (k == 0 || self.order != KeyOrder::Abs) && b.max_abs(x)?.is_infinite() {
            return Err(first_infinite(b, x));
        }
        if k == 0 {
            return empty(b);
        }
        let (key, take) = kth_key(b, x, self.order, k)?;
        let s = b.compact_key(x, self.order, key, take)?;
        Ok(selection(b, s, None))
    }
}
