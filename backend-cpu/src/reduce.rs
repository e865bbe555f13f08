//! [`ReduceOps`]: one-pass reductions over `|x|`, accumulated in `f64`.

use crate::keys::{self, Word, by_width};
use crate::{Cpu, first_nan, max_key, nan_error};
use sparse_core::{Element, ReduceOps, Result, abs_key};

/// Largest magnitude for which [`f32_abs_sum`] is used: eight of them sum
/// far below `f32::MAX`.
const F32_SUM_SAFE: f64 = 1e36;

/// `(max |x_i|, sum |x_i|)` of an `f32` chunk in one vectorized loop:
/// sixteen lanes keep a running maximum and `f32` partial sums of eight
/// elements each, which are added in `f64` (where the `f64` path converts
/// every element). Each partial sum of non-negative terms is within
/// `8 * 2^-24` relative of exact, so the chunk's sum is within `5e-7`
/// relative when every magnitude is at most [`F32_SUM_SAFE`] (the caller
/// checks the maximum and otherwise sums in `f64`); the shared suite checks
/// the mean within `1e-5`. A NaN is skipped by the maximum and makes the sum
/// NaN, which is how the caller finds it.
fn f32_abs_stats(x: &[f32]) -> (f32, f64) {
    const LANES: usize = 16;
    let mut max = [0.0f32; LANES];
    let mut wide = [0.0f64; LANES];
    let mut total = 0.0f64;
    let mut blocks = x.chunks_exact(LANES * 8);
    for block in &mut blocks {
        let mut acc = [0.0f32; LANES];
        for row in block.chunks_exact(LANES) {
            for j in 0..LANES {
                let v = row[j].abs();
                acc[j] += v;
                max[j] = if v > max[j] { v } else { max[j] };
            }
        }
        for j in 0..LANES {
            wide[j] += f64::from(acc[j]);
        }
    }
    for &v in blocks.remainder() {
        let v = v.abs();
        total += f64::from(v);
        max[0] = if v > max[0] { v } else { max[0] };
    }
    (
        max.iter().fold(0.0f32, |m, &v| m.max(v)),
        total + wide.iter().sum::<f64>(),
    )
}

/// Elements per chunk of the fused reductions (16 KiB of `f32`: several
/// passes over a chunk read memory once).
const STATS_CHUNK: usize = 4096;

/// `sum f(x_i)` in `f64` over eight interleaved accumulators (one chain
/// of dependent additions would run at the adder's latency, not at the
/// speed of reading `x`). A NaN anywhere makes the sum NaN (`f` of a
/// finite or infinite value is never NaN), and only then is its position
/// looked up.
fn f64_sum<E: Element>(x: &[E], f: impl Fn(f64) -> f64) -> Result<f64> {
    const LANES: usize = 8;
    let mut acc = [0.0f64; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f(v.to_f64_exact());
        }
    }
    let tail: f64 = chunks
        .remainder()
        .iter()
        .map(|&v| f(v.to_f64_exact()))
        .sum();
    let sum = acc.iter().sum::<f64>() + tail;
    nan_error(sum.is_nan(), x)?;
    Ok(sum)
}

/// `(count of magnitude keys above t, NaN seen)`.
fn count_keys_above<W: Word>(bits: &[W], t: u64, inf: u64) -> (usize, bool) {
    let (t, inf) = (W::from_u64(t), W::from_u64(inf));
    let (mut count, mut nan) = (0usize, false);
    // A 32-bit counter per chunk keeps the lanes narrow enough to vectorize.
    for chunk in bits.chunks(1 << 16) {
        let (mut c, mut n) = (0u32, false);
        for &b in chunk {
            let k = keys::abs(b);
            c += u32::from(k > t);
            n |= k > inf;
        }
        count += c as usize;
        nan |= n;
    }
    (count, nan)
}

