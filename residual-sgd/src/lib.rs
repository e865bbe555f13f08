//! # residual-sgd
//!
//! Error-feedback optimizers: gradients in, a selector picks what to send, a
//! sparse allreduce sums it, the update is applied, and what was not sent
//! stays in a residual for the next step. Generic over the device
//! ([`sparse_core::Backend`]: weights, residuals and momenta live in backend
//! buffers; only the selected pairs and the reduced result cross to the
//! host), over the selection ([`sparse_select::Selector`]) and over the
//! collective ([`sparse_coll::SparseAllreduce`], a user's own included).
//!
//! The three parts are separate, as GRACE and DDP hooks separate them: the
//! residual memory (compensate: add the new gradient in; update: remove what
//! was sent, add back what the collective dropped), the compressor (the
//! selector, per layer) and the communicator (the allreduce, per layer, so
//! stateful collectives keep one state per tensor). [`Trainer::step`] runs
//! them for every layer and returns what was sent, what was dropped, the
//! traffic and the time of each phase.
//!
//! Rules ([`Rule`]):
//! - **SparCML's top-k SGD** (SparCML Alg. 1): `acc = eps + lr g`;
//!   `eps = acc - TopK(acc)`; `w -= allreduce_sum(TopK(acc)) / P`. The
//!   listing applies the sum; dividing by `P` makes `lr` the learning rate
//!   of SGD on the mean gradient, so the same `lr` compares with dense SGD.
//! - **RedSync's RGC** (RedSync Alg. 4): weight decay into `G`
//!   (`G += wd w`); momentum correction `U = m U + G; V = V + U` (the
//!   listing's lines 12/15/18 add the raw gradient, which would drop the
//!   weight decay: `G` is used); Nesterov as `U = m (U + G); V = V + U + G`
//!   (the listing's `V += grad` after `V += U` is not Nesterov: with all
//!   entries sent each step this form equals PyTorch's `G + m b`); the
//!   selected entries leave the residual (`V[idx] = 0`) and, with factor
//!   masking, the momentum (`U[idx] = 0`); `w -= lr sum / P`. Layers of at
//!   most `compress_threshold` bytes go through a dense allreduce with plain
//!   momentum SGD.
//! - DGC's additions, as options of RGC: local gradient clipping to
//!   `C P^(-1/2)` of the L2 norm ([`Config::clip`]) and the density
//!   warm-up ([`dgc_density`]); only tensors of more than one dimension
//!   are compressed ([`LayerSpec::dims`]).
//!
//! Global residual collection (SparDL Alg. 1): whatever the collective cut
//! ([`sparse_coll::Reduced::dropped`]) goes back into the residual of the
//! rank that holds it, so nothing is lost.
//!
//! Options: SparCML's `Q` ([`Config::qsgd`], QSGD with a fresh seed each
//! step, its error fed back or not), RedSync's quantized mode
//! ([`Config::quantized`]: top-k/low-k alternation and same-sign means,
//! the output layer excepted) and tensor fusion of dense layers
//! ([`Config::fuse`]).
//!
//! SparDL's paper variant of residual collection is
//! [`Collection::Paper`]. Not built yet (the README says so): fusion of
//! compressed layers.

use sparse_coll::dense::ring_allreduce;
use sparse_coll::wire::WireValues;
use sparse_coll::{SparseAllreduce, Traffic, Transport, agree_or_fail};
use sparse_core::encoding::Qsgd;
use sparse_core::qsgd::QsgdParams;
use sparse_core::{Backend, Error, KeyOrder, Result, SparseVec};
use sparse_select::{RadixTopK, Selector, k_for_density};
use std::time::{Duration, Instant};

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
    lr: f32,
    density: f64,
    rule: Rule,
    compress_threshold: usize,
    clip: Option<f32>,
    qsgd: Option<(QsgdParams, bool)>,
    quantized: bool,
    fusion: usize,
    collection: Collection,
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
    /// last (the output layer) alternates top-k and low-k by signed value
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

