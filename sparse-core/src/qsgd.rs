//! QSGD bucketed stochastic quantization (SparCML sec. 6, Alistarh et al.).
//!
//! Values are cut into buckets of `B` consecutive entries. Each bucket keeps
//! one full-precision scale `s_b = max |v|` over the bucket, and each value a
//! `bits`-bit code: one sign bit and a magnitude level in `0..=L` with
//! `L = 2^(bits-1) - 1`. With `r = |v| / s_b * L`, the level is `floor(r)`
//! rounded up with probability `r - floor(r)`, so `E[decode(v)] = v`
//! (unbiased) and, in exact arithmetic, `|decode(v) - v| <= s_b / L` (the
//! per-bucket bound). The arithmetic below rounds, so the bound that holds
//! is [`error_bound`]: `s_b / L + s_b (3 u_E + 2^-23)` plus one subnormal
//! step of `E`, with `u_E` the unit roundoff of the element type (half its
//! machine epsilon: `2^-24` for `f32`, `2^-53` for `f64`, `2^-11` for
//! `f16`, `2^-8` for `bf16`). For `f32` and `f64` the extra term is below a
//! millionth of `s_b / L`; for `f16` at 8 bits it is up to a fifth of it,
//! and the plain `s_b / L` is exceeded in practice (by up to 1.05x).
//!
//! Layout (pinned; kernels reproduce it): code `j` sits at bits
//! `[j*bits, (j+1)*bits)` of little-endian `u32` word `j*bits/32`; the sign is
//! the code's top bit. The uniform draw for value `j` is
//! `CounterRng::new(seed).unit_f32_at(counter_base + j)` ([`CounterRng`],
//! kept instead of a `rand` generator because the kernels must reproduce
//! its draws bit for bit).
//!
//! Arithmetic (pinned; kernels reproduce it for `f32`): encoding computes
//! the ratio `|v| / s_b` in the element type, then `r = ratio * L` in `f32`;
//! decoding computes `s_b * (level / L)` in the element type. Both orders
//! keep every intermediate at or below `max(|v|, s_b)`, so no finite input
//! overflows: a value at `f32::MAX` decodes to at most `f32::MAX`, never to
//! infinity (a product `s_b * level` first would overflow for
//! `s_b >= f32::MAX / L`).

use crate::{CounterRng, Element, Error, Result, exact_difference};

/// Default bucket size (SparCML: "in the order of 1024").
pub const DEFAULT_BUCKET: usize = 1024;

/// QSGD parameters, valid by construction: the fields are private and
/// [`QsgdParams::new`] checks them, so no code path can reach a division by
/// a zero bucket or a shift by a zero bit count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QsgdParams {
    bits: u32,
    bucket: usize,
    seed: u64,
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
    /// Bits per value: 2, 4 or 8.
    pub fn bits(&self) -> u32 {
        self.bits
    }
    /// Values per bucket (one scale each).
    pub fn bucket(&self) -> usize {
        self.bucket
    }
    /// Seed of the stochastic rounding.
    pub fn seed(&self) -> u64 {
        self.seed
    }
    /// The same parameters with another seed (a fresh draw per step or per
    /// rank).
    #[must_use]
    pub fn with_seed(self, seed: u64) -> Self {
        Self { seed, ..self }
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
    crate::checks::check_finite(values)?;
    let rng = CounterRng::new(p.seed);
    let levels = p.levels() as f32;
    let bits = p.bits as usize;
    let mut words = vec![0u32; p.words(values.len())];
    let mut scales = Vec::with_capacity(p.buckets(values.len()));
    for (b, chunk) in values.chunks(p.bucket).enumerate() {
        let scale = chunk.iter().fold(E::zero(), |m, &v| m.max(v.abs()));
        scales.push(scale);
        for (o, &v) in chunk.iter().enumerate() {
            let j = b * p.bucket + o;
            // |v| / scale <= 1 in the element type: no overflow, and an f64
            // value beyond f32's range still has a ratio f32 can hold.
            let ratio = if scale > E::zero() {
                (v.abs() / scale).to_f32_lossy()
            } else {
                0.0
            };
            let code = code_of(
                ratio,
                v < E::zero(),
                levels,
                rng.unit_f32_at(counter_base.wrapping_add(j as u32)),
                p.bits,
            );
            words[j * bits / 32] |= code << ((j * bits) % 32);
        }
    }
    Ok(Quantized { scales, words })
}

