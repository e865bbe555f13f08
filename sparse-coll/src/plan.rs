//! Every sparse allreduce behind one name ([`Algorithm`], [`Allreduce`]),
//! its cost for an input ([`Profile`], [`Algorithm::model`]), and the
//! [`Auto`] planner, which picks the cheapest by that model.

use crate::dense::bruck_allgather;
use crate::{
    OkTopk, Reduced, SpardlBsag, Transport, dsar_split_allgather, gtopk, omnireduce_blocks, spardl,
    spardl_rsag, ssar_recursive_double, ssar_split_allgather, topk_a, topk_dsa,
    zen_balanced_parallelism,
};
use sparse_core::cost::{self, Bounds, Cost, ceil_log2, floor_log2};
use sparse_core::encoding::PartitionIndex;
use sparse_core::qsgd::QsgdParams;
use sparse_core::{Element, Error, H0, Result, SparseVec};
use std::sync::Arc;

/// A sparse allreduce and its parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Algorithm {
    /// [`topk_a`]: allgather of every rank's pairs. Lossless.
    TopkA,
    /// [`topk_dsa`]: split, then recursive-doubling allgather of dynamic
    /// streams. Lossless.
    TopkDsa,
    /// [`ssar_recursive_double`]: SparCML's recursive doubling of streams;
    /// also Zen's Hierarchical Centralization. Lossless.
    SsarRecursiveDouble,
    /// [`ssar_split_allgather`]. Lossless.
    SsarSplitAllgather,
    /// [`dsar_split_allgather`], dense phase optionally QSGD-quantized
    /// (then lossy).
    DsarSplitAllgather {
        /// QSGD in the dense phase.
        qsgd: Option<QsgdParams>,
    },
    /// [`zen_balanced_parallelism`] with the `h0` of this seed. Lossless.
    ZenBalancedParallelism {
        /// Seed of Zen's partition hash `h0`.
        seed: u64,
    },
    /// [`omnireduce_blocks`]. Lossless.
    OmniReduceBlocks {
        /// Block size in elements.
        block: usize,
    },
    /// [`gtopk`] keeping `k`. Lossy.
    Gtopk {
        /// Entries kept.
        k: usize,
    },
    /// [`OkTopk`] selecting about `k`, re-estimating every `period` calls.
    /// Lossy.
    OkTopk {
        /// Entries selected.
        k: usize,
        /// Calls between re-estimations.
        period: u64,
    },
    /// [`spardl`] keeping `k`. Lossy.
    Spardl {
        /// Entries kept.
        k: usize,
    },
    /// [`spardl_rsag`] keeping `k` with `d` teams. Lossy.
    SpardlRsag {
        /// Entries kept.
        k: usize,
        /// Teams (a power of two dividing `P`).
        d: usize,
    },
    /// [`SpardlBsag`] keeping `k` with `d` teams. Lossy.
    SpardlBsag {
        /// Entries kept.
        k: usize,
        /// Teams (dividing `P`).
        d: usize,
    },
}

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
    fn k_avg(&self) -> usize {
        self.k_sum.div_ceil(self.p)
    }
    /// Words between the best and worst case, at this input's overlap.
    fn within(&self, b: Bounds) -> Cost {
        let o = self.overlap();
        Cost::new(
            b.hi.rounds - o * (b.hi.rounds - b.lo.rounds),
            b.hi.words - o * (b.hi.words - b.lo.words),
        )
    }
}

impl Algorithm {
    /// Every algorithm's name, as [`Algorithm::name`] gives it.
    pub const NAMES: [&'static str; 13] = [
        "topk_a",
        "topk_dsa",
        "ssar_recursive_double",
        "ssar_split_allgather",
        "dsar_split_allgather",
        "zen_balanced_parallelism",
        "omnireduce_blocks",
        "gtopk",
        "ok_topk",
        "spardl",
        "spardl_rsag",
        "spardl_bsag",
        "dsar_qsgd",
    ];

