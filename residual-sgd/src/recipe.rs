//! The papers' training recipes: each residual optimizer over the sparse
//! allreduce of its paper ([`Scheme`], [`Family`], [`schemes`]), a run of
//! one at a density or its dense counterpart ([`Run`]), and the settings
//! each makes ([`config`]), as `sparse-bench train` and `sparse-bench
//! step` run them.
//!
//! ```
//! use residual_sgd::recipe::{self, Hyper, Run};
//!
//! let spardl = recipe::schemes_named(&["spardl_global_residual".into()])?.remove(0);
//! let run = Run::Sparse { scheme: spardl, density: 0.01 };
//! assert_eq!(run.collective(), "spardl");
//! assert_eq!(run.dense().name(), "dense_momentum_sgd");
//! let cfg = recipe::config(&run, &Hyper::default(), 128 * 1024)?;
//! assert_eq!(cfg.lr(), 0.1);
//! # Ok::<(), sparse_core::Error>(())
//! ```

use crate::{BucketBudget, Buckets, Config, Rule};
use sparse_core::{Error, Result};

/// The optimizer family of a scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// SparCML's top-k SGD (no momentum); dense counterpart: plain SGD.
    TopK,
    /// RedSync's RGC (momentum correction, factor masking).
    Rgc,
    /// RGC in RedSync's quantized mode (same-sign means, top-k/low-k).
    RgcQuantized,
    /// RGC with DGC's density warm-up and gradient clipping.
    Dgc,
    /// RGC over SparDL's collective with global residual collection.
    Spardl,
}

/// A residual optimizer over a sparse allreduce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheme {
    /// Name in reports.
    pub name: &'static str,
    /// The optimizer.
    pub family: Family,
    /// The collective (a registry name with parameters).
    pub collective: &'static str,
}

/// The schemes `sparse-bench train` runs by default: each residual
/// optimizer over the sparse allreduce of its paper.
pub fn schemes() -> Vec<Scheme> {
    vec![
        Scheme {
            name: "sparcml_topk_sgd",
            family: Family::TopK,
            collective: "ssar_recursive_double",
        },
        Scheme {
            name: "redsync_rgc",
            family: Family::Rgc,
            collective: "topk_a",
        },
        Scheme {
            name: "redsync_rgc_quantized",
            family: Family::RgcQuantized,
            collective: "topk_a:values=ssmean",
        },
        Scheme {
            name: "dgc",
            family: Family::Dgc,
            collective: "topk_a",
        },
        Scheme {
            name: "spardl_global_residual",
            family: Family::Spardl,
            collective: "spardl",
        },
    ]
}

/// The schemes `names` names, in [`schemes`]'s spelling (all when empty).
///
/// # Errors
/// [`Error::InvalidParameter`] for an unknown name, listing the known ones.
pub fn schemes_named(names: &[String]) -> Result<Vec<Scheme>> {
    let all = schemes();
    if names.is_empty() {
        return Ok(all);
    }
    names
        .iter()
        .map(|name| {
            all.iter().find(|s| s.name == name).cloned().ok_or_else(|| {
                let known: Vec<&str> = all.iter().map(|s| s.name).collect();
                Error::invalid(
                    "scheme",
                    format!("unknown {name:?}; known: {}", known.join(", ")),
                )
            })
        })
        .collect()
}

/// What a run trains.
#[derive(Debug, Clone, PartialEq)]
pub enum Run {
    /// Every layer through the transport's dense allreduce (the ring on
    /// threads, `MPI_Allreduce` under MPI); momentum SGD when
    /// `momentum` (else plain SGD).
    Dense {
        /// Momentum SGD (RGC's settings) or plain SGD.
        momentum: bool,
    },
    /// A scheme at a density.
    Sparse {
        /// The scheme.
        scheme: Scheme,
        /// Final density of the sent set.
        density: f64,
    },
}

