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
//! Not built yet (the README says so): RedSync's quantized mode inside the
//! optimizer (top-k/low-k alternation; the collectives already send
//! same-sign means with `values=ssmean`), SparCML's QSGD inside the
//! optimizer, SparDL's paper variant of residual collection, tensor fusion,
//! and the runs on the kernel backend and under MPI.

use sparse_coll::dense::ring_allreduce;
use sparse_coll::{SparseAllreduce, Traffic, Transport, agree_or_fail};
use sparse_core::{Backend, Error, Result, SparseVec};
use sparse_select::{Selector, k_for_density};
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
        })
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
        for (spec, w) in layers.into_iter().zip(weights) {
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
        for (layer, g) in self.layers.iter_mut().zip(grads) {
            let mut g = g.clone();
            if let Some(c) = self.cfg.clip {
                clip(&mut g, c / p.sqrt());
            }
            if layer.compressed {
                let (sent, dropped) =
                    compressed_step(&self.b, &self.cfg, layer, t, &g, p, &mut rep)?;
                rep.sent.push(sent);
                rep.dropped.push(dropped);
            } else {
                dense_step(&self.b, &self.cfg, layer, t, &g, p, &mut rep)?;
                rep.sent.push(SparseVec::zeros(layer.spec.len)?);
                rep.dropped.push(SparseVec::zeros(layer.spec.len)?);
            }
            rep.dense.push(!layer.compressed);
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
    let sel = layer.selector.select(b, &layer.v, k)?;
    let sent = sel.to_sparse(b, n)?;
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
    rep.select += clock.elapsed();
    let clock = Instant::now();
    let red = layer.comm.allreduce(t, &sent)?;
    rep.communicate += clock.elapsed();
    let clock = Instant::now();
    // Global residual collection: what the collective cut stays here.
    if red.dropped.nnz() > 0 {
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

/// A dense layer: allreduce of the gradient, then momentum SGD on its mean
/// (`b = m b + G; w -= lr b`, or `w -= lr (G + m b)` with Nesterov; plain
/// SGD for top-k SGD).
fn dense_step<B: Backend, S>(
    b: &B,
    cfg: &Config,
    layer: &mut Layer<B, S>,
    t: &mut dyn Transport,
    g: &[f32],
    p: f32,
    rep: &mut StepReport,
) -> Result<()> {
    let clock = Instant::now();
    let mut gb = b.upload(g)?;
    if let Rule::Rgc { weight_decay, .. } = cfg.rule
        && weight_decay != 0.0
    {
        b.axpy(weight_decay, &layer.w, &mut gb)?;
    }
    let local = b.download(&gb)?;
    rep.select += clock.elapsed();
    let clock = Instant::now();
    let sum = ring_allreduce(t, &local)?;
    rep.communicate += clock.elapsed();
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
