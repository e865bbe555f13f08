//! What the cost model knows of one call ([`Profile`]), and the stream
//! sizes every algorithm's cost model is written with.

use crate::values::WireValues;
use sparse_core::cost::{Bounds, Cost};
use sparse_core::{Element, SparseVec};

/// What the cost model needs to know about one call: the number of ranks,
/// the dimension, the element size, each rank's entries (the largest and
/// the sum over ranks) and the entries of the result (the union of the
/// ranks' index sets), measured or estimated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    /// Ranks.
    pub p: usize,
    /// Dimension.
    pub n: usize,
    /// Bytes per value.
    pub value_bytes: usize,
    /// The most entries any rank contributes.
    pub k_max: usize,
    /// Entries summed over ranks.
    pub k_sum: usize,
    /// Entries of the (lossless) result, between `k_max` and
    /// `min(k_sum, n)`.
    pub union: usize,
}

impl Profile {
    /// The exact profile of every rank's input (`ins[r]` is rank `r`'s):
    /// the element's bytes, the entries' most and sum, and the union of the
    /// index sets (one pass over the indices, a flag per coordinate).
    pub fn of<E: Element>(ins: &[SparseVec<E>]) -> Self {
        let n = ins.first().map_or(0, SparseVec::dim);
        let mut touched = vec![false; n];
        for v in ins {
            for &i in v.indices() {
                touched[i as usize] = true;
            }
        }
        Self {
            p: ins.len(),
            n,
            value_bytes: E::BYTES,
            k_max: ins.iter().map(SparseVec::nnz).max().unwrap_or(0),
            k_sum: ins.iter().map(SparseVec::nnz).sum(),
            union: touched.iter().filter(|&&x| x).count(),
        }
    }
    /// Where the input lies between full overlap (1: every rank holds the
    /// same indices, `union = k_max`) and none (0: `union = k_sum`); the
    /// position within a cost formula's bounds.
    pub fn overlap(&self) -> f64 {
        if self.k_sum <= self.k_max {
            1.0
        } else {
            let u = self.union.clamp(self.k_max, self.k_sum);
            (self.k_sum - u) as f64 / (self.k_sum - self.k_max) as f64
        }
    }
    /// Zen's densification ratio over all ranks (Def. 4): `union / k_sum`.
    pub fn densification(&self) -> f64 {
        if self.k_sum == 0 {
            1.0
        } else {
            self.union as f64 / self.k_sum as f64
        }
    }
    /// The mean entries per rank, rounded up.
    pub fn k_avg(&self) -> usize {
        self.k_sum.div_ceil(self.p.max(1))
    }
    /// Words between the best and worst case, at this input's overlap.
    pub fn within(&self, b: Bounds) -> Cost {
        let o = self.overlap();
        Cost::new(
            b.hi.rounds - o * (b.hi.rounds - b.lo.rounds),
            b.hi.words - o * (b.hi.words - b.lo.words),
        )
    }
    /// `(P - 1) / P`.
    pub fn frac(&self) -> f64 {
        (self.p as f64 - 1.0) / self.p as f64
    }
    /// Bytes of one `(index, value)` pair on the wire.
    pub fn pair_bytes(&self) -> f64 {
        4.0 + self.value_bytes as f64
    }
    /// The expected entries of the union of `m` ranks' index sets, between
    /// one rank's (`m = 1`) and all ranks' (`m = P`), linear in `m`: exact
    /// when a fraction of every rank's indices is shared by all and the
    /// rest is private, Zen's overlap model.
    pub fn union_of(&self, m: f64) -> f64 {
        if self.p <= 1 {
            return self.k_max as f64;
        }
        let m = m.clamp(1.0, self.p as f64);
        let k = self.k_max as f64;
        (k + (m - 1.0) / (self.p as f64 - 1.0) * (self.union as f64 - k)).min(self.n as f64)
    }
    /// Bytes of a sparse stream of `entries` over `len` coordinates on the
    /// wire ([`crate::wire::encode_stream`]): a 4-byte tag, then `nnz:
    /// u32` and the pairs, or the `len` values once past SparCML's delta.
    pub fn stream_bytes(&self, entries: f64, len: f64) -> f64 {
        let vb = self.value_bytes as f64;
        // Without bytes per value (same-sign mean) the sparse form is all
        // there is: indices, and the means counted as none.
        if vb > 0.0 && entries > len * vb / (4.0 + vb) {
            4.0 + vb * len
        } else {
            8.0 + self.pair_bytes() * entries
        }
    }
    /// This profile with the value bytes of `values` on the wire.
    pub fn with_values<E: Element>(&self, values: &WireValues<E>) -> Self {
        Self {
            value_bytes: values.value_bytes(),
            ..*self
        }
    }
    /// `(P - 1)`, as a float.
    pub fn others(&self) -> f64 {
        self.p as f64 - 1.0
    }
}

/// The standard normal quantile for `q` in `[0.5, 1)` (Abramowitz and
/// Stegun 26.2.23, error below 4.5e-4).
fn normal_quantile(q: f64) -> f64 {
    let t = (-2.0 * (1.0 - q).ln()).sqrt();
    t - (2.515_517 + 0.802_853 * t + 0.010_328 * t * t)
        / (1.0 + 1.432_788 * t + 0.189_269 * t * t + 0.001_308 * t * t * t)
}

/// `(P - 1) / P`, the share of the others among `P` ranks: the papers'
/// formulas' factor.
pub(crate) fn frac(p: usize) -> f64 {
    (p as f64 - 1.0) / p as f64
}

/// A cost of `rounds` rounds and `bytes` bytes received.
pub(crate) fn bytes_cost(rounds: f64, bytes: f64) -> Cost {
    Cost::new(rounds, bytes / 4.0)
}

impl Profile {
    /// The split phase of SparCML's split-allgather family and TopkDSA:
    /// from every other rank, a stream of its entries in this rank's
    /// partition (`k / P` of them).
    ///
    /// The busiest rank owns the fullest partition: the entries every rank
    /// shares fall into the same partition on every rank, so their excess
    /// over the mean arrives from all `P - 1` others
    /// ([`Profile::fullest_excess`]).
    pub(crate) fn split_phase_bytes(&self) -> f64 {
        let (p, n) = (self.p as f64, self.n as f64);
        let entries = self.k_avg() as f64 / p + self.fullest_excess();
        self.others() * self.stream_bytes(entries, n / p)
    }
    /// One partition of the sum as a stream (`union / P` entries over
    /// `n / P` coordinates).
    pub(crate) fn partition_stream_bytes(&self) -> f64 {
        let (p, n) = (self.p as f64, self.n as f64);
        self.stream_bytes(self.union as f64 / p, n / p)
    }
    /// The expected excess of the fullest of `P` partitions over the mean,
    /// counting the entries all ranks share (`overlap * k`), which land in
    /// the same partition on every rank: the expected maximum of `P`
    /// binomials, by Blom's approximation of normal order statistics.
    pub fn fullest_excess(&self) -> f64 {
        let p = self.p as f64;
        if self.p < 2 {
            return 0.0;
        }
        let shared = self.overlap() * self.k_avg() as f64;
        let sd = (shared / p * (1.0 - 1.0 / p)).sqrt();
        normal_quantile((p - 0.375) / (p + 0.25)) * sd
    }
}
