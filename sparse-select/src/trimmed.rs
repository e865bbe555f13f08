//! Trimmed top-k (RedSync Alg. 2).

use crate::{Selection, Selector, check_k, empty, kth_key, selection, stats, to_threshold};
use sparse_core::{Backend, Element, KeyOrder, Result};

/// RedSync's trimmed top-k: a threshold `mean + ratio (max - mean)` of
/// `|x|`, starting at `ratio = 1 - epsilon` and lowered by `epsilon` until at
/// least k elements pass; then the exact top-k among the survivors, which is
/// the exact top-k of `x` (every trimmed element is below every survivor).
///
/// The paper's listing loops `while nnz > k`; the text (and the result) need
/// `while nnz < k`, which is what this does. Once the ratio would pass
/// below 0 (threshold under the mean) the trim is abandoned and the whole
/// array is the survivor set, so the loop runs at most `1/epsilon + 1` counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrimmedTopK {
    /// Step of the ratio (RedSync: 0.2).
    pub epsilon: f64,
}

impl Default for TrimmedTopK {
    fn default() -> Self {
        Self { epsilon: 0.2 }
    }
}

impl<B: Backend, E: Element> Selector<B, E> for TrimmedTopK {
    fn name(&self) -> String {
        "trimmed_topk".into()
    }
    fn select(&mut self, b: &B, x: &B::Buffer<E>, k: usize) -> Result<Selection<B, E>> {
        check_k(b, x, k)?;
        let (max, mean) = stats(b, x)?;
        if k == 0 {
            return empty(b);
        }
        let mut ratio = 1.0 - self.epsilon;
        let mut trim: Option<E> = None;
        while ratio >= 0.0 {
            let t = to_threshold::<E>(mean + ratio * (max - mean));
            if b.count_above(x, t)? >= k {
                trim = Some(t);
                break;
            }
            ratio -= self.epsilon;
        }
        // Exact top-k among the survivors: the k-th largest key is found on
        // the (small) survivor set, then one compaction over x takes the top
        // k with the tie rule.
        let (key, take) = match trim {
            Some(t) => {
                let survivors = b.compact_above(x, t)?;
                kth_key(b, &survivors.values, KeyOrder::Abs, k)?
            }
            None => kth_key(b, x, KeyOrder::Abs, k)?,
        };
        Ok(selection(
            b,
            b.compact_key(x, KeyOrder::Abs, key, take)?,
            None,
        ))
    }
}