/// A layer: its name, its number of parameters, and its tensor's number of
/// dimensions (DGC compresses only tensors of more than one dimension).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerSpec {
    /// Name, for reports.
    pub name: String,
    /// Parameters.
    pub len: usize,
    /// Tensor dimensions (1 for a bias).
    pub dims: usize,
}

impl LayerSpec {
    /// Matrices (two dimensions, so DGC's rule compresses them) named
    /// `layer0`, `layer1`, ... of the given sizes.
    pub fn matrices(sizes: &[usize]) -> Vec<Self> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &len)| Self {
                name: format!("layer{i}"),
                len,
                dims: 2,
            })
            .collect()
    }
}

/// What one step did, on this rank.
#[derive(Debug, Clone, Default)]
pub struct StepReport {
    /// Per layer, what this rank sent (empty for dense layers).
    pub sent: Vec<SparseVec<f32>>,
    /// Per layer, what the collective dropped and the residual took back.
    pub dropped: Vec<SparseVec<f32>>,
    /// Which layers went through the dense allreduce.
    pub dense: Vec<bool>,
    /// This rank's traffic over all layers.
    pub traffic: Traffic,
    /// Time spent selecting (and updating residuals before it).
    pub select: Duration,
    /// Time spent in the collectives.
    pub communicate: Duration,
    /// Time spent applying the updates.
    pub apply: Duration,
}

struct Layer<B: Backend, S> {
    spec: LayerSpec,
    compressed: bool,
    w: B::Buffer<f32>,
    v: B::Buffer<f32>,
    u: B::Buffer<f32>,
    selector: S,
    comm: Box<dyn SparseAllreduce<f32>>,
    /// Quantized mode: top-k (true) or low-k next.
    top: bool,
    /// Steps taken (QSGD's fresh seed).
    steps: u64,
    /// The output layer (the last), never quantized.
    output: bool,
}

/// The optimizer of one rank: per-layer weights, residual `V` and momentum
/// `U` in backend buffers, a selector and a collective per layer.
pub struct Trainer<B: Backend, S> {
    b: B,
    cfg: Config,
    layers: Vec<Layer<B, S>>,
}

impl<B: Backend, S: Selector<B, f32> + Clone> Trainer<B, S> {
    /// A trainer over `layers` starting from `weights` (the same on every
    /// rank), selecting with a clone of `selector` per layer and reducing
    /// each compressed layer with the collective `comm(layer)` builds.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] if the weights do not fit the layers;
    /// backend errors; `comm`'s errors.
    pub fn new(
        b: B,
        cfg: Config,
        layers: Vec<LayerSpec>,
        weights: &[Vec<f32>],
        selector: S,
        mut comm: impl FnMut(&LayerSpec) -> Result<Box<dyn SparseAllreduce<f32>>>,
    ) -> Result<Self> {
        if weights.len() != layers.len() {
            return Err(Error::LengthMismatch {
                what: "layers",
                expected: layers.len(),
                got: weights.len(),
            });
        }
        let mut out = Vec::with_capacity(layers.len());
        let last = layers.len().saturating_sub(1);
        for (l, (spec, w)) in layers.into_iter().zip(weights).enumerate() {
            if w.len() != spec.len {
                return Err(Error::LengthMismatch {
                    what: "layer weights",
                    expected: spec.len,
                    got: w.len(),
                });
            }
            let compressed = spec.len * 4 > cfg.compress_threshold && spec.dims > 1;
            out.push(Layer {
                compressed,
                w: b.upload(w)?,
                v: b.zeros(spec.len)?,
                u: b.zeros(spec.len)?,
                selector: selector.clone(),
                comm: comm(&spec)?,
                spec,
                top: true,
                steps: 0,
                output: l == last,
            });
        }
        Ok(Self {
            b,
            cfg,
            layers: out,
        })
    }
}

impl<B: Backend, S: Selector<B, f32>> Trainer<B, S> {
    /// The settings.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// A new density for the following steps (DGC's warm-up).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] outside `(0, 1]`.
    pub fn set_density(&mut self, density: f64) -> Result<()> {
        check_density(density)?;
        self.cfg.density = density;
        Ok(())
    }

