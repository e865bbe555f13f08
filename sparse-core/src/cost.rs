//! The alpha-beta(-gamma) cost model of the four papers.
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

/// TopkA / AGsparse (SparDL Table 1; RedSync sec. 5.3 and App. B): an
/// allgather of every rank's `k` pairs by recursive doubling: `lg P` rounds,
/// `2 (P - 1) k` words.
pub fn topk_a(p: usize, k: usize) -> Cost {
    Cost::new(ceil_log2(p) as f64, 2.0 * (p as f64 - 1.0) * k as f64)
}

/// TopkDSA (SparDL Table 1, after Renggli et al.): `P + 2 lg P` rounds,
/// `[4 (P - 1) / P k, (P - 1) / P (2k + n)]` words.
pub fn topk_dsa(p: usize, n: usize, k: usize) -> Bounds {
    let r = p as f64 + 2.0 * ceil_log2(p) as f64;
    Bounds {
        lo: Cost::new(r, 4.0 * frac(p) * k as f64),
        hi: Cost::new(r, frac(p) * (2.0 * k as f64 + n as f64)),
    }
}

/// gTopk (SparDL Table 1, Shi et al.): a reduction tree with top-k
/// re-selection, then a broadcast tree: `2 lg P` rounds, `4 k lg P` words.
pub fn gtopk(p: usize, k: usize) -> Cost {
    let lg = ceil_log2(p) as f64;
    Cost::new(2.0 * lg, 4.0 * lg * k as f64)
}

/// Ok-Topk (SparDL Table 1, Li and Hoefler): `2 (P + lg P)` rounds,
/// `[2k (P - 1) / P, 6k (P - 1) / P]` words.
pub fn ok_topk(p: usize, k: usize) -> Bounds {
    let r = 2.0 * (p as f64 + ceil_log2(p) as f64);
    Bounds {
        lo: Cost::new(r, 2.0 * frac(p) * k as f64),
        hi: Cost::new(r, 6.0 * frac(p) * k as f64),
    }
}

/// SparDL without SAG (Eq. 3): Spar-Reduce-Scatter (Eq. 1) plus Bruck
/// allgather (Eq. 2), each `ceil(lg P)` rounds and `2k (P - 1) / P` words:
/// `2 ceil(lg P)` rounds, `4k (P - 1) / P` words, for any `P`.
pub fn spardl(p: usize, k: usize) -> Cost {
    Cost::new(2.0 * ceil_log2(p) as f64, 4.0 * frac(p) * k as f64)
}

/// SparDL with R-SAG and `d` teams (`d` a power of two dividing `P`; Eq. 5):
/// SRS and the final Bruck allgather inside a team of `P / d` ranks cost
/// `ceil(lg(P/d))` rounds and `2k (P - d) / P` words each (the text's
/// "2k (P-d)/2" is a typo: `2k (m - 1) / m` with `m = P / d`), and R-SAG's
/// `lg d` recursive-doubling steps move `2 L` words each with
/// `L = d k / P` (Eq. 4): `2 ceil(lg(P/d)) + lg d` rounds,
/// `2k ((2P - 2d) / P + d lg d / P)` words.
pub fn spardl_rsag(p: usize, k: usize, d: usize) -> Cost {
    let (pf, kf, df) = (p as f64, k as f64, d as f64);
    let lgd = ceil_log2(d) as f64;
    Cost::new(
        2.0 * ceil_log2(p / d) as f64 + lgd,
        2.0 * kf * ((2.0 * pf - 2.0 * df) / pf + df * lgd / pf),
    )
}

/// SparDL with B-SAG and `d` teams (`d` dividing `P`; Eq. 6 plus the team
/// SRS and allgather as in [`spardl_rsag`]). B-SAG's Bruck allgather moves
/// `[2k (d - 1) / P, 2k (d^2 - d) / P]` words in `ceil(lg d)` rounds, so the
/// total is `2 ceil(lg(P/d)) + ceil(lg d)` rounds and
/// `[2k (2P - d - 1) / P, 2k (d^2 + 2P - 3d) / P]` words. The upper bound is
/// Table 1's; its printed lower bound is garbled in our copy, and the one
/// here is the sum of Eq. 6's lower bound and the team phases.
pub fn spardl_bsag(p: usize, k: usize, d: usize) -> Bounds {
    let (pf, kf, df) = (p as f64, k as f64, d as f64);
    let r = 2.0 * ceil_log2(p / d) as f64 + ceil_log2(d) as f64;
    Bounds {
        lo: Cost::new(r, 2.0 * kf * (2.0 * pf - df - 1.0) / pf),
        hi: Cost::new(r, 2.0 * kf * (df * df + 2.0 * pf - 3.0 * df) / pf),
    }
}

/// SparCML SSAR_Recursive_double (sec. 5.3.1): `lg P` rounds; between
/// `k lg P` items (indices fully overlap) and `(P - 1) k` items (disjoint),
/// i.e. `[2k lg P, 2k (P - 1)]` words.
pub fn ssar_recursive_double(p: usize, k: usize) -> Bounds {
    let lg = ceil_log2(p) as f64;
    Bounds {
        lo: Cost::new(lg, 2.0 * k as f64 * lg),
        hi: Cost::new(lg, 2.0 * k as f64 * (p as f64 - 1.0)),
    }
}

