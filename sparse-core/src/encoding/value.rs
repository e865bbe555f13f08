//! Value codecs: how the values section of an encoding is written, and
//! how a sender splits its values into what a codec carries exactly and an
//! exact remainder ([`ValueCodec::split`]).

use super::{Reader, unencodable};
use crate::qsgd::{self, QsgdParams, Quantized};
use crate::{Element, Error, Result, exact_difference};
use std::ops::RangeInclusive;

/// The value codec tags left to users: a codec of this workspace has a tag
/// below 128 ([`Raw`] 0, [`F16`] 1, [`Bf16`] 2, [`SameSignMean`] 3, [`Qsgd`]
/// 4; the rest up to 127 reserved for later ones), a user's own one a tag
/// in `128..=255`. `sparse-coll`'s registry refuses a user codec outside
/// this range.
pub const USER_TAGS: RangeInclusive<u8> = 128..=255;

/// What a sender sends of a group of values ([`ValueCodec::split`]): the
/// positions that travel and the values section that carries them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Split {
    /// The positions (into the values given to [`ValueCodec::split`]) that
    /// travel, strictly increasing.
    pub kept: Vec<usize>,
    /// The values section of those positions, as [`ValueCodec::decode`]
    /// reads `kept.len()` values from it: the receivers decode exactly
    /// these bytes, so what they get is what the sender split off, even
    /// for a codec whose encoding is random or not idempotent.
    pub bytes: Vec<u8>,
}

/// Whether `x` may travel as `d` with an exact remainder: `d` finite and
/// nonzero, and `(x - d) + d == x` bit for bit
/// ([`crate::exact_difference`]). The rule [`ValueCodec::split`] keeps.
pub fn sends_exactly<E: Element>(x: E, d: E) -> bool {
    d.is_finite() && d != E::zero() && exact_difference(x, d)
}

/// The default [`ValueCodec::split`], for any codec: encodes
/// `targets(values)` of the nonzero positions, decodes the section, drops
/// the positions whose decoded value breaks [`sends_exactly`], and repeats
/// with the others until none is dropped (at most one pass per value: a
/// codec whose section depends on all its values, a mean or a scale,
/// changes when values leave). `targets` maps the kept values to what the
/// codec is given (the values themselves for most codecs; same-sign mean
/// gives their mean on a coarse grid).
///
/// # Errors
/// [`Error::NonFinite`] for a NaN or infinite value; the codec's errors;
/// [`Error::InvalidParameter`] naming the codec where it breaks its own
/// contract: its decoder returns another number of values than asked, or
/// leaves bytes its encoder wrote, or the section's length is not its
/// `encoded_len`.
pub fn split_by_round_trip<E: Element, C: ValueCodec<E>>(
    codec: &C,
    values: &[E],
    targets: impl Fn(&[E]) -> Vec<E>,
) -> Result<Split> {
    crate::checks::check_finite(values)?;
    let mut kept: Vec<usize> = (0..values.len())
        .filter(|&j| values[j] != E::zero())
        .collect();
    loop {
        let x: Vec<E> = kept.iter().map(|&j| values[j]).collect();
        // No reservation from `encoded_len`: a codec's claim is checked
        // below, not trusted with an allocation.
        let mut bytes = Vec::new();
        codec.encode(&targets(&x), &mut bytes)?;
        let mut r = Reader::new(&bytes, "values");
        let decoded = codec.decode(&mut r, x.len())?;
        let broken = |what: String| {
            Err(Error::invalid(
                "values",
                format!("codec {:?}: {what}", codec.name()),
            ))
        };
        if decoded.len() != x.len() {
            return broken(format!("{} values decode to {}", x.len(), decoded.len()));
        }
        if r.remaining() != 0 {
            return broken(format!(
                "its decoder leaves {} of the {} bytes its encoder wrote",
                r.remaining(),
                bytes.len()
            ));
        }
        if bytes.len() != codec.encoded_len(x.len()) {
            return broken(format!(
                "{} values encode to {} bytes, encoded_len says {}",
                x.len(),
                bytes.len(),
                codec.encoded_len(x.len())
            ));
        }
        let ok: Vec<bool> = x
            .iter()
            .zip(&decoded)
            .map(|(&x, &d)| sends_exactly(x, d))
            .collect();
        if ok.len() == x.len() && ok.iter().all(|&b| b) {
            return Ok(Split { kept, bytes });
        }
        kept = kept
            .into_iter()
            .zip(ok)
            .filter_map(|(j, ok)| ok.then_some(j))
            .collect();
    }
}

