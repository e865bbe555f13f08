//! Zen's hash bitmap (Alg. 2): a bitmap over the sorted index set of one
//! partition, `I_i = { idx : h0(idx) = i }`, instead of over a range.

use super::bitmap::for_each_set_bit;
use super::coo::suffixed;
use super::{Encoding, Raw, Reader, ValueCodec, read_header, unencodable, write_header};
use crate::{Element, Error, H0, Result, SparseVec};
use std::sync::Arc;

const TAG: u8 = 4;

/// The sorted index sets `I_0 .. I_{P-1}` of `h0` over a dimension, computed
/// once (Zen computes them offline) and shared by encoders and decoders.
#[derive(Debug, Clone)]
pub struct PartitionIndex {
    h0: H0,
    dim: usize,
    sets: Vec<Vec<u32>>,
    /// `rank[idx]`: the position of `idx` in its set, so that encoding costs
    /// one lookup per entry instead of a binary search over a large set.
    rank: Vec<u32>,
}

impl PartitionIndex {
    /// The index sets of `h0` over `0..dim`. Memory: `8 * dim` bytes (every
    /// index once in its set, and its position in a lookup table), allocated
    /// fallibly.
    ///
    /// # Errors
    /// [`Error::DimensionTooLarge`]; [`Error::OutOfMemory`] where the
    /// allocator refuses the `8 * dim` bytes.
    pub fn new(h0: H0, dim: usize) -> Result<Self> {
        crate::sparse::check_dim(dim)?;
        // All 8 * dim bytes at once first: a request far beyond the machine
        // fails here instead of after the first half has been written.
        crate::alloc::probe(8 * dim as u64, "partition index")?;
        let mut rank = crate::alloc::try_filled(dim, 0u32, "partition index")?;
        let sets = h0.index_sets(dim)?;
        for set in &sets {
            for (pos, &idx) in set.iter().enumerate() {
                rank[idx as usize] = pos as u32;
            }
        }
        Ok(Self {
            h0,
            dim,
            sets,
            rank,
        })
    }
    /// The partition function.
    pub fn h0(&self) -> &H0 {
        &self.h0
    }
    /// The dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// `I_i`, sorted.
    ///
    /// # Panics
    /// If `i` is not a partition.
    pub fn set(&self, i: u32) -> &[u32] {
        &self.sets[i as usize]
    }
    /// Splits `v` by partition: entry `i` holds the entries with
    /// `h0(idx) = i`, in index order.
    ///
    /// # Errors
    /// [`Error::DimensionMismatch`] if `v` has another dimension.
    pub fn split<E: Element>(&self, v: &SparseVec<E>) -> Result<Vec<SparseVec<E>>> {
        if v.dim() != self.dim {
            return Err(Error::DimensionMismatch {
                left: v.dim() as u64,
                right: self.dim as u64,
            });
        }
        let p = self.h0.partitions() as usize;
        let mut idx = vec![Vec::new(); p];
        let mut val = vec![Vec::new(); p];
        for (i, x) in v.iter() {
            let q = self.h0.partition(i) as usize;
            idx[q].push(i);
            val[q].push(x);
        }
        Ok(idx
            .into_iter()
            .zip(val)
            .map(|(i, x)| SparseVec::new_unchecked(self.dim, i, x))
            .collect())
    }
}

/// The hash bitmap of one partition: `partitions: u32`, `partition: u32`,
/// the `h0` seed (`u32` low, `u32` high), `|I_i|: u32`, then
/// `ceil(|I_i| / 32)` words whose bit `b` says whether `I_i[b]` is stored,
/// then the values.
///
/// Summed over all partitions, the bitmap words take at most `N / 8` bytes
/// plus one word of padding per partition, whatever the density (Zen B.3).
#[derive(Debug, Clone)]
pub struct HashBitmap<V = Raw> {
    index: Arc<PartitionIndex>,
    partition: u32,
    codec: V,
}

impl<V> HashBitmap<V> {
    /// The hash bitmap of `partition`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if `partition` is not below the number of
    /// partitions.
    pub fn new(index: Arc<PartitionIndex>, partition: u32, codec: V) -> Result<Self> {
        if partition >= index.h0.partitions() {
            return Err(Error::invalid(
                "partition",
                format!("{partition} >= {}", index.h0.partitions()),
            ));
        }
        Ok(Self {
            index,
            partition,
            codec,
        })
    }
    fn set(&self) -> &[u32] {
        self.index.set(self.partition)
    }
    fn words(&self) -> usize {
        self.set().len().div_ceil(32)
    }
}

