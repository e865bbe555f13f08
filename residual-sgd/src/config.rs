//! The optimizer's settings.

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
    pub(crate) density: f64,
    pub(crate) rule: Rule,
    pub(crate) compress_threshold: usize,
    pub(crate) clip: Option<f32>,
    pub(crate) qsgd: Option<(QsgdParams, bool)>,
    pub(crate) quantized: bool,
    pub(crate) fusion: usize,
    pub(crate) collection: Collection,
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
            ("density", self.density.to_bits()),
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
        ]
    }

    /// `lr` (finite, positive), the density of the sent set in `(0, 1]`,
    /// the rule; RedSync's compress threshold of 128 KiB, no clipping.
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
        check_density(density)?;
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
            compress_threshold: 128 << 10,
            clip: None,
            qsgd: None,
            quantized: false,
            fusion: 0,
            collection: Collection::Global,
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
    /// [`Error::InvalidParameter`] for bad QSGD parameters or an RGC rule.
    pub fn qsgd(self, bits: u32, bucket: usize, feedback: bool) -> Result<Self> {
        if self.rule != Rule::TopK {
            return Err(Error::invalid(
                "qsgd",
                "SparCML's quantization goes with top-k SGD",
            ));
        }
        Ok(Self {
            qsgd: Some((QsgdParams::new(bits, bucket, 0x51)?, feedback)),
            ..self
        })
    }
    /// RedSync's quantized mode (RGC only): each compressed layer but the
    /// output layer (the last layer of more than one dimension, so a
    /// trailing bias does not count) alternates top-k and low-k by signed value
    /// from step to step and sends the selected entries' same-sign mean;
    /// what the mean misses of each value goes back into the residual,
    /// exactly ([`sparse_coll::wire::WireValues::split_exact`]).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for top-k SGD.
    pub fn quantized(self) -> Result<Self> {
        if self.rule == Rule::TopK {
            return Err(Error::invalid(
                "quantized",
                "RedSync's quantized mode goes with RGC",
            ));
        }
        Ok(Self {
            quantized: true,
            ..self
        })
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
    /// Layers of at most `bytes` bytes go dense (RedSync's `compress_thd`;
    /// 0 compresses every layer).
    #[must_use]
    pub fn compress_threshold(self, bytes: usize) -> Self {
        Self {
            compress_threshold: bytes,
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
        check_density(density)?;
        Ok(Self { density, ..self })
    }
    /// The learning rate.
    pub fn lr(&self) -> f32 {
        self.lr
    }
    /// The density.
    pub fn density(&self) -> f64 {
        self.density
    }
    /// The rule.
    pub fn rule(&self) -> Rule {
        self.rule
    }
}

fn check_density(density: f64) -> Result<()> {
    if !(density > 0.0 && density <= 1.0) {
        return Err(Error::invalid(
            "density",
            format!("{density} not in (0, 1]"),
        ));
    }
    Ok(())
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