/// Writes and reads the values of an encoding.
pub trait ValueCodec<E: Element>: Clone {
    /// Tag stored in the encoding header: below 128 for this workspace's
    /// codecs, in [`USER_TAGS`] for a user's own.
    const TAG: u8;
    /// Short name (`"raw"`, `"f16"`, `"ssmean"`, `"qsgd4"`).
    fn name(&self) -> String;
    /// Whether decoding returns the values exactly.
    fn lossless(&self) -> bool;
    /// Whether the section spends bytes on every value (all codecs but
    /// [`SameSignMean`], which stores one mean for any count). An index
    /// part whose value count is not bounded by its own bytes (the block
    /// encoding, where one 4-byte id stands for `block_size` values) needs
    /// such a codec, or a 24-byte input could ask for gigabytes.
    fn per_value(&self) -> bool {
        true
    }
    /// Exact bytes for `n` values.
    fn encoded_len(&self, n: usize) -> usize;
    /// Appends the values section.
    ///
    /// # Errors
    /// [`Error::Unencodable`] or [`Error::NonFinite`] where the codec cannot
    /// represent the input.
    fn encode(&self, values: &[E], out: &mut Vec<u8>) -> Result<()>;
    /// Reads a values section of `n` values; checks lengths before
    /// allocating.
    ///
    /// # Errors
    /// [`Error::Corrupt`].
    fn decode(&self, r: &mut Reader<'_>, n: usize) -> Result<Vec<E>>;
    /// Whether the values section is each value's little-endian bytes
    /// and nothing else ([`Raw`]), so that an encoding may write and read
    /// it in place. `false` by default.
    fn writes_raw(&self) -> bool {
        false
    }
    /// [`ValueCodec::decode`] appended to `out`, whose allocation a
    /// caller keeps across calls. The default appends what `decode`
    /// returns; [`Raw`] reads the bytes in place.
    ///
    /// # Errors
    /// As [`ValueCodec::decode`].
    fn decode_into(&self, r: &mut Reader<'_>, n: usize, out: &mut Vec<E>) -> Result<()> {
        out.extend(self.decode(r, n)?);
        Ok(())
    }
    /// Splits `values` (one group, see [`ValueCodec::group`]) for a sender
    /// that keeps the quantization error exactly: the positions that
    /// travel and the section that carries them, such that every kept
    /// value decodes to a finite nonzero `d` with `values[j] - d` exact
    /// ([`sends_exactly`]); a position not kept stays whole with the
    /// sender, and so does a zero. The default is [`split_by_round_trip`]
    /// on the values themselves. A codec may override it (one pass that
    /// lowers levels, say); `sparse-coll`'s collectives check every split
    /// they are given against these rules and refuse one that breaks them
    /// with an error naming the codec. A split must be a function of the
    /// values (a seeded random rounding is; a thread's own generator is
    /// not): ranks that hold the same partial sum split it alike and only
    /// one of them keeps the remainder.
    ///
    /// # Errors
    /// [`Error::NonFinite`] for a NaN or infinite value; the codec's
    /// errors.
    fn split(&self, values: &[E]) -> Result<Split> {
        split_by_round_trip(self, values, <[E]>::to_vec)
    }
    /// How many groups a sender splits its values into before
    /// [`ValueCodec::split`]: 1 for every codec but [`SameSignMean`],
    /// whose positive and negative values travel apart. Collectives write
    /// each group as its own section.
    fn groups(&self) -> usize {
        1
    }
    /// The group (below [`ValueCodec::groups`]) of a nonzero value.
    fn group(&self, _x: E) -> usize {
        0
    }
}

/// Values as they are (the element's own little-endian bytes). Lossless.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Raw;

impl<E: Element> ValueCodec<E> for Raw {
    const TAG: u8 = 0;
    fn name(&self) -> String {
        "raw".into()
    }
    fn lossless(&self) -> bool {
        true
    }
    fn encoded_len(&self, n: usize) -> usize {
        n * E::BYTES
    }
    fn encode(&self, values: &[E], out: &mut Vec<u8>) -> Result<()> {
        if cfg!(target_endian = "little") {
            out.extend_from_slice(bytemuck::cast_slice(values));
        } else {
            values.iter().for_each(|v| v.write_le(out));
        }
        Ok(())
    }
    fn decode(&self, r: &mut Reader<'_>, n: usize) -> Result<Vec<E>> {
        r.elements(n)
    }
    fn writes_raw(&self) -> bool {
        true
    }
    fn decode_into(&self, r: &mut Reader<'_>, n: usize, out: &mut Vec<E>) -> Result<()> {
        r.expect_items(n, E::BYTES)?;
        let b = r.bytes(n * E::BYTES)?;
        out.extend(b.chunks_exact(E::BYTES).map(E::read_le));
        Ok(())
    }
}

macro_rules! half_codec {
    ($name:ident, $t:ty, $tag:literal, $label:literal, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct $name;

        impl<E: Element> ValueCodec<E> for $name {
            const TAG: u8 = $tag;
            fn name(&self) -> String {
                $label.into()
            }
            fn lossless(&self) -> bool {
                E::CODE == <$t as Element>::CODE
            }
            fn encoded_len(&self, n: usize) -> usize {
                n * 2
            }
            fn encode(&self, values: &[E], out: &mut Vec<u8>) -> Result<()> {
                out.reserve(values.len() * 2);
                for &v in values {
                    <$t>::from_f64(v.to_f64_exact()).write_le(out);
                }
                Ok(())
            }
            fn decode(&self, r: &mut Reader<'_>, n: usize) -> Result<Vec<E>> {
                let h: Vec<$t> = r.elements(n)?;
                Ok(h.into_iter()
                    .map(|x| E::from_f64_nearest(x.to_f64()))
                    .collect())
            }
        }
    };
}

half_codec!(
    F16,
    half::f16,
    1,
    "f16",
    "Values rounded to IEEE half precision (lossless for `f16` input; values beyond 65504 become infinite)."
);
half_codec!(
    Bf16,
    half::bf16,
    2,
    "bf16",
    "Values rounded to bfloat16 (lossless for `bf16` input)."
);

/// RedSync's same-sign mean quantization: all values are replaced by their
/// mean, stored once. The signs must be uniform (RedSync selects the top-k
/// and the low-k separately so that each set is one-signed); zeros are
/// allowed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SameSignMean;

impl<E: Element> ValueCodec<E> for SameSignMean {
    const TAG: u8 = 3;
    fn name(&self) -> String {
        "ssmean".into()
    }
    fn lossless(&self) -> bool {
        false
    }
    fn per_value(&self) -> bool {
        false
    }
    fn encoded_len(&self, _n: usize) -> usize {
        E::BYTES
    }
    /// The positive values, then the negative ones.
    fn groups(&self) -> usize {
        2
    }
    fn group(&self, x: E) -> usize {
        usize::from(x < E::zero())
    }
    /// [`split_by_round_trip`] with the kept values' mean rounded to 8
    /// significant bits. On that coarse grid the remainder of every value
    /// from half the mean up to `2^16` times it is exact (Sterbenz near the
    /// mean, the common grid above), and sums of such means over ranks stay
    /// exact on ordinary inputs; the 0.4% it moves the mean goes, exactly,
    /// into the remainders. Values below about half the mean are not sent.
    fn split(&self, values: &[E]) -> Result<Split> {
        split_by_round_trip(self, values, |x| {
            if x.is_empty() {
                return Vec::new();
            }
            let mean = x.iter().map(|v| v.to_f64_exact()).sum::<f64>() / x.len() as f64;
            let m = if mean == 0.0 || !mean.is_finite() {
                mean
            } else {
                let q = 2f64.powf(mean.abs().log2().floor() - 7.0);
                (mean / q).round() * q
            };
            vec![E::from_f64_nearest(m); x.len()]
        })
    }
    fn encode(&self, values: &[E], out: &mut Vec<u8>) -> Result<()> {
        let (mut pos, mut neg, mut sum) = (false, false, 0.0f64);
        for &v in values {
            if !v.is_finite() {
                return Err(unencodable("ssmean", "non-finite value"));
            }
            pos |= v > E::zero();
            neg |= v < E::zero();
            sum += v.to_f64_exact();
        }
        if pos && neg {
            return Err(unencodable("ssmean", "values of both signs"));
        }
        let mean = if values.is_empty() {
            0.0
        } else {
            sum / values.len() as f64
        };
        E::from_f64_nearest(mean).write_le(out);
        Ok(())
    }
    fn decode(&self, r: &mut Reader<'_>, n: usize) -> Result<Vec<E>> {
        let mean: E = r.elements(1)?[0];
        if !mean.is_finite() {
            return Err(Error::corrupt("ssmean", "non-finite mean"));
        }
        Ok(vec![mean; n])
    }
}

/// QSGD values (see [`crate::qsgd`]): a section of `bits: u8`,
/// `bucket: u32`, one scale per bucket, then the packed code words. The
/// random draws use the value's position in the section as the counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qsgd(pub QsgdParams);

impl Qsgd {
    /// QSGD with `bits` in {2, 4, 8}, the default bucket of 1024, and `seed`.
    ///
    /// # Errors
    /// As [`QsgdParams::new`].
    pub fn new(bits: u32, seed: u64) -> Result<Self> {
        Ok(Self(QsgdParams::new(bits, qsgd::DEFAULT_BUCKET, seed)?))
    }