/// `(count of magnitude keys above each of up to 8 thresholds, NaN seen)`
/// in one pass over memory: a chunk small enough for L1 is read once from
/// memory and then counted against each threshold in turn, each count a
/// vectorized compare over the chunk's elements.
fn count_keys_above_each<W: Word>(bits: &[W], ts: &[u64], inf: u64) -> ([usize; 8], bool) {
    let inf = W::from_u64(inf);
    let (mut count, mut nan) = ([0usize; 8], false);
    for chunk in bits.chunks(STATS_CHUNK) {
        for (c, &t) in count.iter_mut().zip(ts) {
            let t = W::from_u64(t);
            *c += chunk
                .iter()
                .fold(0u32, |n, &b| n + u32::from(keys::abs(b) > t)) as usize;
        }
        nan |= chunk.iter().fold(false, |n, &b| n | (keys::abs(b) > inf));
    }
    (count, nan)
}

impl<E: Element> ReduceOps<E> for Cpu {
    fn max_abs(&self, x: &Vec<E>) -> Result<E> {
        let (m, nan) = by_width!(x, max_key(abs_key(E::infinity())));
        nan_error(nan, x)?;
        Ok(E::from_bits_u64(m))
    }
    fn mean_abs(&self, x: &Vec<E>) -> Result<f64> {
        if x.is_empty() {
            return Ok(0.0);
        }
        Ok(f64_sum(x, |v| v.abs())? / x.len() as f64)
    }
    fn sum_squares(&self, x: &Vec<E>) -> Result<f64> {
        f64_sum(x, |v| v * v)
    }
    fn abs_stats(&self, x: &Vec<E>) -> Result<(E, f64)> {
        // Both reductions a chunk at a time: one pass over memory (for
        // `f32`, one loop; otherwise two, the chunk still in L1 for the
        // second).
        let inf = abs_key(E::infinity());
        let (mut max, mut sum) = (0u64, 0.0f64);
        for chunk in x.chunks(STATS_CHUNK) {
            if E::BYTES == 4
                && let Ok(f) = bytemuck::try_cast_slice::<E, f32>(chunk)
            {
                let (m, s) = f32_abs_stats(f);
                if s.is_nan() {
                    return Err(first_nan(x));
                }
                if f64::from(m) <= F32_SUM_SAFE {
                    max = max.max(u64::from(m.to_bits()));
                    sum += s;
                    continue;
                }
            }
            let (m, nan) = by_width!(chunk, max_key(inf));
            nan_error(nan, x)?;
            max = max.max(m);
            sum += f64_sum(chunk, |v| v.abs())?;
        }
        let mean = if x.is_empty() {
            0.0
        } else {
            sum / x.len() as f64
        };
        Ok((E::from_bits_u64(max), mean))
    }
    fn count_above_each(&self, x: &Vec<E>, ts: &[E]) -> Result<Vec<usize>> {
        if ts.is_empty() || ts.iter().any(|&t| t < E::zero() || t.is_nan()) {
            return ts.iter().map(|&t| self.count_above(x, t)).collect();
        }
        let inf = abs_key(E::infinity());
        let mut counts = Vec::with_capacity(ts.len());
        for group in ts.chunks(8) {
            let keys: Vec<u64> = group.iter().map(|&t| abs_key(t)).collect();
            let (c, nan) = by_width!(x, count_keys_above_each(&keys, inf));
            nan_error(nan, x)?;
            counts.extend_from_slice(&c[..group.len()]);
        }
        Ok(counts)
    }
    fn count_above(&self, x: &Vec<E>, t: E) -> Result<usize> {
        let inf = abs_key(E::infinity());
        if t < E::zero() || t.is_nan() {
            // Every magnitude is above a negative threshold, none above NaN.
            let (_, nan) = by_width!(x, max_key(inf));
            nan_error(nan, x)?;
            return Ok(if t.is_nan() { 0 } else { x.len() });
        }
        let (count, nan) = by_width!(x, count_keys_above(abs_key(t), inf));
        nan_error(nan, x)?;
        Ok(count)
    }
}
