//! How a collective's messages carry values: any value codec of
//! `sparse_core::encoding` a paper allows ([`WireValues`]), with the
//! quantization error kept exactly in the sender's `dropped`.

use crate::bytes::le_u32s;
use crate::frame::{put_block, take_block};
use sparse_core::encoding::{Bf16, F16, Raw, Reader, SameSignMean, ValueCodec};
use sparse_core::{Element, Error, Result, SparseVec, exact_difference};

/// The value codec of a collective's messages: [`Raw`] (lossless, the
/// default), [`F16`], [`Bf16`] or RedSync's [`SameSignMean`].
///
/// Sending is exact bookkeeping: [`WireValues::split_exact`] splits what a
/// rank sends into the values the receivers decode and a remainder that the
/// sender keeps in its `dropped`, each bit for bit, so `result` plus every
/// rank's `dropped` is still the inputs' sum. An entry whose remainder would
/// round (a value below half of its sign's mean with same-sign mean; one
/// beyond the half-precision range) is not sent at all and stays whole in
/// `dropped`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WireValues {
    /// The element's own bytes.
    #[default]
    Raw,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
    /// RedSync's quantization: the entries of each sign travel as their
    /// indices and one mean (rounded to 8 significant bits).
    SameSignMean,
}

impl WireValues {
    /// The codec of a registry parameter: `raw`, `f16`, `bf16` or `ssmean`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for another name.
    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "raw" => Self::Raw,
            "f16" => Self::F16,
            "bf16" => Self::Bf16,
            "ssmean" => Self::SameSignMean,
            other => {
                return Err(Error::invalid(
                    "values",
                    format!("{other:?} is not raw, f16, bf16 or ssmean"),
                ));
            }
        })
    }

    /// The value the entry round compares.
    pub(crate) fn code(&self) -> u64 {
        match self {
            Self::Raw => 0,
            Self::F16 => 1,
            Self::Bf16 => 2,
            Self::SameSignMean => 3,
        }
    }

    /// Bytes per value on the wire, for cost models (same-sign mean: the
    /// mean's bytes spread over a group, counted as none).
    pub fn value_bytes<E: Element>(&self) -> usize {
        match self {
            Self::Raw => E::BYTES,
            Self::F16 | Self::Bf16 => 2,
            Self::SameSignMean => 0,
        }
    }

    /// The registry name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Raw => "raw",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
            Self::SameSignMean => "ssmean",
        }
    }

    /// Whether every value arrives exactly (raw, or the element's own half
    /// type).
    pub fn lossless<E: Element>(&self) -> bool {
        match self {
            Self::Raw => true,
            Self::F16 => ValueCodec::<E>::lossless(&F16),
            Self::Bf16 => ValueCodec::<E>::lossless(&Bf16),
            Self::SameSignMean => false,
        }
    }

    fn encode<E: Element>(&self, values: &[E], out: &mut Vec<u8>) -> Result<()> {
        match self {
            Self::Raw => Raw.encode(values, out),
            Self::F16 => F16.encode(values, out),
            Self::Bf16 => Bf16.encode(values, out),
            Self::SameSignMean => SameSignMean.encode(values, out),
        }
    }

    fn decode<E: Element>(&self, r: &mut Reader<'_>, n: usize) -> Result<Vec<E>> {
        match self {
            Self::Raw => Raw.decode(r, n),
            Self::F16 => F16.decode(r, n),
            Self::Bf16 => Bf16.decode(r, n),
            Self::SameSignMean => SameSignMean.decode(r, n),
        }
    }

    /// What one group of values decodes to after a round trip.
    fn round_trip<E: Element>(&self, values: &[E]) -> Result<Vec<E>> {
        let mut bytes = Vec::new();
        self.encode(values, &mut bytes)?;
        self.decode(&mut Reader::new(&bytes, "values"), values.len())
    }

    /// Whether this codec can send `v` (checked before a collective's
    /// entry round, so that a refusal reaches every rank): raw values
    /// always, a lossy codec when [`WireValues::split_exact`] takes `v`.
    ///
    /// # Errors
    /// [`WireValues::split_exact`]'s.
    pub(crate) fn ready<E: Element>(&self, v: &SparseVec<E>) -> Result<()> {
        match self {
            Self::Raw => Ok(()),
            values => values.split_exact(v).map(drop),
        }
    }

    /// Splits `v` into `(sent, rest)`: `sent` holds exactly the values the
    /// receivers of [`WireValues::put`] decode, `rest` what the sender keeps,
    /// and at every index `sent + rest` is `v`'s value bit for bit (an index
    /// that is not sent keeps its whole value in `rest`).
    ///
    /// # Errors
    /// [`Error::NonFinite`] and the codec's errors.
    pub fn split_exact<E: Element>(
        &self,
        v: &SparseVec<E>,
    ) -> Result<(SparseVec<E>, SparseVec<E>)> {
        if self.lossless::<E>() {
            return Ok((v.clone(), SparseVec::zeros(v.dim())?));
        }
        sparse_core::backend::check_finite(v.values())?;
        let mut sent_as: Vec<Option<E>> = vec![None; v.nnz()];
        for group in self.groups(v) {
            let mut keep: Vec<usize> = group
                .into_iter()
                .filter(|&j| v.values()[j] != E::zero())
                .collect();
            // Each pass drops the entries whose remainder would round; the
            // others are sent as decoded. Same-sign mean's mean moves as
            // entries leave, so it may take more than one pass (at most one
            // per entry).
            let decoded = loop {
                let decoded = self.round_trip(&self.targets(v, &keep))?;
                let ok: Vec<bool> = keep
                    .iter()
                    .zip(&decoded)
                    .map(|(&j, &d)| {
                        d.is_finite() && d != E::zero() && exact_difference(v.values()[j], d)
                    })
                    .collect();
                if ok.iter().all(|&b| b) {
                    break decoded;
                }
                keep = keep
                    .iter()
                    .zip(ok)
                    .filter(|(_, ok)| *ok)
                    .map(|(&j, _)| j)
                    .collect();
            };
            for (&j, d) in keep.iter().zip(decoded) {
                sent_as[j] = Some(d);
            }
        }
        let (mut sent, mut rest) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
        for ((i, x), d) in v.iter().zip(sent_as) {
            let r = match d {
                Some(d) => {
                    sent.0.push(i);
                    sent.1.push(d);
                    x - d
                }
                None => x,
            };
            if r != E::zero() {
                rest.0.push(i);
                rest.1.push(r);
            }
        }
        Ok((
            SparseVec::new(v.dim(), sent.0, sent.1)?,
            SparseVec::new(v.dim(), rest.0, rest.1)?,
        ))
    }

    /// The positions of `v` that travel as one codec section: all of them,
    /// or for same-sign mean the positive and the negative ones apart.
    fn groups<E: Element>(&self, v: &SparseVec<E>) -> Vec<Vec<usize>> {
        match self {
            Self::SameSignMean => {
                let pos = (0..v.nnz())
                    .filter(|&j| v.values()[j] > E::zero())
                    .collect();
                let neg = (0..v.nnz())
                    .filter(|&j| v.values()[j] < E::zero())
                    .collect();
                vec![pos, neg]
            }
            _ => vec![(0..v.nnz()).collect()],
        }
    }

    /// The values handed to the codec for the kept positions: the values
    /// themselves, or for same-sign mean their mean rounded to 8
    /// significant bits. On that coarse grid the remainder of every value
    /// from half the mean up to `2^16` times it is exact (Sterbenz near the
    /// mean, the common grid above), and sums of such means over ranks
    /// stay exact on ordinary inputs; the 0.4% it moves the mean goes,
    /// exactly, into the remainders.
    fn targets<E: Element>(&self, v: &SparseVec<E>, keep: &[usize]) -> Vec<E> {
        let values: Vec<E> = keep.iter().map(|&j| v.values()[j]).collect();
        if *self != Self::SameSignMean || values.is_empty() {
            return values;
        }
        let mean = values.iter().map(|x| x.to_f64_exact()).sum::<f64>() / values.len() as f64;
        let m = if mean == 0.0 || !mean.is_finite() {
            mean
        } else {
            let q = 2f64.powf(mean.abs().log2().floor() - 7.0);
            (mean / q).round() * q
        };
        vec![E::from_f64_nearest(m); values.len()]
    }

    /// Appends `sent` (from [`WireValues::split_exact`]) as it travels:
    /// for raw values a plain block (`nnz: u32`, indices, values); else per
    /// group (one, or for same-sign mean the positive and the negative
    /// entries) `nnz: u32`, the indices, then the codec's section.
    ///
    /// # Errors
    /// The codec's errors.
    pub fn put<E: Element>(&self, out: &mut Vec<u8>, sent: &SparseVec<E>) -> Result<()> {
        if *self == Self::Raw {
            put_block(out, sent);
            return Ok(());
        }
        for group in self.groups(sent) {
            let idx: Vec<u32> = group.iter().map(|&j| sent.indices()[j]).collect();
            let val: Vec<E> = group.iter().map(|&j| sent.values()[j]).collect();
            out.extend_from_slice(&(idx.len() as u32).to_le_bytes());
            out.extend_from_slice(&le_u32s(&idx));
            self.encode(&val, out)?;
        }
        Ok(())
    }

    /// Reads what [`WireValues::put`] wrote, indices within `lo..lo + len`.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming `what`.
    pub fn take<E: Element>(
        &self,
        b: &mut &[u8],
        dim: usize,
        lo: usize,
        len: usize,
        what: &'static str,
    ) -> Result<SparseVec<E>> {
        if *self == Self::Raw {
            return take_block(b, dim, lo, len, what);
        }
        let groups = if *self == Self::SameSignMean { 2 } else { 1 };
        let mut pairs: Vec<(u32, E)> = Vec::new();
        for _ in 0..groups {
            let mut r = Reader::new(b, what);
            let nnz = r.u32()? as usize;
            let idx = r.u32s(nnz)?;
            let val: Vec<E> = self.decode(&mut r, nnz)?;
            let used = b.len() - r.remaining();
            *b = &b[used..];
            pairs.extend(idx.into_iter().zip(val));
        }
        pairs.sort_unstable_by_key(|p| p.0);
        let (i, x): (Vec<u32>, Vec<E>) = pairs.into_iter().unzip();
        if i.first().is_some_and(|&i| (i as usize) < lo)
            || i.last().is_some_and(|&i| i as usize >= lo + len)
        {
            return Err(Error::corrupt(what, "index outside its block"));
        }
        SparseVec::new(dim, i, x).map_err(|e| Error::corrupt(what, e))
    }
}

