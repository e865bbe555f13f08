//! `SparseVec`: a sparse vector with sorted, unique `u32` indices.

use crate::{Element, Error, Result};

/// The largest dimension a [`SparseVec`] may have: every index fits a `u32`.
pub const MAX_DIM: usize = u32::MAX as usize;

/// A sparse vector of dimension `dim` holding `values[i]` at `indices[i]`.
///
/// Invariants, checked by every public constructor: `dim <= u32::MAX`,
/// indices strictly increasing and below `dim`, one value per index. Explicit
/// zeros are allowed (a selected coordinate whose value happens to be zero).
#[derive(Debug, Clone, PartialEq)]
pub struct SparseVec<E> {
    dim: usize,
    indices: Vec<u32>,
    values: Vec<E>,
}

/// Checks that `dim` fits the `u32` index space.
pub fn check_dim(dim: usize) -> Result<()> {
    if dim > MAX_DIM {
        return Err(Error::DimensionTooLarge {
            dim: dim as u64,
            max: MAX_DIM as u64,
        });
    }
    Ok(())
}

/// Checks that `indices` are strictly increasing and below `dim`.
pub fn check_indices(dim: usize, indices: &[u32]) -> Result<()> {
    for (position, w) in indices.windows(2).enumerate() {
        if w[1] <= w[0] {
            return Err(Error::NotStrictlyIncreasing {
                position: position + 1,
                prev: w[0],
                next: w[1],
            });
        }
    }
    if let Some(&last) = indices.last()
        && last as usize >= dim
    {
        return Err(Error::IndexOutOfRange {
            index: last as u64,
            position: indices.len() - 1,
            dim: dim as u64,
        });
    }
    Ok(())
}

impl<E: Element> SparseVec<E> {
    /// Builds a sparse vector, validating every invariant.
    ///
    /// # Errors
    /// [`Error::DimensionTooLarge`], [`Error::LengthMismatch`],
    /// [`Error::NotStrictlyIncreasing`] (unsorted or duplicate indices),
    /// [`Error::IndexOutOfRange`].
    pub fn new(dim: usize, indices: Vec<u32>, values: Vec<E>) -> Result<Self> {
        check_dim(dim)?;
        if indices.len() != values.len() {
            return Err(Error::LengthMismatch {
                what: "indices vs values",
                expected: indices.len(),
                got: values.len(),
            });
        }
        check_indices(dim, &indices)?;
        Ok(Self {
            dim,
            indices,
            values,
        })
    }

    /// Builds a sparse vector from parts the caller promises valid (the
    /// output of a merge or a selection), without the O(nnz) check of
    /// [`SparseVec::new`].
    ///
    /// Nothing is checked, in any build, so invalid parts make an invalid
    /// vector; that is not memory-unsafe, and everything that takes vectors
    /// from users checks them with [`SparseVec::check`] before use: every
    /// collective of `sparse-coll` on entry (an error on every rank, never a
    /// panic or a silent loss), every encoder of [`crate::encoding`]. Other
    /// methods (`to_dense`, `merge_sum`, ...) assume the invariants and may
    /// panic or give wrong results on an invalid vector.
    pub fn new_unchecked(dim: usize, indices: Vec<u32>, values: Vec<E>) -> Self {
        Self {
            dim,
            indices,
            values,
        }
    }

    /// Checks every invariant of [`SparseVec::new`] (one pass over the
    /// indices): a vector built with [`SparseVec::new_unchecked`] from bad
    /// parts fails here.
    ///
    /// # Errors
    /// As [`SparseVec::new`].
    pub fn check(&self) -> Result<()> {
        check_dim(self.dim)?;
        if self.indices.len() != self.values.len() {
            return Err(Error::LengthMismatch {
                what: "values",
                expected: self.indices.len(),
                got: self.values.len(),
            });
        }
        check_indices(self.dim, &self.indices)
    }

    /// The all-zero vector (no stored entries).
    ///
    /// # Errors
    /// [`Error::DimensionTooLarge`].
    pub fn zeros(dim: usize) -> Result<Self> {
        check_dim(dim)?;
        Ok(Self {
            dim,
            indices: Vec::new(),
            values: Vec::new(),
        })
    }

    /// The non-zero entries of a dense vector (`-0.0` counts as zero).
    ///
    /// # Errors
    /// [`Error::DimensionTooLarge`].
    pub fn from_dense(dense: &[E]) -> Result<Self> {
        check_dim(dense.len())?;
        let mut indices = Vec::new();
        let mut values = Vec::new();
        for (i, &v) in dense.iter().enumerate() {
            if v != E::zero() {
                indices.push(i as u32);
                values.push(v);
            }
        }
        Ok(Self {
            dim: dense.len(),
            indices,
            values,
        })
    }

    /// The dense vector: zeros except at the stored indices.
    pub fn to_dense(&self) -> Vec<E> {
        let mut out = vec![E::zero(); self.dim];
        self.add_to_dense(&mut out);
        out
    }

    /// Adds the stored entries into `dense` (`dense[i] += v`).
    ///
    /// # Panics
    /// If `dense.len() != self.dim()`.
    pub fn add_to_dense(&self, dense: &mut [E]) {
        assert_eq!(dense.len(), self.dim, "add_to_dense: dimension mismatch");
        for (&i, &v) in self.indices.iter().zip(&self.values) {
            dense[i as usize] = dense[i as usize] + v;
        }
    }

