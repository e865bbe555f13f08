//! [`SelectOps`]: exact top-k, compaction and histograms over the
//! elements' keys (`keys`).

use crate::keys::{self, Word, by_width};
use crate::{Cpu, check_indices, check_nan_fast, first_nan, nan_error};
use sparse_core::backend::{check_digit, check_k, check_segments};
use sparse_core::{
    Digit, Element, Extreme, Feedback, KeyOrder, Result, SelectOps, Selected, abs_key, signed_key,
};

/// The NaN test of a magnitude top-k, fused into the selection: a NaN's
/// magnitude key is above every other key, so if `x` holds one, some NaN
/// is among any `k >= 1` largest, and only the selected values need a look.
fn nan_in_top<E: Element>(top: &[E], x: &[E]) -> Result<()> {
    if top.iter().any(|v| v.is_nan()) {
        return Err(first_nan(x));
    }
    Ok(())
}

// Monomorphic entry points for `by_width!`.
fn digit_hist<W: Word>(bits: &[W], order: KeyOrder, d: Digit, inf: u64) -> (Vec<u32>, bool) {
    keys::digit_histogram(bits, order, d, inf)
}
fn compact_by_key<W: Word>(
    bits: &[W],
    order: KeyOrder,
    key: u64,
    take_equal: usize,
    inf: u64,
) -> (Vec<u32>, bool) {
    keys::compact_key(bits, order, key, take_equal, inf)
}
fn topk_abs_bits<W: Word>(bits: &[W], k: usize) -> Vec<u32> {
    keys::topk_abs(bits, k)
}

/// `(indices with magnitude key above t, NaN seen)`, in index order. Each
/// chunk of [`keys::SCREEN`] is compared as a whole into a bit mask (a
/// vectorized compare), and only the set bits are visited: a NaN's key is
/// above infinity's and so above `t`, so it is among them.
fn compact_keys_above<W: Word>(bits: &[W], t: u64, inf: u64) -> (Vec<u32>, bool) {
    let (t, inf) = (W::from_u64(t), W::from_u64(inf));
    let mut out = Vec::new();
    let mut nan = false;
    for (c, chunk) in bits.chunks(keys::SCREEN).enumerate() {
        let mut mask = keys::hit_mask(chunk, |b| keys::abs(b) > t);
        while mask != 0 {
            let o = mask.trailing_zeros() as usize;
            nan |= keys::abs(chunk[o]) > inf;
            out.push((c * keys::SCREEN + o) as u32);
            mask &= mask - 1;
        }
    }
    (out, nan)
}

/// Exact top-k over precomputed keys: the `k` largest keys, ties to the
/// lower index; returned in index order.
fn topk_by_key<E: Element>(x: &[E], k: usize, key: impl Fn(E) -> u64 + Copy) -> Selected<Cpu, E> {
    let indices = sparse_core::topk::topk_positions(x, k, key);
    let values = indices.iter().map(|&i| x[i as usize]).collect();
    Selected { indices, values }
}

impl<E: Element> SelectOps<E> for Cpu {
    fn compact_above(&self, x: &Vec<E>, t: E) -> Result<Selected<Self, E>> {
        if t < E::zero() || t.is_nan() {
            let mut nan = false;
            let s = select_where(x, |_, v| {
                nan |= v.is_nan();
                v.abs() > t
            });
            nan_error(nan, x)?;
            return Ok(s);
        }
        // Any NaN has a magnitude key above infinity's and so above t: it
        // lands in a chunk with a hit, where the scalar pass sees it.
        let (indices, nan) = by_width!(x, compact_keys_above(abs_key(t), abs_key(E::infinity())));
        nan_error(nan, x)?;
        let values = indices.iter().map(|&i| x[i as usize]).collect();
        Ok(Selected { indices, values })
    }
    fn topk_abs(&self, x: &Vec<E>, k: usize) -> Result<Selected<Self, E>> {
        check_k(k, x.len())?;
        if k == 0 {
            check_nan_fast(x)?;
        }
        let indices = by_width!(x, topk_abs_bits(k));
        let values: Vec<E> = indices.iter().map(|&i| x[i as usize]).collect();
        nan_in_top(&values, x)?;
        Ok(Selected { indices, values })
    }
    fn digit_histogram(&self, x: &Vec<E>, order: KeyOrder, d: Digit) -> Result<Vec<u32>> {
        check_digit::<E>(d)?;
        let (hist, nan) = by_width!(x, digit_hist(order, d, abs_key(E::infinity())));
        nan_error(nan, x)?;
        Ok(hist)
    }
    fn compact_key(
        &self,
        x: &Vec<E>,
        order: KeyOrder,
        key: u64,
        take_equal: usize,
    ) -> Result<Selected<Self, E>> {
        let (indices, nan) = by_width!(
            x,
            compact_by_key(order, key, take_equal, abs_key(E::infinity()))
        );
        nan_error(nan, x)?;
        let values = indices.iter().map(|&i| x[i as usize]).collect();
        Ok(Selected { indices, values })
    }
    fn topk_abs_segmented(
        &self,
        x: &Vec<E>,
        offsets: &[usize],
        ks: &[usize],
    ) -> Result<Selected<Self, E>> {
        check_segments(offsets, ks, x.len())?;
        let mut out: Selected<Self, E> = Selected {
            indices: Vec::new(),
            values: Vec::new(),
        };
        for (j, &k) in ks.iter().enumerate() {
            let base = offsets[j];
            let seg = &x[base..offsets[j + 1]];
            if k == 0 {
                // Nothing selected here: the NaN test needs its own pass.
                check_nan_fast(seg).map_err(|_| first_nan(x))?;
                continue;
            }
            let idx = by_width!(seg, topk_abs_bits(k));
            out.indices.extend(idx.iter().map(|&i| i + base as u32));
            out.values.extend(idx.iter().map(|&i| seg[i as usize]));
        }
        nan_in_top(&out.values, x)?;
        Ok(out)
    }
    /// The composition of the primitives: the reference the kernels'
    /// fused pass is diffed against.
    fn accumulate_topk(
        &self,
        v: &mut Vec<E>,
        g: &Vec<E>,
        feedback: Feedback<'_, Self, E>,
        k: usize,
    ) -> Result<Selected<Self, E>> {
        sparse_core::backend::accumulate_topk_composed(self, v, g, feedback, k)
    }
    fn gather(&self, x: &Vec<E>, indices: &Vec<u32>) -> Result<Vec<E>> {
        check_indices(indices, x.len())?;
        Ok(indices.iter().map(|&i| x[i as usize]).collect())
    }
    fn topk_signed(&self, x: &Vec<E>, k: usize, end: Extreme) -> Result<Selected<Self, E>> {
        check_k(k, x.len())?;
        check_nan_fast(x)?;
        Ok(match end {
            Extreme::Largest => topk_by_key(x, k, signed_key),
            Extreme::Smallest => topk_by_key(x, k, |v| !signed_key(v)),
        })
    }
}

fn select_where<E: Element>(x: &[E], mut keep: impl FnMut(usize, E) -> bool) -> Selected<Cpu, E> {
    let mut indices = Vec::new();
    let mut values = Vec::new();
    for (i, &v) in x.iter().enumerate() {
        if keep(i, v) {
            indices.push(i as u32);
            values.push(v);
        }
    }
    Selected { indices, values }
}
