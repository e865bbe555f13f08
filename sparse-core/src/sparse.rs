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
    // A branch-free scan over blocks (it vectorizes); the failing position
    // is looked for only once a block has failed.
    const BLOCK: usize = 1024;
    let mut start = 0;
    while start + 1 < indices.len() {
        let end = (start + BLOCK + 1).min(indices.len());
        let block = &indices[start..end];
        let bad = block.windows(2).fold(false, |bad, w| bad | (w[1] <= w[0]));
        if bad {
            let at = block
                .windows(2)
                .position(|w| w[1] <= w[0])
                .expect("a failing block has a failing pair");
            return Err(Error::NotStrictlyIncreasing {
                position: start + at + 1,
                prev: block[at],
                next: block[at + 1],
            });
        }
        start = end - 1;
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

/// The sum of two sparse vectors given as sorted, duplicate-free index
/// slices with their values (`ai`, `av` and `bi`, `bv`), written into
/// `out_i` and `out_v` (their contents replaced, their allocations reused):
/// the union of the indices in increasing order, with `a + b` where both
/// hold an index and the one value where only one does, bit for bit as
/// [`SparseVec::merge_sum`].
///
/// The loop has no data-dependent branch (each step writes the smaller
/// index and picks its value by table), so random interleavings, the usual
/// case for two ranks' selections, cost no mispredictions; and it runs two
/// independent merges at once, of the indices below and from a pivot (the
/// middle of `ai`), so that each step's loads overlap the other's.
///
/// # Panics
/// If `ai` and `av`, or `bi` and `bv`, differ in length. Unsorted inputs
/// give an unsorted result (no panic): validate inputs from elsewhere first
/// ([`check_indices`]).
pub fn merge_sum_into<E: Element>(
    (ai, av): (&[u32], &[E]),
    (bi, bv): (&[u32], &[E]),
    out_i: &mut Vec<u32>,
    out_v: &mut Vec<E>,
) {
    assert!(
        ai.len() == av.len() && bi.len() == bv.len(),
        "merge_sum_into: index and value lengths differ"
    );
    let n = ai.len() + bi.len();
    // Sized once to the bound (only growth writes zeros), truncated after.
    out_i.resize(n, 0);
    out_v.resize(n, E::zero());
    let m = Merge {
        ai,
        av,
        bi,
        bv,
        oi: &mut out_i[..],
        ov: &mut out_v[..],
    };
    let len = m.run();
    out_i.truncate(len);
    out_v.truncate(len);
}

/// The state of [`merge_sum_into`]: inputs and the output slices.
struct Merge<'a, E> {
    ai: &'a [u32],
    av: &'a [E],
    bi: &'a [u32],
    bv: &'a [E],
    oi: &'a mut [u32],
    ov: &'a mut [E],
}

/// One merge cursor: positions in `a`, `b` and the output.
#[derive(Clone, Copy)]
struct Cursor {
    x: usize,
    y: usize,
    o: usize,
}

