//! Zen's sparsity statistics (Defs. 3, 4, 5 and 8).

use crate::{Element, SparseVec};

/// Overlap ratio of two index sets (Zen Def. 3):
/// `|I1 ∩ I2| / min(|I1|, |I2|)`; 0 if either is empty. Inputs sorted.
pub fn overlap_ratio(a: &[u32], b: &[u32]) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let (mut i, mut j, mut common) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
            }
        }
    }
    common as f64 / a.len().min(b.len()) as f64
}

/// Densification ratio (Zen Def. 4): density of the sum of the tensors over
/// the (average) density of one, `d_G^n / d_G`; 0 when all are empty.
pub fn densification_ratio<E: Element>(tensors: &[SparseVec<E>]) -> f64 {
    let Some(first) = tensors.first() else {
        return 0.0;
    };
    let mut union: Vec<u32> = tensors
        .iter()
        .flat_map(|t| t.indices().iter().copied())
        .collect();
    union.sort_unstable();
    union.dedup();
    let avg = tensors.iter().map(SparseVec::nnz).sum::<usize>() as f64 / tensors.len() as f64;
    if avg == 0.0 || first.dim() == 0 {
        0.0
    } else {
        union.len() as f64 / avg
    }
}

/// Skewness ratio (Zen Def. 5): split `0..dim` evenly into `parts` ranges
/// (the first `dim % parts` one longer); the largest range density over the
/// whole density. 0 for an empty vector.
///
/// # Panics
/// If `parts == 0`.
pub fn skewness_ratio(indices: &[u32], dim: usize, parts: usize) -> f64 {
    assert!(parts > 0, "skewness_ratio: parts == 0");
    if indices.is_empty() || dim == 0 {
        return 0.0;
    }
    let mut counts = vec![0usize; parts];
    for &i in indices {
        counts[even_part(i as usize, dim, parts)] += 1;
    }
    let whole = indices.len() as f64 / dim as f64;
    (0..parts)
        .map(|p| {
            let len = even_len(p, dim, parts);
            if len == 0 {
                0.0
            } else {
                counts[p] as f64 / len as f64
            }
        })
        .fold(0.0, f64::max)
        / whole
}

/// Length of range `p` when `0..dim` is split evenly into `parts` ranges.
pub fn even_len(p: usize, dim: usize, parts: usize) -> usize {
    dim / parts + usize::from(p < dim % parts)
}

/// Start of range `p` of the even split.
pub fn even_start(p: usize, dim: usize, parts: usize) -> usize {
    p * (dim / parts) + p.min(dim % parts)
}

/// The range of the even split that holds `i`.
pub fn even_part(i: usize, dim: usize, parts: usize) -> usize {
    let (q, r) = (dim / parts, dim % parts);
    let big = r * (q + 1);
    if i < big {
        i / (q + 1)
    } else {
        r + (i - big) / q.max(1)
    }
}

/// Push imbalance ratio (Zen Def. 8) of one rank's partition sizes:
/// `max_j n |I^j| / |I|`; 1 is perfect balance, 0 for no data.
pub fn imbalance_ratio(partition_sizes: &[usize]) -> f64 {
    let total: usize = partition_sizes.iter().sum();
    if total == 0 {
        return 0.0;
    }
    let max = partition_sizes.iter().copied().max().unwrap_or(0);
    partition_sizes.len() as f64 * max as f64 / total as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_hand() {
        assert_eq!(overlap_ratio(&[1, 2, 3, 4], &[3, 4, 5]), 2.0 / 3.0);
        assert_eq!(overlap_ratio(&[], &[1]), 0.0);
        let a = SparseVec::new(10, vec![0, 1], vec![1.0f32; 2]).unwrap();
        let b = SparseVec::new(10, vec![1, 2], vec![1.0f32; 2]).unwrap();
        assert_eq!(densification_ratio(&[a, b]), 1.5);
        // dim 10 in 2 parts: [0,5) holds 3 of 4 -> 0.6 / 0.4 = 1.5.
        approx::assert_abs_diff_eq!(skewness_ratio(&[0, 1, 2, 7], 10, 2), 1.5, epsilon = 1e-12);
        assert_eq!(imbalance_ratio(&[2, 2, 4]), 1.5);
        for dim in [1, 7, 10, 17] {
            for parts in 1..=dim {
                let mut seen = 0;
                for p in 0..parts {
                    assert_eq!(even_start(p, dim, parts), seen);
                    for i in seen..seen + even_len(p, dim, parts) {
                        assert_eq!(even_part(i, dim, parts), p);
                    }
                    seen += even_len(p, dim, parts);
                }
                assert_eq!(seen, dim);
            }
        }
    }
}
