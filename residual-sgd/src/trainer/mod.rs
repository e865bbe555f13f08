//! The trainer: its layers, each dense or compressed (a memory, a
//! selector, a collective), how it is built and what it holds. The step
//! is in `step` (its rounds) and `step/layer` (one layer's local work and
//! update), what a step reports in `report`, save and load in `state`.

use crate::memory::{self, Memory};
use crate::{Config, LayerSpec};
use sparse_coll::{Defaults, Registry, SparseAllreduce};
use sparse_core::{Backend, Error, Result, Selected};
use sparse_select::Selector;

mod report;
mod state;
mod step;

pub use report::{LayerReport, StepFailure, StepReport};
pub use step::Feed;
pub(crate) use step::cut;

/// A compressed layer's parts: its memory, its compressor and the bucket
/// whose collective reduces it.
struct Compressed<B: Backend<f32>, S> {
    memory: Box<dyn Memory<B>>,
    selector: S,
    /// Its bucket in [`Trainer::buckets`].
    bucket: usize,
    /// Quantized mode: top-k (true) or low-k next.
    top: bool,
    /// Steps taken (QSGD's fresh seed).
    steps: u64,
    /// The output layer (the last of more than one dimension), never
    /// quantized.
    output: bool,
    /// What this step's fused selection ([`Memory::compensate_topk`]) took
    /// out of the memory and no rank has committed yet: put back if the
    /// step fails. `None` between steps.
    taken: Option<Selected<B, f32>>,
}

/// Compressed layers that one collective call reduces per step: a single
/// layer, or with [`Config::buckets`] a bucket of them, their index
/// spaces laid end to end in list order.
struct Bucket {
    /// Its layers' positions, in list order.
    layers: Vec<usize>,
    /// Its layers' parameters.
    len: usize,
    /// Whether the settings fuse layers ([`Config::buckets`]).
    fused: bool,
    comm: Box<dyn SparseAllreduce<f32>>,
}

impl Bucket {
    /// The collective's name and parameters, and for fused settings the
    /// bucket's layers: what a saved state must share.
    fn parts(&self) -> String {
        let params = self.comm.params();
        let comm = if params.is_empty() {
            self.comm.name()
        } else {
            format!("{}:{params}", self.comm.name())
        };
        if self.fused {
            format!("collective {comm}, bucket of layers {:?}", self.layers)
        } else {
            format!("collective {comm}")
        }
    }
}

/// The selector's name and its bucket's parts, which a saved state must
/// share.
fn parts<B: Backend<f32>, S: Selector<B, f32>>(c: &Compressed<B, S>, bucket: &Bucket) -> String {
    format!("selector {}, {}", c.selector.name(), bucket.parts())
}

/// How a layer is reduced.
enum Part<B: Backend<f32>, S> {
    /// Dense allreduce and momentum SGD with momentum `u`.
    Dense { u: B::Buffer<f32> },
    /// Compressed.
    Compressed(Compressed<B, S>),
}

struct Layer<B: Backend<f32>, S> {
    spec: LayerSpec,
    w: B::Buffer<f32>,
    part: Part<B, S>,
}

/// The optimizer of one rank: per layer, weights in a backend buffer and
/// either a dense momentum or the three parts of a compressed layer (a
/// [`Memory`], a selector, a collective). Which layers are compressed is
/// fixed at construction ([`Config::compresses`]); a step takes the
/// gradients in backend buffers ([`Trainer::step_buffers`]) or on the host
/// ([`Trainer::step`]).
pub struct Trainer<B: Backend<f32>, S> {
    b: B,
    cfg: Config,
    layers: Vec<Layer<B, S>>,
    /// The collective calls of a step, in the order they fill (one per
    /// compressed layer unless [`Config::buckets`] fuses them).
    buckets: Vec<Bucket>,
    /// A digest of the weights' history: FNV-1a of the initial weights,
    /// then folded with the digest of every step's applied results. Ranks
    /// that applied the same steps to the same weights hold the same
    /// digest; the entry round of each step compares it.
    history: u64,
    /// What the last step did with this rank's gradients, where it failed
    /// ([`Trainer::last_failure`]).
    failure: Option<StepFailure>,
}

