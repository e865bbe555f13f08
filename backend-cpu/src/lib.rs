//! # backend-cpu
//!
//! The reference [`Backend`](sparse_core::Backend): every device primitive
//! written plainly over `Vec`s on the host, to be obviously right. Other
//! backends are tested against it.
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
//! Choices: exact top-k sorts nothing larger than needed
//! (`select_nth_unstable_by` on `(key desc, index asc)`, then a sort of the
//! `k` winners by index); sums of `mean_abs` are accumulated in `f64`; hash
//! partitioning runs Zen's Alg. 1 sequentially in input order, which is one
//! valid serialization of the parallel algorithm (read-after-write then never
//! sees a lost race).

use sparse_core::backend::{check_digit, check_k, check_len, check_segments};
use sparse_core::encoding::{bits_from_indices, indices_from_bits};
use sparse_core::qsgd::{self, QsgdParams, Quantized};
use sparse_core::{
    BufferOps, CodecOps, DenseOps, Element, Error, Extreme, HashOps, HashPartitions,
    HierarchicalHash, ReduceOps, Result, Scalar, SelectOps, Selected, abs_key, signed_key,
};
use sparse_core::{Digit, KeyOrder};

/// The CPU reference backend. Buffers are `Vec`s.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu;

fn check_nan<E: Element>(x: &[E]) -> Result<()> {
    match x.iter().position(|v| v.is_nan()) {
        Some(index) => Err(Error::NonFinite { index }),
        None => Ok(()),
    }
}

/// An unsigned integer as wide as an element: its bit pattern.
trait Word: bytemuck::Pod + Ord + Copy {
    const SIGN: Self;
    fn clear(self, mask: Self) -> Self;
    fn to_u64(self) -> u64;
    fn from_u64(v: u64) -> Self;
}

macro_rules! word {
    ($t:ty) => {
        impl Word for $t {
            const SIGN: Self = 1 << (<$t>::BITS - 1);
            #[inline]
            fn clear(self, mask: Self) -> Self {
                self & !mask
            }
            #[inline]
            fn to_u64(self) -> u64 {
                self as u64
            }
            #[inline]
            fn from_u64(v: u64) -> Self {
                v as $t
            }
        }
    };
}
word!(u16);
word!(u32);
word!(u64);

/// Calls `$f::<W>(bits)` with the elements viewed as integers of their
/// width: magnitudes then compare as integers (`abs_key`), and NaN is any
/// magnitude key above infinity's. Branch-free integer loops vectorize,
/// where `Float::max` with its NaN rules does not.
macro_rules! by_width {
    ($x:expr, $f:ident ( $($arg:expr),* )) => {
        match E::BYTES {
            2 => $f::<u16>(bytemuck::cast_slice($x) $(, $arg)*),
            4 => $f::<u32>(bytemuck::cast_slice($x) $(, $arg)*),
            _ => $f::<u64>(bytemuck::cast_slice($x) $(, $arg)*),
        }
    };
}

/// `(max magnitude key, NaN seen)`.
fn max_key<W: Word>(bits: &[W], inf: u64) -> (u64, bool) {
    let m = bits
        .iter()
        .fold(W::from_u64(0), |m, &b| m.max(b.clear(W::SIGN)));
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
            let k = b.clear(W::SIGN);
            c += u32::from(k > t);
            n |= k > inf;
        }
        count += c as usize;
        nan |= n;
    }
    (count, nan)
}