    /// The algorithm of this name with the parameters given: `k` for the
    /// lossy ones, `d` teams for the SparDL variants; Zen's seed, the block
    /// size of 256, Ok-Topk's period of 32 and QSGD at 4 bits in buckets of
    /// 512 are fixed defaults.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for an unknown name.
    pub fn from_name(name: &str, k: usize, d: usize) -> Result<Self> {
        Ok(match name {
            "topk_a" => Self::TopkA,
            "topk_dsa" => Self::TopkDsa,
            "ssar_recursive_double" => Self::SsarRecursiveDouble,
            "ssar_split_allgather" => Self::SsarSplitAllgather,
            "dsar_split_allgather" => Self::DsarSplitAllgather { qsgd: None },
            "dsar_qsgd" => Self::DsarSplitAllgather {
                qsgd: Some(QsgdParams::new(4, 512, 0x95d)?),
            },
            "zen_balanced_parallelism" => Self::ZenBalancedParallelism { seed: 0x2e7 },
            "omnireduce_blocks" => Self::OmniReduceBlocks { block: 256 },
            "gtopk" => Self::Gtopk { k },
            "ok_topk" => Self::OkTopk { k, period: 32 },
            "spardl" => Self::Spardl { k },
            "spardl_rsag" => Self::SpardlRsag { k, d },
            "spardl_bsag" => Self::SpardlBsag { k, d },
            other => {
                return Err(Error::invalid(
                    "algorithm",
                    format!("unknown {other:?}; known: {}", Self::NAMES.join(", ")),
                ));
            }
        })
    }

    /// The lossless algorithms [`Auto::lossless`] chooses among.
    pub const LOSSLESS: [Algorithm; 6] = [
        Algorithm::TopkA,
        Algorithm::TopkDsa,
        Algorithm::SsarRecursiveDouble,
        Algorithm::SsarSplitAllgather,
        Algorithm::DsarSplitAllgather { qsgd: None },
        Algorithm::ZenBalancedParallelism { seed: 0x2e7 },
    ];

    /// Every named algorithm, in the order of [`Algorithm::NAMES`], with
    /// budget `k`, R-SAG on `rsag` teams and B-SAG on `bsag` teams.
    pub fn all(k: usize, rsag: usize, bsag: usize) -> Vec<Self> {
        Self::NAMES
            .iter()
            .map(|&name| {
                let d = match name {
                    "spardl_rsag" => rsag,
                    "spardl_bsag" => bsag,
                    _ => 1,
                };
                Self::from_name(name, k, d).expect("a known name")
            })
            .collect()
    }

    /// The teams of SparDL with SAG; 1 for every other algorithm.
    pub fn teams(&self) -> usize {
        match *self {
            Self::SpardlRsag { d, .. } | Self::SpardlBsag { d, .. } => d,
            _ => 1,
        }
    }

