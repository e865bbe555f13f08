//! The one host top-k of the workspace: exact, by magnitude or any
//! order-preserving key, ties to the lower position. `backend-cpu`'s
//! selection primitives, [`crate::SparseVec::split_topk`] and every lossy
//! collective of `sparse-coll` use it, so they all select the same entries.

use crate::stats::even_len;
use crate::{Element, Error, Result, SparseVec, abs_key};

/// Positions of the `k` largest `key(values[i])` (all when `k >= len`),
/// ties to the lower position, in increasing order. `O(len)` expected: the
/// `k`-th largest key by introselect on the plain keys ([`kth_largest`]),
/// then one pass in position order that keeps every key above it and the
/// first keys equal to it until `k` are kept (the same set as sorting on
/// `(key desc, position asc)`, with no sort of the winners).
pub fn topk_positions<E: Element>(values: &[E], k: usize, key: impl Fn(E) -> u64) -> Vec<u32> {
    let n = values.len();
    if k >= n {
        return (0..n as u32).collect();
    }
    if k == 0 {
        return Vec::new();
    }
    let mut keys: Vec<u64> = values.iter().map(|&v| key(v)).collect();
    let kth = kth_largest(&mut keys, k).unwrap_or(u64::MAX);
    let above = keys.iter().filter(|&&x| x > kth).count();
    let mut ties = k - above;
    let mut out = Vec::with_capacity(k);
    for (i, &v) in values.iter().enumerate() {
        let x = key(v);
        if x > kth {
            out.push(i as u32);
        } else if x == kth && ties > 0 {
            ties -= 1;
            out.push(i as u32);
        }
    }
    out
}

/// The `k`-th largest of `keys` (`None` when there are fewer than `k`;
/// above every key, `u64::MAX`, when `k == 0`). Reorders `keys`.
pub fn kth_largest(keys: &mut [u64], k: usize) -> Option<u64> {
    if k == 0 {
        return Some(u64::MAX);
    }
    if keys.len() < k {
        return None;
    }
    let (_, kth, _) = keys.select_nth_unstable_by(k - 1, |a, b| b.cmp(a));
    Some(*kth)
}

/// Contiguous blocks of [`SAMPLE_BLOCK`] positions spread evenly over
/// `0..n`, [`SAMPLE_BLOCKS`] of them, from which an exact top-k estimates a
/// lower bound for its candidates (`None` when `n` is too small for a
/// sample to pay off). Contiguous blocks read whole cache lines; spreading
/// them stratifies the sample over the layers of a fused gradient. The
/// sample only decides how much work the exact selection does, never its
/// result.
pub fn narrowing_sample(n: usize) -> Option<Vec<core::ops::Range<usize>>> {
    let m = SAMPLE_BLOCKS * SAMPLE_BLOCK;
    if n < 16 * m {
        return None;
    }
    let gap = (n - SAMPLE_BLOCK) / (SAMPLE_BLOCKS - 1);
    Some(
        (0..SAMPLE_BLOCKS)
            .map(|j| j * gap..j * gap + SAMPLE_BLOCK)
            .collect(),
    )
}

/// Blocks in [`narrowing_sample`].
pub const SAMPLE_BLOCKS: usize = 64;
/// Positions per block of [`narrowing_sample`].
pub const SAMPLE_BLOCK: usize = 1024;

/// The rank within a sample of `m` (of `n`) whose key bounds the
/// candidates of an exact top-`k` from below: the expected rank of the
/// k-th largest, `k m / n`, plus four standard deviations and 16, so that
/// the bound undershoots (fewer than k candidates, and a second route)
/// rarely. `None` when that rank is not inside the sample.
pub fn sample_rank(k: usize, n: usize, m: usize) -> Option<usize> {
    let ks = k as f64 * m as f64 / n.max(1) as f64;
    let r = (ks + 4.0 * ks.sqrt() + 16.0).ceil() as usize;
    (r < m).then_some(r.max(1))
}