/// SparCML SSAR_Split_allgather (sec. 5.3.2): latency `L2 = (P - 1) + lg P`
/// rounds; between `2 (P - 1) / P k` and `P k` items, i.e.
/// `[4k (P - 1) / P, 2 P k]` words.
pub fn ssar_split_allgather(p: usize, k: usize) -> Bounds {
    let r = p as f64 - 1.0 + ceil_log2(p) as f64;
    Bounds {
        lo: Cost::new(r, 4.0 * frac(p) * k as f64),
        hi: Cost::new(r, 2.0 * p as f64 * k as f64),
    }
}

/// SparCML DSAR_Split_allgather (sec. 5.3.3): the split phase as in
/// SSAR_Split_allgather (`P - 1` rounds, 0 to `k` items), then a dense
/// allgather of the `n / P` partitions (`lg P` rounds, `(P - 1) / P n`
/// values). With QSGD at `bits` bits in the dense phase, each value costs
/// `bits / 32` words plus one scale word per bucket of `bucket` values.
pub fn dsar_split_allgather(p: usize, n: usize, k: usize, qsgd: Option<(u32, usize)>) -> Bounds {
    let r = p as f64 - 1.0 + ceil_log2(p) as f64;
    let dense = frac(p) * n as f64;
    let dense_words = match qsgd {
        None => dense,
        Some((bits, bucket)) => dense * bits as f64 / 32.0 + dense / bucket as f64,
    };
    Bounds {
        lo: Cost::new(r, dense_words),
        hi: Cost::new(r, dense_words + 2.0 * k as f64),
    }
}

/// SparCML Lemma 5.1: any sparse allreduce needs `lg P` rounds and
/// `(P - 1) k` items if the result has `kP` entries, `2 (P - 1) / P k` items
/// if it has `k`: returned as `[K = k, K = kP]` in words.
pub fn sparse_allreduce_lower_bound(p: usize, k: usize) -> Bounds {
    let lg = ceil_log2(p) as f64;
    Bounds {
        lo: Cost::new(lg, 2.0 * 2.0 * frac(p) * k as f64),
        hi: Cost::new(lg, 2.0 * (p as f64 - 1.0) * k as f64),
    }
}

/// SparCML Lemma 5.2: a dynamic sparse allreduce (result of `delta` or more
/// entries, dense) needs `lg P` rounds and `delta` dense words.
pub fn dsar_lower_bound(p: usize, delta: usize) -> Cost {
    Cost::new(ceil_log2(p) as f64, delta as f64)
}

/// RedSync Eq. 1 (time of allgather-based sparse synchronisation):
/// `T_select + lg(p) alpha + (p - 1) M D beta + p gamma1`, with `M` the layer
/// size in bytes, `D` the density of the communication set, `beta` seconds
/// per byte and `gamma1` the time to decompress one rank's message.
pub fn redsync_sparse_time(
    p: usize,
    m_bytes: f64,
    density: f64,
    t_select: f64,
    alpha: f64,
    beta: f64,
    gamma1: f64,
) -> f64 {
    t_select
        + ceil_log2(p) as f64 * alpha
        + (p as f64 - 1.0) * m_bytes * density * beta
        + p as f64 * gamma1
}

/// RedSync Eq. 2 (time of Rabenseifner's dense allreduce):
/// `2 lg(p) alpha + 2 (p - 1) / p M beta + (p - 1) / p gamma2`, with
/// `gamma2` the time to reduce `M` bytes locally.
pub fn redsync_dense_time(p: usize, m_bytes: f64, alpha: f64, beta: f64, gamma2: f64) -> f64 {
    2.0 * ceil_log2(p) as f64 * alpha + 2.0 * frac(p) * m_bytes * beta + frac(p) * gamma2
}

/// Zen Eq. 1, Balanced Parallelism: `(n - 1) / n (gamma_n + 1) 2 M d / b`,
/// where `gamma_n` is the densification ratio over all `n` GPUs (Def. 4), `M`
/// the dense size in elements, `d` the density, `b` the bandwidth in
/// elements per second. Each element costs 2 (COO index and value), as in
/// the paper. Returns the time; with `b = 1` it is the words received.
pub fn zen_balanced_parallelism(n: usize, m: usize, density: f64, gamma_n: f64, b: f64) -> f64 {
    frac(n) * (gamma_n + 1.0) * 2.0 * m as f64 * density / b
}