/// `(indices with magnitude key above t, NaN seen)`, in index order. Chunks
/// of 64 are first tested as a whole (a vectorized any-hit test), so the
/// scalar, branchy pass only visits chunks that hold a hit.
fn compact_keys_above<W: Word>(bits: &[W], t: u64, inf: u64) -> (Vec<u32>, bool) {
    let (t, inf) = (W::from_u64(t), W::from_u64(inf));
    let mut out = Vec::new();
    let mut nan = false;
    for (c, chunk) in bits.chunks(64).enumerate() {
        let hits = chunk.iter().fold(false, |h, &b| h | (b.clear(W::SIGN) > t));
        if hits {
            for (o, &b) in chunk.iter().enumerate() {
                let k = b.clear(W::SIGN);
                nan |= k > inf;
                if k > t {
                    out.push((c * 64 + o) as u32);
                }
            }
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

impl ReduceOps for Cpu {
    fn max_abs<E: Element>(&self, x: &Vec<E>) -> Result<E> {
        let (m, nan) = by_width!(x, max_key(abs_key(E::infinity())));
        nan_error(nan, x)?;
        Ok(E::from_bits_u64(m))
    }
    fn mean_abs<E: Element>(&self, x: &Vec<E>) -> Result<f64> {
        if x.is_empty() {
            return Ok(0.0);
        }
        let mut nan = false;
        let mut sum = 0.0f64;
        for &v in x.iter() {
            nan |= v.is_nan();
            sum += v.to_f64_exact().abs();
        }
        nan_error(nan, x)?;
        Ok(sum / x.len() as f64)
    }
    fn sum_squares<E: Element>(&self, x: &Vec<E>) -> Result<f64> {
        let mut nan = false;
        let mut sum = 0.0f64;
        for &v in x.iter() {
            nan |= v.is_nan();
            let v = v.to_f64_exact();
            sum += v * v;
        }
        nan_error(nan, x)?;
        Ok(sum)
    }
    fn count_above<E: Element>(&self, x: &Vec<E>, t: E) -> Result<usize> {
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
fn topk_by_key<E: Element>(x: &[E], k: usize, key: impl Fn(E) -> u64) -> Selected<Cpu, E> {
    let indices = sparse_core::topk::topk_positions(x, k, key);
    let values = indices.iter().map(|&i| x[i as usize]).collect();
    Selected { indices, values }
}

impl SelectOps for Cpu {
    fn compact_above<E: Element>(&self, x: &Vec<E>, t: E) -> Result<Selected<Self, E>> {
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
    fn topk_abs<E: Element>(&self, x: &Vec<E>, k: usize) -> Result<Selected<Self, E>> {
        check_k(k, x.len())?;
        check_nan(x)?;
        Ok(topk_by_key(x, k, abs_key))
    }
    fn digit_histogram<E: Element>(
        &self,
        x: &Vec<E>,
        order: KeyOrder,
        d: Digit,
    ) -> Result<Vec<u32>> {
        check_digit::<E>(d)?;
        let mut hist = vec![0u32; 1 << d.digit_bits];
        let top = d.shift + d.digit_bits;
        let mask = (1u64 << d.digit_bits) - 1;
        let mut nan = false;
        for &v in x {
            nan |= v.is_nan();
            let key = order.key(v);
            if top >= 64 || key >> top == d.prefix {
                hist[((key >> d.shift) & mask) as usize] += 1;
            }
        }
        nan_error(nan, x)?;
        Ok(hist)
    }
    fn compact_key<E: Element>(
        &self,
        x: &Vec<E>,
        order: KeyOrder,
        key: u64,
        take_equal: usize,
    ) -> Result<Selected<Self, E>> {
        let mut equal_left = take_equal;
        let mut nan = false;
        let s = select_where(x, |_, v| {
            nan |= v.is_nan();
            let k = order.key(v);
            if k == key && equal_left > 0 {
                equal_left -= 1;
                return true;
            }
            k > key
        });
        nan_error(nan, x)?;
        Ok(s)
    }
    fn topk_abs_segmented<E: Element>(
        &self,
        x: &Vec<E>,
        offsets: &[usize],
        ks: &[usize],
    ) -> Result<Selected<Self, E>> {
        check_segments(offsets, ks, x.len())?;
        check_nan(x)?;
        let mut out: Selected<Self, E> = Selected {
            indices: Vec::new(),
            values: Vec::new(),
        };
        for (j, &k) in ks.iter().enumerate() {
            let base = offsets[j];
            let seg = topk_by_key(&x[base..offsets[j + 1]], k, abs_key);
            out.indices
                .extend(seg.indices.iter().map(|&i| i + base as u32));
            out.values.extend(seg.values);
        }
        Ok(out)
    }
    fn gather<E: Element>(&self, x: &Vec<E>, indices: &Vec<u32>) -> Result<Vec<E>> {
        check_indices(indices, x.len())?;
        Ok(indices.iter().map(|&i| x[i as usize]).collect())
    }
    fn topk_signed<E: Element>(
        &self,
        x: &Vec<E>,
        k: usize,
        end: Extreme,
    ) -> Result<Selected<Self, E>> {
        check_k(k, x.len())?;
        check_nan(x)?;
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

impl DenseOps for Cpu {
    fn scatter_add<E: Element>(
        &self,
        dense: &mut Vec<E>,
        indices: &Vec<u32>,
        values: &Vec<E>,
    ) -> Result<()> {
        check_len("scatter_add indices vs values", indices.len(), values.len())?;
        check_indices(indices, dense.len())?;
        for (&i, &v) in indices.iter().zip(values) {
            dense[i as usize] = dense[i as usize] + v;
        }
        Ok(())
    }
    fn mask<E: Element>(&self, dense: &mut Vec<E>, indices: &Vec<u32>) -> Result<()> {
        check_indices(indices, dense.len())?;
        for &i in indices {
            dense[i as usize] = E::zero();
        }
        Ok(())
    }
    fn axpy<E: Element>(&self, a: E, x: &Vec<E>, y: &mut Vec<E>) -> Result<()> {
        check_len("axpy x vs y", y.len(), x.len())?;
        for (yi, &xi) in y.iter_mut().zip(x) {
            *yi = a * xi + *yi;
        }
        Ok(())
    }
    fn scale<E: Element>(&self, a: E, x: &mut Vec<E>) -> Result<()> {
        for v in x.iter_mut() {
            *v = a * *v;
        }
        Ok(())
    }
}

impl HashOps for Cpu {
    fn hash_partition<E: Element>(
        &self,
        indices: &Vec<u32>,
        values: &Vec<E>,
        h: &HierarchicalHash,
    ) -> Result<HashPartitions<E>> {
        check_len(
            "hash_partition indices vs values",
            indices.len(),
            values.len(),
        )?;
        let p = h.h0.partitions() as usize;
        let (r1, width) = (h.r1 as usize, h.r1 as usize + h.r2 as usize);
        // Slot value 0 is empty; an index is stored as index + 1 (Zen's
        // indices start at 1 for the same reason).
        let mut slots = vec![0u32; p * width];
        let mut slot_val = vec![E::zero(); p * width];
        let mut counter = vec![r1; p];
        let mut fallback: Vec<Vec<(u32, E)>> = vec![Vec::new(); p];
        let (mut serial, mut spilled) = (0, 0);
        'entries: for (&idx, &val) in indices.iter().zip(values) {
            let part = h.h0.partition(idx) as usize;
            let row = part * width;
            for f in &h.rehash {
                let q = row + f.hash_to(idx, h.r1) as usize;
                if slots[q] == 0 {
                    slots[q] = idx + 1;
                    slot_val[q] = val;
                    continue 'entries;
                }
            }
            let c = counter[part];
            counter[part] += 1;
            if c < width {
                slots[row + c] = idx + 1;
                slot_val[row + c] = val;
                serial += 1;
            } else {
                fallback[part].push((idx, val));
                spilled += 1;
            }
        }
        let mut out = HashPartitions {
            offsets: vec![0],
            indices: Vec::with_capacity(indices.len()),
            values: Vec::with_capacity(indices.len()),
            serial,
            fallback: spilled,
        };
        for (part, spill) in fallback.iter().enumerate() {
            for q in part * width..(part + 1) * width {
                if slots[q] != 0 {
                    out.indices.push(slots[q] - 1);
                    out.values.push(slot_val[q]);
                }
            }
            for &(i, v) in spill {
                out.indices.push(i);
                out.values.push(v);
            }
            out.offsets.push(out.indices.len());
        }
        Ok(out)
    }
}

impl CodecOps for Cpu {
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
    fn qsgd_quantize<E: Element>(
        &self,
        x: &Vec<E>,
        p: &QsgdParams,
        counter_base: u32,
    ) -> Result<(Vec<E>, Vec<u32>)> {
        let q = qsgd::quantize(x, p, counter_base)?;
        Ok((q.scales, q.words))
    }
    fn qsgd_dequantize<E: Element>(
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
    sparse_core::backend_test_suite!(crate::Cpu);

    /// Every function of the backend suite is listed in
    /// `backend_test_suite!`, and nothing else is.
    #[test]
    fn the_backend_suite_macro_lists_every_suite_function() {
        let (missing, extra) = sparse_core::testing::unlisted_suite_fns(
            include_str!("../../sparse-core/src/testing/suite.rs"),
            include_str!("../../sparse-core/src/testing/mod.rs"),
        );
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{missing:?} {extra:?}"
        );
    }
}
