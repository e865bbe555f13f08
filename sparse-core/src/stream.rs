//! SparCML's sparse streams (sec. 5.1): sparse while that is smaller, dense
//! once the number of non-zeros passes delta.

use crate::{Element, Error, Result, SparseVec};

/// Bytes per index in the sparse representation (`c` in SparCML): our
/// indices are `u32`.
pub const INDEX_BYTES: usize = 4;

/// SparCML's switch point `delta = N * isize / (c + isize)` (sec. 5.1): the
/// sparse form (`nnz * (c + isize)` bytes) is no larger than the dense form
/// (`N * isize` bytes) exactly while `nnz <= delta`. Rounded down. With
/// `c = isize = 0` both forms take no bytes and delta is `n`.
pub fn delta(n: usize, isize: usize, c: usize) -> usize {
    let per_entry = c as u128 + isize as u128;
    if per_entry == 0 {
        return n;
    }
    ((n as u128 * isize as u128) / per_entry) as usize
}

/// A vector held sparse or dense, as SparCML's sparse stream.
///
/// Invariant: a `Sparse` stream has `nnz <= delta(dim)`; a stream that would
/// pass delta is held `Dense`. Once dense, sums stay dense (SparCML's dynamic
/// fill-in never goes back).
#[derive(Debug, Clone, PartialEq)]
pub enum Stream<E> {
    /// Index/value pairs, `nnz <= delta`.
    Sparse(SparseVec<E>),
    /// All `dim` values.
    Dense(Vec<E>),
}

impl<E: Element> Stream<E> {
    /// The switch point for this element type with `u32` indices.
    pub fn delta(dim: usize) -> usize {
        delta(dim, E::BYTES, INDEX_BYTES)
    }

    /// Wraps a sparse vector, switching to dense if `nnz > delta`.
    pub fn from_sparse(v: SparseVec<E>) -> Self {
        if v.nnz() > Self::delta(v.dim()) {
            Stream::Dense(v.to_dense())
        } else {
            Stream::Sparse(v)
        }
    }

    /// Wraps a dense vector as is.
    pub fn from_dense(v: Vec<E>) -> Self {
        Stream::Dense(v)
    }

    /// The dimension.
    pub fn dim(&self) -> usize {
        match self {
            Stream::Sparse(s) => s.dim(),
            Stream::Dense(d) => d.len(),
        }
    }

    /// Stored entries: nnz when sparse, the dimension when dense.
    pub fn stored(&self) -> usize {
        match self {
            Stream::Sparse(s) => s.nnz(),
            Stream::Dense(d) => d.len(),
        }
    }

    /// Whether the stream is held dense.
    pub fn is_dense(&self) -> bool {
        matches!(self, Stream::Dense(_))
    }

    /// Bytes of the representation: `nnz * (c + isize)` or `N * isize`.
    pub fn payload_bytes(&self) -> usize {
        match self {
            Stream::Sparse(s) => s.nnz() * (INDEX_BYTES + E::BYTES),
            Stream::Dense(d) => d.len() * E::BYTES,
        }
    }

    /// The dense vector.
    pub fn to_dense(&self) -> Vec<E> {
        match self {
            Stream::Sparse(s) => s.to_dense(),
            Stream::Dense(d) => d.clone(),
        }
    }