/// The code of one value from its ratio `|v| / scale` (in `0..=1`; 0 for a
/// zero value or scale) and its sign: the rounding rule shared by all
/// backends.
#[inline]
pub fn code_of(ratio: f32, negative: bool, levels: f32, u: f32, bits: u32) -> u32 {
    if ratio <= 0.0 {
        return 0;
    }
    let r = ratio * levels;
    let lo = r.floor();
    let level = if u < r - lo { lo + 1.0 } else { lo };
    let level = (level as u32).min(levels as u32);
    if level == 0 {
        0
    } else {
        level | (u32::from(negative) << (bits - 1))
    }
}

/// The magnitude a code of `level` decodes to: `scale * (level / levels)`,
/// in that order, so that the result never exceeds `scale` (no overflow for
/// any finite scale).
#[inline]
pub fn magnitude<E: Element>(scale: E, level: u32, levels: u32) -> E {
    scale * (E::from_f64_nearest(level as f64) / E::from_f64_nearest(levels as f64))
}

/// The largest `|decode(v) - v|` QSGD can produce in a bucket of scale
/// `scale` with `levels` magnitude levels, for element type `E`, as an
/// `f64`: `s / L + s (3 u_E + 2^-23) + d_E`, where `u_E` is `E`'s unit
/// roundoff (`E::epsilon() / 2`) and `d_E` its smallest subnormal.
///
/// Derivation (the pinned arithmetic of the module doc): encoding rounds
/// the ratio `|v| / s` in `E` (relative error `u_E`) and the product
/// `ratio * L` in `f32` (`2^-24`), so `r` is within `|v| (u_E + 2^-24)`
/// (scaled by `L / s`) of its exact value and the level within 1 of `r`:
/// the exact `s * level / L` is within `s / L + s (u_E + 2^-24)` of `v`.
/// Decoding rounds `level / L` and `s * (level / L)` in `E` (two relative
/// errors of `u_E` on a result at most `s`). Summed, with the second-order
/// terms folded into the `2^-23`: the bound above; `d_E` covers a result in
/// `E`'s subnormal range, where rounding is absolute, not relative.
pub fn error_bound<E: Element>(scale: E, levels: u32) -> f64 {
    let s = scale.to_f64_exact().abs();
    let unit_roundoff = E::epsilon().to_f64_exact() / 2.0;
    let subnormal = E::from_bits_u64(1).to_f64_exact();
    s / f64::from(levels) + s * (3.0 * unit_roundoff + 2f64.powi(-23)) + subnormal
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
    let levels = p.levels();
    Ok((0..n)
        .map(|j| {
            let code = (q.words[j * bits / 32] >> ((j * bits) % 32)) & mask;
            let level = code & (mask >> 1);
            let mag = magnitude(q.scales[j / p.bucket], level, levels);
            if code >> (bits - 1) != 0 { -mag } else { mag }
        })
        .collect())
}

/// Makes every remainder exact: where `values[j] - decode(code j)` would
/// round in `E`, lowers that code's level until it does not (level 0, which
/// decodes to zero, always does), and returns the remainders
/// `values[j] - decode(code j)`, each exact, so that the decoded values plus
/// the remainders are the inputs bit for bit.
///
/// By Sterbenz's lemma a level `l >= 1` rounded down from `r` is exact
/// (`decode` is within a factor 2 of the value), so in practice only a value
/// below half a level (`r < 1/2`) that was rounded *up* to level 1 is
/// lowered, to 0: such an entry is then not sent at all and stays whole in
/// the remainder. This trades QSGD's unbiasedness on those entries for an
/// exact split, which is what error feedback needs (the remainder goes back
/// into the residual, so nothing is lost); without error feedback use
/// [`quantize`] alone.
///
/// # Errors
/// [`Error::LengthMismatch`] as [`dequantize`].
pub fn exact_remainders<E: Element>(
    values: &[E],
    q: &mut Quantized<E>,
    p: &QsgdParams,
) -> Result<Vec<E>> {
    let n = values.len();
    let decoded = dequantize(q, n, p)?;
    let bits = p.bits as usize;
    let mask = (1u32 << bits) - 1;
    let levels = p.levels();
    let mut rest = Vec::with_capacity(n);
    for (j, (&v, &d)) in values.iter().zip(&decoded).enumerate() {
        if exact_difference(v, d) {
            rest.push(v - d);
            continue;
        }
        let (w, shift) = (j * bits / 32, (j * bits) % 32);
        let code = (q.words[w] >> shift) & mask;
        let scale = q.scales[j / p.bucket];
        let new = lowered_code(v, code, scale, levels, p.bits);
        q.words[w] = (q.words[w] & !(mask << shift)) | (new << shift);
        rest.push(v - decode_code(new, scale, levels, p.bits));
    }
    Ok(rest)
}