    /// Every layer's weights, downloaded.
    ///
    /// # Errors
    /// Backend errors.
    pub fn weights(&self) -> Result<Vec<Vec<f32>>> {
        self.layers.iter().map(|l| self.b.download(&l.w)).collect()
    }

    /// Every layer's residual `V`, downloaded.
    ///
    /// # Errors
    /// Backend errors.
    pub fn residuals(&self) -> Result<Vec<Vec<f32>>> {
        self.layers.iter().map(|l| self.b.download(&l.v)).collect()
    }

    /// Which layers are compressed (the others go dense).
    pub fn compressed(&self) -> Vec<bool> {
        self.layers.iter().map(|l| l.compressed).collect()
    }

    /// One step with every layer's gradient. Every rank calls it with its
    /// own gradients. A NaN or infinite gradient or gradients that do not
    /// fit the layers are an error on every rank (checked in one round
    /// before anything changes, so no state moves); layers that differ
    /// across ranks are [`Error::Disagreement`] on every rank.
    ///
    /// # Errors
    /// As above; the collectives' and the backend's errors.
    pub fn step(&mut self, t: &mut dyn Transport, grads: &[Vec<f32>]) -> Result<StepReport> {
        let local = self.check(grads);
        let mut fields = vec![("layers", self.layers.len() as u64)];
        fields.extend(
            self.layers
                .iter()
                .map(|l| ("layer size", l.spec.len as u64)),
        );
        agree_or_fail(t, &fields, local)?;
        let start = t.traffic();
        let p = t.size() as f32;
        let mut rep = StepReport::default();
        // Dense layers wait in a bucket until it holds `fusion` bytes or a
        // compressed layer comes.
        let mut bucket: Vec<(usize, Vec<f32>)> = Vec::new();
        let n = self.layers.len();
        for (l, g) in grads.iter().enumerate() {
            let mut g = g.clone();
            if let Some(c) = self.cfg.clip {
                clip(&mut g, c / p.sqrt());
            }
            let layer = &mut self.layers[l];
            rep.dense.push(!layer.compressed);
            rep.sent.push(SparseVec::zeros(layer.spec.len)?);
            rep.dropped.push(SparseVec::zeros(layer.spec.len)?);
            if layer.compressed {
                let (sent, dropped) =
                    compressed_step(&self.b, &self.cfg, layer, t, &g, p, &mut rep)?;
                rep.sent[l] = sent;
                rep.dropped[l] = dropped;
            } else {
                bucket.push((l, dense_gradient(&self.b, &self.cfg, layer, &g, &mut rep)?));
            }
            let bytes: usize = bucket.iter().map(|(_, g)| 4 * g.len()).sum();
            let next_compressed = self.layers.get(l + 1).is_some_and(|x| x.compressed);
            if !bucket.is_empty() && (bytes >= self.cfg.fusion || next_compressed || l + 1 == n) {
                let fused: Vec<f32> = bucket.iter().flat_map(|(_, g)| g.iter().copied()).collect();
                let clock = Instant::now();
                let sum = ring_allreduce(t, &fused)?;
                rep.communicate += clock.elapsed();
                let mut at = 0;
                for (j, g) in bucket.drain(..) {
                    let part = &sum[at..at + g.len()];
                    at += g.len();
                    dense_apply(&self.b, &self.cfg, &mut self.layers[j], part, p, &mut rep)?;
                }
            }
        }
        rep.traffic = t.traffic().since(&start);
        Ok(rep)
    }

    fn check(&self, grads: &[Vec<f32>]) -> Result<()> {
        if grads.len() != self.layers.len() {
            return Err(Error::LengthMismatch {
                what: "gradients",
                expected: self.layers.len(),
                got: grads.len(),
            });
        }
        for (l, g) in self.layers.iter().zip(grads) {
            if g.len() != l.spec.len {
                return Err(Error::LengthMismatch {
                    what: "layer gradient",
                    expected: l.spec.len,
                    got: g.len(),
                });
            }
            if let Some(index) = g.iter().position(|x| !x.is_finite()) {
                return Err(Error::NonFinite { index });
            }
        }
        Ok(())
    }
}

