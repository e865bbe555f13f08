//! # backend-cpu
//!
//! The reference [`Backend`](sparse_core::Backend): every device primitive
//! written plainly over `Vec`s on the host, to be obviously right, for every
//! element type (`f32`, `f64`, `f16`, `bf16`: one generic impl of each ops
//! trait). Other backends are tested against it.
//!
//! ```
//! use backend_cpu::Cpu;
//! use sparse_core::{BufferOps, SelectOps};
//!
//! let b = Cpu;
//! let x = b.upload(&[0.5f32, -3.0, 3.0, 1.0])?;
//! let top = b.topk_abs(&x, 2)?; // |-3| and |3| tie: both taken
//! assert_eq!(b.download(&top.indices)?, vec![1, 2]);
//! # Ok::<(), sparse_core::Error>(())
//! ```
//!
//! Choices: "plain" means plain loops, not slow ones: the selection
//! primitives compare elements as integers of their width in loops that
//! vectorize, and only visit element by element the chunks that hold a hit
//! (see `keys`), so a pass runs near the speed of reading memory. Exact
//! top-k (`topk_abs`, the segments of `topk_abs_segmented`) narrows the
//! input to candidates at or above a bound estimated from a sample or a
//! histogram, checks that at least k reach it, and runs introselect on
//! `(key desc, index asc)` over those candidates only; every path is
//! checked against a full sort in the shared suite. NaN in a magnitude
//! top-k is found among the selected (its key is above every other).
//! Sums of `mean_abs` and `sum_squares` are accumulated in `f64` (eight
//! interleaved accumulators); `abs_stats` and `count_above_each` are one
//! pass each; hash
//! partitioning runs Zen's Alg. 1 sequentially in input order, which is one
//! valid serialization of the parallel algorithm (read-after-write then never
//! sees a lost race).

use sparse_core::backend::{check_digit, check_k, check_len, check_segments};
use sparse_core::encoding::{bits_from_indices, indices_from_bits};
use sparse_core::qsgd::{self, QsgdParams, Quantized};
use sparse_core::{
    BufferOps, CodecOps, DenseOps, Element, Error, Extreme, HashOps, HashPartitions,
    HierarchicalHash, IndexOps, ReduceOps, Result, Scalar, SelectOps, Selected, abs_key,
    signed_key,
};
use sparse_core::{Digit, KeyOrder};

/// The CPU reference backend. Buffers are `Vec`s.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu;

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

/// The NaN test of a magnitude top-k, fused into the selection: a NaN's
/// magnitude key is above every other key, so if `x` holds one, some NaN
/// is among any `k >= 1` largest, and only the selected values need a look.
fn nan_in_top<E: Element>(top: &[E], x: &[E]) -> Result<()> {
    if top.iter().any(|v| v.is_nan()) {
        return Err(first_nan(x));
    }
    Ok(())
}

/// The error naming the first NaN of `x` (which holds one).
fn first_nan<E: Element>(x: &[E]) -> Error {
    check_nan(x).err().unwrap_or(Error::NonFinite { index: 0 })
}

/// [`check_nan`] as a vectorized integer pass (the position is only looked
/// up when there is a NaN).
fn check_nan_fast<E: Element>(x: &[E]) -> Result<()> {
    let (_, nan) = by_width!(x, max_key(abs_key(E::infinity())));
    nan_error(nan, x)
}

fn check_nan<E: Element>(x: &[E]) -> Result<()> {
    match x.iter().position(|v| v.is_nan()) {
        Some(index) => Err(Error::NonFinite { index }),
        None => Ok(()),
    }
}

mod keys;
use keys::{Word, by_width};

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

