//! Bitmap over an index range: one bit per coordinate of the range.

use super::coo::suffixed;
use super::{Encoding, Raw, Reader, ValueCodec, read_header, unencodable, write_header};
use crate::{Element, Error, Result, SparseVec};
use std::ops::Range;

const TAG: u8 = 3;

/// Sets bit `i - lo` for each index `i` (all in `lo..lo + len`) of a bitmap
/// of `ceil(len / 32)` little-endian words: bit `b` is bit `b % 32` of word
/// `b / 32`. The layout every backend's `bitmap_encode` produces.
///
/// # Panics
/// If an index is outside the range (callers check first).
pub fn bits_from_indices(indices: &[u32], lo: u32, len: usize) -> Vec<u32> {
    let mut words = vec![0u32; len.div_ceil(32)];
    for &i in indices {
        let b = (i - lo) as usize;
        assert!(b < len, "index {i} outside bitmap range");
        words[b / 32] |= 1 << (b % 32);
    }
    words
}

/// The indices `lo + b` of the set bits `b < len`, ascending. Bits at or
/// beyond `len` are ignored.
pub fn indices_from_bits(words: &[u32], lo: u32, len: usize) -> Vec<u32> {
    let mut out = Vec::with_capacity(words.iter().map(|w| w.count_ones() as usize).sum());
    for (k, &w) in words.iter().enumerate() {
        let mut w = w;
        while w != 0 {
            let b = k * 32 + w.trailing_zeros() as usize;
            if b >= len {
                break;
            }
            out.push(lo + b as u32);
            w &= w - 1;
        }
    }
    out
}

/// Calls `f(b)` for each set bit `b` of the little-endian bit field
/// `bytes` (bit `b` is bit `b % 8` of byte `b / 8`, the layout of
/// [`bits_from_indices`]' words written little-endian), ascending. Reads
/// the bytes in place, 64 at a time, skipping runs of zeros: a sparse
/// bitmap costs about one load per 8 bytes.
#[inline]
pub(crate) fn for_each_set_bit(bytes: &[u8], mut f: impl FnMut(usize)) {
    let word = |c: &[u8]| u64::from_le_bytes(c.try_into().expect("8 bytes"));
    let mut lines = bytes.chunks_exact(64);
    let mut base = 0;
    for line in &mut lines {
        let any = line.chunks_exact(8).fold(0, |acc, c| acc | word(c));
        if any != 0 {
            for (j, c) in line.chunks_exact(8).enumerate() {
                let mut w = word(c);
                while w != 0 {
                    f(base + 64 * j + w.trailing_zeros() as usize);
                    w &= w - 1;
                }
            }
        }
        base += 512;
    }
    for (j, &byte) in lines.remainder().iter().enumerate() {
        let mut w = byte;
        while w != 0 {
            f(base + 8 * j + w.trailing_zeros() as usize);
            w &= w - 1;
        }
    }
}

/// A bitmap over `range` (the whole dimension when `None`): `lo: u32`,
/// `hi: u32`, `ceil((hi - lo) / 32)` words, then the values of the set bits
/// in index order. Every stored index must lie in the range.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bitmap<V = Raw> {
    /// The covered index range; `None` covers `0..dim`.
    pub range: Option<Range<u32>>,
    /// The value codec.
    pub codec: V,
}

impl<V> Bitmap<V> {
    /// A bitmap over the whole dimension.
    pub fn new(codec: V) -> Self {
        Self { range: None, codec }
    }
    /// A bitmap over `range`.
    pub fn over(range: Range<u32>, codec: V) -> Self {
        Self {
            range: Some(range),
            codec,
        }
    }
    fn bounds(&self, dim: usize) -> Result<(u32, u32)> {
        let (lo, hi) = match &self.range {
            Some(r) => (r.start, r.end),
            None => (0, dim as u32),
        };
        if lo > hi || hi as usize > dim {
            return Err(unencodable(
                "bitmap",
                format!("range {lo}..{hi} not within 0..{dim}"),
            ));
        }
        Ok((lo, hi))
    }
}

impl<E: Element, V: ValueCodec<E>> Encoding<E> for Bitmap<V> {
    fn name(&self) -> String {
        suffixed("bitmap", &self.codec.name())
    }
    fn lossless(&self) -> bool {
        self.codec.lossless()
    }
    fn index_bytes(&self, v: &SparseVec<E>) -> Result<usize> {
        let (lo, hi) = self.bounds(v.dim())?;
        Ok(4 * ((hi - lo) as usize).div_ceil(32))
    }
    fn encoded_len(&self, v: &SparseVec<E>) -> Result<usize> {
        Ok(super::HEADER_BYTES + 8 + self.index_bytes(v)? + self.codec.encoded_len(v.nnz()))
    }
    fn encode_into(&self, v: &SparseVec<E>, out: &mut Vec<u8>) -> Result<()> {
        v.check()?;
        let (lo, hi) = self.bounds(v.dim())?;
        if let (Some(&first), Some(&last)) = (v.indices().first(), v.indices().last())
            && (first < lo || last >= hi)
        {
            return Err(unencodable(
                "bitmap",
                format!("indices {first}..={last} outside range {lo}..{hi}"),
            ));
        }
        write_header::<E>(out, TAG, V::TAG, v.dim());
        out.extend_from_slice(&lo.to_le_bytes());
        out.extend_from_slice(&hi.to_le_bytes());
        super::write_words(out, &bits_from_indices(v.indices(), lo, (hi - lo) as usize));
        self.codec.encode(v.values(), out)
    }
    fn decode(&self, bytes: &[u8]) -> Result<SparseVec<E>> {
        let mut r = Reader::new(bytes, "bitmap");
        let dim = read_header::<E>(&mut r, "bitmap", TAG, V::TAG)?;
        let lo = r.u32()?;
        let hi = r.u32()?;
        if lo > hi || hi as usize > dim {
            return Err(Error::corrupt(
                "bitmap",
                format!("range {lo}..{hi} not within 0..{dim}"),
            ));
        }
        let len = (hi - lo) as usize;
        let words = r.packed_words(len)?;
        let indices = indices_from_bits(&words, lo, len);
        let values = self.codec.decode(&mut r, indices.len())?;
        r.finish()?;
        Ok(SparseVec::new_unchecked(dim, indices, values))
    }
}