    /// The algorithm's name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::TopkA => "topk_a",
            Self::TopkDsa => "topk_dsa",
            Self::SsarRecursiveDouble => "ssar_recursive_double",
            Self::SsarSplitAllgather => "ssar_split_allgather",
            Self::DsarSplitAllgather { qsgd: None } => "dsar_split_allgather",
            Self::DsarSplitAllgather { qsgd: Some(_) } => "dsar_qsgd",
            Self::ZenBalancedParallelism { .. } => "zen_balanced_parallelism",
            Self::OmniReduceBlocks { .. } => "omnireduce_blocks",
            Self::Gtopk { .. } => "gtopk",
            Self::OkTopk { .. } => "ok_topk",
            Self::Spardl { .. } => "spardl",
            Self::SpardlRsag { .. } => "spardl_rsag",
            Self::SpardlBsag { .. } => "spardl_bsag",
        }
    }

    /// Whether the result is the exact sum (nothing in `dropped`).
    pub fn lossless(&self) -> bool {
        matches!(
            self,
            Self::TopkA
                | Self::TopkDsa
                | Self::SsarRecursiveDouble
                | Self::SsarSplitAllgather
                | Self::DsarSplitAllgather { qsgd: None }
                | Self::ZenBalancedParallelism { .. }
                | Self::OmniReduceBlocks { .. }
        )
    }

    /// The cost model's rounds and 32-bit words received by the busiest rank
    /// for an input of this profile (a pair is 2 words, as the papers
    /// count). Where a paper gives bounds for full and no overlap, the cost
    /// is placed between them at the input's [`Profile::overlap`], which is
    /// Zen's way of choosing between its schemes from the densification
    /// ratio, applied to every algorithm:
    /// - TopkA: Table 1 with the mean `k`; SSAR_Recursive_double,
    ///   SSAR_Split_allgather, Ok-Topk and SparDL with B-SAG: their bounds
    ///   (SparCML sec. 5.3, SparDL Table 1) with the mean `k`;
    /// - TopkDSA: SSAR_Split_allgather's words capped by DSAR's (each
    ///   partition travels sparse or dense, whichever is smaller; Table 1's
    ///   upper bound assumes a dense result), in the rounds of
    ///   [`crate::topk_dsa`];
    /// - DSAR: the dense allgather plus the split phase at this overlap;
    /// - Zen's Balanced Parallelism: Eq. 1 at this densification ratio, in
    ///   `2 (P - 1)` rounds;
    /// - OmniReduce blocks: the blocks a uniform input of this density
    ///   touches, pushed and pulled in `2 (P - 1)` rounds;
    /// - gTopk, SparDL and SparDL with R-SAG: Table 1 and Eq. 3, 5 (gTopk's
    ///   `4 k lg P` counts the root's words sent and received).
    pub fn model(&self, prof: &Profile) -> Cost {
        let (p, n) = (prof.p, prof.n);
        let k = prof.k_avg();
        if p == 1 {
            return Cost::new(0.0, 0.0);
        }
        match *self {
            Self::TopkA => cost::topk_a(p, k),
            Self::TopkDsa => {
                // Each partition travels sparse or dense, whichever is
                // smaller: SSAR_Split_allgather's words, capped by DSAR's.
                let sparse = prof.within(cost::ssar_split_allgather(p, k)).words;
                let dense = prof.within(cost::dsar_split_allgather(p, n, k, None)).words;
                let rounds = (p - 1) as f64
                    + if p.is_power_of_two() {
                        ceil_log2(p) as f64
                    } else {
                        floor_log2(p) as f64 + 2.0
                    };
                Cost::new(rounds, sparse.min(dense))
            }
            Self::SsarRecursiveDouble => {
                let rounds = if p.is_power_of_two() {
                    ceil_log2(p) as f64
                } else {
                    floor_log2(p) as f64 + 2.0
                };
                Cost::new(rounds, prof.within(cost::ssar_recursive_double(p, k)).words)
            }
            Self::SsarSplitAllgather => prof.within(cost::ssar_split_allgather(p, k)),
            Self::DsarSplitAllgather { qsgd } => prof.within(cost::dsar_split_allgather(
                p,
                n,
                k,
                qsgd.map(|q| (q.bits(), q.bucket())),
            )),
            Self::ZenBalancedParallelism { .. } => {
                let density = k as f64 / n as f64;
                let words =
                    cost::zen_balanced_parallelism(p, n, density, prof.densification(), 1.0);
                Cost::new(2.0 * (p as f64 - 1.0), words + n as f64 / 32.0 * frac(p))
            }
            Self::OmniReduceBlocks { block } => {
                let b = block as f64;
                let blocks = n.div_ceil(block) as f64;
                let touched = |entries: f64| blocks * (1.0 - (1.0 - b / n as f64).powf(entries));
                // Push: each other rank's touched blocks of this partition;
                // pull: the union's touched blocks of the others' partitions.
                let push = touched(k as f64) / p as f64 * (p as f64 - 1.0);
                let pull = touched(prof.union as f64) * frac(p);
                Cost::new(2.0 * (p as f64 - 1.0), (push + pull) * (b + 1.0))
            }
            Self::Gtopk { k } => cost::gtopk(p, k),
            Self::OkTopk { k, .. } => prof.within(cost::ok_topk(p, k)),
            Self::Spardl { k } => cost::spardl(p, k),
            Self::SpardlRsag { k, d } => cost::spardl_rsag(p, k, d),
            Self::SpardlBsag { k, d } => prof.within(cost::spardl_bsag(p, k, d)),
        }
    }
}

