//! The optimizer's settings.

use crate::bucket::{BucketBudget, Buckets, FillOrder};
use crate::layer::LayerSpec;
use sparse_core::budget::{Budget, Density};
use sparse_core::qsgd::QsgdParams;
use sparse_core::{Error, Result};

/// How a layer's update is formed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rule {
    /// SparCML's top-k SGD: no momentum, no weight decay.
    TopK,
    /// RedSync's residual gradient compression.
    Rgc {
        /// Momentum `m` (0: plain SGD).
        momentum: f32,
        /// Nesterov's form of momentum.
        nesterov: bool,
        /// Weight decay added into the gradient.
        weight_decay: f32,
        /// Factor masking: zero the momentum of the sent entries.
        factor_masking: bool,
    },
}

/// The optimizer's settings, valid by construction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    pub(crate) lr: f32,
    pub(crate) density: Density,
    pub(crate) rule: Rule,
    pub(crate) compress_threshold: usize,
    pub(crate) min_dims: usize,
    pub(crate) dense: bool,
    pub(crate) clip: Option<f32>,
    pub(crate) qsgd: Option<(QsgdParams, bool)>,
    pub(crate) quantized: bool,
    pub(crate) fusion: usize,
    pub(crate) collection: Collection,
    pub(crate) buckets: Option<Buckets>,
}

/// Where what a collective cut goes (SparDL Alg. 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Collection {
    /// Global residual collection: `dropped` returns into the residual of
    /// the rank that holds it, so the inputs sum exactly to what was applied
    /// plus every residual (nothing lost, nothing counted twice).
    #[default]
    Global,
    /// The paper's variant: after a step the residual is this rank's
    /// accumulator outside the result's indices (what it sent that did not
    /// make the result comes back; what the collective cut there is not
    /// kept) and `dropped` inside. So conservation holds only up to the
    /// entries cut outside the result.
    Paper,
}

impl Config {
    /// The settings ranks must share, as the trainer's entry round compares
    /// them: a rank with another learning rate, rule, density, clipping or
    /// quantization would apply other updates than its peers, silently.
    pub(crate) fn fields(&self) -> Vec<(&'static str, u64)> {
        let (kind, momentum, nesterov, weight_decay, masking) = match self.rule {
            Rule::TopK => (0, 0.0, false, 0.0, false),
            Rule::Rgc {
                momentum,
                nesterov,
                weight_decay,
                factor_masking,
            } => (1, momentum, nesterov, weight_decay, factor_masking),
        };
        let (qsgd, feedback) = match self.qsgd {
            Some((q, feedback)) => (
                u64::from(q.bits()) | (q.bucket() as u64) << 8,
                u64::from(feedback),
            ),
            None => (0, 0),
        };
        vec![
            ("lr", u64::from(self.lr.to_bits())),
            ("density", self.density.get().to_bits()),
            ("rule", kind),
            ("momentum", u64::from(momentum.to_bits())),
            ("nesterov", u64::from(nesterov)),
            ("weight decay", u64::from(weight_decay.to_bits())),
            ("factor masking", u64::from(masking)),
            (
                "clip",
                self.clip.map_or(u64::MAX, |c| u64::from(c.to_bits())),
            ),
            ("qsgd", qsgd),
            ("qsgd feedback", feedback),
            ("quantized", u64::from(self.quantized)),
            (
                "collection",
                u64::from(self.collection == Collection::Paper),
            ),
            ("fusion", self.fusion as u64),
            ("dense", u64::from(self.dense)),
            ("bucket cap", self.buckets.map_or(0, |b| b.cap() as u64)),
            (
                "bucket budget",
                self.buckets
                    .map_or(0, |b| u64::from(b.budget_rule() == BucketBudget::Global)),
            ),
            (
                "bucket order",
                self.buckets
                    .map_or(0, |b| u64::from(b.fill_order() == FillOrder::List)),
            ),
        ]
    }

