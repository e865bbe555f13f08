//! Trimmed top-k (RedSync Alg. 2).

use crate::radix::{rank_sample, refine, top_k};
use crate::{Selection, Selector, check_k, empty, selection, stats, to_threshold};
use sparse_core::{Backend, Element, Error, KeyOrder, Result, Selected};

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
///
/// # Cost
/// The paper counts one rung per pass over the input. Here a sample of the
/// input (the [`narrowing_sample`](sparse_core::topk::narrowing_sample) of the radix select, 64 Ki elements)
/// predicts the rung: the highest whose sample count reaches
/// [`sample_rank`](sparse_core::topk::sample_rank) (the expected count of k plus four standard
/// deviations), unless that rung holds more than a 32nd of the sample. One
/// pass compacts everything above the predicted rung; the
/// rungs above it are counted on that (small) compacted set, and the
/// survivors are narrowed to the paper's rung, the highest that holds k.
/// Where the prediction was too high (fewer than k compacted), the ladder
/// goes on below it, up to eight rungs counted per pass
/// ([`sparse_core::ReduceOps::count_above_each`]). The sample only decides
/// how much work is done: the trim rung, the survivors and the result are
/// the paper's in every case. The input is read twice in the common case:
/// statistics, then the compaction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrimmedTopK {
    epsilon: f64,
}

impl Default for TrimmedTopK {
    /// RedSync's step of 0.2.
    fn default() -> Self {
        Self { epsilon: 0.2 }
    }
}

impl TrimmedTopK {
    /// A ladder lowered by `epsilon` per rung.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] unless `0 < epsilon <= 1` (a step of 0,
    /// or a negative or NaN one, would never reach the mean).
    pub fn new(epsilon: f64) -> Result<Self> {
        if !(epsilon > 0.0 && epsilon <= 1.0) {
            return Err(Error::invalid(
                "epsilon",
                format!("{epsilon} not in (0, 1]"),
            ));
        }
        Ok(Self { epsilon })
    }

    /// The step of the ratio per rung.
    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    /// The rungs from the top: `mean + ratio (max - mean)` for `ratio = 1 -
    /// epsilon, 1 - 2 epsilon, ...` while `ratio >= 0`.
    fn rungs<E: Element>(&self, max: f64, mean: f64) -> Vec<E> {
        let mut ratio = 1.0 - self.epsilon;
        let mut rungs = Vec::new();
        while ratio >= 0.0 {
            rungs.push(to_threshold::<E>(mean + ratio * (max - mean)));
            ratio -= self.epsilon;
        }
        rungs
    }
}

/// The first of `rungs` above which at least `k` elements of `x` lie,
/// counted [`LADDER`] rungs per call (one pass on backends that fuse the
/// counts).
fn first_rung<B: Backend<E>, E: Element>(
    b: &B,
    x: &B::Buffer<E>,
    rungs: &[E],
    k: usize,
) -> Result<Option<usize>> {
    for (g, group) in rungs.chunks(LADDER).enumerate() {
        let counts = b.count_above_each(x, group)?;
        if let Some(i) = counts.iter().position(|&c| c >= k) {
            return Ok(Some(g * LADDER + i));
        }
    }
    Ok(None)
}

/// The rung a sample of `x` predicts holds `k`: the highest whose count in
/// the sample reaches [`sample_rank`](sparse_core::topk::sample_rank). `None` without a sample (small
/// inputs, or `k` too close to `n`), when no rung is predicted to hold k,
/// or when the predicted rung holds more than [`MAX_PREDICTED`] of the
/// sample (a compaction that large costs more than counting the ladder on
/// the input, the route taken then).
fn predicted_rung<B: Backend<E>, E: Element>(
    b: &B,
    x: &B::Buffer<E>,
    rungs: &[E],
    k: usize,
) -> Result<Option<usize>> {
    let Some((sample, r)) = rank_sample(b, x, k)? else {
        return Ok(None);
    };
    let m = b.len(&sample);
    let counts = b.count_above_each(&sample, rungs)?;
    Ok(counts
        .iter()
        .position(|&c| c >= r)
        .filter(|&p| counts[p] as f64 <= MAX_PREDICTED * m as f64))
}

/// The largest share of the sample a predicted rung may hold.
const MAX_PREDICTED: f64 = 1.0 / 32.0;

/// The elements of a selection `c` whose magnitude is above `t`.
fn narrow<B: Backend<E>, E: Element>(b: &B, c: &Selected<B, E>, t: E) -> Result<Selected<B, E>> {
    let pos = b.compact_above(&c.values, t)?;
    Ok(Selected {
        indices: b.gather_indices(&c.indices, &pos.indices)?,
        values: pos.values,
    })
}

/// The survivors of the paper's trim: every element above the highest rung
/// that at least `k` elements are above, or `None` where no rung holds k.
fn survivors<B: Backend<E>, E: Element>(
    b: &B,
    x: &B::Buffer<E>,
    rungs: &[E],
    k: usize,
) -> Result<Option<Selected<B, E>>> {
    let below = match predicted_rung(b, x, rungs, k)? {
        Some(p) => {
            let c = b.compact_above(x, rungs[p])?;
            if b.len(&c.indices) >= k {
                // Every rung above p selects a subset of c: count them there.
                return Ok(Some(match first_rung(b, &c.values, &rungs[..p], k)? {
                    Some(i) => narrow(b, &c, rungs[i])?,
                    None => c,
                }));
            }
            // Rung p (and so every rung above it) holds fewer than k.
            p + 1
        }
        None => 0,
    };
    match first_rung(b, x, &rungs[below..], k)? {
        Some(i) => Ok(Some(b.compact_above(x, rungs[below + i])?)),
        None => Ok(None),
    }
}

impl<B: Backend<E>, E: Element> Selector<B, E> for TrimmedTopK {
    fn name(&self) -> String {
        "trimmed_topk".into()
    }
    fn select(&mut self, b: &B, x: &B::Buffer<E>, k: usize) -> Result<Selection<B, E>> {
        sparse_core::backend::resolve_non_finite_in(
            b,
            x,
            (|| -> Result<Selection<B, E>> {
                check_k(b, x, k)?;
                let (max, mean) = stats(b, x)?;
                if k == 0 {
                    return empty(b);
                }
                let rungs = self.rungs::<E>(max, mean);
                // Exact top-k among the survivors, found and compacted on the
                // (small) survivor set itself; without a trim, on the whole input.
                let (s, _) = match survivors(b, x, &rungs, k)? {
                    Some(c) => refine(b, &c, KeyOrder::Abs, k, false)?,
                    None => top_k(b, x, KeyOrder::Abs, k, false)?,
                };
                Ok(selection(b, s, None))
            })(),
        )
    }
}