    /// Appends the values section of `values` like [`ValueCodec::encode`],
    /// with levels lowered where needed so that the remainder of every value
    /// is exact ([`qsgd::exact_remainders`]), and returns those remainders:
    /// what decoding the section gives plus the remainders is `values` bit
    /// for bit. For error feedback (the remainder goes back into a
    /// residual).
    ///
    /// # Errors
    /// [`Error::NonFinite`] for a NaN or infinite value.
    pub fn encode_with_remainder<E: Element>(
        &self,
        values: &[E],
        out: &mut Vec<u8>,
    ) -> Result<Vec<E>> {
        let mut q = qsgd::quantize(values, &self.0, 0)?;
        let rest = qsgd::exact_remainders(values, &mut q, &self.0)?;
        self.write(q, out);
        Ok(rest)
    }

    fn write<E: Element>(&self, q: Quantized<E>, out: &mut Vec<u8>) {
        out.push(self.0.bits() as u8);
        out.extend_from_slice(&(self.0.bucket() as u32).to_le_bytes());
        for s in q.scales {
            s.write_le(out);
        }
        for w in q.words {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
}

impl<E: Element> ValueCodec<E> for Qsgd {
    const TAG: u8 = 4;
    fn name(&self) -> String {
        format!("qsgd{}", self.0.bits())
    }
    fn lossless(&self) -> bool {
        false
    }
    fn encoded_len(&self, n: usize) -> usize {
        5 + self.0.buckets(n) * E::BYTES + self.0.words(n) * 4
    }
    fn encode(&self, values: &[E], out: &mut Vec<u8>) -> Result<()> {
        self.write(qsgd::quantize(values, &self.0, 0)?, out);
        Ok(())
    }
    fn decode(&self, r: &mut Reader<'_>, n: usize) -> Result<Vec<E>> {
        let bits = r.u8()? as u32;
        let bucket = r.u32()? as usize;
        let p = QsgdParams::new(bits, bucket, 0).map_err(|e| Error::corrupt("qsgd", e))?;
        let scales: Vec<E> = r.elements(p.buckets(n))?;
        if let Some(b) = scales.iter().position(|s| !s.is_finite() || *s < E::zero()) {
            return Err(Error::corrupt(
                "qsgd",
                format!("scale of bucket {b} is negative or not finite"),
            ));
        }
        let words = r.packed_words(n * bits as usize)?;
        let q = Quantized { scales, words };
        let sign = 1u32 << (bits - 1);
        let mask = (1u32 << bits) - 1;
        for j in 0..n {
            let code = (q.words[j * bits as usize / 32] >> ((j * bits as usize) % 32)) & mask;
            if code == sign {
                return Err(Error::corrupt("qsgd", format!("negative zero code at {j}")));
            }
        }
        qsgd::dequantize(&q, n, &p)
    }
}
