//! Seeded generators of synthetic gradients, for benchmarks, examples and
//! tests alike: always built (the test suites of the `testing` feature use
//! them too).
//!
//! [`GradientSpec`] draws one sparse gradient per rank with a chosen
//! dimension, density, overlap ratio between ranks (Zen Def. 3), skewness
//! (Zen Def. 5) and value distribution; [`dense_values`] draws dense
//! inputs. The same spec and seed give the same gradients on every machine.

/// The named, seedable generator of synthetic gradients and test inputs:
/// ChaCha8, whose stream is fixed by its specification (not by a `rand`
/// version). Hashing seeds ([`crate::SplitMix64`]) and QSGD's counter-based
/// draws, which kernels reproduce bit for bit, keep their own generators.
pub type Rng = rand_chacha::ChaCha8Rng;
use crate::stats::{even_len, even_start};
use crate::{Element, Error, Result, SparseVec};
use rand::{Rng as _, SeedableRng};

/// Distribution of the non-zero values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueDist {
    /// Normal with mean 0.
    Normal {
        /// Standard deviation.
        std: f64,
    },
    /// Uniform in `[-half_width, half_width]`.
    Uniform {
        /// Half the width.
        half_width: f64,
    },
    /// Student's t with 2 degrees of freedom times `scale`: heavy tails as
    /// in real gradients (infinite variance, finite mean).
    HeavyTailed {
        /// Scale.
        scale: f64,
    },
    /// Uniform non-zero integers in `[-max, max]`: sums are exact in floats,
    /// so collective results can be compared bit for bit.
    Integer {
        /// Largest magnitude (at least 1).
        max: u32,
    },
}

impl ValueDist {
    /// One non-zero draw.
    pub fn sample<R: rand::Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        match *self {
            ValueDist::Normal { std } => normal(rng) * std,
            ValueDist::Uniform { half_width } => (2.0 * rng.random::<f64>() - 1.0) * half_width,
            ValueDist::HeavyTailed { scale } => {
                // t(2) = Z / sqrt(chi2(2) / 2), chi2(2) = -2 ln U.
                let u = 1.0 - rng.random::<f64>();
                normal(rng) / (-u.ln()).sqrt() * scale
            }
            ValueDist::Integer { max } => {
                let m = max.max(1) as u64;
                let v = rng.random_range(0..2 * m) as i64 - m as i64;
                (if v >= 0 { v + 1 } else { v }) as f64
            }
        }
    }

    /// A non-zero element drawn from the distribution (draws again if the
    /// conversion to `E` rounds to zero).
    pub fn sample_element<E: Element>(&self, rng: &mut (impl rand::Rng + ?Sized)) -> E {
        for _ in 0..64 {
            let v = E::from_f64_nearest(self.sample(rng));
            if v != E::zero() && v.is_finite() {
                return v;
            }
        }
        E::one()
    }
}

fn normal<R: rand::Rng + ?Sized>(rng: &mut R) -> f64 {
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Skew (Zen Def. 5): with the dimension split evenly into `partitions`
/// ranges, a fraction `ratio / partitions` of the indices falls in the first
/// range and the rest uniformly in the others, so the skewness ratio is
/// about `ratio` (at least 1, at most `partitions`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Skew {
    /// Number of even ranges.
    pub partitions: usize,
    /// Target skewness ratio.
    pub ratio: f64,
}

/// What synthetic gradients to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct GradientSpec {
    /// Dimension.
    pub dim: usize,
    /// Non-zeros per rank as a fraction of `dim`, in `[0, 1]`.
    pub density: f64,
    /// Overlap ratio between any two ranks (Zen Def. 3), in `[0, 1]`: this
    /// fraction of each rank's indices is shared by all ranks, the rest is
    /// private (disjoint across ranks).
    pub overlap: f64,
    /// Optional skew of the index distribution.
    pub skew: Option<Skew>,
    /// Value distribution.
    pub values: ValueDist,
    /// Seed.
    pub seed: u64,
}

impl GradientSpec {
    /// Uniform indices, no overlap, normal values.
    pub fn new(dim: usize, density: f64, seed: u64) -> Self {
        Self {
            dim,
            density,
            overlap: 0.0,
            skew: None,
            values: ValueDist::Normal { std: 1.0 },
            seed,
        }
    }

    /// Non-zeros per rank.
    pub fn nnz(&self) -> usize {
        (self.density * self.dim as f64).round() as usize
    }