fn frac(p: usize) -> f64 {
    (p as f64 - 1.0) / p as f64
}

/// One algorithm ready to run, with the state it keeps across calls
/// (Ok-Topk's thresholds, B-SAG's `h`, Zen's partition index).
#[derive(Debug, Clone)]
pub struct Allreduce<E> {
    algorithm: Algorithm,
    ok: Option<OkTopk<E>>,
    bsag: Option<SpardlBsag>,
    zen: Option<(usize, usize, Arc<PartitionIndex>)>,
}

impl<E: Element> Allreduce<E> {
    /// A runner for `algorithm`.
    ///
    /// # Errors
    /// The algorithm's parameter errors ([`Error::InvalidParameter`]).
    pub fn new(algorithm: Algorithm) -> Result<Self> {
        Ok(Self {
            algorithm,
            ok: match algorithm {
                Algorithm::OkTopk { k, period } => Some(OkTopk::new(k, period)?),
                _ => None,
            },
            bsag: match algorithm {
                Algorithm::SpardlBsag { k, d } => Some(SpardlBsag::new(k, d)?),
                _ => None,
            },
            zen: None,
        })
    }

    /// The algorithm this runs.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// One allreduce of `v` over `t`.
    ///
    /// # Errors
    /// As the algorithm's function.
    pub fn run<T: Transport + ?Sized>(
        &mut self,
        t: &mut T,
        v: &SparseVec<E>,
    ) -> Result<Reduced<E>> {
        match self.algorithm {
            Algorithm::TopkA => topk_a(t, v),
            Algorithm::TopkDsa => topk_dsa(t, v),
            Algorithm::SsarRecursiveDouble => ssar_recursive_double(t, v),
            Algorithm::SsarSplitAllgather => ssar_split_allgather(t, v),
            Algorithm::DsarSplitAllgather { qsgd } => dsar_split_allgather(t, v, qsgd),
            Algorithm::ZenBalancedParallelism { seed } => {
                let (p, dim) = (t.size(), v.dim());
                let index = match &self.zen {
                    Some((zp, zd, index)) if *zp == p && *zd == dim => index.clone(),
                    _ => {
                        // Built before the call (8 bytes per coordinate); a
                        // refused allocation reaches every rank as an error.
                        let built = H0::new(seed, p as u32)
                            .and_then(|h0| PartitionIndex::new(h0, dim))
                            .map(Arc::new);
                        let index = match built {
                            Ok(index) => index,
                            Err(e) => return crate::zen::zen_failed(t, v, seed, e),
                        };
                        self.zen = Some((p, dim, index.clone()));
                        index
                    }
                };
                zen_balanced_parallelism(t, v, &index)
            }
            Algorithm::OmniReduceBlocks { block } => omnireduce_blocks(t, v, block),
            Algorithm::Gtopk { k } => gtopk(t, v, k),
            Algorithm::OkTopk { .. } => self.ok.as_mut().expect("made in new").allreduce(t, v),
            Algorithm::Spardl { k } => spardl(t, v, k),
            Algorithm::SpardlRsag { k, d } => spardl_rsag(t, v, k, d),
            Algorithm::SpardlBsag { .. } => {
                self.bsag.as_mut().expect("made in new").allreduce(t, v)
            }
        }
    }
}

/// The planner: on each call it picks, among its candidates, the algorithm
/// with the least modelled time `alpha * rounds + beta * words`
/// ([`Algorithm::model`]) for this call's profile, and runs it.
///
/// The profile must be the same on every rank, or ranks would pick
/// different algorithms. Each call therefore starts with a Bruck allgather
/// of every rank's entry count (`ceil(lg P)` rounds of a few bytes, not
/// counted in the returned traffic), which gives `k_max` and `k_sum`
/// exactly. The union of the index sets is only known after the
/// allreduce: it is estimated from the densification ratio of the last
/// calls (the result's entries over `k_sum`, identical on every rank),
/// averaged with weight 1/2 on the newest, as Zen profiles sparsity at run
/// time. Before the first call the planner assumes no overlap (the worst
/// case for sparse algorithms). Ties go to the earlier candidate.
#[derive(Debug, Clone)]
pub struct Auto<E> {
    alpha: f64,
    beta: f64,
    runners: Vec<Allreduce<E>>,
    densification: Option<f64>,
    last: Option<Algorithm>,
}

