//! The alpha-beta cost model: [`Cost`] and [`Bounds`], the logarithms, and
//! the dense baselines every sparse algorithm is measured against: ring,
//! recursive doubling and Rabenseifner allreduce, Bruck allgather. Each
//! paper's formula (SparDL's Table 1, SparCML's bounds and lemmas,
//! RedSync's Eq. 1-2, Zen's Eq. 1-2) is in its algorithm's file in
//! `sparse-coll`, beside the collective it describes (`sparse_coll::cost`
//! gathers them).
//!
//! A [`Cost`] counts, per rank, latency rounds (the alpha term) and 32-bit
//! words received (the beta term). Units: a dense element is one word; a
//! sparse element is two words (a `u32` index and an `f32` value), which is
//! how SparDL's Table 1 counts ("2k" for k index/value pairs) and how
//! SparCML's `k beta_s` terms are converted here (`beta_s` = 2 words).
//!
//! `P` is the number of ranks, `n` the dense dimension, `k` the number of
//! selected elements per rank. Table 1 of SparDL states its formulas for
//! powers of two; `log P` is written `lg(P)` below and evaluated as
//! `ceil(log2 P)`, which equals `log2 P` there.

/// Rounds and words received per rank.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    /// Latency rounds (multiplies alpha).
    pub rounds: f64,
    /// 32-bit words received per rank (multiplies beta).
    pub words: f64,
}

impl Cost {
    /// A cost of `rounds` rounds and `words` words.
    pub fn new(rounds: f64, words: f64) -> Self {
        Self { rounds, words }
    }
    /// `rounds * alpha + words * beta` (alpha in seconds per message, beta in
    /// seconds per word).
    pub fn time(&self, alpha: f64, beta: f64) -> f64 {
        self.rounds * alpha + self.words * beta
    }
    /// Bytes received per rank (`4 * words`).
    pub fn bytes(&self) -> f64 {
        4.0 * self.words
    }
}

/// A data-dependent cost: best case (`lo`, e.g. fully overlapping indices)
/// and worst case (`hi`, e.g. disjoint indices).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    /// Best case.
    pub lo: Cost,
    /// Worst case.
    pub hi: Cost,
}

impl Bounds {
    /// A data-independent cost (`lo == hi`).
    pub fn exact(c: Cost) -> Self {
        Self { lo: c, hi: c }
    }
}

/// `ceil(log2 p)` for `p >= 1`.
pub fn ceil_log2(p: usize) -> u32 {
    assert!(p >= 1, "ceil_log2(0)");
    usize::BITS - (p - 1).leading_zeros()
}

/// `floor(log2 p)` for `p >= 1`.
pub fn floor_log2(p: usize) -> u32 {
    assert!(p >= 1, "floor_log2(0)");
    usize::BITS - 1 - p.leading_zeros()
}

fn frac(p: usize) -> f64 {
    (p as f64 - 1.0) / p as f64
}

/// Dense ring allreduce (Patarasuk and Yuan; Zen's "Ring"): a reduce-scatter
/// and an allgather of `P - 1` steps each, moving `n / P` per step:
/// `2 (P - 1)` rounds, `2 (P - 1) / P * n` words.
pub fn ring_allreduce(p: usize, n: usize) -> Cost {
    Cost::new(2.0 * (p as f64 - 1.0), 2.0 * frac(p) * n as f64)
}

/// Dense recursive-doubling allreduce (Thakur, Rabenseifner and Gropp, as in
/// MPICH): `lg P` exchanges of the whole vector, `n lg P` words, for a power
/// of two. Otherwise, with `p' = 2^floor(log2 P)`, MPICH first folds the
/// `P - p'` extra ranks into partners (one round, `n` words), runs recursive
/// doubling on `p'` ranks and sends the result back (one round): the busiest
/// rank receives `n (1 + lg p')` words in `lg p' + 2` rounds.
pub fn recursive_doubling_allreduce(p: usize, n: usize) -> Cost {
    let lg = floor_log2(p) as f64;
    if p.is_power_of_two() {
        Cost::new(lg, n as f64 * lg)
    } else {
        Cost::new(lg + 2.0, n as f64 * (1.0 + lg))
    }
}

/// Rabenseifner's allreduce (recursive-halving reduce-scatter, then
/// recursive-doubling allgather; SparCML sec. 5.3.2, RedSync Eq. 2):
/// `2 lg P` rounds, `2 (P - 1) / P * n` words for a power of two. Otherwise
/// MPICH's fold to `p'` ranks adds one round and `n` words before and one
/// round after: `2 lg p' + 2` rounds, `n + 2 (p' - 1) / p' * n` words for the
/// busiest rank.
pub fn rabenseifner_allreduce(p: usize, n: usize) -> Cost {
    let pp = 1usize << floor_log2(p);
    let lg = floor_log2(p) as f64;
    let core = 2.0 * frac(pp) * n as f64;
    if p.is_power_of_two() {
        Cost::new(2.0 * lg, core)
    } else {
        Cost::new(2.0 * lg + 2.0, n as f64 + core)
    }
}

/// Bruck allgather of `m` words per rank (SparDL sec. 2): `ceil(lg P)`
/// rounds and `(P - 1) m` words for any `P`.
pub fn bruck_allgather(p: usize, m: usize) -> Cost {
    Cost::new(ceil_log2(p) as f64, (p as f64 - 1.0) * m as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs() {
        assert_eq!(
            (
                ceil_log2(1),
                ceil_log2(2),
                ceil_log2(5),
                ceil_log2(8),
                ceil_log2(9)
            ),
            (0, 1, 3, 3, 4)
        );
        assert_eq!((floor_log2(1), floor_log2(5), floor_log2(8)), (0, 2, 3));
    }

    #[test]
    fn dense_by_hand() {
        // P = 4, n = 1000: ring 6 rounds, 2 * 3/4 * 1000 = 1500 words.
        assert_eq!(ring_allreduce(4, 1000), Cost::new(6.0, 1500.0));
        // recursive doubling: 2 rounds of 1000 words.
        assert_eq!(
            recursive_doubling_allreduce(4, 1000),
            Cost::new(2.0, 2000.0)
        );
        // P = 6: p' = 4, fold + 2 + unfold = 4 rounds, 1000 * (1 + 2) = 3000.
        assert_eq!(
            recursive_doubling_allreduce(6, 1000),
            Cost::new(4.0, 3000.0)
        );
        // Rabenseifner P = 4: 4 rounds, 1500 words; P = 6: 6 rounds, 1000 + 1500.
        assert_eq!(rabenseifner_allreduce(4, 1000), Cost::new(4.0, 1500.0));
        assert_eq!(rabenseifner_allreduce(6, 1000), Cost::new(6.0, 2500.0));
        // Bruck P = 5, 10 words each: 3 rounds, 40 words.
        assert_eq!(bruck_allgather(5, 10), Cost::new(3.0, 40.0));
        assert_eq!(Cost::new(2.0, 100.0).time(1e-6, 1e-9), 2e-6 + 1e-7);
    }
}
