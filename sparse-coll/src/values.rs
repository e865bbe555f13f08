//! How a collective's messages carry values: any value codec
//! ([`sparse_core::encoding::ValueCodec`]), the built-in ones and a user's
//! own alike ([`WireValues`]), with the quantization error kept exactly in
//! the sender's `dropped`.

use crate::frame::{put_block, take_block};
use sparse_core::encoding::{
    Bf16, F16, Raw, Reader, SameSignMean, Split, ValueCodec, sends_exactly,
};
use sparse_core::{Element, Error, Result, SparseVec};
use std::any::TypeId;
use std::fmt;
use std::sync::Arc;

/// A value codec behind a pointer: [`ValueCodec`] has an associated
/// constant and `Clone`, so it is not object safe; this is.
trait WireCodec<E>: Send + Sync {
    fn name(&self) -> String;
    fn tag(&self) -> u8;
    fn lossless(&self) -> bool;
    fn encoded_len(&self, n: usize) -> usize;
    fn split(&self, values: &[E]) -> Result<Split>;
    fn decode(&self, r: &mut Reader<'_>, n: usize) -> Result<Vec<E>>;
    fn groups(&self) -> usize;
    fn group(&self, x: E) -> usize;
}

impl<E: Element, C: ValueCodec<E> + Send + Sync> WireCodec<E> for C {
    fn name(&self) -> String {
        ValueCodec::name(self)
    }
    fn tag(&self) -> u8 {
        C::TAG
    }
    fn lossless(&self) -> bool {
        ValueCodec::lossless(self)
    }
    fn encoded_len(&self, n: usize) -> usize {
        ValueCodec::encoded_len(self, n)
    }
    fn split(&self, values: &[E]) -> Result<Split> {
        ValueCodec::split(self, values)
    }
    fn decode(&self, r: &mut Reader<'_>, n: usize) -> Result<Vec<E>> {
        ValueCodec::decode(self, r, n)
    }
    fn groups(&self) -> usize {
        ValueCodec::groups(self)
    }
    fn group(&self, x: E) -> usize {
        ValueCodec::group(self, x)
    }
}

/// The value codec of a collective's messages: raw values (lossless, the
/// default) or any [`ValueCodec`]: the built-in [`F16`], [`Bf16`] and
/// RedSync's [`SameSignMean`], QSGD, or a user's own
/// ([`WireValues::codec`]; by name through
/// [`Registry::add_values`](crate::Registry::add_values)).
///
/// Sending is exact bookkeeping: [`WireValues::pack`] splits what a rank
/// sends with the codec's [`ValueCodec::split`] into the values the
/// receivers decode and a remainder that the sender keeps in its
/// `dropped`, each bit for bit, so `result` plus every rank's `dropped` is
/// still the inputs' sum. An entry whose remainder would round (a value
/// below half of its sign's mean with same-sign mean; one beyond the
/// half-precision range) is not sent at all and stays whole in `dropped`.
/// The split is checked whatever the codec (a user's override included),
/// and the bytes the receivers decode are the ones the split produced, so
/// a codec whose encoding is random (QSGD) or not idempotent sends exactly
/// what the sender subtracted. Each message's split is exact; the sums of
/// decoded values over ranks are exact where those values lie on a coarse
/// grid (half precision, same-sign mean's 8-bit mean, a power-of-two
/// scale) and round otherwise (QSGD's arbitrary scales), so conservation
/// of `result` plus every `dropped` is then within that rounding.
///
/// Cheap to clone (the codec is shared).
pub struct WireValues<E> {
    /// `None`: raw values.
    codec: Option<Arc<dyn WireCodec<E>>>,
}

impl<E> Clone for WireValues<E> {
    fn clone(&self) -> Self {
        Self {
            codec: self.codec.clone(),
        }
    }
}

impl<E> Default for WireValues<E> {
    /// Raw values.
    fn default() -> Self {
        Self { codec: None }
    }
}

impl<E> fmt::Debug for WireValues<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.codec {
            None => write!(f, "WireValues(raw)"),
            Some(c) => write!(f, "WireValues({})", c.name()),
        }
    }
}