impl Run {
    /// The report's name of the run.
    pub fn name(&self) -> String {
        match self {
            Run::Dense { momentum: true } => "dense_momentum_sgd".into(),
            Run::Dense { momentum: false } => "dense_sgd".into(),
            Run::Sparse { scheme, .. } => scheme.name.into(),
        }
    }
    /// The collective's name.
    pub fn collective(&self) -> String {
        match self {
            Run::Dense { .. } => "dense_allreduce".into(),
            Run::Sparse { scheme, .. } => scheme.collective.into(),
        }
    }
    /// The final density of the sent set (1 for dense runs).
    pub fn density(&self) -> f64 {
        match self {
            Run::Sparse { density, .. } => *density,
            Run::Dense { .. } => 1.0,
        }
    }
    /// The dense counterpart (same optimizer settings, dense allreduce).
    pub fn dense(&self) -> Run {
        match self {
            Run::Sparse { scheme, .. } => Run::Dense {
                momentum: scheme.family != Family::TopK,
            },
            d => d.clone(),
        }
    }
}

/// The settings a recipe takes besides its scheme and density (the
/// defaults are `sparse-bench train`'s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hyper {
    /// The learning rate.
    pub lr: f32,
    /// RGC's momentum (and the dense momentum SGD's).
    pub momentum: f32,
    /// RGC's weight decay.
    pub weight_decay: f32,
    /// DGC's clipping constant.
    pub clip: f32,
    /// Fuse layers into buckets of at least this many bytes (compressed
    /// layers with [`Config::buckets`], dense ones with [`Config::fuse`]);
    /// `None`: a call per layer.
    pub bucket_bytes: Option<usize>,
    /// With buckets: one budget over each bucket ([`BucketBudget::Global`]).
    pub global_budget: bool,
}

impl Default for Hyper {
    fn default() -> Self {
        Self {
            lr: 0.1,
            momentum: 0.9,
            weight_decay: 1e-4,
            clip: 5.0,
            bucket_bytes: None,
            global_budget: false,
        }
    }
}

/// The optimizer settings a run uses: [`config_with_threshold`] with
/// RedSync's compress threshold (`redsync_threshold` bytes) for the two
/// RedSync schemes and none for the others, whose papers have no such
/// rule.
///
/// # Errors
/// Invalid settings.
pub fn config(run: &Run, a: &Hyper, redsync_threshold: usize) -> Result<Config> {
    let threshold = match run {
        Run::Sparse { scheme, .. }
            if matches!(scheme.family, Family::Rgc | Family::RgcQuantized) =>
        {
            redsync_threshold
        }
        _ => 0,
    };
    config_with_threshold(run, a, threshold)
}

/// The optimizer settings of `run` with layers of at most
/// `compress_threshold` bytes dense, and biases (one dimension) dense in
/// every scheme (DGC's rule).
///
/// # Errors
/// Invalid settings.
pub fn config_with_threshold(run: &Run, a: &Hyper, compress_threshold: usize) -> Result<Config> {
    let rgc = Rule::Rgc {
        momentum: a.momentum,
        nesterov: false,
        weight_decay: a.weight_decay,
        factor_masking: true,
    };
    let bucket = a.bucket_bytes;
    Ok(match run {
        Run::Dense { momentum: false } => {
            Config::dense(a.lr, Rule::TopK)?.fuse(bucket.unwrap_or(0))
        }
        Run::Dense { momentum: true } => Config::dense(a.lr, rgc)?.fuse(bucket.unwrap_or(0)),
        Run::Sparse { scheme, density } => {
            let rule = if scheme.family == Family::TopK {
                Rule::TopK
            } else {
                rgc
            };
            // Biases go dense in every scheme (DGC's rule, as this
            // benchmark has always run them; `dense_layers` reports it).
            let cfg = Config::new(a.lr, *density, rule)?
                .compress_threshold(compress_threshold)
                .compress_min_dims(2);
            let cfg = match scheme.family {
                Family::RgcQuantized => cfg.quantized()?,
                Family::Dgc => cfg.clip(a.clip)?,
                _ => cfg,
            };
            match bucket {
                Some(bytes) => {
                    let budget = if a.global_budget {
                        BucketBudget::Global
                    } else {
                        BucketBudget::PerLayer
                    };
                    cfg.buckets(Buckets::new(bytes)?.budget(budget))?
                }
                None => cfg,
            }
        }
    })
}

/// The collective a compressed layer of `run` goes through: the scheme's,
/// except TopkA for the output layer (`output`) in RedSync's quantized
/// mode, which leaves that layer exact; TopkA for the dense runs (which
/// compress no layer).
pub fn layer_collective(run: &Run, output: bool) -> &'static str {
    match run {
        Run::Sparse { scheme, .. } if !(scheme.family == Family::RgcQuantized && output) => {
            scheme.collective
        }
        _ => "topk_a",
    }
}
