//! The one host top-k of the workspace: exact, by magnitude or any
//! order-preserving key, ties to the lower position. `backend-cpu`'s
//! selection primitives, [`crate::SparseVec::split_topk`] and every lossy
//! collective of `sparse-coll` use it, so they all select the same entries.

use crate::stats::even_len;
use crate::{Element, SparseVec, abs_key};

/// Positions of the `k` largest `key(values[i])` (all when `k >= len`),
/// ties to the lower position, in increasing order. `O(len)`: the `k`-th
/// largest key by radix select ([`kth_key`]), then one pass in position
/// order that keeps every key above it and the first keys equal to it
/// until `k` are kept (the same set as sorting on `(key desc, position
/// asc)`, with no sort of the winners).
pub fn topk_positions<E: Element>(
    values: &[E],
    k: usize,
    key: impl Fn(E) -> u64 + Copy,
) -> Vec<u32> {
    let n = values.len();
    if k >= n {
        return (0..n as u32).collect();
    }
    if k == 0 {
        return Vec::new();
    }
    let (kth, mut ties) = kth_key(values, k, key, &mut Vec::new());
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

/// Bits of [`kth_key`]'s first digit: 2^11 counters stay in L1.
pub const KTH_DIGIT_BITS: u32 = 11;

/// The `k`-th largest of `key(values[i])` (`1 <= k <= len`) and how many
/// of its copies belong to the top `k` (`k` minus the keys above it): a
/// radix select on the host. One pass counts the keys by their top
/// [`KTH_DIGIT_BITS`] bits (of the element's width), one copies
/// the keys of the digit that holds the `k`-th largest into `scratch`
/// (about `len / 2^11` of them for spread values), and an introselect
/// there ends it. `scratch` is left holding the keys of that digit (every
/// copy of the `k`-th key among them; its allocation kept).
///
/// # Panics
/// If `k == 0` or `k > values.len()`.
pub fn kth_key<E: Element>(
    values: &[E],
    k: usize,
    key: impl Fn(E) -> u64 + Copy,
    scratch: &mut Vec<u64>,
) -> (u64, usize) {
    assert!(
        k >= 1 && k <= values.len(),
        "kth_key: k = {k} of {}",
        values.len()
    );
    // Keys of this element fit its width: the first digit is its top
    // bits (for magnitudes the sign bit is clear, and the digit is one
    // bit narrower in effect: for floats the exponent and the leading
    // mantissa bits, whatever the values' scale).
    let mut shift = (E::BYTES as u32 * 8).saturating_sub(KTH_DIGIT_BITS);
    let mut hist = [0u32; 1 << KTH_DIGIT_BITS];
    let top = hist.len() - 1;
    let mut wide = 0u64;
    {
        // Four histograms, one per lane: values close together fall in the
        // same digit, and one counter incremented back to back waits on
        // its own last store.
        let mut lanes = [[0u32; 1 << KTH_DIGIT_BITS]; 4];
        let chunks = values.chunks_exact(4);
        let tail = chunks.remainder();
        for c in chunks {
            for (lane, &v) in lanes.iter_mut().zip(c) {
                let d = key(v) >> shift;
                wide |= d;
                lane[(d as usize).min(top)] += 1;
            }
        }
        for &v in tail {
            let d = key(v) >> shift;
            wide |= d;
            lanes[0][(d as usize).min(top)] += 1;
        }
        for (j, h) in hist.iter_mut().enumerate() {
            *h = lanes[0][j] + lanes[1][j] + lanes[2][j] + lanes[3][j];
        }
    }
    if wide as usize > top {
        // A key wider than the element (a caller's own key): the first
        // digit is the top bits of the largest key instead.
        let max = values.iter().map(|&v| key(v)).max().unwrap_or(0);
        shift = (u64::BITS - max.leading_zeros()).saturating_sub(KTH_DIGIT_BITS);
        hist.fill(0);
        for &v in values {
            hist[(key(v) >> shift) as usize] += 1;
        }
    }
    // The digit holding the k-th largest, and the keys above it.
    let (mut d, mut above) = (hist.len() - 1, 0usize);
    while above + (hist[d] as usize) < k {
        above += hist[d] as usize;
        d -= 1;
    }
    let need = k - above;
    scratch.clear();
    if shift == 0 {
        // The digit is the key: its copies, for the caller's count of ties.
        scratch.extend(values.iter().map(|&v| key(v)).filter(|&x| x == d as u64));
        return (d as u64, need);
    }
    scratch.extend(
        values
            .iter()
            .map(|&v| key(v))
            .filter(|&x| (x >> shift) as usize == d),
    );
    let kth = kth_largest(scratch, need).expect("the digit holds `need` keys");
    let higher = scratch.iter().filter(|&&x| x > kth).count();
    (kth, need - higher)
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

/// The pairs `(indices, values)` split into the `k` of largest
/// `key(value)` (ties: the lower position) and the rest, both in their
/// order, into `kept` and `cut` (contents replaced, allocations reused):
/// [`kth_key`], then one branch-free pass. With `k >= len` everything is
/// kept.
///
/// # Panics
/// If `indices` and `values` differ in length.
pub fn split_topk_into<E: Element>(
    (indices, values): (&[u32], &[E]),
    k: usize,
    key: impl Fn(E) -> u64 + Copy,
    kept: (&mut Vec<u32>, &mut Vec<E>),
    cut: (&mut Vec<u32>, &mut Vec<E>),
    scratch: &mut Vec<u64>,
) {
    assert_eq!(
        indices.len(),
        values.len(),
        "split_topk_into: lengths differ"
    );
    let n = values.len();
    let (ki, kv) = kept;
    let (ci, cv) = cut;
    if k >= n || k == 0 {
        let (all, none) = if k == 0 {
            ((ci, cv), (ki, kv))
        } else {
            ((ki, kv), (ci, cv))
        };
        all.0.clear();
        all.0.extend_from_slice(indices);
        all.1.clear();
        all.1.extend_from_slice(values);
        none.0.clear();
        none.1.clear();
        return;
    }
    let (kth, ties) = kth_key(values, k, key, scratch);
    // Every key equal to the k-th lies in `scratch` (its digit).
    let all_ties = ties == scratch.iter().filter(|&&x| x == kth).count();
    // One spare slot on each side: every entry is written to both and the
    // cursor of its side advances.
    for (v, len) in [(&mut *ki, k + 1), (&mut *ci, n - k + 1)] {
        v.clear();
        v.resize(len, 0);
    }
    for (v, len) in [(&mut *kv, k + 1), (&mut *cv, n - k + 1)] {
        v.clear();
        v.resize(len, E::zero());
    }
    let (mut a, mut b) = (0usize, 0usize);
    let mut put = |i: u32, v: E, take: bool| {
        ki[a] = i;
        kv[a] = v;
        ci[b] = i;
        cv[b] = v;
        a += usize::from(take);
        b += usize::from(!take);
    };
    if all_ties {
        // Every copy of the k-th key is taken: no count to carry.
        for (&i, &v) in indices.iter().zip(values) {
            put(i, v, key(v) >= kth);
        }
    } else {
        let mut ties = ties;
        for (&i, &v) in indices.iter().zip(values) {
            let x = key(v);
            let tie = x == kth && ties > 0;
            ties -= usize::from(tie);
            put(i, v, x > kth || tie);
        }
    }
    debug_assert_eq!((a, b), (k, n - k));
    ki.truncate(k);
    kv.truncate(k);
    ci.truncate(n - k);
    cv.truncate(n - k);
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

pub use crate::budget::k_for_density;

impl<E: Element> SparseVec<E> {
    /// The `k` entries of largest magnitude (ties: the lower index) and the
    /// rest, both in index order: [`split_topk_into`] over the values.
    pub fn split_topk(&self, k: usize) -> (Self, Self) {
        let empty = || Self::new_unchecked(self.dim(), Vec::new(), Vec::new());
        let (mut kept, mut cut) = (empty(), empty());
        self.split_topk_into(k, &mut kept, &mut cut, &mut Vec::new());
        (kept, cut)
    }

    /// [`SparseVec::split_topk`] into `kept` and `cut` (contents replaced,
    /// dimension set to this one's, allocations reused), with `scratch`
    /// for the selection ([`kth_key`]).
    pub fn split_topk_into(
        &self,
        k: usize,
        kept: &mut Self,
        cut: &mut Self,
        scratch: &mut Vec<u64>,
    ) {
        let empty = || Self::new_unchecked(0, Vec::new(), Vec::new());
        let (_, mut ki, mut kv) = std::mem::replace(kept, empty()).into_parts();
        let (_, mut ci, mut cv) = std::mem::replace(cut, empty()).into_parts();
        split_topk_into(
            (self.indices(), self.values()),
            k,
            abs_key,
            (&mut ki, &mut kv),
            (&mut ci, &mut cv),
            scratch,
        );
        *kept = Self::new_unchecked(self.dim(), ki, kv);
        *cut = Self::new_unchecked(self.dim(), ci, cv);
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
        // A key wider than the element.
        let x = [1.0f32, -3.0, 2.0, 0.5];
        let wide = |v: f32| (v.abs() as u64) << 40;
        assert_eq!(topk_positions(&x, 2, wide), vec![1, 2]);
        let mut keys = vec![5, 1, 9, 9, 3];
        assert_eq!(kth_largest(&mut keys, 2), Some(9));
        assert_eq!(kth_largest(&mut keys, 4), Some(3));
        assert_eq!(kth_largest(&mut keys, 6), None);
        assert_eq!(kth_largest(&mut keys, 0), Some(u64::MAX));
        assert_eq!(block_share(10, 7, 3, 0), 3);
        assert_eq!(block_share(10, 100, 3, 0), 4);
    }

    /// The radix select against a full sort, on spreads that put the k-th
    /// key in a crowded digit (many equal exponents), in an empty-topped
    /// histogram (one huge value), among subnormals and signed zeros, with
    /// magnitude and signed keys; `split_topk_into` keeps the same set as
    /// `topk_positions` and cuts the rest, in order.
    #[test]
    fn radix_select_equals_a_sort_on_hard_spreads() {
        let mut rng = Rng::seed_from_u64(11);
        let (mut ki, mut kv, mut ci, mut cv, mut scratch) =
            (vec![7u32], vec![1.0f32], Vec::new(), Vec::new(), Vec::new());
        for case in 0..60 {
            let n = [1usize, 2, 5, 100, 3000, 20_000][case % 6];
            let x: Vec<f32> = (0..n)
                .map(|i| match case % 5 {
                    0 => rng.random_range(-1.0f32..1.0),
                    1 => 1.0 + rng.random_range(0..4) as f32 * f32::EPSILON,
                    2 if i == 0 => 3.0e38,
                    2 => rng.random_range(-1.0f32..1.0) * 1e-3,
                    3 => {
                        f32::from_bits(rng.random_range(0..64u32))
                            * if i % 2 == 0 { -1.0 } else { 1.0 }
                    }
                    _ => [0.0, -0.0, 1.5, -1.5][rng.random_range(0..4usize)],
                })
                .collect();
            for key in [abs_key::<f32> as fn(f32) -> u64, crate::signed_key::<f32>] {
                for k in [1, n / 3, n / 2, n.saturating_sub(1), n] {
                    let mut all: Vec<u32> = (0..n as u32).collect();
                    all.sort_by(|&a, &b| {
                        key(x[b as usize]).cmp(&key(x[a as usize])).then(a.cmp(&b))
                    });
                    let mut want = all[..k.min(n)].to_vec();
                    want.sort_unstable();
                    assert_eq!(topk_positions(&x, k, key), want, "case {case} n={n} k={k}");
                    let idx: Vec<u32> = (0..n as u32).map(|i| 3 * i + 1).collect();
                    split_topk_into(
                        (&idx, &x),
                        k,
                        key,
                        (&mut ki, &mut kv),
                        (&mut ci, &mut cv),
                        &mut scratch,
                    );
                    let kept: Vec<u32> = want.iter().map(|&j| idx[j as usize]).collect();
                    assert_eq!(ki, kept);
                    assert_eq!(
                        kv.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        want.iter()
                            .map(|&j| x[j as usize].to_bits())
                            .collect::<Vec<_>>()
                    );
                    let rest: Vec<u32> = (0..n as u32)
                        .filter(|j| want.binary_search(j).is_err())
                        .collect();
                    assert_eq!(
                        ci,
                        rest.iter().map(|&j| idx[j as usize]).collect::<Vec<_>>()
                    );
                    assert_eq!(cv.len(), rest.len());
                }
            }
        }
    }
}