/// A collective's `values` parameter as its registry spec writes it (empty
/// for raw, the default).
pub(crate) fn values_param(values: WireValues) -> String {
    match values {
        WireValues::Raw => String::new(),
        v => format!("values={}", v.name()),
    }
}

/// The collective suite's specs of an algorithm that takes `values`: raw
/// (its defaults) and each lossy codec.
pub(crate) fn with_codecs(name: &str) -> Vec<String> {
    let mut specs = vec![name.to_string()];
    specs.extend(["f16", "bf16", "ssmean"].map(|v| format!("{name}:values={v}")));
    specs
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng as _, SeedableRng as _};
    use rand_chacha::ChaCha8Rng as Rng;

    fn random(dim: usize, nnz: usize, seed: u64) -> SparseVec<f32> {
        let mut rng = Rng::seed_from_u64(seed);
        let mut idx: Vec<u32> = (0..dim as u32).collect();
        for i in 0..nnz {
            let j = i + rng.random_range(0..(dim - i) as u64) as usize;
            idx.swap(i, j);
        }
        idx.truncate(nnz);
        idx.sort_unstable();
        let val = (0..nnz)
            .map(|_| {
                let x = (rng.random::<f64>() - 0.5) * 2f64.powi(rng.random_range(0..60) - 30);
                if x == 0.0 { 1.0 } else { x as f32 }
            })
            .collect();
        SparseVec::new(dim, idx, val).unwrap()
    }

    /// On values of every scale: `sent + rest` is the input bit for bit at
    /// every index, the wire carries `sent` exactly, and same-sign mean sends
    /// one value per sign.
    #[test]
    fn split_is_exact_and_the_wire_carries_what_was_sent() {
        for seed in 0..50 {
            let v = random(5000, 400, seed);
            for values in [WireValues::F16, WireValues::Bf16, WireValues::SameSignMean] {
                let (sent, rest) = values.split_exact(&v).unwrap();
                let mut total = sent.to_dense();
                for (i, x) in rest.iter() {
                    total[i as usize] += x;
                }
                for (i, x) in v.iter() {
                    assert_eq!(
                        total[i as usize].to_bits(),
                        x.to_bits(),
                        "{values:?} at {i}"
                    );
                    let s = sent.iter().find(|p| p.0 == i).map(|p| p.1);
                    if let Some(s) = s {
                        assert_eq!(f64::from(s) + f64::from(x - s), f64::from(x));
                    }
                }
                let mut msg = Vec::new();
                values.put(&mut msg, &sent).unwrap();
                let mut b: &[u8] = &msg;
                let back: SparseVec<f32> = values.take(&mut b, 5000, 0, 5000, "test").unwrap();
                assert!(b.is_empty());
                assert_eq!(back, sent, "{values:?}");
                if values == WireValues::SameSignMean {
                    let pos: Vec<f32> =
                        sent.values().iter().copied().filter(|x| *x > 0.0).collect();
                    let neg: Vec<f32> =
                        sent.values().iter().copied().filter(|x| *x < 0.0).collect();
                    assert!(pos.windows(2).all(|w| w[0] == w[1]), "one positive mean");
                    assert!(neg.windows(2).all(|w| w[0] == w[1]), "one negative mean");
                    assert!(!pos.is_empty() || !neg.is_empty());
                }
            }
        }
        // Raw sends everything and keeps nothing.
        let v = random(100, 30, 1);
        let (sent, rest) = WireValues::Raw.split_exact(&v).unwrap();
        assert_eq!((sent, rest.nnz()), (v, 0));
        assert!(WireValues::parse("f32").is_err());
    }
}