/// The value code `code` decodes to in a bucket of `scale`: `scale *
/// (level / levels)`, negated where the sign bit is set (`+0` for code 0).
#[inline]
pub fn decode_code<E: Element>(code: u32, scale: E, levels: u32, bits: u32) -> E {
    let mag = magnitude(scale, code & ((1 << (bits - 1)) - 1), levels);
    if code >> (bits - 1) != 0 { -mag } else { mag }
}

/// [`exact_remainders`]' rule for one value `v` whose code `code` does not
/// leave an exact remainder: its level lowered until `v - decode` is exact
/// (level 0, code 0, always is). `code` itself where it already does.
#[inline]
fn lowered_code<E: Element>(v: E, code: u32, scale: E, levels: u32, bits: u32) -> u32 {
    if exact_difference(v, decode_code(code, scale, levels, bits)) {
        return code;
    }
    let sign = code & (1 << (bits - 1));
    let mut level = code & ((1 << (bits - 1)) - 1);
    while level > 0 {
        level -= 1;
        if exact_difference(v, decode_code(level | sign, scale, levels, bits)) {
            break;
        }
    }
    if level == 0 { 0 } else { level | sign }
}

/// [`quantize`] (counter base 0) and then [`exact_remainders`] of the
/// vector of `n` values that is zero but at `indices` (strictly
/// increasing, below `n`), where it holds `values`: the same scales and
/// codes bit for bit, in `O(buckets + nnz)` rather than `O(n)`, written in
/// place as [`crate::encoding::Qsgd`] lays them out: every scale into
/// `scales` (`buckets(n)` little-endian elements) and the entries' codes
/// OR-ed into `words` (`words(n)` little-endian `u32`s, zero on entry; a
/// zero value's code is 0, so only the entries' words are written). The
/// remainder of entry `k` is `values[k]` less [`decode_code`] of its code.
///
/// # Errors
/// [`Error::NonFinite`] naming the position in the vector of `n` of the
/// first non-finite value, before anything is written.
///
/// # Panics
/// If `scales` or `words` do not have those lengths, or an index is not
/// below `n`.
pub fn quantize_sparse_exact_into<E: Element>(
    (indices, values): (&[u32], &[E]),
    n: usize,
    p: &QsgdParams,
    scales: &mut [u8],
    words: &mut [u8],
) -> Result<()> {
    assert_eq!(scales.len(), p.buckets(n) * E::BYTES, "qsgd: scales length");
    assert_eq!(words.len(), p.words(n) * 4, "qsgd: words length");
    assert!(
        indices.last().is_none_or(|&i| (i as usize) < n),
        "qsgd: index"
    );
    if let Some(k) = values.iter().position(|v| !v.is_finite()) {
        return Err(Error::NonFinite {
            index: indices[k] as usize,
        });
    }
    let rng = CounterRng::new(p.seed);
    let (levels, bits) = (p.levels(), p.bits);
    scales.fill(0);
    let mut k = 0;
    while k < indices.len() {
        let b = indices[k] as usize / p.bucket;
        let end = k + indices[k..].partition_point(|&i| i as usize / p.bucket == b);
        let (is, vs) = (&indices[k..end], &values[k..end]);
        // The zeros of the bucket do not change its max.
        let scale = vs.iter().fold(E::zero(), |m, &v| m.max(v.abs()));
        let at = b * E::BYTES;
        scales[at..at + E::BYTES].copy_from_slice(&scale.to_bits_u64().to_le_bytes()[..E::BYTES]);
        for (&j, &v) in is.iter().zip(vs) {
            let ratio = if scale > E::zero() {
                (v.abs() / scale).to_f32_lossy()
            } else {
                0.0
            };
            if ratio <= 0.0 {
                // Code 0, as `code_of` gives without reading its draw.
                continue;
            }
            let u = rng.unit_f32_at(j);
            let code = code_of(ratio, v < E::zero(), levels as f32, u, bits);
            let code = lowered_code(v, code, scale, levels, bits);
            let (j, b) = (j as usize, bits as usize);
            let (w, shift) = (j * b / 32 * 4, (j * b) % 32);
            let word = u32::from_le_bytes(words[w..w + 4].try_into().expect("4 bytes"));
            words[w..w + 4].copy_from_slice(&(word | code << shift).to_le_bytes());
        }
        k = end;
    }
    Ok(())
}

