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

    /// [`Encoding::encode_into`] for a codec that writes raw values
    /// ([`ValueCodec::writes_raw`]): the ids and the blocks' values written
    /// in place in `out`, nothing else allocated. `v` is checked.
    fn encode_raw<E: Element>(&self, v: &SparseVec<E>, out: &mut Vec<u8>)
    where
        V: ValueCodec<E>,
    {
        let id = |i: u32| (i as usize / self.block_size) as u32;
        let mut count = 0u32;
        let mut prev = None;
        for &i in v.indices() {
            if prev != Some(id(i)) {
                count += 1;
                prev = Some(id(i));
            }
        }
        write_header::<E>(out, TAG, V::TAG, v.dim());
        out.extend_from_slice(&(self.block_size as u32).to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
        let mut prev = None;
        let mut values = 0;
        for &i in v.indices() {
            let b = id(i);
            if prev != Some(b) {
                out.extend_from_slice(&b.to_le_bytes());
                values += self.block_len(b, v.dim());
                prev = Some(b);
            }
        }
        let at = out.len();
        out.resize(at + values * E::BYTES, 0);
        // Each entry at its offset in its block; blocks in id order.
        let (mut prev, mut start) = (None, at);
        for (i, x) in v.iter() {
            let b = id(i);
            if prev != Some(b) {
                if let Some(p) = prev {
                    start += self.block_len(p, v.dim()) * E::BYTES;
                }
                prev = Some(b);
            }
            let o = start + (i as usize - b as usize * self.block_size) * E::BYTES;
            let (dst, src) = (&mut out[o..o + E::BYTES], bytemuck::bytes_of(&x));
            if cfg!(target_endian = "little") {
                dst.copy_from_slice(src);
            } else {
                dst.iter_mut()
                    .zip(src.iter().rev())
                    .for_each(|(d, s)| *d = *s);
            }
        }
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
        if self.codec.writes_raw() {
            self.encode_raw(v, out);
            return Ok(());
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
        super::decode_fresh(self, bytes)
    }
    fn decode_into(
        &self,
        bytes: &[u8],
        indices: &mut Vec<u32>,
        kept: &mut Vec<E>,
    ) -> Result<usize> {
        indices.clear();
        kept.clear();
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
        r.expect_items(n_blocks, 4)?;
        let ids = r.bytes(4 * n_blocks)?;
        let shape = Block {
            block_size,
            codec: (),
        };
        let mut total = 0usize;
        let mut last = None;
        for (k, b) in ids.chunks_exact(4).enumerate() {
            let b = u32::from_le_bytes(b.try_into().expect("4 bytes"));
            if b as usize * block_size >= dim || last.is_some_and(|l| b <= l) {
                return Err(Error::corrupt(
                    "block",
                    format!("block id {b} at {k} out of order or range"),
                ));
            }
            total += shape.block_len(b, dim);
            last = Some(b);
        }
        if self.codec.writes_raw() {
            // The values read in place, as `Raw` reads them.
            r.expect_items(total, E::BYTES)?;
            let values = r.bytes(total * E::BYTES)?;
            r.finish()?;
            // Runs of all-zero bytes (most of a sparse block) are skipped
            // 8 bytes at a time; anything else is read value by value
            // (`-0` too: it equals zero and is not kept).
            let mut start = 0;
            for b in ids.chunks_exact(4) {
                let b = u32::from_le_bytes(b.try_into().expect("4 bytes"));
                let base = b as usize * block_size;
                let len = shape.block_len(b, dim);
                let block = &values[start..start + len * E::BYTES];
                start += len * E::BYTES;
                let mut chunks = block.chunks_exact(8);
                let mut o = base;
                for c in &mut chunks {
                    if u64::from_le_bytes(c.try_into().expect("8 bytes")) != 0 {
                        for (j, x) in c.chunks_exact(E::BYTES).enumerate() {
                            let x = E::read_le(x);
                            if x != E::zero() {
                                indices.push((o + j) as u32);
                                kept.push(x);
                            }
                        }
                    }
                    o += 8 / E::BYTES;
                }
                for (j, x) in chunks.remainder().chunks_exact(E::BYTES).enumerate() {
                    let x = E::read_le(x);
                    if x != E::zero() {
                        indices.push((o + j) as u32);
                        kept.push(x);
                    }
                }
            }
            return Ok(dim);
        }
        let values = self.codec.decode(&mut r, total)?;
        r.finish()?;
        let mut pos = 0;
        for b in ids.chunks_exact(4) {
            let b = u32::from_le_bytes(b.try_into().expect("4 bytes"));
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
        Ok(dim)
    }
}
