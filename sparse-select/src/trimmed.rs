//! Trimmed top-k (RedSync Alg. 2).

use crate::radix::{refine, top_k};
use crate::{Selection, Selector, check_k, empty, selection, stats, to_threshold};
use sparse_core::{Backend, Element, KeyOrder, Result};

/// Thresholds of the ladder counted per call.
const LADDER: usize = 8;

/// RedSync's trimmed top-k: a threshold `mean + ratio (max - mean)` of
/// `|x|`, starting at `ratio = 1 - epsilon` and lowered by `epsilon` until at
/// least k elements pass; then the exact top-k among the survivors, which is
/// the exact top-k of `x` (every trimmed element is below every survivor).
///
/// The paper's listing loops `while nnz > k`; the text (and the result) need
/// `while nnz < k`, which is what this does. Once the ratio would pass
/// below 0 (threshold under the mean) the trim is abandoned and the whole
/// array is the survivor set, so the loop runs at most `1/epsilon + 1` counts.
/// The counts of up to eight rungs are asked for in one
/// [`sparse_core::ReduceOps::count_above_each`] call (one pass on
/// `backend-cpu`), and the survivors' top k is compacted from the survivors
/// themselves, so the input is read three times: statistics, counts,
/// survivors.
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
        // The ladder of thresholds, counted LADDER at a time in one call
        // (one pass on backends that fuse the counts).
        let mut ratio = 1.0 - self.epsilon;
        let mut trim: Option<E> = None;
        while trim.is_none() && ratio >= 0.0 {
            let mut ts = Vec::with_capacity(LADDER);
            while ts.len() < LADDER && ratio >= 0.0 {
                ts.push(to_threshold::<E>(mean + ratio * (max - mean)));
                ratio -= self.epsilon;
            }
            let counts = b.count_above_each(x, &ts)?;
            trim = ts
                .iter()
                .zip(counts)
                .find(|&(_, c)| c >= k)
                .map(|(&t, _)| t);
        }
        // Exact top-k among the survivors, found and compacted on the
        // (small) survivor set itself; without a trim, on the whole input.
        let (s, _) = match trim {
            Some(t) => refine(b, &b.compact_above(x, t)?, KeyOrder::Abs, k, false)?,
            None => top_k(b, x, KeyOrder::Abs, k, false)?,
        };
        Ok(selection(b, s, None))
    }
}