/// The code of value `j` in little-endian code words `words` of `bits`
/// bits a code.
#[inline]
pub fn code_at(words: &[u8], j: usize, bits: u32) -> u32 {
    let (b, mask) = (bits as usize, (1u32 << bits) - 1);
    let w = j * b / 32 * 4;
    let word = u32::from_le_bytes(words[w..w + 4].try_into().expect("4 bytes"));
    (word >> ((j * b) % 32)) & mask
}

/// Reads a values section of `n` values as [`crate::encoding::Qsgd`]'s
/// decoder does, with the same checks and the same errors (parameters,
/// lengths, scales, padding bits, negative-zero codes), and calls `f(j, x)`
/// for each decoded value `x != 0`, in order of `j`, without building the
/// dense values or copying the section: `O(buckets + words)` work, where
/// a zero word (every code in it 0, decoding to `+0`) is skipped whole. On
/// an error `f` may have been called for values before the fault. Nothing
/// is allocated.
///
/// # Errors
/// [`Error::Corrupt`] as the codec's decoder.
pub fn decode_nonzeros<E: Element>(
    r: &mut crate::reader::Reader<'_>,
    n: usize,
    mut f: impl FnMut(usize, E),
) -> Result<()> {
    let bits = u32::from(r.u8()?);
    let bucket = r.u32()? as usize;
    let p = QsgdParams::new(bits, bucket, 0).map_err(|e| Error::corrupt("qsgd", e))?;
    let nb = p.buckets(n);
    r.expect_items(nb, E::BYTES)?;
    let sb = r.bytes(nb * E::BYTES)?;
    let scale = |b: usize| E::read_le(&sb[b * E::BYTES..(b + 1) * E::BYTES]);
    if let Some(b) = (0..nb).position(|b| !scale(b).is_finite() || scale(b) < E::zero()) {
        return Err(Error::corrupt(
            "qsgd",
            format!("scale of bucket {b} is negative or not finite"),
        ));
    }
    let nbits = n * bits as usize;
    let nw = nbits.div_ceil(32);
    r.expect_items(nw, 4)?;
    let wb = r.bytes(nw * 4)?;
    let word = |w: usize| u32::from_le_bytes(wb[4 * w..4 * w + 4].try_into().expect("4 bytes"));
    if !nbits.is_multiple_of(32) && nw > 0 && word(nw - 1) >> (nbits % 32) != 0 {
        return Err(Error::corrupt(r.what(), "non-zero padding bits"));
    }
    let (levels, per, mask) = (p.levels(), 32 / bits, (1u32 << bits) - 1);
    let sign = 1u32 << (bits - 1);
    // Runs of zero words are skipped 64 bytes at a time.
    const RUN: usize = 64;
    for (at, run) in wb.chunks(RUN).enumerate() {
        if run.iter().fold(0u8, |a, &b| a | b) == 0 {
            continue;
        }
        for (o, c) in run.chunks_exact(4).enumerate() {
            let w = at * RUN / 4 + o;
            let mut x = u32::from_le_bytes(c.try_into().expect("4 bytes"));
            while x != 0 {
                let slot = x.trailing_zeros() / bits;
                let code = (x >> (slot * bits)) & mask;
                x &= !(mask << (slot * bits));
                let j = w * per as usize + slot as usize;
                if code == sign {
                    return Err(Error::corrupt("qsgd", format!("negative zero code at {j}")));
                }
                let v = decode_code(code, scale(j / bucket), levels, bits);
                if v != E::zero() {
                    f(j, v);
                }
            }
        }
    }
    Ok(())
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

    /// Issue 11.1: `scale * level / levels` overflowed to infinity for
    /// `|x| >= f32::MAX / levels`. Every decoded value is finite, keeps its
    /// sign, stays within its bucket's scale and within the QSGD bound
    /// `s / L` (plus the rounding of the two operations, and one subnormal
    /// step where the result is subnormal).
    #[test]
    fn extreme_magnitudes_stay_finite_and_within_the_bound() {
        let tiny = f32::from_bits(1);
        let sub = f32::MIN_POSITIVE / 3.0;
        let cases: [&[f32]; 5] = [
            &[f32::MAX, -f32::MAX, 1.0, -1e38],
            &[1e38, 3e37, -2e37, 4.9e37],
            &[tiny, -tiny, sub, 0.0, -sub * 2.0],
            &[f32::MAX, tiny, -sub],
            &[-f32::MAX, -f32::MAX, f32::MAX],
        ];
        for bits in [2, 4, 8] {
            for bucket in [1, 2, 1024] {
                for seed in 0..40 {
                    let p = QsgdParams::new(bits, bucket, seed).unwrap();
                    let l = f64::from(p.levels());
                    for x in cases {
                        let q = quantize(x, &p, 0).unwrap();
                        let y = dequantize(&q, x.len(), &p).unwrap();
                        for (j, (&v, &d)) in x.iter().zip(&y).enumerate() {
                            let s = f64::from(q.scales[j / bucket]);
                            assert!(d.is_finite(), "bits {bits}: {v} decoded to {d}");
                            assert!(d == 0.0 || d.signum() == v.signum(), "{v} -> {d}");
                            assert!(f64::from(d.abs()) <= s, "{v} -> {d} above scale {s}");
                            let bound = s / l * (1.0 + 1e-6) + 2.0 * f64::from(tiny);
                            assert!(
                                approx::abs_diff_eq!(f64::from(d), f64::from(v), epsilon = bound),
                                "bits {bits}: {v} -> {d}, error above {bound}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// The same through the codec: `Coo(Qsgd)` of 1e38 decodes finite.
    #[test]
    fn codec_round_trip_of_huge_values_is_finite() {
        use crate::SparseVec;
        use crate::encoding::{Coo, Encoding, Qsgd};
        for bits in [2, 4, 8] {
            let enc = Coo(Qsgd::new(bits, 1).unwrap());
            let v = SparseVec::new(4, vec![0, 1, 3], vec![1e38f32, -f32::MAX, 7.0]).unwrap();
            let back: SparseVec<f32> = enc.decode(&enc.encode(&v).unwrap()).unwrap();
            assert!(back.values().iter().all(|x| x.is_finite()), "{back:?}");
        }
    }

    /// Issue 11.7: with the lowered levels, decoded + remainder is the input
    /// bit for bit, on random non-integer inputs of every scale (today's
    /// `a - q(a)` missed by one ulp in about one step of ten).
    #[test]
    fn exact_remainders_split_exactly() {
        use rand::{RngCore as _, SeedableRng as _};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x1234_5678);
        let mut lowered = 0usize;
        for bits in [2, 4, 8] {
            for round in 0..200u64 {
                let x: Vec<f32> = (0..257)
                    .map(|_| {
                        let r = rng.next_u64();
                        let mant = (r >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                        mant * 2f32.powi(((r >> 8) % 60) as i32 - 30)
                    })
                    .collect();
                let p = QsgdParams::new(bits, 64, round).unwrap();
                let mut q = quantize(&x, &p, 0).unwrap();
                let before = q.words.clone();
                let rest = exact_remainders(&x, &mut q, &p).unwrap();
                lowered += usize::from(before != q.words);
                let sent = dequantize(&q, x.len(), &p).unwrap();
                for j in 0..x.len() {
                    assert_eq!(
                        f64::from(sent[j]) + f64::from(rest[j]),
                        f64::from(x[j]),
                        "bits {bits} round {round} at {j}"
                    );
                    assert_eq!(sent[j] + rest[j], x[j]);
                }
            }
        }
        // The test exercises the lowering, not only exact first choices.
        assert!(lowered > 0);
    }

    /// Issue 27.9: every decoded value of every element type is within
    /// [`error_bound`] of its input, on values of many scales and signs;
    /// returns how many exceeded the plain `s / L` (by what largest factor).
    fn within_the_typed_bound<E: Element>() -> (usize, f64) {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(27);
        let (mut above_plain, mut worst) = (0, 0f64);
        for bits in [2, 4, 8] {
            for bucket in [1, 7, 64] {
                for seed in 0..20 {
                    let p = QsgdParams::new(bits, bucket, seed).unwrap();
                    let x: Vec<E> = (0..256)
                        .map(|_| {
                            let m = rng.random::<f64>() - 0.5;
                            E::from_f64_nearest(m * 2f64.powi(rng.random_range(-6..6)))
                        })
                        .collect();
                    let q = quantize(&x, &p, 0).unwrap();
                    let y = dequantize(&q, x.len(), &p).unwrap();
                    for (j, (&v, &d)) in x.iter().zip(&y).enumerate() {
                        let scale = q.scales[j / bucket];
                        let err = (d.to_f64_exact() - v.to_f64_exact()).abs();
                        let bound = error_bound(scale, p.levels());
                        assert!(
                            err <= bound,
                            "{}: {bits} bits, {v:?} -> {d:?}, {err} > {bound}",
                            E::NAME
                        );
                        let plain = scale.to_f64_exact() / f64::from(p.levels());
                        if err > plain {
                            above_plain += 1;
                            worst = worst.max(err / plain);
                        }
                    }
                }
            }
        }
        (above_plain, worst)
    }

    #[test]
    fn the_error_bound_holds_per_element_type() {
        for (name, (above, worst)) in [
            ("f32", within_the_typed_bound::<f32>()),
            ("f64", within_the_typed_bound::<f64>()),
            ("f16", within_the_typed_bound::<half::f16>()),
            ("bf16", within_the_typed_bound::<half::bf16>()),
        ] {
            // The rounding term is below a millionth of s / L for f32 and f64.
            if matches!(name, "f32" | "f64") {
                assert!(
                    worst <= 1.0 + 1e-6,
                    "{name}: {above} above s/L, worst {worst}"
                );
            }
            if name == "f16" {
                // The plain bound does not hold for f16: the typed one is needed.
                assert!(above > 0, "f16 never exceeded s / L");
            }
        }
    }

    /// Sparse entries of dimension `n` with what the exact split must
    /// handle: negative zeros, zeros, subnormals, values far below their
    /// bucket's scale (lowered levels) and every sign.
    fn sparse_entries(rng: &mut impl rand::RngCore, n: usize) -> (Vec<u32>, Vec<f32>) {
        let idx: Vec<u32> = (0..n as u32)
            .filter(|_| rng.next_u32().is_multiple_of(5))
            .collect();
        let val = idx
            .iter()
            .map(|_| {
                let r = rng.next_u64();
                let mant = (r >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                match r % 9 {
                    0 => -0.0,
                    1 => 0.0,
                    2 => f32::from_bits(1 + (r >> 50) as u32),
                    _ => mant * 2f32.powi(((r >> 8) % 60) as i32 - 30),
                }
            })
            .collect();
        (idx, val)
    }

    /// Issue 30: `quantize_sparse_exact_into` writes the scales and codes
    /// that `quantize` and `exact_remainders` give on the dense vector, bit
    /// for bit, and the remainders it implies are theirs.
    #[test]
    fn sparse_quantization_equals_the_dense_one() {
        use rand::SeedableRng as _;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(30);
        for bits in [2, 4, 8] {
            for bucket in [1, 7, 64, 512] {
                for round in 0..8u64 {
                    let n = 1 + (round as usize * 397) % 3000;
                    let (idx, val) = sparse_entries(&mut rng, n);
                    let mut dense = vec![0f32; n];
                    idx.iter()
                        .zip(&val)
                        .for_each(|(&i, &x)| dense[i as usize] = x);
                    let p = QsgdParams::new(bits, bucket, round * 31 + 5).unwrap();
                    let mut q = quantize(&dense, &p, 0).unwrap();
                    let rest = exact_remainders(&dense, &mut q, &p).unwrap();
                    let mut scales = vec![0xa5u8; p.buckets(n) * 4];
                    let mut words = vec![0u8; p.words(n) * 4];
                    quantize_sparse_exact_into((&idx, &val), n, &p, &mut scales, &mut words)
                        .unwrap();
                    let want: Vec<u8> = q.scales.iter().flat_map(|s| s.to_le_bytes()).collect();
                    assert_eq!(scales, want, "scales, bits {bits} bucket {bucket}");
                    let want: Vec<u8> = q.words.iter().flat_map(|w| w.to_le_bytes()).collect();
                    assert_eq!(words, want, "codes, bits {bits} bucket {bucket}");
                    for (&i, &x) in idx.iter().zip(&val) {
                        let j = i as usize;
                        let scale = q.scales[j / bucket];
                        let sent = decode_code(code_at(&words, j, bits), scale, p.levels(), bits);
                        assert_eq!((x - sent).to_bits(), rest[j].to_bits(), "rest at {j}");
                    }
                }
            }
        }
        let p = QsgdParams::new(4, 8, 0).unwrap();
        let (mut scales, mut words) = (vec![0u8; 8], vec![0u8; 8]);
        assert!(matches!(
            quantize_sparse_exact_into(
                (&[3, 9], &[1.0f32, f32::NAN]),
                16,
                &p,
                &mut scales,
                &mut words
            ),
            Err(Error::NonFinite { index: 9 })
        ));
    }

    /// Issue 30: `decode_nonzeros` finds the non-zeros the codec's decoder
    /// gives, and on corrupted sections (bytes flipped, cut or added) fails
    /// where it fails, with the same error.
    #[test]
    fn decode_nonzeros_equals_the_codec() {
        use crate::encoding::{Qsgd, Reader, ValueCodec};
        use rand::{RngCore as _, SeedableRng as _};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(31);
        let codec = |b: &[u8], n: usize| -> Result<Vec<(usize, f32)>> {
            let mut rd = Reader::new(b, "qsgd partition");
            let d: Vec<f32> =
                ValueCodec::<f32>::decode(&Qsgd(QsgdParams::new(2, 1, 0)?), &mut rd, n)?;
            rd.finish()?;
            Ok(d.into_iter()
                .enumerate()
                .filter(|(_, x)| *x != 0.0)
                .collect())
        };
        let fast = |b: &[u8], n: usize| -> Result<Vec<(usize, f32)>> {
            let mut rd = Reader::new(b, "qsgd partition");
            let mut got = Vec::new();
            decode_nonzeros(&mut rd, n, |j, x: f32| got.push((j, x)))?;
            rd.finish()?;
            Ok(got)
        };
        let (mut oks, mut errs) = (0, 0);
        for bits in [2, 4, 8] {
            for bucket in [1, 5, 64] {
                for round in 0..40 {
                    let n = 1 + (round * 37) % 300;
                    let (idx, val) = sparse_entries(&mut rng, n);
                    let mut dense = vec![0f32; n];
                    idx.iter()
                        .zip(&val)
                        .for_each(|(&i, &x)| dense[i as usize] = x);
                    let mut b = Vec::new();
                    Qsgd(QsgdParams::new(bits, bucket, round as u64).unwrap())
                        .encode(&dense, &mut b)
                        .unwrap();
                    if round % 4 != 0 {
                        let r = rng.next_u64() as usize;
                        let at = r % b.len();
                        match round % 4 {
                            1 => b[at] ^= 1 << ((r >> 32) % 8),
                            2 => b.truncate(at),
                            _ => b.extend_from_slice(&[0, 1][..1 + r % 2]),
                        }
                    }
                    match (codec(&b, n), fast(&b, n)) {
                        (Ok(a), Ok(f)) => {
                            oks += 1;
                            let bits_of = |v: Vec<(usize, f32)>| -> Vec<(usize, u32)> {
                                v.into_iter().map(|(j, x)| (j, x.to_bits())).collect()
                            };
                            assert_eq!(bits_of(a), bits_of(f));
                        }
                        (Err(a), Err(f)) => {
                            errs += 1;
                            assert_eq!(a.to_string(), f.to_string());
                        }
                        (a, f) => panic!("codec {a:?}, decode_nonzeros {f:?}"),
                    }
                }
            }
        }
        assert!(oks > 50 && errs > 50, "{oks} decoded, {errs} refused");
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