impl<B: Backend<f32> + 'static, S: Selector<B, f32> + Clone> Trainer<B, S> {
    /// A trainer over `layers` starting from `weights` (the same on every
    /// rank), selecting with a clone of `selector` per compressed layer and
    /// reducing it with the collective `comm(layer)` builds: one per
    /// compressed layer, or with [`Config::buckets`] one per bucket, called
    /// with a spec of the bucket's layers laid end to end (named
    /// `bucket(a+b)`); each compressed layer's memory is the rule's
    /// ([`memory::for_rule`]).
    ///
    /// Which layers are compressed is the settings' choice
    /// ([`Config::compresses`]); settings under which none is, other than
    /// [`Config::dense`], are an error rather than dense training that
    /// looks like compression.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] if the weights do not fit the layers;
    /// [`Error::InvalidParameter`] if no layer is compressed and the
    /// settings are not [`Config::dense`] (the message names the rule that
    /// kept each layer dense); backend errors; `comm`'s errors.
    pub fn new(
        b: B,
        cfg: Config,
        layers: Vec<LayerSpec>,
        weights: &[Vec<f32>],
        selector: S,
        comm: impl FnMut(&LayerSpec) -> Result<Box<dyn SparseAllreduce<f32>>>,
    ) -> Result<Self> {
        let (rule, lr) = (cfg.rule(), cfg.lr());
        Self::with_memory(b, cfg, layers, weights, selector, comm, |b, spec| {
            memory::for_rule(b, rule, lr, spec.len)
        })
    }

    /// As [`Trainer::new`], with each compressed layer's (or bucket's)
    /// collective built from `registry` by the spec `collective` (`"spardl"`,
    /// `"ok_topk:period=8"`, ...) with the settings' budget
    /// ([`Config::budget`]) as its default: the density is given once, in
    /// `cfg`. A `k=` or `density=` in the spec overrides it for that
    /// collective; a caller who wants other defaults per layer uses
    /// [`Trainer::new`] with its own closure.
    ///
    /// The budget is the settings' at construction: a density that changes
    /// later ([`Config::with_density`], DGC's warm-up) changes what the
    /// selector keeps, and a lossy collective keeps its own budget of what
    /// it receives.
    ///
    /// # Errors
    /// As [`Trainer::new`]; [`Registry::build`]'s errors (an unknown name
    /// or parameter, naming the known ones).
    pub fn from_registry(
        b: B,
        cfg: Config,
        layers: Vec<LayerSpec>,
        weights: &[Vec<f32>],
        selector: S,
        registry: &Registry<f32>,
        collective: &str,
    ) -> Result<Self> {
        let defaults = Defaults::with_budget(cfg.budget());
        Self::new(b, cfg, layers, weights, selector, |_| {
            registry.build(collective, defaults)
        })
    }
}

impl<B: Backend<f32>, S: Selector<B, f32> + Clone> Trainer<B, S> {
    /// As [`Trainer::new`], with each compressed layer's memory built by
    /// `memory(backend, layer)`: a user's own error feedback. The step applied is
    /// `lr * sum / P` for RGC rules and `sum / P` for top-k SGD (whose
    /// memory folds `lr` into what it accumulates).
    ///
    /// # Errors
    /// As [`Trainer::new`]; `memory`'s errors; [`Error::LengthMismatch`] if
    /// a memory's accumulator does not fit its layer.
    pub fn with_memory(
        b: B,
        cfg: Config,
        layers: Vec<LayerSpec>,
        weights: &[Vec<f32>],
        selector: S,
        comm: impl FnMut(&LayerSpec) -> Result<Box<dyn SparseAllreduce<f32>>>,
        memory: impl FnMut(&B, &LayerSpec) -> Result<Box<dyn Memory<B>>>,
    ) -> Result<Self> {
        Self::with_parts(
            b,
            cfg,
            layers,
            weights,
            |_| Ok(selector.clone()),
            comm,
            memory,
        )
    }
}

