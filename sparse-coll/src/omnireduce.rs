//! The OmniReduce-style block baseline Zen improves on.

use crate::Transport;
use crate::push_pull::{Scheme, push_pull};
use crate::sparse::{Id, Reduced, enter};
use sparse_core::encoding::{Block, Encoding, Raw};
use sparse_core::{Element, Result, SparseVec};

struct Omni {
    dim: usize,
    p: usize,
    block: Block<Raw>,
}

impl<E: Element> Scheme<E> for Omni {
    fn owner(&self, idx: u32) -> usize {
        sparse_core::stats::even_part(idx as usize, self.dim, self.p)
    }
    fn push(&self) -> Box<dyn Encoding<E> + '_> {
        Box::new(self.block)
    }
    fn pull(&self, _server: usize) -> Result<Box<dyn Encoding<E> + '_>> {
        Ok(Box::new(self.block))
    }
}

/// The OmniReduce-style baseline Zen improves on: point-to-point, one-shot,
/// with the dimension split evenly across the servers (imbalanced when the
/// non-zeros are skewed, Zen Table 3), pieces sent as OmniReduce's blocks
/// (ids of the non-zero blocks of `block_size` plus their whole values).
/// Lossless as a dense vector (explicit zeros inside a block are not
/// kept).
///
/// Memory per rank: the blocks touched by any rank, at most `(4 + E) n` bytes
/// (`E` the element's bytes), plus the input.
///
/// # Errors
/// [`sparse_core::Error::Disagreement`],
/// [`sparse_core::Error::InvalidParameter`] for a zero block size, transport
/// errors, [`sparse_core::Error::Corrupt`].
pub fn omnireduce_blocks<T: Transport + ?Sized, E: Element>(
    t: &mut T,
    v: &SparseVec<E>,
    block_size: usize,
) -> Result<Reduced<E>> {
    let block = Block::new(block_size, Raw);
    enter(
        t,
        Id::OmniReduceBlocks,
        v,
        &[("block size", block_size as u64)],
        block.as_ref().map(drop).map_err(Clone::clone),
    )?;
    let scheme = Omni {
        dim: v.dim(),
        p: t.size(),
        block: block?,
    };
    push_pull(t, v, &scheme)
}
