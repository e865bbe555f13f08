//! QSGD bucketed stochastic quantization (SparCML sec. 6, Alistarh et al.).
//!
//! Values are cut into buckets of `B` consecutive entries. Each bucket keeps
//! one full-precision scale `s_b = max |v|` over the bucket, and each value a
//! `bits`-bit code: one sign bit and a magnitude level in `0..=L` with
//! `L = 2^(bits-1) - 1`. With `r = |v| / s_b * L`, the level is `floor(r)`
//! rounded up with probability `r - floor(r)`, so `E[decode(v)] = v`
//! (unbiased) and `|decode(v) - v| <= s_b / L` (the per-bucket bound).
//!
//! Layout (pinned; kernels reproduce it): code `j` sits at bits
//! `[j*bits, (j+1)*bits)` of little-endian `u32` word `j*bits/32`; the sign is
//! the code's top bit. The uniform draw for value `j` is
//! `CounterRng::new(seed).unit_f32_at(counter_base + j)`; the arithmetic is in
//! `f32` whatever the element type.

use crate::{CounterRng, Element, Error, Result};

/// Default bucket size (SparCML: "in the order of 1024").
pub const DEFAULT_BUCKET: usize = 1024;

/// QSGD parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QsgdParams {
    /// Bits per value: 2, 4 or 8.
    pub bits: u32,
    /// Values per bucket (one scale each).
    pub bucket: usize,
    /// Seed of the stochastic rounding.
    pub seed: u64,
}

impl QsgdParams {
    /// Validated parameters.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] unless `bits` is 2, 4 or 8 and
    /// `1 <= bucket <= u32::MAX`.
    pub fn new(bits: u32, bucket: usize, seed: u64) -> Result<Self> {
        if !matches!(bits, 2 | 4 | 8) {
            return Err(Error::invalid("bits", format!("{bits} is not 2, 4 or 8")));
        }
        if bucket == 0 || bucket > u32::MAX as usize {
            return Err(Error::invalid(
                "bucket",
                format!("{bucket} not in 1..=u32::MAX"),
            ));
        }
        Ok(Self { bits, bucket, seed })
    }
    /// The top magnitude level `L = 2^(bits-1) - 1`.
    pub fn levels(&self) -> u32 {
        (1 << (self.bits - 1)) - 1
    }
    /// Number of buckets for `n` values.
    pub fn buckets(&self, n: usize) -> usize {
        n.div_ceil(self.bucket)
    }
    /// Number of `u32` code words for `n` values.
    pub fn words(&self, n: usize) -> usize {
        (n * self.bits as usize).div_ceil(32)
    }
}

/// Quantized values: one scale per bucket and packed codes.
#[derive(Debug, Clone, PartialEq)]
pub struct Quantized<E> {
    /// `max |v|` of each bucket.
    pub scales: Vec<E>,
    /// Packed codes (see the module doc for the layout).
    pub words: Vec<u32>,
}

/// Quantizes `values`; `counter_base` offsets the generator's counter (use
/// the global position of `values[0]` when quantizing a slice of a larger
/// vector, so that every backend draws the same numbers).
///
/// # Errors
/// [`Error::NonFinite`] if a value is NaN or infinite.
pub fn quantize<E: Element>(
    values: &[E],
    p: &QsgdParams,
    counter_base: u32,
) -> Result<Quantized<E>> {
    if let Some(index) = values.iter().position(|v| !v.is_finite()) {
        return Err(Error::NonFinite { index });
    }
    let rng = CounterRng::new(p.seed);
    let levels = p.levels() as f32;
    let bits = p.bits as usize;
    let mut words = vec![0u32; p.words(values.len())];
    let mut scales = Vec::with_capacity(p.buckets(values.len()));
    for (b, chunk) in values.chunks(p.bucket).enumerate() {
        let scale = chunk.iter().fold(E::zero(), |m, &v| m.max(v.abs()));
        scales.push(scale);
        let s = scale.to_f32_lossy();
        for (o, &v) in chunk.iter().enumerate() {
            let j = b * p.bucket + o;
            let code = code_of(
                v.to_f32_lossy(),
                s,
                levels,
                rng.unit_f32_at(counter_base.wrapping_add(j as u32)),
                p.bits,
            );
            words[j * bits / 32] |= code << ((j * bits) % 32);
        }
    }
    Ok(Quantized { scales, words })
}

/// The code of one value: the rounding rule shared by all backends.
#[inline]
pub fn code_of(v: f32, scale: f32, levels: f32, u: f32, bits: u32) -> u32 {
    if scale <= 0.0 || v == 0.0 {
        return 0;
    }
    let r = v.abs() / scale * levels;
    let lo = r.floor();
    let level = if u < r - lo { lo + 1.0 } else { lo };
    let level = (level as u32).min(levels as u32);
    if level == 0 {
        0
    } else {
        level | (u32::from(v < 0.0) << (bits - 1))
    }
}

/// Decodes `n` values.
///
/// # Errors
/// [`Error::LengthMismatch`] if `scales` or `words` do not fit `n`.
pub fn dequantize<E: Element>(q: &Quantized<E>, n: usize, p: &QsgdParams) -> Result<Vec<E>> {
    if q.scales.len() != p.buckets(n) {
        return Err(Error::LengthMismatch {
            what: "qsgd scales",
            expected: p.buckets(n),
            got: q.scales.len(),
        });
    }
    if q.words.len() != p.words(n) {
        return Err(Error::LengthMismatch {
            what: "qsgd words",
            expected: p.words(n),
            got: q.words.len(),
        });
    }
    let bits = p.bits as usize;
    let mask = (1u32 << bits) - 1;
    let levels = E::from_f64_nearest(p.levels() as f64);
    Ok((0..n)
        .map(|j| {
            let code = (q.words[j * bits / 32] >> ((j * bits) % 32)) & mask;
            let level = code & (mask >> 1);
            let mag = q.scales[j / p.bucket] * E::from_f64_nearest(level as f64) / levels;
            if code >> (bits - 1) != 0 { -mag } else { mag }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_layout() {
        // 2 bits, L = 1: values equal to +-scale encode to exactly level 1.
        let p = QsgdParams::new(2, 4, 9).unwrap();
        let q = quantize(&[1.0f32, -1.0, 0.0, 1.0, -2.0], &p, 0).unwrap();
        assert_eq!(q.scales, vec![1.0, 2.0]);
        // codes: 01, 11, 00, 01 | 11 (the -2 is its bucket's max).
        assert_eq!(q.words, vec![0b01_00_11_01 | (0b11 << 8)]);
        assert_eq!(
            dequantize(&q, 5, &p).unwrap(),
            vec![1.0, -1.0, 0.0, 1.0, -2.0]
        );
    }

    #[test]
    fn rejects_bad_params_and_nan() {
        assert!(QsgdParams::new(3, 8, 0).is_err());
        assert!(QsgdParams::new(4, 0, 0).is_err());
        let p = QsgdParams::new(4, 8, 0).unwrap();
        assert!(matches!(
            quantize(&[1.0f32, f32::NAN], &p, 0),
            Err(Error::NonFinite { index: 1 })
        ));
    }
}
