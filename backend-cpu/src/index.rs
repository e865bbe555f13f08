//! [`IndexOps`]: gathers of indices and the bitmap codec.

use crate::{Cpu, check_indices};
use sparse_core::backend::check_len;
use sparse_core::encoding::{bits_from_indices, indices_from_bits};
use sparse_core::{Error, IndexOps, Result};

impl IndexOps for Cpu {
    fn gather_indices(&self, src: &Vec<u32>, positions: &Vec<u32>) -> Result<Vec<u32>> {
        check_indices(positions, src.len())?;
        Ok(positions.iter().map(|&i| src[i as usize]).collect())
    }
    fn bitmap_encode(&self, indices: &Vec<u32>, lo: u32, len: usize) -> Result<Vec<u32>> {
        if let Some(position) = indices
            .iter()
            .position(|&i| i < lo || (i - lo) as usize >= len)
        {
            return Err(Error::IndexOutOfRange {
                index: indices[position] as u64,
                position,
                dim: lo as u64 + len as u64,
            });
        }
        Ok(bits_from_indices(indices, lo, len))
    }
    fn bitmap_decode(&self, words: &Vec<u32>, lo: u32, len: usize) -> Result<Vec<u32>> {
        check_len("bitmap words", len.div_ceil(32), words.len())?;
        Ok(indices_from_bits(words, lo, len))
    }
}