    /// The element-wise sum of two sparse vectors, in O(nnz(a) + nnz(b)).
    ///
    /// The result holds the union of the indices; a coordinate whose sum is
    /// zero is kept (the pattern does not depend on the values).
    ///
    /// # Errors
    /// [`Error::DimensionMismatch`].
    pub fn merge_sum(&self, other: &Self) -> Result<Self> {
        if self.dim != other.dim {
            return Err(Error::DimensionMismatch {
                left: self.dim as u64,
                right: other.dim as u64,
            });
        }
        let (ai, av, bi, bv) = (&self.indices, &self.values, &other.indices, &other.values);
        let mut indices = Vec::with_capacity(ai.len() + bi.len());
        let mut values = Vec::with_capacity(ai.len() + bi.len());
        let (mut x, mut y) = (0, 0);
        while x < ai.len() && y < bi.len() {
            match ai[x].cmp(&bi[y]) {
                std::cmp::Ordering::Less => {
                    indices.push(ai[x]);
                    values.push(av[x]);
                    x += 1;
                }
                std::cmp::Ordering::Greater => {
                    indices.push(bi[y]);
                    values.push(bv[y]);
                    y += 1;
                }
                std::cmp::Ordering::Equal => {
                    indices.push(ai[x]);
                    values.push(av[x] + bv[y]);
                    x += 1;
                    y += 1;
                }
            }
        }
        indices.extend_from_slice(&ai[x..]);
        values.extend_from_slice(&av[x..]);
        indices.extend_from_slice(&bi[y..]);
        values.extend_from_slice(&bv[y..]);
        Ok(Self {
            dim: self.dim,
            indices,
            values,
        })
    }

    /// The entries with index in `lo..lo + len` (indices unchanged), in
    /// O(log nnz + entries) by binary search.
    pub fn restrict(&self, lo: usize, len: usize) -> Self {
        let a = self.indices.partition_point(|&i| (i as usize) < lo);
        let b = self.indices.partition_point(|&i| (i as usize) < lo + len);
        Self {
            dim: self.dim,
            indices: self.indices[a..b].to_vec(),
            values: self.values[a..b].to_vec(),
        }
    }

    /// The dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// Number of stored entries.
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }
    /// `nnz / dim` (0 for a zero-dimensional vector).
    pub fn density(&self) -> f64 {
        if self.dim == 0 {
            0.0
        } else {
            self.nnz() as f64 / self.dim as f64
        }
    }
    /// The sorted indices.
    pub fn indices(&self) -> &[u32] {
        &self.indices
    }
    /// The values, one per index.
    pub fn values(&self) -> &[E] {
        &self.values
    }
    /// Mutable values (the pattern cannot be changed through this).
    pub fn values_mut(&mut self) -> &mut [E] {
        &mut self.values
    }
    /// Splits into `(dim, indices, values)`.
    pub fn into_parts(self) -> (usize, Vec<u32>, Vec<E>) {
        (self.dim, self.indices, self.values)
    }
    /// Iterates over `(index, value)` pairs in index order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, E)> + '_ {
        self.indices
            .iter()
            .copied()
            .zip(self.values.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructor_rejects_bad_input() {
        assert!(matches!(
            SparseVec::<f32>::new(10, vec![3, 2], vec![1.0, 2.0]),
            Err(Error::NotStrictlyIncreasing {
                position: 1,
                prev: 3,
                next: 2
            })
        ));
        assert!(matches!(
            SparseVec::<f32>::new(10, vec![2, 2], vec![1.0, 2.0]),
            Err(Error::NotStrictlyIncreasing { .. })
        ));
        assert!(matches!(
            SparseVec::<f32>::new(10, vec![2, 10], vec![1.0, 2.0]),
            Err(Error::IndexOutOfRange {
                index: 10,
                position: 1,
                dim: 10
            })
        ));
        assert!(matches!(
            SparseVec::<f32>::new(10, vec![2], vec![1.0, 2.0]),
            Err(Error::LengthMismatch {
                expected: 1,
                got: 2,
                ..
            })
        ));
        assert!(matches!(
            SparseVec::<f32>::new(MAX_DIM + 1, vec![], vec![]),
            Err(Error::DimensionTooLarge { .. })
        ));
        assert!(SparseVec::<f32>::new(MAX_DIM, vec![u32::MAX - 1], vec![1.0]).is_ok());
    }

    #[test]
    fn dense_roundtrip_and_density() {
        let d = [0.0f32, 1.0, 0.0, -2.0, -0.0];
        let s = SparseVec::from_dense(&d).unwrap();
        assert_eq!(s.indices(), &[1, 3]);
        assert_eq!(s.values(), &[1.0, -2.0]);
        assert_eq!(s.density(), 0.4);
        assert_eq!(s.to_dense(), vec![0.0, 1.0, 0.0, -2.0, 0.0]);
    }

    #[test]
    fn merge_sum_matches_dense_sum() {
        let a = SparseVec::new(8, vec![0, 3, 5], vec![1.0f64, 2.0, 3.0]).unwrap();
        let b = SparseVec::new(8, vec![1, 3, 7], vec![10.0, -2.0, 4.0]).unwrap();
        let m = a.merge_sum(&b).unwrap();
        assert_eq!(m.indices(), &[0, 1, 3, 5, 7]);
        assert_eq!(m.values(), &[1.0, 10.0, 0.0, 3.0, 4.0]);
        let dense: Vec<f64> = a
            .to_dense()
            .iter()
            .zip(b.to_dense())
            .map(|(x, y)| x + y)
            .collect();
        assert_eq!(m.to_dense(), dense);
        assert_eq!(m.restrict(1, 5).indices(), &[1, 3, 5]);
        assert_eq!(m.restrict(8, 3).nnz(), 0);
        let c = SparseVec::<f64>::zeros(9).unwrap();
        assert!(matches!(
            a.merge_sum(&c),
            Err(Error::DimensionMismatch { .. })
        ));
    }
}