    /// `lr` (finite, positive), the density of the sent set in `(0, 1]`,
    /// the rule, and the rule's paper's keep-dense rules: for
    /// [`Rule::Rgc`] RedSync's compress threshold of 128 KiB (layers of at
    /// most 128 KiB go dense, Alg. 4's `size(w) > compress_thd`); for
    /// [`Rule::TopK`] none (SparCML's Alg. 1 sparsifies the whole
    /// gradient), so every layer is compressed. DGC's rule (only tensors
    /// of more than one dimension) is off until
    /// [`Config::compress_min_dims`] asks for it. No clipping.
    ///
    /// A [`crate::Trainer`] built with settings under which no layer is
    /// compressed is an error naming the rules that kept each layer
    /// dense; [`Config::dense`] is deliberate dense training.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a learning rate that is not finite
    /// and positive, a density outside `(0, 1]`, a momentum outside
    /// `[0, 1)` or a weight decay that is negative or not finite.
    pub fn new(lr: f32, density: f64, rule: Rule) -> Result<Self> {
        if !(lr.is_finite() && lr > 0.0) {
            return Err(Error::invalid(
                "lr",
                format!("{lr} is not finite and positive"),
            ));
        }
        let density = Density::new(density)?;
        if let Rule::Rgc {
            momentum,
            weight_decay,
            ..
        } = rule
        {
            if !(0.0..1.0).contains(&momentum) {
                return Err(Error::invalid(
                    "momentum",
                    format!("{momentum} not in [0, 1)"),
                ));
            }
            if !(weight_decay.is_finite() && weight_decay >= 0.0) {
                return Err(Error::invalid(
                    "weight_decay",
                    format!("{weight_decay} is not finite and non-negative"),
                ));
            }
        }
        Ok(Self {
            lr,
            density,
            rule,
            compress_threshold: match rule {
                Rule::TopK => 0,
                Rule::Rgc { .. } => REDSYNC_COMPRESS_THRESHOLD,
            },
            min_dims: 0,
            dense: false,
            clip: None,
            qsgd: None,
            quantized: false,
            fusion: 0,
            collection: Collection::Global,
            buckets: None,
        })
    }
    /// Deliberate dense training, the baseline the compressed rules are
    /// measured against: every layer goes through the dense allreduce
    /// and the rule's dense update (plain SGD on the mean gradient for
    /// [`Rule::TopK`]; momentum SGD with the rule's momentum, Nesterov
    /// and weight decay for [`Rule::Rgc`]), whatever its size. The density
    /// is 1; [`Config::compress_threshold`] and
    /// [`Config::compress_min_dims`] change nothing here.
    ///
    /// # Errors
    /// As [`Config::new`].
    pub fn dense(lr: f32, rule: Rule) -> Result<Self> {
        Ok(Self {
            dense: true,
            ..Self::new(lr, 1.0, rule)?
        })
    }
    /// Where what the collective cut goes ([`Collection`]).
    #[must_use]
    pub fn collection(self, collection: Collection) -> Self {
        Self { collection, ..self }
    }
    /// SparCML's `Q` (top-k SGD only): the sent values QSGD-quantized
    /// (`bits` 2, 4 or 8, buckets of `bucket`, a fresh seed each step);
    /// with `feedback` the quantization error, exact
    /// ([`sparse_core::encoding::Qsgd::encode_with_remainder`]), goes back
    /// into the residual, else it is lost as in the listing.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for bad QSGD parameters, an RGC rule,
    /// a [`Config::dense`] configuration (nothing selected to quantize) or
    /// a global bucket budget ([`Config::buckets`]).
    pub fn qsgd(self, bits: u32, bucket: usize, feedback: bool) -> Result<Self> {
        if self.dense {
            return Err(Error::invalid(
                "qsgd",
                "a dense configuration sends no selection to quantize",
            ));
        }
        if self.rule != Rule::TopK {
            return Err(Error::invalid(
                "qsgd",
                "SparCML's quantization goes with top-k SGD",
            ));
        }
        Self {
            qsgd: Some((QsgdParams::new(bits, bucket, 0x51)?, feedback)),
            ..self
        }
        .checked_buckets()
    }
    /// RedSync's quantized mode (RGC only): each compressed layer but the
    /// output layer (the last layer of more than one dimension, so a
    /// trailing bias does not count) alternates top-k and low-k by signed value
    /// from step to step and sends the selected entries' same-sign mean;
    /// what the mean misses of each value goes back into the residual,
    /// exactly ([`sparse_coll::wire::WireValues::split_exact`]).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for top-k SGD, a [`Config::dense`]
    /// configuration (nothing selected to quantize) or a global bucket
    /// budget ([`Config::buckets`]).
    pub fn quantized(self) -> Result<Self> {
        if self.dense {
            return Err(Error::invalid(
                "quantized",
                "a dense configuration sends no selection to quantize",
            ));
        }
        if self.rule == Rule::TopK {
            return Err(Error::invalid(
                "quantized",
                "RedSync's quantized mode goes with RGC",
            ));
        }
        Self {
            quantized: true,
            ..self
        }
        .checked_buckets()
    }
    /// Fused compressed layers ([`Buckets`]): one selection budget rule
    /// and one collective call per bucket of layers, as DDP buckets
    /// gradients (25 MiB, backward order: [`Buckets::default`]) and
    /// Ok-Topk and gTopk select over the whole model
    /// ([`BucketBudget::Global`]). Unset, each compressed layer makes its
    /// own call.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a global budget with QSGD or
    /// RedSync's quantized mode (both quantize each layer's selection;
    /// a global budget chooses across layers first): use per-layer
    /// budgets there.
    pub fn buckets(self, buckets: Buckets) -> Result<Self> {
        Self {
            buckets: Some(buckets),
            ..self
        }
        .checked_buckets()
    }
    /// The buckets of compressed layers, if fused.
    pub fn bucketing(&self) -> Option<Buckets> {
        self.buckets
    }
    /// These settings, if their buckets go with their quantization.
    fn checked_buckets(self) -> Result<Self> {
        let global = self
            .buckets
            .is_some_and(|b| b.budget_rule() == BucketBudget::Global);
        if global && (self.quantized || self.qsgd.is_some()) {
            return Err(Error::invalid(
                "buckets",
                "a global bucket budget chooses across layers before anything is quantized, \
                 and QSGD and RedSync's quantized mode quantize each layer's selection: use \
                 BucketBudget::PerLayer with them",
            ));
        }
        Ok(self)
    }
    /// Tensor fusion: consecutive dense layers are reduced together, one
    /// allreduce per bucket of at least `bytes` (0: one call per layer),
    /// as RedSync fuses small layers and DDP buckets gradients.
    #[must_use]
    pub fn fuse(self, bytes: usize) -> Self {
        Self {
            fusion: bytes,
            ..self
        }
    }
    /// Layers of at most `bytes` bytes (4 per parameter) go dense:
    /// RedSync's `compress_thd` (Alg. 4 compresses a layer when
    /// `size(w) > compress_thd`; Sec. 5.4 puts it at 128 KiB, below which
    /// compressing costs more than it saves). The default is 128 KiB for
    /// [`Rule::Rgc`] and 0 (every layer compressed) for [`Rule::TopK`].
    #[must_use]
    pub fn compress_threshold(self, bytes: usize) -> Self {
        Self {
            compress_threshold: bytes,
            ..self
        }
    }
    /// Layers of fewer than `dims` dimensions ([`crate::LayerSpec::dims`])
    /// go dense. `2` is DGC's rule: its reference implementation
    /// (`train.py` of Lin et al.'s code) hands the compressor only the
    /// parameters with `dim() > 1`, so biases and normalization
    /// parameters travel dense; none of the four papers this workspace
    /// implements states it, and none of their rules applies it, so the
    /// default is 0 (no rule).
    #[must_use]
    pub fn compress_min_dims(self, dims: usize) -> Self {
        Self {
            min_dims: dims,
            ..self
        }
    }
    /// DGC's local gradient clipping: each rank scales its gradient down to
    /// an L2 norm of at most `c / sqrt(P)`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] unless `c` is finite and positive.
    pub fn clip(self, c: f32) -> Result<Self> {
        if !(c.is_finite() && c > 0.0) {
            return Err(Error::invalid(
                "clip",
                format!("{c} is not finite and positive"),
            ));
        }
        Ok(Self {
            clip: Some(c),
            ..self
        })
    }
    /// The same settings with another density.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] outside `(0, 1]`.
    pub fn with_density(self, density: f64) -> Result<Self> {
        Ok(Self {
            density: Density::new(density)?,
            ..self
        })
    }
    /// The learning rate.
    pub fn lr(&self) -> f32 {
        self.lr
    }
    /// The density.
    pub fn density(&self) -> f64 {
        self.density.get()
    }
    /// The budget these settings give the lossy collectives a trainer
    /// builds ([`crate::Trainer::from_registry`]): their density, unless
    /// the collective's name gives its own (`k=` or `density=`).
    pub fn budget(&self) -> Budget {
        Budget::from(self.density)
    }
    /// The rule.
    pub fn rule(&self) -> Rule {
        self.rule
    }
    /// Whether this is [`Config::dense`]: every layer dense, deliberately.
    pub fn is_dense(&self) -> bool {
        self.dense
    }
    /// Whether a layer is compressed under these settings.
    pub fn compresses(&self, layer: &LayerSpec) -> bool {
        self.kept_dense(layer).is_none()
    }
    /// The first rule that keeps a layer dense under these settings, or
    /// `None` for a compressed layer.
    pub fn kept_dense(&self, layer: &LayerSpec) -> Option<KeptDense> {
        if self.dense {
            return Some(KeptDense::DenseConfig);
        }
        let bytes = layer.len.saturating_mul(4);
        if bytes <= self.compress_threshold {
            return Some(KeptDense::Threshold {
                bytes,
                threshold: self.compress_threshold,
            });
        }
        if layer.dims < self.min_dims {
            return Some(KeptDense::Dims {
                dims: layer.dims,
                min_dims: self.min_dims,
            });
        }
        None
    }
}