/// Zen Eq. 2, Hierarchical Centralization: `sum_{i=1}^{lg n}
/// gamma_{2^(i-1)} 2 M d / b`, where `gamma(k)` is the densification ratio
/// of `k` GPUs (`gamma(1) = 1`).
pub fn zen_hierarchical_centralization(
    n: usize,
    m: usize,
    density: f64,
    gamma: impl Fn(usize) -> f64,
    b: f64,
) -> f64 {
    (1..=ceil_log2(n))
        .map(|i| gamma(1 << (i - 1)) * 2.0 * m as f64 * density / b)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) {
        assert!(
            approx::relative_eq!(a, b, epsilon = 1e-9, max_relative = 1e-9),
            "{a} != {b}"
        );
    }

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

    #[test]
    fn spardl_table1_by_hand() {
        // P = 8, k = 100, n = 10_000.
        assert_eq!(topk_a(8, 100), Cost::new(3.0, 1400.0));
        let dsa = topk_dsa(8, 10_000, 100);
        assert_eq!(dsa.lo, Cost::new(14.0, 350.0)); // 4 * 7/8 * 100
        assert_eq!(dsa.hi, Cost::new(14.0, 8925.0)); // 7/8 * (200 + 10000)
        assert_eq!(gtopk(8, 100), Cost::new(6.0, 1200.0));
        let ok = ok_topk(8, 100);
        assert_eq!(
            (ok.lo, ok.hi),
            (Cost::new(22.0, 175.0), Cost::new(22.0, 525.0))
        );
        assert_eq!(spardl(8, 100), Cost::new(6.0, 350.0));
        // P = 6 (not a power of two): ceil(lg 6) = 3, 4 * 100 * 5/6.
        let s6 = spardl(6, 120);
        assert_eq!(s6.rounds, 6.0);
        close(s6.words, 400.0);
        // R-SAG P = 8, d = 2: 2*lg 4 + 1 = 5 rounds; 2*100*((16-4)/8 + 2*1/8) = 200*1.75 = 350.
        assert_eq!(spardl_rsag(8, 100, 2), Cost::new(5.0, 350.0));
        // d = 2 keeps SparDL's bandwidth with fewer rounds (the paper's remark).
        assert_eq!(spardl_rsag(8, 100, 2).words, spardl(8, 100).words);
        // B-SAG P = 8, d = 4: rounds 2*1 + 2 = 4; lo = 200*(16-5)/8 = 275;
        // hi = 200 * (16 + 16 - 12)/8 = 500.
        let b = spardl_bsag(8, 100, 4);
        assert_eq!((b.lo, b.hi), (Cost::new(4.0, 275.0), Cost::new(4.0, 500.0)));
    }

    #[test]
    fn sparcml_by_hand() {
        // P = 8, k = 100: rec. doubling [2*100*3, 2*100*7].
        let rd = ssar_recursive_double(8, 100);
        assert_eq!(
            (rd.lo, rd.hi),
            (Cost::new(3.0, 600.0), Cost::new(3.0, 1400.0))
        );
        // split allgather: 7 + 3 rounds; [4*100*7/8, 2*8*100].
        let sa = ssar_split_allgather(8, 100);
        assert_eq!(
            (sa.lo, sa.hi),
            (Cost::new(10.0, 350.0), Cost::new(10.0, 1600.0))
        );
        // DSAR, n = 8000: dense allgather 7000 words; + 200 worst case split.
        let ds = dsar_split_allgather(8, 8000, 100, None);
        assert_eq!((ds.lo.words, ds.hi.words), (7000.0, 7200.0));
        // 4-bit QSGD, buckets of 1000: 7000 * 4/32 + 7 = 882.
        assert_eq!(
            dsar_split_allgather(8, 8000, 100, Some((4, 1000))).lo.words,
            882.0
        );
        let lb = sparse_allreduce_lower_bound(4, 100);
        assert_eq!((lb.lo.words, lb.hi.words), (300.0, 600.0));
        assert_eq!(dsar_lower_bound(16, 500), Cost::new(4.0, 500.0));
    }

    #[test]
    fn redsync_by_hand() {
        // p = 4, M = 1e6 bytes, D = 0.001, select 1 ms, alpha 1 us, beta 1 ns, gamma1 10 us:
        // 1e-3 + 2e-6 + 3 * 1000 * 1e-9 + 4e-5 = 0.001045.
        close(
            redsync_sparse_time(4, 1e6, 0.001, 1e-3, 1e-6, 1e-9, 1e-5),
            0.001045,
        );
        // dense: 4e-6 + 1.5e6 * 1e-9 + 0.75 * 2e-4 = 0.001654.
        close(redsync_dense_time(4, 1e6, 1e-6, 1e-9, 2e-4), 0.001654);
    }

    #[test]
    fn zen_by_hand() {
        // n = 4, M = 1000, d = 0.1, gamma_4 = 2.5, b = 1: 3/4 * 3.5 * 200 = 525.
        close(zen_balanced_parallelism(4, 1000, 0.1, 2.5, 1.0), 525.0);
        // gamma(1) = 1, gamma(2) = 1.5: 200 * (1 + 1.5) = 500.
        let g = |k: usize| if k == 1 { 1.0 } else { 1.5 };
        close(zen_hierarchical_centralization(4, 1000, 0.1, g, 1.0), 500.0);
        // Fully overlapping indices (gamma = 1): BP = 3/4*2*200 = 300 < HC = 2*200 = 400.
        assert!(
            zen_balanced_parallelism(4, 1000, 0.1, 1.0, 1.0)
                < zen_hierarchical_centralization(4, 1000, 0.1, |_| 1.0, 1.0)
        );
    }
}