impl<E: Element> PartialEq for WireValues<E> {
    /// The same codec by name and tag (what the entry round compares).
    fn eq(&self, other: &Self) -> bool {
        self.code() == other.code()
    }
}

/// The registry names of the built-in codecs besides raw.
pub(crate) const BUILTIN_CODECS: [&str; 3] = ["f16", "bf16", "ssmean"];

impl<E: Element> WireValues<E> {
    /// Raw values: the element's own bytes, lossless.
    pub fn raw() -> Self {
        Self::default()
    }

    /// IEEE half precision ([`F16`]).
    pub fn f16() -> Self {
        Self::codec(F16)
    }

    /// bfloat16 ([`Bf16`]).
    pub fn bf16() -> Self {
        Self::codec(Bf16)
    }

    /// RedSync's quantization ([`SameSignMean`]): the entries of each
    /// sign travel as their indices and one mean (rounded to 8
    /// significant bits).
    pub fn same_sign_mean() -> Self {
        Self::codec(SameSignMean)
    }

    /// Values sent with `codec`, any [`ValueCodec`] (a user's own
    /// included; [`Raw`] is [`WireValues::raw`]).
    pub fn codec<C: ValueCodec<E> + Send + Sync + 'static>(codec: C) -> Self {
        if TypeId::of::<C>() == TypeId::of::<Raw>() {
            return Self::raw();
        }
        Self {
            codec: Some(Arc::new(codec)),
        }
    }

    /// A built-in codec by its registry name: `raw`, `f16`, `bf16` or
    /// `ssmean` (a user's codecs by name: [`crate::Registry::values`]).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for another name.
    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "raw" => Self::raw(),
            "f16" => Self::f16(),
            "bf16" => Self::bf16(),
            "ssmean" => Self::same_sign_mean(),
            other => {
                return Err(Error::invalid(
                    "values",
                    format!("{other:?} is not raw, f16, bf16 or ssmean"),
                ));
            }
        })
    }

    /// Whether these are raw values.
    pub fn is_raw(&self) -> bool {
        self.codec.is_none()
    }

    /// The codec's name (`"raw"` for raw values), its registry name.
    pub fn name(&self) -> String {
        self.codec
            .as_ref()
            .map_or_else(|| "raw".into(), |c| c.name())
    }

    /// The codec's tag ([`ValueCodec::TAG`]; 0 for raw values).
    pub fn tag(&self) -> u8 {
        self.codec.as_ref().map_or(0, |c| c.tag())
    }

    /// The value the entry round compares: a stable hash of the codec's
    /// tag and name (raw values as tag 0, `raw`), so that ranks with
    /// different codecs disagree on `values`, by name and tag.
    pub(crate) fn code(&self) -> u64 {
        let (tag, name) = match &self.codec {
            None => (0, "raw".to_string()),
            Some(c) => (c.tag(), c.name()),
        };
        let code = sparse_core::hash::fnv1a(std::iter::once(tag).chain(name.bytes())) | 1 << 63;
        // So that a disagreement prints the codecs, not two numbers.
        crate::transport::agree::remember(code, &format!("{name} (tag {tag})"));
        code
    }

    /// Bytes per value on the wire, for cost models: the codec's bytes
    /// per value in a section of 65,536 values, rounded (same-sign mean,
    /// whose section is one mean: none).
    pub fn value_bytes(&self) -> usize {
        match &self.codec {
            None => E::BYTES,
            Some(c) => {
                let n = 1usize << 16;
                (c.encoded_len(n) as f64 / n as f64).round() as usize
            }
        }
    }

    /// Whether every value arrives exactly (raw, or a codec that says so:
    /// the element's own half type). Even then the split is checked.
    pub fn lossless(&self) -> bool {
        self.codec.as_ref().is_none_or(|c| c.lossless())
    }

    /// Whether this codec can send `v` (checked before a collective's
    /// entry round, so that a refusal reaches every rank): raw values
    /// always, a codec when [`WireValues::pack`] takes `v`.
    ///
    /// # Errors
    /// [`WireValues::pack`]'s.
    pub(crate) fn ready(&self, v: &SparseVec<E>) -> Result<()> {
        match self.codec {
            None => Ok(()),
            Some(_) => self.pack(v).map(drop),
        }
    }

    /// Splits `v` into `(sent, rest)`: `sent` holds exactly the values the
    /// receivers of [`WireValues::pack`]'s message decode, `rest` what the
    /// sender keeps, and at every index `sent + rest` is `v`'s value bit for
    /// bit (an index that is not sent keeps its whole value in `rest`).
    /// [`WireValues::pack`] without the message.
    ///
    /// # Errors
    /// As [`WireValues::pack`].
    pub fn split_exact(&self, v: &SparseVec<E>) -> Result<(SparseVec<E>, SparseVec<E>)> {
        let p = self.pack(v)?;
        Ok((p.sent, p.rest))
    }

    /// Splits `v` for sending ([`Packed`]): for raw values all of it, as a
    /// plain block (`nnz: u32`, indices, values); else each group of the
    /// codec ([`ValueCodec::groups`]: one, or for same-sign mean the
    /// positive and the negative entries) split with
    /// [`ValueCodec::split`], checked, and written as `nnz: u32`, the
    /// indices, then the section the split produced.
    ///
    /// # Errors
    /// [`Error::NonFinite`] and the codec's errors;
    /// [`Error::InvalidParameter`] naming the codec for a split that
    /// breaks [`ValueCodec::split`]'s rules (a position out of order, a
    /// section that does not decode to as many values, a decoded value
    /// that is not finite and nonzero or whose remainder is not exact).
    pub fn pack(&self, v: &SparseVec<E>) -> Result<Packed<E>> {
        let Some(codec) = &self.codec else {
            let mut bytes = Vec::new();
            put_block(&mut bytes, v);
            return Ok(Packed {
                sent: v.clone(),
                rest: SparseVec::zeros(v.dim())?,
                bytes,
            });
        };
        sparse_core::backend::check_finite(v.values())?;
        let groups = codec.groups();
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); groups];
        for (j, &x) in v.values().iter().enumerate() {
            if x != E::zero() {
                let g = codec.group(x);
                members
                    .get_mut(g)
                    .ok_or_else(|| {
                        bad_split(&**codec, format!("group {g} of {groups} for value {x:?}"))
                    })?
                    .push(j);
            }
        }
        let mut sent_as: Vec<Option<E>> = vec![None; v.nnz()];
        let mut bytes = Vec::new();
        for group in members {
            let values: Vec<E> = group.iter().map(|&j| v.values()[j]).collect();
            let split = codec.split(&values)?;
            let decoded = check_split(&**codec, &values, &split)?;
            bytes.extend_from_slice(&(split.kept.len() as u32).to_le_bytes());
            for &j in &split.kept {
                bytes.extend_from_slice(&v.indices()[group[j]].to_le_bytes());
            }
            bytes.extend_from_slice(&split.bytes);
            for (&j, d) in split.kept.iter().zip(decoded) {
                sent_as[group[j]] = Some(d);
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
        Ok(Packed {
            sent: SparseVec::new(v.dim(), sent.0, sent.1)?,
            rest: SparseVec::new(v.dim(), rest.0, rest.1)?,
            bytes,
        })
    }

    /// Reads what [`WireValues::pack`] wrote, indices within `lo..lo + len`.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming `what`.
    pub fn take(
        &self,
        b: &mut &[u8],
        dim: usize,
        lo: usize,
        len: usize,
        what: &'static str,
    ) -> Result<SparseVec<E>> {
        let Some(codec) = &self.codec else {
            return take_block(b, dim, lo, len, what);
        };
        let mut pairs: Vec<(u32, E)> = Vec::new();
        for _ in 0..codec.groups() {
            let mut r = Reader::new(b, what);
            let nnz = r.u32()? as usize;
            // The indices are read first: `nnz` is bounded by the bytes
            // present before the codec allocates anything.
            let idx = r.u32s(nnz)?;
            let val: Vec<E> = codec.decode(&mut r, nnz)?;
            if val.len() != nnz {
                return Err(Error::corrupt(what, "values section of another length"));
            }
            if let Some(x) = val.iter().find(|x| !x.is_finite() || **x == E::zero()) {
                return Err(Error::corrupt(what, format!("value {x:?} sent")));
            }
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

/// A vector split for sending ([`WireValues::pack`]): what travels, what
/// the sender keeps, and the message that carries what travels.
#[derive(Debug, Clone, PartialEq)]
pub struct Packed<E> {
    sent: SparseVec<E>,
    rest: SparseVec<E>,
    bytes: Vec<u8>,
}

impl<E: Element> Packed<E> {
    /// What the receivers decode, bit for bit.
    pub fn sent(&self) -> &SparseVec<E> {
        &self.sent
    }
    /// What the sender keeps (its `dropped`): `sent + rest` is the input
    /// bit for bit at every index.
    pub fn rest(&self) -> &SparseVec<E> {
        &self.rest
    }
    /// The message ([`WireValues::take`] reads it).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
    /// Appends the message to `out`.
    pub fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.bytes);
    }
    /// `(sent, rest)`.
    pub fn into_parts(self) -> (SparseVec<E>, SparseVec<E>) {
        (self.sent, self.rest)
    }
}

/// The error of a split that breaks [`ValueCodec::split`]'s rules.
fn bad_split<E>(codec: &dyn WireCodec<E>, why: impl fmt::Display) -> Error {
    Error::invalid(
        "values",
        format!(
            "codec {:?} (tag {}): split {why}",
            codec.name(),
            codec.tag()
        ),
    )
}

/// Checks `split` of `values` against [`ValueCodec::split`]'s rules and
/// returns the values its section decodes to.
fn check_split<E: Element>(
    codec: &dyn WireCodec<E>,
    values: &[E],
    split: &Split,
) -> Result<Vec<E>> {
    let kept = &split.kept;
    if !kept.windows(2).all(|w| w[0] < w[1]) || kept.last().is_some_and(|&j| j >= values.len()) {
        return Err(bad_split(
            codec,
            format!("keeps positions out of order or past {}", values.len()),
        ));
    }
    let mut r = Reader::new(&split.bytes, "values");
    let decoded = codec
        .decode(&mut r, kept.len())
        .map_err(|e| bad_split(codec, format!("made a section that does not decode: {e}")))?;
    if r.remaining() != 0 || decoded.len() != kept.len() {
        return Err(bad_split(
            codec,
            format!("made a section that is not {} values", kept.len()),
        ));
    }
    for (&j, &d) in kept.iter().zip(&decoded) {
        if !sends_exactly(values[j], d) {
            return Err(bad_split(
                codec,
                format!(
                    "sends {:?} as {d:?}: not finite and nonzero, or the remainder is not exact",
                    values[j]
                ),
            ));
        }
    }
    Ok(decoded)
}

/// A collective's `values` parameter as its registry spec writes it (empty
/// for raw, the default).
pub(crate) fn values_param<E: Element>(values: &WireValues<E>) -> String {
    if values.is_raw() {
        String::new()
    } else {
        format!("values={}", values.name())
    }
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
            for values in [
                WireValues::f16(),
                WireValues::bf16(),
                WireValues::same_sign_mean(),
            ] {
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
                let packed = values.pack(&v).unwrap();
                assert_eq!((packed.sent(), packed.rest()), (&sent, &rest));
                let mut b: &[u8] = packed.bytes();
                let back: SparseVec<f32> = values.take(&mut b, 5000, 0, 5000, "test").unwrap();
                assert!(b.is_empty());
                assert_eq!(back, sent, "{values:?}");
                if values == WireValues::same_sign_mean() {
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
        let (sent, rest) = WireValues::raw().split_exact(&v).unwrap();
        assert_eq!((sent, rest.nnz()), (v, 0));
        assert!(WireValues::<f32>::parse("f32").is_err());
    }
}