/// RedSync's `compress_thd`: 128 KiB (Sec. 5.4).
const REDSYNC_COMPRESS_THRESHOLD: usize = 128 << 10;

/// Why a layer goes through the dense allreduce
/// ([`Config::compresses`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeptDense {
    /// [`Config::dense`]: deliberate dense training.
    DenseConfig,
    /// RedSync's compress threshold ([`Config::compress_threshold`]): the
    /// layer's `bytes` are at most `threshold`.
    Threshold {
        /// The layer's size in bytes.
        bytes: usize,
        /// The threshold in bytes.
        threshold: usize,
    },
    /// DGC's rule ([`Config::compress_min_dims`]): the layer has fewer
    /// than `min_dims` dimensions.
    Dims {
        /// The layer's dimensions.
        dims: usize,
        /// The fewest compressed.
        min_dims: usize,
    },
}

impl std::fmt::Display for KeptDense {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeptDense::DenseConfig => write!(f, "Config::dense"),
            KeptDense::Threshold { bytes, threshold } => write!(
                f,
                "{bytes} bytes, at most the compress threshold of {threshold} bytes \
                 (RedSync's compress_thd, Config::compress_threshold)"
            ),
            KeptDense::Dims { dims, min_dims } => write!(
                f,
                "{dims} dimension(s), fewer than {min_dims} \
                 (DGC's rule, Config::compress_min_dims)"
            ),
        }
    }
}

/// DGC's density warm-up: `max(c^(e + 1), D)` with `c = D^(1 / (W + 1))`
/// for epochs `e < W`, then `D` (D = 0.001, W = 4: 25%, 6.3%, 1.6%, 0.4%,
/// then 0.1%).
pub fn dgc_density(epoch: usize, final_density: f64, warmup: usize) -> f64 {
    if epoch >= warmup {
        return final_density;
    }
    let c = final_density.powf(1.0 / (warmup as f64 + 1.0));
    c.powi(epoch as i32 + 1).max(final_density)
}