/// Scales `g` down to an L2 norm of at most `max` (computed in `f64`).
fn clip(g: &mut [f32], max: f32) {
    let norm = g
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    if norm > f64::from(max) {
        let s = (f64::from(max) / norm) as f32;
        g.iter_mut().for_each(|x| *x *= s);
    }
}

/// A compressed layer: residual update, selection, allreduce, apply.
fn compressed_step<B: Backend, S: Selector<B, f32>>(
    b: &B,
    cfg: &Config,
    layer: &mut Layer<B, S>,
    t: &mut dyn Transport,
    g: &[f32],
    p: f32,
    rep: &mut StepReport,
) -> Result<(SparseVec<f32>, SparseVec<f32>)> {
    let n = layer.spec.len;
    let clock = Instant::now();
    let mut gb = b.upload(g)?;
    // The step applied is `scale * sum / P`.
    let scale = match cfg.rule {
        Rule::TopK => {
            // acc = eps + lr g.
            b.axpy(cfg.lr, &gb, &mut layer.v)?;
            1.0
        }
        Rule::Rgc {
            momentum,
            nesterov,
            weight_decay,
            ..
        } => {
            if weight_decay != 0.0 {
                b.axpy(weight_decay, &layer.w, &mut gb)?;
            }
            if momentum == 0.0 {
                b.axpy(1.0, &gb, &mut layer.v)?;
            } else if nesterov {
                // U = m (U + G); V = V + U + G.
                b.axpy(1.0, &gb, &mut layer.u)?;
                b.scale(momentum, &mut layer.u)?;
                b.axpy(1.0, &layer.u, &mut layer.v)?;
                b.axpy(1.0, &gb, &mut layer.v)?;
            } else {
                // U = m U + G; V = V + U.
                b.scale(momentum, &mut layer.u)?;
                b.axpy(1.0, &gb, &mut layer.u)?;
                b.axpy(1.0, &layer.u, &mut layer.v)?;
            }
            cfg.lr
        }
    };
    let k = k_for_density(n, cfg.density)?;
    let quantize = cfg.quantized && !layer.output;
    let sel = if quantize {
        // RedSync's alternation: the largest values, then the smallest.
        let order = if layer.top {
            KeyOrder::Signed
        } else {
            KeyOrder::SignedReversed
        };
        layer.top = !layer.top;
        RadixTopK { order }.select(b, &layer.v, k)?
    } else {
        layer.selector.select(b, &layer.v, k)?
    };
    let mut sent = sel.to_sparse(b, n)?;
    // The sent entries leave the residual; factor masking clears their
    // momentum too.
    b.mask(&mut layer.v, &sel.indices)?;
    if let Rule::Rgc {
        factor_masking: true,
        ..
    } = cfg.rule
    {
        b.mask(&mut layer.u, &sel.indices)?;
    }
    // Quantization: what is sent is what the codec carries; the exact
    // remainder goes back into the residual (for QSGD without feedback it
    // is lost, as in SparCML's listing).
    let remainder = if quantize {
        let (q, rest) = WireValues::SameSignMean.split_exact(&sent)?;
        sent = q;
        Some(rest)
    } else if let Some((params, feedback)) = cfg.qsgd {
        let seed = params.seed() ^ layer.steps.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut bytes = Vec::new();
        let rest = Qsgd(params.with_seed(seed)).encode_with_remainder(sent.values(), &mut bytes)?;
        let decoded: Vec<f32> = sent
            .values()
            .iter()
            .zip(&rest)
            .map(|(&x, &r)| x - r)
            .collect();
        let rest = SparseVec::new(n, sent.indices().to_vec(), rest)?;
        sent = SparseVec::new(n, sent.indices().to_vec(), decoded)?;
        feedback.then_some(rest)
    } else {
        None
    };
    if let Some(rest) = remainder.filter(|r| r.nnz() > 0) {
        let idx = b.upload(rest.indices())?;
        let val = b.upload(rest.values())?;
        b.scatter_add(&mut layer.v, &idx, &val)?;
    }
    layer.steps += 1;
    rep.select += clock.elapsed();
    let clock = Instant::now();
    let red = layer.comm.allreduce(t, &sent)?;
    rep.communicate += clock.elapsed();
    let clock = Instant::now();
    // SparDL's paper variant: outside the result this rank keeps its own
    // accumulator (what it sent comes back), inside it keeps only what the
    // collective dropped here.
    if cfg.collection == Collection::Paper {
        let outside: Vec<(u32, f32)> = sent
            .iter()
            .filter(|(i, _)| red.result.indices().binary_search(i).is_err())
            .collect();
        if red.result.nnz() > 0 {
            b.mask(&mut layer.v, &b.upload(red.result.indices())?)?;
        }
        let inside: Vec<(u32, f32)> = red
            .dropped
            .iter()
            .filter(|(i, _)| red.result.indices().binary_search(i).is_ok())
            .collect();
        for part in [outside, inside] {
            if !part.is_empty() {
                let (idx, val): (Vec<u32>, Vec<f32>) = part.into_iter().unzip();
                b.scatter_add(&mut layer.v, &b.upload(&idx)?, &b.upload(&val)?)?;
            }
        }
    } else if red.dropped.nnz() > 0 {
        // Global residual collection: what the collective cut stays here.
        let idx = b.upload(red.dropped.indices())?;
        let val = b.upload(red.dropped.values())?;
        b.scatter_add(&mut layer.v, &idx, &val)?;
    }
    if red.result.nnz() > 0 {
        let step: Vec<f32> = red
            .result
            .values()
            .iter()
            .map(|&x| -scale * x / p)
            .collect();
        let idx = b.upload(red.result.indices())?;
        let val = b.upload(&step)?;
        b.scatter_add(&mut layer.w, &idx, &val)?;
    }
    rep.apply += clock.elapsed();
    Ok((sent, red.dropped))
}