    /// The element-wise sum, in all four sparse/dense combinations.
    ///
    /// sparse + sparse merges in O(nnz) and switches to dense when the union
    /// passes delta; anything + dense is dense.
    ///
    /// # Errors
    /// [`Error::DimensionMismatch`].
    pub fn sum(&self, other: &Self) -> Result<Self> {
        if self.dim() != other.dim() {
            return Err(Error::DimensionMismatch {
                left: self.dim() as u64,
                right: other.dim() as u64,
            });
        }
        Ok(match (self, other) {
            (Stream::Sparse(a), Stream::Sparse(b)) => Stream::from_sparse(a.merge_sum(b)?),
            (Stream::Sparse(s), Stream::Dense(d)) | (Stream::Dense(d), Stream::Sparse(s)) => {
                let mut out = d.clone();
                s.add_to_dense(&mut out);
                Stream::Dense(out)
            }
            (Stream::Dense(a), Stream::Dense(b)) => {
                Stream::Dense(a.iter().zip(b).map(|(&x, &y)| x + y).collect())
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_matches_paper_formula() {
        // f32 with u32 indices: N * 4 / (4 + 4) = N / 2.
        assert_eq!(Stream::<f32>::delta(1000), 500);
        // f64: N * 8 / 12, rounded down: 1000 * 8 / 12 = 666.67 -> 666.
        assert_eq!(Stream::<f64>::delta(1000), 666);
        // f16: N * 2 / 6: 1000 / 3 -> 333.
        assert_eq!(Stream::<half::f16>::delta(1000), 333);
        // Degenerate sizes: no bytes per entry either way, or no value bytes.
        assert_eq!(delta(10, 0, 0), 10);
        assert_eq!(delta(10, 0, 4), 0);
        assert_eq!(delta(usize::MAX, usize::MAX, usize::MAX), usize::MAX / 2);
    }

    #[test]
    fn switches_exactly_past_delta() {
        let n = 10; // delta = 5 for f32
        let at = SparseVec::new(n, (0..5).collect(), vec![1.0f32; 5]).unwrap();
        assert!(!Stream::from_sparse(at).is_dense());
        let past = SparseVec::new(n, (0..6).collect(), vec![1.0f32; 6]).unwrap();
        assert!(Stream::from_sparse(past).is_dense());
        // A sum of two sparse streams of 3 disjoint entries each has 6 > 5.
        let a = Stream::from_sparse(SparseVec::new(n, vec![0, 1, 2], vec![1.0f32; 3]).unwrap());
        let b = Stream::from_sparse(SparseVec::new(n, vec![3, 4, 5], vec![1.0f32; 3]).unwrap());
        assert!(a.sum(&b).unwrap().is_dense());
        // ... while an overlapping pair stays sparse.
        let c = Stream::from_sparse(SparseVec::new(n, vec![1, 2, 3], vec![1.0f32; 3]).unwrap());
        let s = a.sum(&c).unwrap();
        assert!(!s.is_dense());
        assert_eq!(s.stored(), 4);
    }

    #[test]
    fn sums_equal_dense_sums_in_all_combinations() {
        use crate::testing_support::random_vec;
        let n = 1000; // delta = 500 for f32
        for (na, nb) in [
            (0, 0),
            (10, 20),
            (300, 300),
            (499, 2),
            (600, 10),
            (900, 950),
        ] {
            let a = random_vec::<f32>(n, na, na as u64 + 1);
            let b = random_vec::<f32>(n, nb, nb as u64 + 1000);
            let want: Vec<f32> = a
                .to_dense()
                .iter()
                .zip(b.to_dense())
                .map(|(x, y)| x + y)
                .collect();
            let forms = |v: &SparseVec<f32>| {
                [
                    Stream::from_sparse(v.clone()),
                    Stream::from_dense(v.to_dense()),
                ]
            };
            for sa in forms(&a) {
                for sb in forms(&b) {
                    let s = sa.sum(&sb).unwrap();
                    assert_eq!(
                        s.to_dense(),
                        want,
                        "{na}+{nb} dense={},{}",
                        sa.is_dense(),
                        sb.is_dense()
                    );
                    assert_eq!(s.dim(), n);
                    if sa.is_dense() || sb.is_dense() {
                        assert!(s.is_dense());
                    } else {
                        let union = a.merge_sum(&b).unwrap().nnz();
                        assert_eq!(
                            s.is_dense(),
                            union > Stream::<f32>::delta(n),
                            "{na}+{nb}: union {union}"
                        );
                        assert!(s.payload_bytes() <= n * 4);
                    }
                }
            }
        }
        let short = Stream::<f32>::from_dense(vec![0.0; 3]);
        assert!(matches!(
            short.sum(&Stream::from_dense(vec![0.0; 4])),
            Err(Error::DimensionMismatch { .. })
        ));
    }
}