impl<E: Element> Merge<'_, E> {
    /// One output entry; the caller guarantees `x` and `y` are in range.
    #[inline(always)]
    fn step(&mut self, c: &mut Cursor) {
        let (a, b) = (self.ai[c.x], self.bi[c.y]);
        let (va, vb) = (self.av[c.x], self.bv[c.y]);
        let (lt, gt) = (a < b, b < a);
        // Indexed by: only b, only a, both.
        let pick = [vb, va, va + vb];
        self.oi[c.o] = a.min(b);
        self.ov[c.o] = pick[usize::from(lt) | (usize::from(!(lt | gt)) << 1)];
        c.o += 1;
        c.x += usize::from(!gt);
        c.y += usize::from(!lt);
    }

    /// Finishes cursor `c` over `a[..xe]` and `b[..ye]`; returns its end.
    fn finish(&mut self, mut c: Cursor, xe: usize, ye: usize) -> usize {
        while c.x < xe && c.y < ye {
            self.step(&mut c);
        }
        for (is, vs, from, to) in [(self.ai, self.av, c.x, xe), (self.bi, self.bv, c.y, ye)] {
            let rest = to - from;
            self.oi[c.o..c.o + rest].copy_from_slice(&is[from..to]);
            self.ov[c.o..c.o + rest].copy_from_slice(&vs[from..to]);
            c.o += rest;
        }
        c.o
    }

    /// Both halves, interleaved, then the upper half's output moved down
    /// against the lower's; returns the output length.
    fn run(mut self) -> usize {
        let (na, nb) = (self.ai.len(), self.bi.len());
        let sa = na / 2;
        let pivot = self.ai.get(sa).copied().unwrap_or(u32::MAX);
        let sb = self.bi.partition_point(|&i| i < pivot);
        let mut lo = Cursor { x: 0, y: 0, o: 0 };
        let mut hi = Cursor {
            x: sa,
            y: sb,
            o: sa + sb,
        };
        loop {
            // Steps both cursors can take without running out.
            let safe = (sa - lo.x).min(sb - lo.y).min(na - hi.x).min(nb - hi.y);
            if safe == 0 {
                break;
            }
            for _ in 0..safe {
                self.step(&mut lo);
                self.step(&mut hi);
            }
        }
        let lo_end = self.finish(lo, sa, sb);
        let hi_end = self.finish(hi, na, nb);
        let hi_start = sa + sb;
        if lo_end != hi_start {
            self.oi.copy_within(hi_start..hi_end, lo_end);
            self.ov.copy_within(hi_start..hi_end, lo_end);
        }
        lo_end + (hi_end - hi_start)
    }
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
        // A side without entries adds nothing: the other one, copied whole
        // (what the merge would write, entry by entry).
        for (a, b) in [(self, other), (other, self)] {
            if b.indices.is_empty() {
                return Ok(a.clone());
            }
        }
        let (mut indices, mut values) = (Vec::new(), Vec::new());
        merge_sum_into(
            (&self.indices, &self.values),
            (&other.indices, &other.values),
            &mut indices,
            &mut values,
        );
        Ok(Self {
            dim: self.dim,
            indices,
            values,
        })
    }

    /// The entries with index in `lo..lo + len` (indices unchanged), in
    /// O(log nnz + entries) by binary search. A range past `usize::MAX`
    /// ends there.
    pub fn restrict(&self, lo: usize, len: usize) -> Self {
        let span = self.span(lo, len);
        Self {
            dim: self.dim,
            indices: self.indices[span.clone()].to_vec(),
            values: self.values[span].to_vec(),
        }
    }

    /// The positions of the entries with index in `lo..lo + len`, by
    /// binary search ([`SparseVec::restrict`] without the copy).
    pub fn span(&self, lo: usize, len: usize) -> core::ops::Range<usize> {
        let hi = lo.saturating_add(len);
        let a = self.indices.partition_point(|&i| (i as usize) < lo);
        let b = self.indices.partition_point(|&i| (i as usize) < hi);
        a..b
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

    /// `restrict` against a filter, ranges past the end and past
    /// `usize::MAX` included.
    #[test]
    fn restrict_equals_a_filter() {
        let v = SparseVec::new(100, vec![0, 3, 50, 99], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
        for (lo, len) in [
            (0, 0),
            (0, 100),
            (1, 50),
            (3, 1),
            (99, usize::MAX),
            (1, usize::MAX),
        ] {
            let keep = |i: u32| (i as usize) >= lo && (i as usize - lo) < len;
            let r = v.restrict(lo, len);
            let want: Vec<u32> = v.indices().iter().copied().filter(|&i| keep(i)).collect();
            assert_eq!(r.indices(), &want[..], "{lo} {len}");
            assert_eq!(r.dim(), 100);
        }
    }

    /// A small generator for the merge test (no dependency needed here).
    fn lcg(state: &mut u64) -> u64 {
        *state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        *state >> 33
    }

    /// `merge_sum_into` against a plain map oracle, on random index sets of
    /// every size relation (empty, disjoint, nested, equal, interleaved),
    /// values with signed zeros, bit for bit; and reusing its outputs.
    #[test]
    fn merge_sum_into_equals_a_map_oracle() {
        let mut state = 7u64;
        let (mut oi, mut ov) = (vec![9u32; 3], vec![1.0f32; 3]);
        for case in 0..400 {
            let dim = 1 + (lcg(&mut state) % 300) as usize;
            let mut pick = |density: u64| -> SparseVec<f32> {
                let idx: Vec<u32> = (0..dim as u32)
                    .filter(|_| lcg(&mut state) % 100 < density)
                    .collect();
                let val = idx
                    .iter()
                    .map(|_| match lcg(&mut state) % 5 {
                        0 => -0.0,
                        1 => 0.0,
                        v => v as f32 - 3.5,
                    })
                    .collect();
                SparseVec::new(dim, idx, val).unwrap()
            };
            let (da, db) = ((case % 7) as u64 * 16, (case % 11) as u64 * 10);
            let (a, b) = (pick(da), pick(db));
            let mut oracle = std::collections::BTreeMap::new();
            for (i, v) in a.iter() {
                oracle.insert(i, v);
            }
            for (i, v) in b.iter() {
                oracle
                    .entry(i)
                    .and_modify(|x: &mut f32| *x += v)
                    .or_insert(v);
            }
            merge_sum_into(
                (a.indices(), a.values()),
                (b.indices(), b.values()),
                &mut oi,
                &mut ov,
            );
            let want_i: Vec<u32> = oracle.keys().copied().collect();
            let want_v: Vec<u32> = oracle.values().map(|v| v.to_bits()).collect();
            assert_eq!(oi, want_i, "case {case}");
            assert_eq!(ov.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want_v);
            let m = a.merge_sum(&b).unwrap();
            assert_eq!((m.indices(), m.values()), (&oi[..], &ov[..]));
        }
    }

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