/// A dense layer's contribution: its gradient plus weight decay, on the
/// host for the allreduce.
fn dense_gradient<B: Backend, S>(
    b: &B,
    cfg: &Config,
    layer: &mut Layer<B, S>,
    g: &[f32],
    rep: &mut StepReport,
) -> Result<Vec<f32>> {
    let clock = Instant::now();
    let mut gb = b.upload(g)?;
    if let Rule::Rgc { weight_decay, .. } = cfg.rule
        && weight_decay != 0.0
    {
        b.axpy(weight_decay, &layer.w, &mut gb)?;
    }
    let local = b.download(&gb)?;
    rep.select += clock.elapsed();
    Ok(local)
}

/// A dense layer's update from the reduced sum: momentum SGD on the mean
/// (`b = m b + G; w -= lr b`, or `w -= lr (G + m b)` with Nesterov; plain
/// SGD for top-k SGD).
fn dense_apply<B: Backend, S>(
    b: &B,
    cfg: &Config,
    layer: &mut Layer<B, S>,
    sum: &[f32],
    p: f32,
    rep: &mut StepReport,
) -> Result<()> {
    let clock = Instant::now();
    let mean: Vec<f32> = sum.iter().map(|&x| x / p).collect();
    let mut mean = b.upload(&mean)?;
    match cfg.rule {
        Rule::Rgc {
            momentum, nesterov, ..
        } if momentum != 0.0 => {
            b.scale(momentum, &mut layer.u)?;
            b.axpy(1.0, &mean, &mut layer.u)?;
            if nesterov {
                // w -= lr (G + m b), the sum formed first as PyTorch does.
                b.axpy(momentum, &layer.u, &mut mean)?;
                b.axpy(-cfg.lr, &mean, &mut layer.w)?;
            } else {
                b.axpy(-cfg.lr, &layer.u, &mut layer.w)?;
            }
        }
        _ => b.axpy(-cfg.lr, &mean, &mut layer.w)?,
    }
    rep.apply += clock.elapsed();
    Ok(())
}