impl<B: Backend<f32>, S: Selector<B, f32>> Trainer<B, S> {
    /// As [`Trainer::with_memory`], with each compressed layer's selector
    /// built by `selector(layer)`: one per layer, chosen at run time
    /// (`S = Box<dyn Selector<B, f32>>`) or differing from layer to layer.
    ///
    /// # Errors
    /// As [`Trainer::with_memory`]; `selector`'s errors.
    pub fn with_parts(
        b: B,
        cfg: Config,
        layers: Vec<LayerSpec>,
        weights: &[Vec<f32>],
        mut selector: impl FnMut(&LayerSpec) -> Result<S>,
        mut comm: impl FnMut(&LayerSpec) -> Result<Box<dyn SparseAllreduce<f32>>>,
        mut memory: impl FnMut(&B, &LayerSpec) -> Result<Box<dyn Memory<B>>>,
    ) -> Result<Self> {
        if weights.len() != layers.len() {
            return Err(Error::LengthMismatch {
                what: "layers",
                expected: layers.len(),
                got: weights.len(),
            });
        }
        if !cfg.is_dense() && !layers.iter().any(|s| cfg.compresses(s)) {
            return Err(nothing_compressed(&cfg, &layers));
        }
        let mut out = Vec::with_capacity(layers.len());
        // The output layer: the last of more than one dimension (a trailing
        // bias, as burn lists a `Linear`'s parameters, is not it).
        let last = layers.iter().rposition(|s| s.dims > 1);
        // RedSync's quantized mode exempts the output layer: where it is
        // the only compressed layer, nothing would be quantized.
        if cfg.quantized
            && !layers
                .iter()
                .enumerate()
                .any(|(l, s)| cfg.compresses(s) && Some(l) != last)
        {
            return Err(Error::invalid(
                "config",
                "RedSync's quantized mode leaves the output layer (the last of more than one \
                 dimension) unquantized, and no other layer is compressed: nothing would be \
                 quantized; drop Config::quantized or compress another layer",
            ));
        }
        for (l, (spec, w)) in layers.into_iter().zip(weights).enumerate() {
            if w.len() != spec.len {
                return Err(Error::LengthMismatch {
                    what: "layer weights",
                    expected: spec.len,
                    got: w.len(),
                });
            }
            let part = if cfg.compresses(&spec) {
                let memory = memory(&b, &spec)?;
                let got = b.len(memory.accumulator());
                if got != spec.len {
                    return Err(Error::LengthMismatch {
                        what: "memory accumulator",
                        expected: spec.len,
                        got,
                    });
                }
                Part::Compressed(Compressed {
                    memory,
                    selector: selector(&spec)?,
                    bucket: usize::MAX,
                    top: true,
                    steps: 0,
                    output: Some(l) == last,
                    taken: None,
                })
            } else {
                Part::Dense {
                    u: b.zeros(spec.len)?,
                }
            };
            out.push(Layer {
                w: b.upload(w)?,
                part,
                spec,
            });
        }
        let buckets = buckets(&cfg, &mut out, &mut comm)?;
        let history = sparse_core::hash::fnv1a(
            weights
                .iter()
                .flat_map(|w| w.iter().flat_map(|x| x.to_bits().to_le_bytes())),
        );
        Ok(Self {
            b,
            cfg,
            layers: out,
            buckets,
            history,
            failure: None,
        })
    }
}

/// The step's collective calls over `layers`: one per compressed layer
/// in list order, or the buckets of [`Config::buckets`]; each gets the
/// collective `comm` builds for its layer, or for a bucket of several a
/// layer named after them (`bucket(layer3+layer4)`, its length their
/// sum). Sets each compressed layer's bucket.
fn buckets<B: Backend<f32>, S>(
    cfg: &Config,
    layers: &mut [Layer<B, S>],
    comm: &mut impl FnMut(&LayerSpec) -> Result<Box<dyn SparseAllreduce<f32>>>,
) -> Result<Vec<Bucket>> {
    let compressed: Vec<bool> = layers
        .iter()
        .map(|l| matches!(l.part, Part::Compressed(_)))
        .collect();
    let groups = match cfg.buckets {
        Some(b) => {
            let specs: Vec<LayerSpec> = layers.iter().map(|l| l.spec.clone()).collect();
            b.layout(&specs, &compressed)?
        }
        None => (0..layers.len())
            .filter(|&l| compressed[l])
            .map(|l| vec![l])
            .collect(),
    };
    let mut out = Vec::with_capacity(groups.len());
    for (j, group) in groups.into_iter().enumerate() {
        let len = group.iter().map(|&l| layers[l].spec.len).sum();
        let spec = match group.as_slice() {
            [l] => layers[*l].spec.clone(),
            _ => LayerSpec {
                name: format!(
                    "bucket({})",
                    group
                        .iter()
                        .map(|&l| layers[l].spec.name.as_str())
                        .collect::<Vec<_>>()
                        .join("+")
                ),
                len,
                dims: 2,
            },
        };
        for &l in &group {
            if let Part::Compressed(c) = &mut layers[l].part {
                c.bucket = j;
            }
        }
        out.push(Bucket {
            layers: group,
            len,
            fused: cfg.buckets.is_some(),
            comm: comm(&spec)?,
        });
    }
    Ok(out)
}