impl<E: Element, V: ValueCodec<E>> Encoding<E> for HashBitmap<V> {
    fn name(&self) -> String {
        suffixed("hash-bitmap", &self.codec.name())
    }
    fn lossless(&self) -> bool {
        self.codec.lossless()
    }
    fn index_bytes(&self, _v: &SparseVec<E>) -> Result<usize> {
        Ok(4 * self.words())
    }
    fn encoded_len(&self, v: &SparseVec<E>) -> Result<usize> {
        Ok(super::HEADER_BYTES + 20 + 4 * self.words() + self.codec.encoded_len(v.nnz()))
    }
    fn encode_into(&self, v: &SparseVec<E>, out: &mut Vec<u8>) -> Result<()> {
        v.check()?;
        if v.dim() != self.index.dim {
            return Err(unencodable(
                "hash-bitmap",
                format!(
                    "dimension {} but index sets for {}",
                    v.dim(),
                    self.index.dim
                ),
            ));
        }
        let set_len = self.set().len();
        let start = out.len();
        write_header::<E>(out, TAG, V::TAG, v.dim());
        let seed = self.index.h0.seed();
        for x in [
            self.index.h0.partitions(),
            self.partition,
            seed as u32,
            (seed >> 32) as u32,
            set_len as u32,
        ] {
            out.extend_from_slice(&x.to_le_bytes());
        }
        // The words of `bits_from_indices`, set in place in `out`: bit `b`
        // of the little-endian words is bit `b % 8` of byte `b / 8`.
        let at = out.len();
        out.resize(at + 4 * set_len.div_ceil(32), 0);
        let bits = &mut out[at..];
        let rank = &self.index.rank;
        for &i in v.indices() {
            if self.index.h0.partition(i) != self.partition {
                out.truncate(start);
                return Err(unencodable(
                    "hash-bitmap",
                    format!("index {i} is not in partition {}", self.partition),
                ));
            }
            let b = rank[i as usize] as usize;
            bits[b / 8] |= 1 << (b % 8);
        }
        self.codec.encode(v.values(), out)
    }
    fn decode(&self, bytes: &[u8]) -> Result<SparseVec<E>> {
        super::decode_fresh(self, bytes)
    }
    fn decode_into(
        &self,
        bytes: &[u8],
        indices: &mut Vec<u32>,
        values: &mut Vec<E>,
    ) -> Result<usize> {
        indices.clear();
        values.clear();
        let mut r = Reader::new(bytes, "hash-bitmap");
        let dim = read_header::<E>(&mut r, "hash-bitmap", TAG, V::TAG)?;
        let (parts, part) = (r.u32()?, r.u32()?);
        let seed = r.u32()? as u64 | ((r.u32()? as u64) << 32);
        let set_len = r.u32()? as usize;
        let h0 = &self.index.h0;
        if dim != self.index.dim
            || parts != h0.partitions()
            || part != self.partition
            || seed != h0.seed()
            || set_len != self.set().len()
        {
            return Err(Error::corrupt(
                "hash-bitmap",
                format!(
                    "written for dim {dim}, partition {part}/{parts}, seed {seed}, |I| {set_len}; decoder has dim {}, partition {}/{}, seed {}, |I| {}",
                    self.index.dim,
                    self.partition,
                    h0.partitions(),
                    h0.seed(),
                    self.set().len()
                ),
            ));
        }
        // The packed words, read in place (`Reader::packed_words`' checks).
        let words = set_len.div_ceil(32);
        r.expect_items(words, 4)?;
        let bits = r.bytes(4 * words)?;
        if !set_len.is_multiple_of(32) {
            let last = u32::from_le_bytes(bits[bits.len() - 4..].try_into().expect("4 bytes"));
            if last >> (set_len % 32) != 0 {
                return Err(Error::corrupt("hash-bitmap", "non-zero padding bits"));
            }
        }
        // Every set bit is below `set_len` (the padding is zero).
        let set = self.set();
        for_each_set_bit(bits, |b| indices.push(set[b]));
        self.codec.decode_into(&mut r, indices.len(), values)?;
        r.finish()?;
        Ok(dim)
    }
}
