//! The OmniReduce-style block baseline Zen improves on.

use crate::algorithm::{Catalog, Defaults, Params, Promises, Registered, SparseAllreduce};
use crate::algorithms::push_pull::{Keeps, PushPull, Scheme, push_pull_into, split_by_owner};
use crate::entry::{Admission, Reduced, admit};
use crate::profile::{Profile, bytes_cost};
use crate::scratch::Scratch;
use crate::{Entered, Transport};
use sparse_core::cost::Cost;
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
    /// Blocks (raw values) do not keep explicit zeros.
    fn pull_keeps(&self) -> Keeps {
        Keeps::NonZero
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
/// Registry name `omnireduce_blocks`, parameter `block`.
///
/// # Errors
/// [`sparse_core::Error::Disagreement`],
/// [`sparse_core::Error::InvalidParameter`] for a zero block size, transport
/// errors, [`sparse_core::Error::Corrupt`].
#[derive(Debug, Clone)]
pub struct OmniReduceBlocks {
    block: usize,
    /// The call's memory ([`PushPull`] for the call's element), kept
    /// across calls.
    scratch: Scratch,
}

impl OmniReduceBlocks {
    /// Blocks of `block` coordinates.
    ///
    /// # Errors
    /// [`sparse_core::Error::InvalidParameter`] for a zero block.
    pub fn new(block: usize) -> Result<Self> {
        Block::new(block, Raw)?;
        Ok(Self {
            block,
            scratch: Scratch::default(),
        })
    }
}

/// The registry name, from which the entry id derives.
const NAME: &str = "omnireduce_blocks";

impl<E: Element> SparseAllreduce<E> for OmniReduceBlocks {
    fn name(&self) -> String {
        NAME.into()
    }
    fn params(&self) -> String {
        format!("block={}", self.block)
    }
    fn lossless(&self) -> bool {
        true
    }
    /// The blocks a uniform input of this density touches (each its id and
    /// every value, each message its header), pushed to their owners and
    /// pulled back, in `2 (P - 1)` rounds. Each owner's piece (`n / P`
    /// coordinates) travels as the whole blocks it overlaps, so where a
    /// piece is shorter than a block (small `n`, many ranks) a message
    /// still carries a whole block.
    fn cost(&self, prof: &Profile) -> Cost {
        let n = prof.n.max(1);
        let piece = n.div_ceil(prof.p.max(1)).max(1);
        let per_piece = piece.div_ceil(self.block) as f64;
        let span = self.block.min(piece) as f64;
        let touched = |entries: f64| per_piece * (1.0 - (1.0 - span / n as f64).powf(entries));
        let block = 4.0 + prof.value_bytes as f64 * self.block.min(n) as f64;
        let push = 16.0 + block * touched(prof.k_avg() as f64);
        let pull = 16.0 + block * touched(prof.union as f64);
        bytes_cost(2.0 * prof.others(), prof.others() * (push + pull))
    }
    fn admit(&mut self, _: &dyn Transport, v: &SparseVec<E>) -> Option<Admission> {
        Some(admit(NAME, v, &[("block size", self.block as u64)], Ok(())))
    }
    fn agreed_body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        _: Entered,
        out: &mut Reduced<E>,
    ) -> Result<Result<()>> {
        let scheme = Omni {
            dim: v.dim(),
            p: t.size(),
            block: Block::new(self.block, Raw)?,
        };
        let bufs = self.scratch.get::<PushPull<E>>();
        split_by_owner(v, &scheme, t.size(), bufs);
        push_pull_into(t, v.dim(), &scheme, bufs, out).map(Ok)
    }
}

impl<E: Element> Promises<E> for OmniReduceBlocks {
    /// Push to every other rank, then pull from every other rank.
    fn expected_rounds(&self, p: usize, _r: usize) -> Option<u64> {
        Some(2 * (p as u64 - 1))
    }
}

impl<E: Element> Registered<E> for OmniReduceBlocks {
    const NAME: &'static str = NAME;
    const LOSSLESS: bool = true;
    const WARM: bool = true;
    const PARAMS: &'static str = "block (coordinates, default 256)";
    const HELP: &'static str = "OmniReduce: push and pull the non-zero blocks; lossless";
    fn build(params: &mut Params, _: Defaults, _: &dyn Catalog<E>) -> Result<Self> {
        Self::new(params.take("block")?.unwrap_or(256))
    }
}