/// The share of a budget `k` of block `j` when `n` coordinates are cut into
/// `m` even blocks: `k / m`, one more for the first `k % m` blocks, at most
/// the block's length. SparDL's block shares and `sparse-select`'s block
/// top-k both use it.
pub fn block_share(k: usize, n: usize, m: usize, j: usize) -> usize {
    (k / m + usize::from(j < k % m)).min(even_len(j, n, m))
}

/// The number of elements a density selects from `n`: `round(density n)`,
/// at least 1 when `n > 0` (and at most `n`). `sparse-select`'s selectors
/// and the lossy collectives of `sparse-coll` (a budget given as a
/// density) both resolve a density with it.
///
/// # Errors
/// [`Error::InvalidParameter`] unless `0 < density <= 1`.
pub fn k_for_density(n: usize, density: f64) -> Result<usize> {
    if !(density > 0.0 && density <= 1.0) {
        return Err(Error::invalid(
            "density",
            format!("{density} not in (0, 1]"),
        ));
    }
    Ok(((density * n as f64).round() as usize).clamp(n.min(1), n))
}

impl<E: Element> SparseVec<E> {
    /// The `k` entries of largest magnitude (ties: the lower index) and the
    /// rest, both in index order: [`topk_positions`] over the values.
    pub fn split_topk(&self, k: usize) -> (Self, Self) {
        if self.nnz() <= k {
            return (
                self.clone(),
                Self::new_unchecked(self.dim(), Vec::new(), Vec::new()),
            );
        }
        let keep = topk_positions(self.values(), k, abs_key);
        let mut flags = vec![false; self.nnz()];
        for &j in &keep {
            flags[j as usize] = true;
        }
        let (mut a, mut b) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
        for ((i, x), keep) in self.iter().zip(flags) {
            let side = if keep { &mut a } else { &mut b };
            side.0.push(i);
            side.1.push(x);
        }
        (
            Self::new_unchecked(self.dim(), a.0, a.1),
            Self::new_unchecked(self.dim(), b.0, b.1),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng as _, SeedableRng as _};
    use rand_chacha::ChaCha8Rng as Rng;

    /// Against a full sort on `(key desc, position asc)`.
    #[test]
    fn equals_a_sort_with_the_tie_rule() {
        let mut rng = Rng::seed_from_u64(3);
        for n in [0usize, 1, 2, 7, 100, 1000] {
            let x: Vec<f32> = (0..n)
                .map(|_| (rng.random_range(0..9) as f32 - 4.0) * 0.5)
                .collect();
            for k in [0, 1, n / 3, n.saturating_sub(1), n, n + 2] {
                let mut all: Vec<u32> = (0..n as u32).collect();
                all.sort_by(|&a, &b| {
                    abs_key(x[b as usize])
                        .cmp(&abs_key(x[a as usize]))
                        .then(a.cmp(&b))
                });
                let mut want = all[..k.min(n)].to_vec();
                want.sort_unstable();
                assert_eq!(topk_positions(&x, k, abs_key), want, "n={n} k={k}");
                let v = SparseVec::from_dense(&x).unwrap();
                let (kept, rest) = v.split_topk(k);
                assert_eq!(kept.nnz() + rest.nnz(), v.nnz());
                assert_eq!(kept.nnz(), k.min(v.nnz()));
            }
        }
        let mut keys = vec![5, 1, 9, 9, 3];
        assert_eq!(kth_largest(&mut keys, 2), Some(9));
        assert_eq!(kth_largest(&mut keys, 4), Some(3));
        assert_eq!(kth_largest(&mut keys, 6), None);
        assert_eq!(kth_largest(&mut keys, 0), Some(u64::MAX));
        assert_eq!(block_share(10, 7, 3, 0), 3);
        assert_eq!(block_share(10, 100, 3, 0), 4);
    }
}
