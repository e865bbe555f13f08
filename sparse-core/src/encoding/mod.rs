//! Encodings of sparse vectors into bytes, behind one trait.
//!
//! An encoding is an *index part* (how the positions are written: [`Coo`],
//! [`Block`], [`Bitmap`], [`HashBitmap`]) combined with a *value codec*
//! ([`Raw`], [`F16`], [`Bf16`], [`SameSignMean`], [`Qsgd`]): `Coo<Raw>` is
//! plain COO, `Coo<Qsgd>` COO with QSGD values, and so on.
//!
//! Every encoding has an exact [`Encoding::encoded_len`]. Decoders treat the
//! bytes as hostile: lengths are checked against the bytes present before
//! anything is allocated, every field is validated, trailing bytes are an
//! error, so every strict prefix of a valid encoding is rejected.
//!
//! Layout: a 4-byte header (format tag, element code, value codec tag,
//! format version), `dim: u32`, then the index part, then the values section
//! (the codec's own header, then its payload). All integers little-endian.

mod bitmap;
mod block;
mod coo;
mod hash_bitmap;
mod value;

pub use crate::reader::Reader;
pub use bitmap::{Bitmap, bits_from_indices, indices_from_bits};
pub use block::{Block, DEFAULT_BLOCK};
pub use coo::Coo;
pub use hash_bitmap::{HashBitmap, PartitionIndex};
pub use value::{
    Bf16, F16, Qsgd, Raw, SameSignMean, Split, USER_TAGS, ValueCodec, sends_exactly,
    split_by_round_trip,
};

use crate::{Element, Error, Result, SparseVec};

/// Bytes of the common header: tag, element code, codec tag, version, `dim`.
pub const HEADER_BYTES: usize = 8;
const VERSION: u8 = 1;

/// A sparse-vector encoding.
pub trait Encoding<E: Element> {
    /// A stable name such as `"coo"` or `"bitmap+qsgd4"`.
    fn name(&self) -> String;
    /// Whether `decode(encode(v))` equals `v` exactly.
    fn lossless(&self) -> bool;
    /// Bytes spent on locating entries (indices, block ids, bitmap words).
    ///
    /// # Errors
    /// As [`Encoding::encode_into`].
    fn index_bytes(&self, v: &SparseVec<E>) -> Result<usize>;
    /// The exact length of `encode(v)`.
    ///
    /// # Errors
    /// As [`Encoding::encode_into`].
    fn encoded_len(&self, v: &SparseVec<E>) -> Result<usize>;
    /// Appends the encoding of `v` to `out`.
    ///
    /// # Errors
    /// [`Error::Unencodable`] when `v` does not fit the encoding (an index
    /// outside a bitmap's range or partition, mixed signs for
    /// [`SameSignMean`]); [`Error::NonFinite`] for QSGD on NaN.
    fn encode_into(&self, v: &SparseVec<E>, out: &mut Vec<u8>) -> Result<()>;
    /// The encoding of `v` in a new buffer of exactly `encoded_len` bytes.
    ///
    /// # Errors
    /// As [`Encoding::encode_into`].
    fn encode(&self, v: &SparseVec<E>) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.encoded_len(v)?);
        self.encode_into(v, &mut out)?;
        debug_assert_eq!(out.len(), self.encoded_len(v)?);
        Ok(out)
    }
    /// Decodes bytes produced by [`Encoding::encode`] with the same
    /// parameters.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for anything that is not such an encoding.
    fn decode(&self, bytes: &[u8]) -> Result<SparseVec<E>>;
    /// [`Encoding::decode`] into `indices` and `values` (their contents
    /// replaced, their allocations reused), returning the dimension: the
    /// same entries and the same errors, for a caller that decodes again
    /// and again into the same memory. The default copies what `decode`
    /// returns; [`Coo`], [`Block`] and [`HashBitmap`] decode in place.
    ///
    /// # Errors
    /// As [`Encoding::decode`].
    fn decode_into(
        &self,
        bytes: &[u8],
        indices: &mut Vec<u32>,
        values: &mut Vec<E>,
    ) -> Result<usize> {
        let v = self.decode(bytes)?;
        indices.clear();
        values.clear();
        indices.extend_from_slice(v.indices());
        values.extend_from_slice(v.values());
        Ok(v.dim())
    }
}

/// [`Encoding::decode`] of an encoding that decodes in place: its
/// [`Encoding::decode_into`] into fresh vectors.
fn decode_fresh<E: Element>(enc: &impl Encoding<E>, bytes: &[u8]) -> Result<SparseVec<E>> {
    let (mut indices, mut values) = (Vec::new(), Vec::new());
    let dim = enc.decode_into(bytes, &mut indices, &mut values)?;
    Ok(SparseVec::new_unchecked(dim, indices, values))
}

fn write_header<E: Element>(out: &mut Vec<u8>, tag: u8, codec: u8, dim: usize) {
    out.extend_from_slice(&[tag, E::CODE, codec, VERSION]);
    out.extend_from_slice(&(dim as u32).to_le_bytes());
}

fn read_header<E: Element>(
    r: &mut Reader<'_>,
    what: &'static str,
    tag: u8,
    codec: u8,
) -> Result<usize> {
    let h = r.bytes(4)?;
    if h[0] != tag {
        return Err(Error::corrupt(
            what,
            format!("format tag {} (expected {tag})", h[0]),
        ));
    }
    if h[1] != E::CODE {
        return Err(Error::corrupt(
            what,
            format!(
                "element code {} (expected {} for {})",
                h[1],
                E::CODE,
                E::NAME
            ),
        ));
    }
    if h[2] != codec {
        return Err(Error::corrupt(
            what,
            format!("value codec tag {} (expected {codec})", h[2]),
        ));
    }
    if h[3] != VERSION {
        return Err(Error::corrupt(what, format!("version {}", h[3])));
    }
    Ok(r.u32()? as usize)
}

/// Appends `words` as little-endian `u32`s.
fn write_words(out: &mut Vec<u8>, words: &[u32]) {
    if cfg!(target_endian = "little") {
        out.extend_from_slice(bytemuck::cast_slice(words));
    } else {
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
}

fn unencodable(codec: &'static str, reason: impl std::fmt::Display) -> Error {
    Error::Unencodable {
        codec,
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests;