/// `(max magnitude key, NaN seen)`.
fn max_key<W: Word>(bits: &[W], inf: u64) -> (u64, bool) {
    let m = bits
        .iter()
        .fold(W::from_u64(0), |m, &b| m.max(keys::abs(b)));
    (m.to_u64(), m.to_u64() > inf)
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

/// The NaN test fused into a primitive's own pass: `nan` is or-ed inside
/// the loop, and only when it is set is the first NaN's index looked up.
fn nan_error<E: Element>(nan: bool, x: &[E]) -> Result<()> {
    if nan { check_nan(x) } else { Ok(()) }
}

fn check_indices(indices: &[u32], len: usize) -> Result<()> {
    match indices.iter().position(|&i| i as usize >= len) {
        Some(position) => Err(Error::IndexOutOfRange {
            index: indices[position] as u64,
            position,
            dim: len as u64,
        }),
        None => Ok(()),
    }
}

impl BufferOps for Cpu {
    type Buffer<T: Scalar> = Vec<T>;
    fn name(&self) -> &'static str {
        "cpu"
    }
    fn upload<T: Scalar>(&self, data: &[T]) -> Result<Vec<T>> {
        Ok(data.to_vec())
    }
    fn download<T: Scalar>(&self, buf: &Vec<T>) -> Result<Vec<T>> {
        Ok(buf.clone())
    }
    fn zeros<T: Scalar>(&self, len: usize) -> Result<Vec<T>> {
        Ok(vec![T::zeroed(); len])
    }
    fn len<T: Scalar>(&self, buf: &Vec<T>) -> usize {
        buf.len()
    }
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

impl<E: Element> DenseOps<E> for Cpu {
    fn scatter_add(&self, dense: &mut Vec<E>, indices: &Vec<u32>, values: &Vec<E>) -> Result<()> {
        check_len("scatter_add indices vs values", indices.len(), values.len())?;
        check_indices(indices, dense.len())?;
        for (&i, &v) in indices.iter().zip(values) {
            dense[i as usize] = dense[i as usize] + v;
        }
        Ok(())
    }
    fn mask(&self, dense: &mut Vec<E>, indices: &Vec<u32>) -> Result<()> {
        check_indices(indices, dense.len())?;
        for &i in indices {
            dense[i as usize] = E::zero();
        }
        Ok(())
    }
    fn axpy(&self, a: E, x: &Vec<E>, y: &mut Vec<E>) -> Result<()> {
        check_len("axpy x vs y", y.len(), x.len())?;
        for (yi, &xi) in y.iter_mut().zip(x) {
            *yi = a * xi + *yi;
        }
        Ok(())
    }
    fn scale(&self, a: E, x: &mut Vec<E>) -> Result<()> {
        for v in x.iter_mut() {
            *v = a * *v;
        }
        Ok(())
    }
}

impl<E: Element> HashOps<E> for Cpu {
    /// [`sparse_core::hash::partition_host`]: the reference every backend
    /// is diffed against.
    fn hash_partition(
        &self,
        indices: &Vec<u32>,
        values: &Vec<E>,
        h: &HierarchicalHash,
    ) -> Result<HashPartitions<E>> {
        sparse_core::hash::partition_host(indices, values, h)
    }
}

impl IndexOps for Cpu {
    fn gather_indices(&self, src: &Vec<u32>, positions: &Vec<u32>) -> Result<Vec<u32>> {
        check_indices(positions, src.len())?;
        Ok(positions.iter().map(|&i| src[i as usize]).collect())
    }
    fn bitmap_encode(&self, indices: &Vec<u32>, lo: u32, len: usize) -> Result<Vec<u32>> {
        if let Some(position) = indices
            .iter()
            .position(|&i| i < lo || (i - lo) as usize >= len)
        {
            return Err(Error::IndexOutOfRange {
                index: indices[position] as u64,
                position,
                dim: lo as u64 + len as u64,
            });
        }
        Ok(bits_from_indices(indices, lo, len))
    }
    fn bitmap_decode(&self, words: &Vec<u32>, lo: u32, len: usize) -> Result<Vec<u32>> {
        check_len("bitmap words", len.div_ceil(32), words.len())?;
        Ok(indices_from_bits(words, lo, len))
    }
}

impl<E: Element> CodecOps<E> for Cpu {
    fn qsgd_quantize(
        &self,
        x: &Vec<E>,
        p: &QsgdParams,
        counter_base: u32,
    ) -> Result<(Vec<E>, Vec<u32>)> {
        let q = qsgd::quantize(x, p, counter_base)?;
        Ok((q.scales, q.words))
    }
    fn qsgd_dequantize(
        &self,
        scales: &Vec<E>,
        words: &Vec<u32>,
        n: usize,
        p: &QsgdParams,
    ) -> Result<Vec<E>> {
        qsgd::dequantize(
            &Quantized {
                scales: scales.clone(),
                words: words.clone(),
            },
            n,
            p,
        )
    }
}

#[cfg(test)]
mod suite {
    sparse_core::backend_test_suite!(crate::Cpu; f32, f64, f16, bf16);

    /// Every function of the backend suite is listed in
    /// `backend_test_suite!`, and nothing else is; the same for the
    /// differential tests and `differential_test_suite!`.
    #[test]
    fn the_backend_suite_macro_lists_every_suite_function() {
        for (suite, macros) in [
            (
                include_str!("../../sparse-core/src/testing/suite.rs"),
                include_str!("../../sparse-core/src/testing/mod.rs"),
            ),
            (
                include_str!("../../sparse-core/src/testing/differential.rs"),
                include_str!("../../sparse-core/src/testing/differential.rs"),
            ),
        ] {
            let (missing, extra) = sparse_core::testing::unlisted_suite_fns(suite, macros);
            assert!(
                missing.is_empty() && extra.is_empty(),
                "{missing:?} {extra:?}"
            );
        }
    }
}

#[cfg(test)]
mod hash_table {
    use crate::Cpu;
    use sparse_core::{BufferOps, Error, HashOps, HierarchicalHash};

    /// Issue 27.3: a table of `P (r1 + r2)` slots too large for any
    /// machine is `OutOfMemory`, not an abort of the process.
    #[test]
    fn a_table_beyond_the_machine_is_out_of_memory() {
        let h = HierarchicalHash::new(1, 2, 1 << 16, 3, u32::MAX, u32::MAX).unwrap();
        let idx = Cpu.upload(&[5u32]).unwrap();
        let val = Cpu.upload(&[1.0f32]).unwrap();
        let res = HashOps::<f32>::hash_partition(&Cpu, &idx, &val, &h);
        assert!(matches!(res, Err(Error::OutOfMemory { .. })), "{res:?}");
    }
}