    /// One sparse gradient per rank: [`GradientSpec::pool`] and each
    /// rank's [`GradientPool::rank`].
    ///
    /// # Errors
    /// As [`GradientSpec::pool`].
    pub fn generate<E: Element>(&self, ranks: usize) -> Result<Vec<SparseVec<E>>> {
        let pool = self.pool(ranks)?;
        (0..ranks).map(|r| pool.rank(r)).collect()
    }

    /// The index pool of `ranks` ranks, from which each rank draws its own
    /// gradient ([`GradientPool::rank`]) without the others' being built:
    /// the shared indices and every rank's private ones, `4 (shared + P
    /// private)` bytes. A simulated cluster of a thousand ranks holds this
    /// once and lets each rank generate its input inside its own thread.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if density or overlap is outside
    /// `[0, 1]`, the skew is out of range, or the dimension cannot hold the
    /// shared indices plus every rank's private ones.
    pub fn pool(&self, ranks: usize) -> Result<GradientPool> {
        let (shared, private) = self.split(ranks)?;
        let total = shared + ranks * private;
        let mut rng = Rng::seed_from_u64(self.seed);
        let indices = self.draw_distinct(total, &mut rng);
        Ok(GradientPool {
            spec: self.clone(),
            ranks,
            shared,
            private,
            indices,
        })
    }

    /// How each rank's entries split for `ranks` ranks, without drawing
    /// them: `(shared, private)`, the indices every rank holds and those
    /// each holds alone ([`GradientSpec::pool`] draws them; a caller that
    /// only needs the counts, such as a memory estimate, stops here).
    ///
    /// # Errors
    /// As [`GradientSpec::pool`].
    pub fn split(&self, ranks: usize) -> Result<(usize, usize)> {
        crate::sparse::check_dim(self.dim)?;
        if !(0.0..=1.0).contains(&self.density) {
            return Err(Error::invalid(
                "density",
                format!("{} not in [0, 1]", self.density),
            ));
        }
        if !(0.0..=1.0).contains(&self.overlap) {
            return Err(Error::invalid(
                "overlap",
                format!("{} not in [0, 1]", self.overlap),
            ));
        }
        if let Some(s) = self.skew
            && (s.partitions == 0
                || s.partitions > self.dim.max(1)
                || !(1.0..=s.partitions as f64).contains(&s.ratio))
        {
            return Err(Error::invalid(
                "skew",
                format!("{s:?} for dimension {}", self.dim),
            ));
        }
        let nnz = self.nnz();
        let shared = if ranks <= 1 {
            nnz
        } else {
            (self.overlap * nnz as f64).round() as usize
        };
        let private = nnz - shared;
        ranks
            .checked_mul(private)
            .and_then(|x| x.checked_add(shared))
            .filter(|&t| t <= self.dim)
            .ok_or_else(|| {
                Error::invalid(
                    "density",
                    format!(
                        "{ranks} ranks x {nnz} non-zeros with overlap {} need {} distinct indices > dimension {}",
                        self.overlap,
                        shared as u128 + ranks as u128 * private as u128,
                        self.dim
                    ),
                )
            })?;
        Ok((shared, private))
    }

    /// `count` distinct indices in draw order.
    fn draw_distinct(&self, count: usize, rng: &mut Rng) -> Vec<u32> {
        let dim = self.dim;
        if count * 2 > dim {
            // Dense regime: a partial Fisher-Yates shuffle of 0..dim (skew
            // cannot be honoured when most coordinates are taken anyway).
            let mut all: Vec<u32> = (0..dim as u32).collect();
            for i in 0..count {
                let j = i + rng.random_range(0..(dim - i) as u64) as usize;
                all.swap(i, j);
            }
            all.truncate(count);
            return all;
        }
        let mut taken = vec![0u64; dim.div_ceil(64)];
        let mut out = Vec::with_capacity(count);
        while out.len() < count {
            let mut i = self.draw_one(rng);
            let mut tries = 0;
            while taken[i / 64] >> (i % 64) & 1 == 1 {
                tries += 1;
                i = if tries < 64 {
                    self.draw_one(rng)
                } else {
                    (i + 1) % dim
                };
            }
            taken[i / 64] |= 1 << (i % 64);
            out.push(i as u32);
        }
        out
    }

    fn draw_one(&self, rng: &mut Rng) -> usize {
        match self.skew {
            Some(s) if s.partitions > 1 => {
                let first = even_len(0, self.dim, s.partitions);
                if rng.random::<f64>() < s.ratio / s.partitions as f64 || first == self.dim {
                    rng.random_range(0..first as u64) as usize
                } else {
                    let start = even_start(1, self.dim, s.partitions);
                    start + rng.random_range(0..(self.dim - start) as u64) as usize
                }
            }
            _ => rng.random_range(0..self.dim as u64) as usize,
        }
    }
}