impl<E: Element> Auto<E> {
    /// A planner over the lossless algorithms ([`Algorithm::LOSSLESS`]:
    /// TopkA, TopkDSA, SSAR_Recursive_double, SSAR_Split_allgather,
    /// DSAR_Split_allgather, Zen's Balanced Parallelism), for a network of `alpha` seconds per
    /// message and `beta` seconds per 32-bit word.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a negative or non-finite `alpha` or
    /// `beta`.
    pub fn lossless(alpha: f64, beta: f64) -> Result<Self> {
        Self::new(alpha, beta, &Algorithm::LOSSLESS)
    }

    /// A planner over `candidates` (mixing lossless and lossy ones is
    /// allowed; the choice then also decides what is dropped).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for no candidates or a bad `alpha`,
    /// `beta`; the candidates' parameter errors.
    pub fn new(alpha: f64, beta: f64, candidates: &[Algorithm]) -> Result<Self> {
        for (name, x) in [("alpha", alpha), ("beta", beta)] {
            if !(x.is_finite() && x >= 0.0) {
                return Err(Error::invalid(
                    name,
                    format!("{x} is not a finite non-negative time"),
                ));
            }
        }
        if candidates.is_empty() {
            return Err(Error::invalid("candidates", "none given"));
        }
        Ok(Self {
            alpha,
            beta,
            runners: candidates
                .iter()
                .map(|&a| Allreduce::new(a))
                .collect::<Result<_>>()?,
            densification: None,
            last: None,
        })
    }

    /// The algorithm the last call ran.
    pub fn last_choice(&self) -> Option<Algorithm> {
        self.last
    }

    /// The profile the planner would use for these entry counts.
    pub fn profile(&self, n: usize, value_bytes: usize, counts: &[usize]) -> Profile {
        let p = counts.len();
        let k_max = counts.iter().copied().max().unwrap_or(0);
        let k_sum: usize = counts.iter().sum();
        let gamma = self.densification.unwrap_or(1.0);
        let union = ((k_sum as f64 * gamma).round() as usize)
            .clamp(k_max, k_sum.max(k_max))
            .min(n);
        Profile {
            p,
            n,
            value_bytes,
            k_max,
            k_sum,
            union,
        }
    }

    /// The candidate with the least modelled time for `prof`.
    pub fn choose(&self, prof: &Profile) -> usize {
        let mut best = (f64::INFINITY, 0);
        for (i, r) in self.runners.iter().enumerate() {
            let c = r.algorithm().model(prof);
            let time = c.time(self.alpha, self.beta);
            if time < best.0 {
                best = (time, i);
            }
        }
        best.1
    }

    /// Profiles the call, picks the algorithm and runs it.
    ///
    /// # Errors
    /// Transport errors; the chosen algorithm's errors.
    pub fn allreduce<T: Transport + ?Sized>(
        &mut self,
        t: &mut T,
        v: &SparseVec<E>,
    ) -> Result<Reduced<E>> {
        let all = bruck_allgather(t, &(v.nnz() as u64).to_le_bytes())?;
        let counts = all
            .iter()
            .map(|b| {
                b.as_slice()
                    .try_into()
                    .map(|w| u64::from_le_bytes(w) as usize)
                    .map_err(|_| Error::corrupt("entry count", "not 8 bytes"))
            })
            .collect::<Result<Vec<_>>>()?;
        let prof = self.profile(v.dim(), E::BYTES, &counts);
        let i = self.choose(&prof);
        let red = self.runners[i].run(t, v)?;
        self.last = Some(self.runners[i].algorithm());
        if prof.k_sum > 0 && self.runners[i].algorithm().lossless() {
            let seen = red.result.nnz() as f64 / prof.k_sum as f64;
            self.densification = Some(match self.densification {
                Some(old) => 0.5 * old + 0.5 * seen,
                None => seen,
            });
        }
        Ok(red)
    }
}
