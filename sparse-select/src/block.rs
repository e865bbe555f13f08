//! Block top-k (SparDL) and bucket top-k (SparCML).

use crate::{Selection, Selector, check_k, selection};
use sparse_core::backend::check_finite_buffer;
use sparse_core::stats::even_start;
use sparse_core::{Backend, Element, Error, Result};

/// Validates, plans the segments for `n` elements, and runs the segmented
/// top-k primitive: the shared body of block and bucket top-k.
fn segmented<B: Backend<E>, E: Element>(
    b: &B,
    x: &B::Buffer<E>,
    k: usize,
    plan: impl FnOnce(usize, usize) -> Result<(Vec<usize>, Vec<usize>)>,
) -> Result<Selection<B, E>> {
    let n = check_k(b, x, k)?;
    check_finite_buffer(b, x)?;
    let (offsets, ks) = plan(n, k)?;
    Ok(selection(b, b.topk_abs_segmented(x, &offsets, &ks)?, None))
}

/// SparDL's block top-k: `x` is split evenly into `blocks` contiguous blocks
/// (the first `n % blocks` one longer, as Spar-Reduce-Scatter splits the
/// gradient) and block `j` contributes its exact top `k_j`, with
/// `k_j = k / blocks` plus one for the first `k % blocks` blocks. A block
/// shorter than its share gives all it has, so fewer than k may be selected
/// when `n` is tiny. Nothing is promised about the whole input: a block of
/// small values still gives its share, so a selected magnitude may be
/// below one left out elsewhere (the selector suite checks the exact top
/// share of each block, ties to the lower index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockTopK {
    /// Number of blocks (SparDL: the number of workers).
    pub blocks: usize,
}

impl BlockTopK {
    /// The segment offsets and per-segment k for `n` elements.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if `blocks == 0`.
    pub fn plan(&self, n: usize, k: usize) -> Result<(Vec<usize>, Vec<usize>)> {
        if self.blocks == 0 {
            return Err(Error::invalid("blocks", "must be at least 1"));
        }
        let p = self.blocks;
        let offsets: Vec<usize> = (0..=p)
            .map(|j| if j == p { n } else { even_start(j, n, p) })
            .collect();
        let ks = (0..p)
            .map(|j| sparse_core::topk::block_share(k, n, p, j))
            .collect();
        Ok((offsets, ks))
    }
}

impl<B: Backend<E>, E: Element> Selector<B, E> for BlockTopK {
    fn name(&self) -> String {
        format!("block_topk(P={})", self.blocks)
    }
    fn select(&mut self, b: &B, x: &B::Buffer<E>, k: usize) -> Result<Selection<B, E>> {
        segmented(b, x, k, |n, k| self.plan(n, k))
    }
}

/// SparCML's bucket top-k: the exact top `per_bucket` of every `bucket`
/// consecutive elements (SparCML: 512); the last bucket gives at most its
/// length. With `per_bucket = None`, it is derived from k as
/// `ceil(k * bucket / n)`, so that at least k are selected overall; as for
/// [`BlockTopK`], the top of each bucket, not of the whole input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketTopK {
    /// Elements per bucket.
    pub bucket: usize,
    /// Elements kept per bucket; `None` derives it from k.
    pub per_bucket: Option<usize>,
}

impl Default for BucketTopK {
    fn default() -> Self {
        Self {
            bucket: 512,
            per_bucket: None,
        }
    }
}

impl BucketTopK {
    /// The segment offsets and per-segment k for `n` elements.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if `bucket == 0`.
    pub fn plan(&self, n: usize, k: usize) -> Result<(Vec<usize>, Vec<usize>)> {
        sparse_core::backend::bucket_plan(n, self.bucket, self.per(n, k))
    }
    /// Elements each bucket gives for `k` of `n`: `per_bucket`, or `k`
    /// spread over the buckets, rounded up. In 128 bits: `k * bucket`
    /// overflows `usize` for a bucket past `usize::MAX / k` (a bucket
    /// longer than the input is one bucket: the top k); the quotient is at
    /// most `bucket` where `k <= n`, and saturates otherwise.
    fn per(&self, n: usize, k: usize) -> usize {
        self.per_bucket.unwrap_or_else(|| {
            if n == 0 {
                0
            } else {
                let per = (k as u128 * self.bucket as u128).div_ceil(n as u128);
                usize::try_from(per).unwrap_or(usize::MAX)
            }
        })
    }
}

impl<B: Backend<E>, E: Element> Selector<B, E> for BucketTopK {
    fn name(&self) -> String {
        format!("bucket_topk({})", self.bucket)
    }
    /// The backend's [`sparse_core::SelectOps::topk_abs_buckets`]: on `backend-cuda`
    /// the buckets' bounds are computed on the device, no offsets laid out
    /// on the host. A bucket of 0 is the primitive's `InvalidParameter`,
    /// after the input's checks, as before.
    fn select(&mut self, b: &B, x: &B::Buffer<E>, k: usize) -> Result<Selection<B, E>> {
        let n = check_k(b, x, k)?;
        check_finite_buffer(b, x)?;
        let per = self.per(n, k);
        Ok(selection(b, b.topk_abs_buckets(x, self.bucket, per)?, None))
    }
}