/// The indices of every rank's gradient of a [`GradientSpec`]
/// ([`GradientSpec::pool`]); each rank's vector is built on demand.
#[derive(Debug, Clone, PartialEq)]
pub struct GradientPool {
    spec: GradientSpec,
    ranks: usize,
    shared: usize,
    private: usize,
    indices: Vec<u32>,
}

impl GradientPool {
    /// Ranks the pool was drawn for.
    pub fn ranks(&self) -> usize {
        self.ranks
    }
    /// Indices every rank holds.
    pub fn shared(&self) -> usize {
        self.shared
    }
    /// Indices each rank holds alone.
    pub fn private(&self) -> usize {
        self.private
    }
    /// Entries of the sum of every rank's gradient: the shared indices and
    /// every rank's private ones.
    pub fn union(&self) -> usize {
        self.indices.len()
    }
    /// Rank `r`'s gradient: the shared indices and its private ones,
    /// sorted, with values from its own seeded stream; the same vector
    /// [`GradientSpec::generate`] gives rank `r`.
    ///
    /// # Errors
    /// [`Error::NoSuchRank`] for `r >= ranks`.
    pub fn rank<E: Element>(&self, r: usize) -> Result<SparseVec<E>> {
        if r >= self.ranks {
            return Err(Error::NoSuchRank {
                rank: r,
                size: self.ranks,
            });
        }
        let (shared, private) = (self.shared, self.private);
        let mut idx: Vec<u32> = self.indices[..shared].to_vec();
        idx.extend_from_slice(&self.indices[shared + r * private..shared + (r + 1) * private]);
        idx.sort_unstable();
        let mut vr = Rng::seed_from_u64(self.spec.seed ^ (0x9e37_79b9 * (r as u64 + 1)));
        let values = (0..idx.len())
            .map(|_| self.spec.values.sample_element::<E>(&mut vr))
            .collect();
        SparseVec::new(self.spec.dim, idx, values)
    }
}

/// `n` dense values drawn from `dist` (every one non-zero).
pub fn dense_values<E: Element>(n: usize, dist: ValueDist, seed: u64) -> Vec<E> {
    let mut rng = Rng::seed_from_u64(seed);
    (0..n).map(|_| dist.sample_element(&mut rng)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{overlap_ratio, skewness_ratio};

    #[test]
    fn overlap_and_density_are_as_asked() {
        for overlap in [0.0, 0.25, 0.5, 1.0] {
            let spec = GradientSpec {
                overlap,
                ..GradientSpec::new(100_000, 0.01, 5)
            };
            let g = spec.generate::<f32>(4).unwrap();
            for r in &g {
                assert_eq!(r.nnz(), 1000);
            }
            for a in 0..4 {
                for b in a + 1..4 {
                    approx::assert_abs_diff_eq!(
                        overlap_ratio(g[a].indices(), g[b].indices()),
                        overlap,
                        epsilon = 1e-9
                    );
                }
            }
        }
    }

    #[test]
    fn skew_is_as_asked() {
        let spec = GradientSpec {
            skew: Some(Skew {
                partitions: 8,
                ratio: 5.0,
            }),
            ..GradientSpec::new(1_000_000, 0.01, 1)
        };
        let g = spec.generate::<f32>(1).unwrap();
        let s = skewness_ratio(g[0].indices(), 1_000_000, 8);
        approx::assert_abs_diff_eq!(s, 5.0, epsilon = 0.3);
        let u = GradientSpec::new(1_000_000, 0.01, 1)
            .generate::<f32>(1)
            .unwrap();
        assert!(skewness_ratio(u[0].indices(), 1_000_000, 8) < 1.2);
    }

    #[test]
    fn deterministic_and_validated() {
        let spec = GradientSpec {
            values: ValueDist::Integer { max: 3 },
            ..GradientSpec::new(1000, 0.9, 2)
        };
        assert_eq!(
            spec.generate::<f64>(1).unwrap(),
            spec.generate::<f64>(1).unwrap()
        );
        assert!(
            spec.generate::<f64>(1).unwrap()[0]
                .values()
                .iter()
                .all(|v| v.fract() == 0.0 && *v != 0.0 && v.abs() <= 3.0)
        );
        assert!(spec.generate::<f32>(2).is_err()); // 2 x 900 disjoint > 1000
        assert!(
            GradientSpec {
                density: 1.5,
                ..spec.clone()
            }
            .generate::<f32>(1)
            .is_err()
        );
        let full = GradientSpec::new(50, 1.0, 3)
            .generate::<half::bf16>(1)
            .unwrap();
        assert_eq!(full[0].nnz(), 50);
    }
}