impl<B: Backend<f32>, S: Selector<B, f32>> Trainer<B, S> {
    /// The settings.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The layers.
    pub fn layers(&self) -> Vec<LayerSpec> {
        self.layers.iter().map(|l| l.spec.clone()).collect()
    }

    /// A new density for the following steps (DGC's warm-up).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] outside `(0, 1]`.
    pub fn set_density(&mut self, density: f64) -> Result<()> {
        self.cfg = self.cfg.with_density(density)?;
        Ok(())
    }

    /// What the last step did with this rank's gradients, where it
    /// failed (`None` after a step that succeeded, and before the first).
    /// Every form of the step keeps one rule ([`Trainer::step_buffers`],
    /// "A failed step"): the gradients it accepted for compressed layers
    /// are in their memories, so the batch is dropped, not retried.
    pub fn last_failure(&self) -> Option<&StepFailure> {
        self.failure.as_ref()
    }

    /// Every layer's weights, downloaded (a copy on the host; see
    /// [`Trainer::weight_buffers`] for the weights where they live).
    ///
    /// # Errors
    /// Backend errors.
    pub fn weights(&self) -> Result<Vec<Vec<f32>>> {
        self.layers.iter().map(|l| self.b.download(&l.w)).collect()
    }

    /// Every layer's weights in the backend's buffers, where the steps
    /// update them: a model on the same device reads them without a
    /// transfer.
    pub fn weight_buffers(&self) -> Vec<&B::Buffer<f32>> {
        self.layers.iter().map(|l| &l.w).collect()
    }

    /// The backend the weights, memories and gradients live on (to upload
    /// gradients for [`Trainer::step_buffers`], or to read a backend's own
    /// counters, as `backend-cuda`'s transfer counts).
    pub fn backend(&self) -> &B {
        &self.b
    }

    /// Every layer's residual (its memory's accumulator; zeros for dense
    /// layers), downloaded.
    ///
    /// # Errors
    /// Backend errors.
    pub fn residuals(&self) -> Result<Vec<Vec<f32>>> {
        self.layers
            .iter()
            .map(|l| match &l.part {
                Part::Compressed(c) => self.b.download(c.memory.accumulator()),
                Part::Dense { .. } => Ok(vec![0.0; l.spec.len]),
            })
            .collect()
    }

    /// The compressed layers' buckets, in the order they fill: each one
    /// collective call per step over its layers (positions in list
    /// order). Without [`Config::buckets`], one per compressed layer.
    pub fn buckets(&self) -> Vec<Vec<usize>> {
        self.buckets.iter().map(|b| b.layers.clone()).collect()
    }

    /// Which layers are compressed (the others go dense).
    pub fn compressed(&self) -> Vec<bool> {
        self.layers
            .iter()
            .map(|l| matches!(l.part, Part::Compressed(_)))
            .collect()
    }
}

/// The error of settings that compress none of `layers`: each layer with
/// the rule that kept it dense, and how to change it.
fn nothing_compressed(cfg: &Config, layers: &[LayerSpec]) -> Error {
    let why: Vec<String> = layers
        .iter()
        .filter_map(|l| cfg.kept_dense(l).map(|k| format!("{}: {k}", l.name)))
        .collect();
    let why = if why.is_empty() {
        "there are no layers".to_string()
    } else {
        why.join("; ")
    };
    Error::invalid(
        "config",
        format!(
            "no layer would be compressed, so every step would be dense SGD ({why}); \
             lower Config::compress_threshold or Config::compress_min_dims, or use \
             Config::dense for dense training"
        ),
    )
}
