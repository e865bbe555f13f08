//! OmniReduce-style blocks: the ids of blocks holding a non-zero, then every
//! value of those blocks.

use super::coo::suffixed;
use super::{Encoding, Raw, Reader, ValueCodec, read_header, unencodable, write_header};
use crate::{Element, Error, Result, SparseVec};

const TAG: u8 = 2;
const NOT_PER_VALUE: &str = "a value codec without bytes per value (same-sign mean) \
     would spread each entry over its whole block; use Coo or Bitmap with it";
/// OmniReduce's default block size.
pub const DEFAULT_BLOCK: usize = 256;

/// Block encoding (OmniReduce): the dimension is cut into blocks of
/// `block_size` coordinates; the encoding holds `block_size: u32`,
/// `blocks: u32`, the sorted ids of the blocks that hold a stored entry, and
/// then all values of those blocks (the last block of the vector is only as
/// long as the dimension allows).
///
/// Lossless as a dense vector: decoding returns the non-zero coordinates of
/// the sent blocks, so stored explicit zeros are not preserved.
///
/// The value codec must spend bytes on every value ([`ValueCodec::per_value`]):
/// with [`super::SameSignMean`] one stored entry would decode as its mean
/// spread over every coordinate of its block (a single `10.0` as 256
/// entries of `0.039`), and a 4-byte block id would make the decoder
/// allocate `block_size` values from one header, so that combination is
/// rejected by encoding and decoding alike ([`Error::Unencodable`],
/// [`Error::Corrupt`]). RedSync's quantized mode sends `(index, mean)`:
/// `Coo(SameSignMean)` or `Bitmap::new(SameSignMean)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block<V = Raw> {
    block_size: usize,
    codec: V,
}

impl Default for Block<Raw> {
    fn default() -> Self {
        Self {
            block_size: DEFAULT_BLOCK,
            codec: Raw,
        }
    }
}

impl<V> Block<V> {
    /// Blocks of `block_size` with the given value codec.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if `block_size` is 0 or above `u32::MAX`.
    pub fn new(block_size: usize, codec: V) -> Result<Self> {
        if block_size == 0 || block_size > u32::MAX as usize {
            return Err(Error::invalid(
                "block_size",
                format!("{block_size} not in 1..=u32::MAX"),
            ));
        }
        Ok(Self { block_size, codec })
    }
    /// Coordinates per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }
    /// The value codec.
    pub fn codec(&self) -> &V {
        &self.codec
    }

    fn block_ids(&self, indices: &[u32]) -> Vec<u32> {
        let mut ids: Vec<u32> = Vec::new();
        for &i in indices {
            let b = (i as usize / self.block_size) as u32;
            if ids.last() != Some(&b) {
                ids.push(b);
            }
        }
        ids
    }

    fn block_len(&self, id: u32, dim: usize) -> usize {
        let start = id as usize * self.block_size;
        self.block_size.min(dim.saturating_sub(start))
    }
}

impl<E: Element, V: ValueCodec<E>> Encoding<E> for Block<V> {
    fn name(&self) -> String {
        let base = if self.block_size == DEFAULT_BLOCK {
            "block".to_string()
        } else {
            format!("block{}", self.block_size)
        };
        suffixed(&base, &self.codec.name())
    }
    fn lossless(&self) -> bool {
        self.codec.lossless()
    }
    fn index_bytes(&self, v: &SparseVec<E>) -> Result<usize> {
        Ok(4 * self.block_ids(v.indices()).len())
    }
    fn encoded_len(&self, v: &SparseVec<E>) -> Result<usize> {
        let ids = self.block_ids(v.indices());
        let values: usize = ids.iter().map(|&b| self.block_len(b, v.dim())).sum();
        Ok(super::HEADER_BYTES + 8 + 4 * ids.len() + self.codec.encoded_len(values))
    }
    fn encode_into(&self, v: &SparseVec<E>, out: &mut Vec<u8>) -> Result<()> {
        v.check()?;
        if self.block_size == 0 {
            return Err(unencodable("block", "block size 0"));
        }
        if !self.codec.per_value() {
            return Err(unencodable("block", NOT_PER_VALUE));
        }
        let ids = self.block_ids(v.indices());
        write_header::<E>(out, TAG, V::TAG, v.dim());
        out.extend_from_slice(&(self.block_size as u32).to_le_bytes());
        out.extend_from_slice(&(ids.len() as u32).to_le_bytes());
        let mut values = Vec::new();
        let mut entries = v.iter().peekable();
        for &b in &ids {
            out.extend_from_slice(&b.to_le_bytes());
            let start = values.len();
            let base = b as usize * self.block_size;
            values.resize(start + self.block_len(b, v.dim()), E::zero());
            while let Some(&(i, x)) = entries.peek() {
                if (i as usize) >= base + self.block_size {
                    break;
                }
                values[start + i as usize - base] = x;
                entries.next();
            }
        }
        self.codec.encode(&values, out)
    }
    fn decode(&self, bytes: &[u8]) -> Result<SparseVec<E>> {
        if !self.codec.per_value() {
            return Err(Error::corrupt("block", NOT_PER_VALUE));
        }
        let mut r = Reader::new(bytes, "block");
        let dim = read_header::<E>(&mut r, "block", TAG, V::TAG)?;
        let block_size = r.u32()? as usize;
        if block_size == 0 {
            return Err(Error::corrupt("block", "block size 0"));
        }
        let n_blocks = r.u32()? as usize;
        if n_blocks > dim.div_ceil(block_size) {
            return Err(Error::corrupt(
                "block",
                format!("{n_blocks} blocks for dimension {dim}"),
            ));
        }
        let ids = r.u32s(n_blocks)?;
        let shape = Block {
            block_size,
            codec: (),
        };
        let mut total = 0usize;
        for (k, &b) in ids.iter().enumerate() {
            if b as usize * block_size >= dim || (k > 0 && b <= ids[k - 1]) {
                return Err(Error::corrupt(
                    "block",
                    format!("block id {b} at {k} out of order or range"),
                ));
            }
            total += shape.block_len(b, dim);
        }
        let values = self.codec.decode(&mut r, total)?;
        r.finish()?;
        let mut indices = Vec::new();
        let mut kept = Vec::new();
        let mut pos = 0;
        for &b in &ids {
            let base = b as usize * block_size;
            for o in 0..shape.block_len(b, dim) {
                let x = values[pos];
                pos += 1;
                if x != E::zero() {
                    indices.push((base + o) as u32);
                    kept.push(x);
                }
            }
        }
        Ok(SparseVec::new_unchecked(dim, indices, kept))
    }
}
