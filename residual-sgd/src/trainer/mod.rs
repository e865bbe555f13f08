//! The step: compensate, compress, communicate, apply, for every layer.

use crate::memory::{self, Memory};
use crate::{Collection, Config, LayerSpec, Rule};
use sparse_coll::wire::WireValues;
use sparse_coll::{Reduced, SparseAllreduce, Traffic, Transport, agree, agree_or_fail};
use sparse_core::backend::{check_finite, check_finite_buffer};
use sparse_core::encoding::Qsgd;
use sparse_core::{Backend, Error, KeyOrder, Result, SparseVec};
use sparse_select::{RadixTopK, Selection, Selector, k_for_density};
use std::time::{Duration, Instant};

mod state;
use state::readable;

/// What one step did, on this rank.
#[derive(Debug, Clone, Default)]
pub struct StepReport {
    /// Per layer, what this rank sent (empty for dense layers).
    pub sent: Vec<SparseVec<f32>>,
    /// Per layer, what the collective dropped and the residual took back.
    pub dropped: Vec<SparseVec<f32>>,
    /// Per layer, whether it was compressed and how much of it was sent.
    pub layers: Vec<LayerReport>,
    /// This rank's traffic over the whole step: its two agreement rounds,
    /// every layer's collective and the dense allreduces.
    pub traffic: Traffic,
    /// Time spent selecting (and updating residuals before it).
    pub select: Duration,
    /// Time spent in the collectives.
    pub communicate: Duration,
    /// Time spent applying the updates.
    pub apply: Duration,
}

/// One layer's part of a step ([`StepReport::layers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LayerReport {
    /// Whether the layer was compressed (else it went through the dense
    /// allreduce, whole).
    pub compressed: bool,
    /// The layer's parameters.
    pub len: usize,
    /// The entries this rank sent: the selection's size for a compressed
    /// layer, `len` for a dense one.
    pub sent: usize,
}

impl LayerReport {
    /// The density this rank sent, `sent / len` (1 for a dense layer, 0
    /// for an empty one).
    pub fn density(&self) -> f64 {
        if self.len == 0 {
            0.0
        } else {
            self.sent as f64 / self.len as f64
        }
    }
}

/// A compressed layer's parts: its memory, its compressor and its
/// communicator.
struct Compressed<B: Backend<f32>, S> {
    memory: Box<dyn Memory<B>>,
    selector: S,
    comm: Box<dyn SparseAllreduce<f32>>,
    /// Quantized mode: top-k (true) or low-k next.
    top: bool,
    /// Steps taken (QSGD's fresh seed).
    steps: u64,
    /// The output layer (the last of more than one dimension), never
    /// quantized.
    output: bool,
}

impl<B: Backend<f32>, S: Selector<B, f32>> Compressed<B, S> {
    /// The selector's and the collective's names and parameters, which a
    /// saved state must share.
    fn parts(&self) -> String {
        let params = self.comm.params();
        let comm = if params.is_empty() {
            self.comm.name()
        } else {
            format!("{}:{params}", self.comm.name())
        };
        format!("selector {}, collective {comm}", self.selector.name())
    }
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
    /// A digest of the weights' history: FNV-1a of the initial weights,
    /// then folded with the digest of every step's applied results. Ranks
    /// that applied the same steps to the same weights hold the same
    /// digest; the entry round of each step compares it.
    history: u64,
}

impl<B: Backend<f32> + 'static, S: Selector<B, f32> + Clone> Trainer<B, S> {
    /// A trainer over `layers` starting from `weights` (the same on every
    /// rank), selecting with a clone of `selector` per compressed layer and
    /// reducing it with the collective `comm(layer)` builds; each
    /// compressed layer's memory is the rule's ([`memory::for_rule`]).
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
                    comm: comm(&spec)?,
                    top: true,
                    steps: 0,
                    output: Some(l) == last,
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
        let history = sparse_core::hash::fnv1a(
            weights
                .iter()
                .flat_map(|w| w.iter().flat_map(|x| x.to_bits().to_le_bytes())),
        );
        Ok(Self {
            b,
            cfg,
            layers: out,
            history,
        })
    }
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

    /// Which layers are compressed (the others go dense).
    pub fn compressed(&self) -> Vec<bool> {
        self.layers
            .iter()
            .map(|l| matches!(l.part, Part::Compressed(_)))
            .collect()
    }

    /// One step with every layer's gradient on the host: uploads them and
    /// runs [`Trainer::step_buffers`], the NaN and infinity check done on
    /// the host before the upload (it names the first non-finite value).
    ///
    /// # Errors
    /// As [`Trainer::step_buffers`].
    pub fn step(&mut self, t: &mut dyn Transport, grads: &[Vec<f32>]) -> Result<StepReport> {
        let local = self.check(grads).and_then(|()| {
            grads
                .iter()
                .map(|g| self.b.upload(g).map(Grad::Owned))
                .collect::<Result<Vec<_>>>()
        });
        self.run(t, local)
    }

    /// One step with every layer's gradient in a backend buffer, where a
    /// model on the same device computed it; the weights stay in the
    /// backend's buffers ([`Trainer::weight_buffers`]). Nothing of a
    /// gradient crosses to the host but what the layer sends: a
    /// compressed layer's selected pairs, a dense layer's gradient for its
    /// allreduce. The NaN and infinity check is one reduction per layer
    /// ([`sparse_core::backend::check_finite_buffer`]); the gradients are
    /// only read (clipping and weight decay work on a device copy).
    ///
    /// Every rank calls it with its
    /// own gradients. A NaN or infinite gradient or gradients that do not
    /// fit the layers are an error on every rank (checked in one round
    /// before anything changes, so no state moves); layers that differ
    /// across ranks (in size or in being compressed), or settings that
    /// differ (learning rate, rule, density, clipping, quantization,
    /// collection, fusion), are [`Error::Disagreement`] on every rank.
    ///
    /// The entry round also compares a digest of the weights' history (the
    /// initial weights, then every step's applied results): ranks whose
    /// weights went apart by any route (a step that ended `Ok` on some ranks
    /// and in an error on others, a transport lost in its last round) get
    /// [`Error::Disagreement`] at every later step instead of training on,
    /// until their trainers are rebuilt from common weights.
    ///
    /// Then every layer's local work runs (compensation, selection from the
    /// compensated accumulator, quantization) before anything is sent; what
    /// a layer sends is the accumulator's values at the selected indices,
    /// whatever values its selector returned. A second round tells every
    /// rank whether that succeeded everywhere: a failure there (a residual
    /// that overflowed to infinity, a backend error) is an error on every
    /// rank, in step; a residual that overflowed keeps failing the steps
    /// that follow.
    ///
    /// A step is all or nothing on every rank: every layer's collective
    /// (and the dense layers' allreduces) runs first, then every rank
    /// checks every reduced result (valid sparse vectors of the layer's
    /// dimension, every value finite: a sum that overflowed is
    /// [`Error::NonFinite`]) and a third round compares one digest of them
    /// all (results that differ between ranks are
    /// [`Error::Disagreement`] about `"results"`); only then does any rank
    /// apply anything. A step that fails anywhere before that leaves the
    /// weights as they were and every selection in its memory (the
    /// memories may hold this step's compensated gradient): nothing is
    /// lost. A failure on one rank only (a collective part way, a memory's
    /// or the backend's error) abandons the transport
    /// ([`sparse_coll::guard`]), so no peer waits on it; a failure every
    /// rank shares leaves it usable. Where a rank fails in the third round
    /// itself after its peers completed it, the peers apply and it does
    /// not; the weights digest then stops the next step on every rank.
    ///
    /// # Errors
    /// As above; the collectives' and the backend's errors.
    pub fn step_buffers(
        &mut self,
        t: &mut dyn Transport,
        grads: &[B::Buffer<f32>],
    ) -> Result<StepReport> {
        let local = self
            .check_buffers(grads)
            .map(|()| grads.iter().map(Grad::Borrowed).collect());
        self.run(t, local)
    }

    /// A step from gradients already on the backend, or this rank's
    /// failure to provide them (which the entry round shares).
    fn run(
        &mut self,
        t: &mut dyn Transport,
        grads: Result<Vec<Grad<'_, B>>>,
    ) -> Result<StepReport> {
        let (grads, local) = match grads {
            Ok(g) => (g, Ok(())),
            Err(e) => (Vec::new(), Err(e)),
        };
        let mut fields = self.cfg.fields();
        fields.push(("layers", self.layers.len() as u64));
        for l in &self.layers {
            fields.push(("layer size", l.spec.len as u64));
            fields.push((
                "layer compressed",
                u64::from(matches!(l.part, Part::Compressed(_))),
            ));
            // The dimensions pick the output layer quantized mode exempts.
            fields.push(("layer dims", l.spec.dims as u64));
        }
        fields.push(("weights", self.history));
        let start = t.traffic();
        // One word stands for all of them (FNV-1a over the values), so the
        // round stays small at every step; only when it differs do the
        // ranks (all of them, as all see it) exchange the fields to name
        // the one that differs.
        let digest = sparse_core::hash::fnv1a(fields.iter().flat_map(|(_, v)| v.to_le_bytes()));
        match agree_or_fail(t, &[("settings", digest)], local) {
            Err(Error::Disagreement {
                what: "settings", ..
            }) => {
                // Names the field that differs ("weights" for ranks whose
                // weights went apart).
                agree(t, &fields).map_err(readable)?;
                return Err(Error::Disagreement {
                    what: "settings",
                    detail: "the ranks' settings hash differently".into(),
                });
            }
            other => other?,
        }
        let p = t.size() as f32;
        let mut rep = StepReport::default();
        let mut ready = Vec::with_capacity(grads.len());
        let prepared = grads.into_iter().enumerate().try_for_each(|(l, g)| {
            ready.push(self.prepare(l, g, p, &mut rep)?);
            Ok(())
        });
        agree_or_fail(t, &[("step", 1)], prepared)?;
        // From here a failure on one rank only (a memory's or the backend's
        // error) abandons the transport, so that no peer waits on this rank
        // in a collective (each collective guards its own body, and the
        // local work below runs in `sparse_coll::guard`); a failure every
        // rank shares (a collective's entry agreement, the commit round)
        // leaves it usable.
        match self.reduce_and_apply(t, ready, p, &mut rep) {
            Ok(digest) => {
                self.history = sparse_core::hash::fnv1a(
                    [self.history, digest].iter().flat_map(|d| d.to_le_bytes()),
                );
            }
            Err(e) => {
                // A collective that failed part way may have advanced its
                // state (a call count, thresholds, a planner's choice) on
                // some ranks only: every rank whose step fails returns its
                // collectives to their first-call state, so the next step
                // starts in step everywhere.
                for layer in &mut self.layers {
                    if let Part::Compressed(c) = &mut layer.part {
                        c.comm.reset();
                    }
                }
                return Err(e);
            }
        }
        rep.traffic = t.traffic().since(&start);
        Ok(rep)
    }

    /// The step's collectives, the commit round and the update: every rank
    /// checks every layer's reduced result, and the ranks compare one
    /// digest of them all; only when every rank holds the same valid
    /// results does any rank apply anything. A step is all or nothing on
    /// every rank. Returns the results' digest.
    fn reduce_and_apply(
        &mut self,
        t: &mut dyn Transport,
        ready: Vec<Ready<B>>,
        p: f32,
        rep: &mut StepReport,
    ) -> Result<u64> {
        let received = self.communicate(t, ready, rep)?;
        let checked = self.check_received(&received);
        let digest = *checked.as_ref().unwrap_or(&0);
        agree_or_fail(t, &[("results", digest)], checked.map(drop))?;
        sparse_coll::guard(t, |_| self.apply(received, p, rep))?;
        Ok(digest)
    }

    /// The step's communication, once every rank has done its local work:
    /// each compressed layer's collective and the dense layers' (fused)
    /// allreduces, in layer order. Nothing is applied here.
    fn communicate(
        &mut self,
        t: &mut dyn Transport,
        ready: Vec<Ready<B>>,
        rep: &mut StepReport,
    ) -> Result<Vec<Received<B>>> {
        let n = self.layers.len();
        let mut received: Vec<Option<Received<B>>> = (0..n).map(|_| None).collect();
        // Dense layers wait in a bucket until it holds `fusion` bytes or a
        // compressed layer comes.
        let mut bucket: Vec<(usize, Vec<f32>)> = Vec::new();
        for (l, r) in ready.into_iter().enumerate() {
            match (&mut self.layers[l].part, r) {
                (Part::Compressed(c), Ready::Compressed(out)) => {
                    let clock = Instant::now();
                    let red = c.comm.allreduce(t, &out.sent)?;
                    rep.communicate += clock.elapsed();
                    received[l] = Some(Received::Compressed(Box::new((out, red))));
                }
                (Part::Dense { .. }, Ready::Dense(g)) => bucket.push((l, g)),
                _ => {
                    let e = Error::invalid("layer", "prepared for another kind");
                    return sparse_coll::guard(t, |_| Err(e));
                }
            }
            let bytes: usize = bucket.iter().map(|(_, g)| 4 * g.len()).sum();
            let next_compressed = self
                .layers
                .get(l + 1)
                .is_some_and(|x| matches!(x.part, Part::Compressed(_)));
            if !bucket.is_empty() && (bytes >= self.cfg.fusion || next_compressed || l + 1 == n) {
                let fused: Vec<f32> = bucket.iter().flat_map(|(_, g)| g.iter().copied()).collect();
                let clock = Instant::now();
                let sum = t.allreduce_sum_f32(&fused)?;
                rep.communicate += clock.elapsed();
                let mut at = 0;
                for (j, g) in bucket.drain(..) {
                    received[j] = Some(Received::Dense(sum[at..at + g.len()].to_vec()));
                    at += g.len();
                }
            }
        }
        received
            .into_iter()
            .map(|r| r.ok_or_else(|| Error::invalid("layer", "no reduced result")))
            .collect()
    }

    /// Checks every layer's reduced result before anything is applied: a
    /// collective's result and dropped entries valid sparse vectors of the
    /// layer's dimension, every value finite (a sum that overflowed is
    /// [`Error::NonFinite`]), a dense sum of the layer's length and finite.
    /// Returns the digest of the results, which the ranks compare.
    fn check_received(&self, received: &[Received<B>]) -> Result<u64> {
        let mut words = Vec::with_capacity(received.len());
        for (layer, r) in self.layers.iter().zip(received) {
            let n = layer.spec.len;
            match r {
                Received::Compressed(sent) => {
                    let red = &sent.1;
                    for (what, v) in [("reduced result", &red.result), ("dropped", &red.dropped)] {
                        v.check()?;
                        if v.dim() != n {
                            return Err(Error::LengthMismatch {
                                what,
                                expected: n,
                                got: v.dim(),
                            });
                        }
                        check_finite(v.values())?;
                    }
                    words.push(sparse_core::hash::fnv1a(
                        red.result
                            .indices()
                            .iter()
                            .flat_map(|i| i.to_le_bytes())
                            .chain(
                                red.result
                                    .values()
                                    .iter()
                                    .flat_map(|x| x.to_bits().to_le_bytes()),
                            ),
                    ));
                }
                Received::Dense(sum) => {
                    if sum.len() != n {
                        return Err(Error::LengthMismatch {
                            what: "dense sum",
                            expected: n,
                            got: sum.len(),
                        });
                    }
                    check_finite(sum)?;
                    words.push(sparse_core::hash::fnv1a(
                        sum.iter().flat_map(|x| x.to_bits().to_le_bytes()),
                    ));
                }
            }
        }
        Ok(sparse_core::hash::fnv1a(
            words.iter().flat_map(|w| w.to_le_bytes()),
        ))
    }

    /// Applies every layer's checked result: a compressed layer's selection
    /// leaves its memory, the collection, the update; a dense layer's
    /// momentum SGD.
    fn apply(&mut self, received: Vec<Received<B>>, p: f32, rep: &mut StepReport) -> Result<()> {
        for (l, r) in received.into_iter().enumerate() {
            let layer = &mut self.layers[l];
            match (&mut layer.part, r) {
                (Part::Compressed(c), Received::Compressed(sent)) => {
                    let (out, red) = *sent;
                    let env = Env {
                        b: &self.b,
                        cfg: &self.cfg,
                        p,
                    };
                    let (sent, dropped) = compressed_apply(&env, c, &mut layer.w, out, red, rep)?;
                    rep.layers[l].sent = sent.nnz();
                    rep.sent[l] = sent;
                    rep.dropped[l] = dropped;
                }
                (Part::Dense { .. }, Received::Dense(sum)) => {
                    dense_apply(&self.b, &self.cfg, layer, &sum, p, rep)?;
                }
                _ => return Err(Error::invalid("layer", "reduced for another kind")),
            }
        }
        Ok(())
    }

    /// Layer `l`'s local work of a step: clipping and weight decay (on a
    /// copy of a caller's gradient buffer), then for a compressed layer
    /// compensation, selection and quantization; nothing is taken from its
    /// memory yet.
    fn prepare(
        &mut self,
        l: usize,
        g: Grad<'_, B>,
        p: f32,
        rep: &mut StepReport,
    ) -> Result<Ready<B>> {
        let clock = Instant::now();
        let b = &self.b;
        let layer = &mut self.layers[l];
        // DGC's local clipping to `c / sqrt(P)`: the factor from the norm
        // ([`sparse_core::ReduceOps::sum_squares`], on the device).
        let factor = match self.cfg.clip {
            Some(c) => clip_factor(b, g.get(), c / p.sqrt())?,
            None => None,
        };
        let decay = match self.cfg.rule {
            Rule::Rgc { weight_decay, .. } if weight_decay != 0.0 => Some(weight_decay),
            _ => None,
        };
        let mut g = g;
        if factor.is_some() || decay.is_some() {
            let mut x = g.into_owned(b)?;
            if let Some(f) = factor {
                b.scale(f, &mut x)?;
            }
            if let Some(wd) = decay {
                b.axpy(wd, &layer.w, &mut x)?;
            }
            g = Grad::Owned(x);
        }
        let g = g.get();
        let compressed = matches!(layer.part, Part::Compressed(_));
        rep.layers.push(LayerReport {
            compressed,
            len: layer.spec.len,
            sent: if compressed { 0 } else { layer.spec.len },
        });
        rep.sent.push(SparseVec::zeros(layer.spec.len)?);
        rep.dropped.push(SparseVec::zeros(layer.spec.len)?);
        let ready = match &mut layer.part {
            Part::Compressed(c) => Ready::Compressed(compress(b, &self.cfg, c, g)?),
            Part::Dense { .. } => Ready::Dense(b.download(g)?),
        };
        rep.select += clock.elapsed();
        Ok(ready)
    }

    /// The gradient buffers' number and lengths, and NaN or infinity with
    /// one reduction per layer on the backend.
    fn check_buffers(&self, grads: &[B::Buffer<f32>]) -> Result<()> {
        self.check_lengths(grads.iter().map(|g| self.b.len(g)))?;
        grads
            .iter()
            .try_for_each(|g| check_finite_buffer(&self.b, g))
    }

    /// The host gradients' number and lengths, and NaN or infinity.
    fn check(&self, grads: &[Vec<f32>]) -> Result<()> {
        self.check_lengths(grads.iter().map(Vec::len))?;
        grads.iter().try_for_each(|g| check_finite(g))
    }

    /// One gradient per layer, each of its layer's length.
    fn check_lengths(&self, lens: impl ExactSizeIterator<Item = usize>) -> Result<()> {
        if lens.len() != self.layers.len() {
            return Err(Error::LengthMismatch {
                what: "gradients",
                expected: self.layers.len(),
                got: lens.len(),
            });
        }
        for (l, got) in self.layers.iter().zip(lens) {
            if got != l.spec.len {
                return Err(Error::LengthMismatch {
                    what: "layer gradient",
                    expected: l.spec.len,
                    got,
                });
            }
        }
        Ok(())
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

/// The factor that scales `g` down to an L2 norm of at most `max`, if it
/// is above (the norm from [`sparse_core::ReduceOps::sum_squares`], on the
/// device).
fn clip_factor<B: Backend<f32>>(b: &B, g: &B::Buffer<f32>, max: f32) -> Result<Option<f32>> {
    let norm = b.sum_squares(g)?.sqrt();
    Ok((norm > f64::from(max)).then(|| (f64::from(max) / norm) as f32))
}

/// A layer's gradient for a step: uploaded by [`Trainer::step`] (the
/// trainer's own) or the caller's buffer ([`Trainer::step_buffers`]),
/// which is only read.
enum Grad<'a, B: Backend<f32>> {
    Owned(B::Buffer<f32>),
    Borrowed(&'a B::Buffer<f32>),
}

impl<B: Backend<f32>> Grad<'_, B> {
    fn get(&self) -> &B::Buffer<f32> {
        match self {
            Grad::Owned(x) => x,
            Grad::Borrowed(x) => x,
        }
    }
    /// The trainer's own buffer: a caller's is copied on the device
    /// (`0 + 1 g`, exact).
    fn into_owned(self, b: &B) -> Result<B::Buffer<f32>> {
        match self {
            Grad::Owned(x) => Ok(x),
            Grad::Borrowed(x) => {
                let mut y = b.zeros(b.len(x))?;
                b.axpy(1.0, x, &mut y)?;
                Ok(y)
            }
        }
    }
}

/// A layer's reduced result, checked before anything is applied.
enum Received<B: Backend<f32>> {
    /// A compressed layer's selection and its collective's result.
    Compressed(Box<(Outgoing<B>, Reduced<f32>)>),
    /// A dense layer's share of its (fused) allreduce.
    Dense(Vec<f32>),
}

/// A layer's part of a step, ready to send.
enum Ready<B: Backend<f32>> {
    /// A compressed layer's selection.
    Compressed(Outgoing<B>),
    /// A dense layer's gradient.
    Dense(Vec<f32>),
}

/// What a compressed layer sends in a step: the positions to take from its
/// memory, what it sends, and what quantization removed from that (not
/// [`sparse_core::Selected`], the selector's output it is made from).
struct Outgoing<B: Backend<f32>> {
    indices: B::Buffer<u32>,
    sent: SparseVec<f32>,
    remainder: Option<SparseVec<f32>>,
    quantized: bool,
}

/// A compressed layer's local work: compensate, select, quantize. Its
/// memory holds the compensated accumulator afterwards, with nothing taken
/// out yet.
fn compress<B: Backend<f32>, S: Selector<B, f32>>(
    b: &B,
    cfg: &Config,
    c: &mut Compressed<B, S>,
    g: &B::Buffer<f32>,
) -> Result<Outgoing<B>> {
    let n = b.len(g);
    c.memory.compensate(b, g)?;
    let k = k_for_density(n, cfg.density)?;
    let quantized = cfg.quantized && !c.output;
    let sel = if quantized {
        // RedSync's alternation: the largest values, then the smallest.
        let order = if c.top {
            KeyOrder::Signed
        } else {
            KeyOrder::SignedReversed
        };
        RadixTopK { order }.select(b, c.memory.accumulator(), k)?
    } else {
        c.selector.select(b, c.memory.accumulator(), k)?
    };
    // What is sent is the accumulator at the selected indices, whatever
    // values the selector returned: a selector cannot create or lose
    // gradient mass. `to_sparse` checks the indices (sorted, unique, in
    // range).
    let values = b.gather(c.memory.accumulator(), &sel.indices)?;
    let sel = Selection { values, ..sel };
    let mut sent = sel.to_sparse(b, n)?;
    // Quantization: what is sent is what the codec carries; the exact
    // remainder goes back into the memory (for QSGD without feedback it is
    // lost, as in SparCML's listing).
    let remainder = if quantized {
        let (q, rest) = WireValues::same_sign_mean().split_exact(&sent)?;
        sent = q;
        Some(rest)
    } else if let Some((params, feedback)) = cfg.qsgd {
        let seed = params.seed() ^ c.steps.wrapping_mul(0x9e37_79b9_7f4a_7c15);
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
    Ok(Outgoing {
        indices: sel.indices,
        sent,
        remainder,
        quantized,
    })
}

/// What a layer's update needs of the trainer: the backend, the
/// settings and the number of ranks.
struct Env<'a, B> {
    b: &'a B,
    cfg: &'a Config,
    p: f32,
}

/// A compressed layer's update once every rank holds the same checked
/// result: take the selection from the memory, collect, apply.
fn compressed_apply<B: Backend<f32>, S: Selector<B, f32>>(
    env: &Env<'_, B>,
    c: &mut Compressed<B, S>,
    w: &mut B::Buffer<f32>,
    x: Outgoing<B>,
    red: Reduced<f32>,
    rep: &mut StepReport,
) -> Result<(SparseVec<f32>, SparseVec<f32>)> {
    let Env { b, cfg, p } = *env;
    let Outgoing {
        indices,
        sent,
        remainder,
        quantized,
    } = x;
    // The step applied is `scale * sum / P`.
    let scale = match cfg.rule {
        Rule::TopK => 1.0,
        Rule::Rgc { .. } => cfg.lr,
    };
    let clock = Instant::now();
    // Taken from the memory only once every layer's collective has
    // succeeded on every rank: a failed step leaves every selection in
    // its memory, not lost.
    c.memory.remove(b, &indices)?;
    if quantized {
        c.top = !c.top;
    }
    c.steps = c.steps.wrapping_add(1);
    collect(b, cfg.collection, c, &sent, &red)?;
    // What quantization removed goes back after the collection, which in
    // the paper's variant clears the result's positions.
    if let Some(rest) = remainder {
        c.memory.restore(b, &rest)?;
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
        b.scatter_add(w, &idx, &val)?;
    }
    rep.apply += clock.elapsed();
    Ok((sent, red.dropped))
}

/// The residual collection after a compressed layer's collective
/// returned `red` for what this rank `sent`.
fn collect<B: Backend<f32>, S: Selector<B, f32>>(
    b: &B,
    collection: Collection,
    c: &mut Compressed<B, S>,
    sent: &SparseVec<f32>,
    red: &Reduced<f32>,
) -> Result<()> {
    if collection != Collection::Paper {
        // Global residual collection: what the collective cut stays here.
        return c.memory.restore(b, &red.dropped);
    }
    // SparDL's paper variant: outside the result this rank keeps its
    // own accumulator (what it sent comes back), inside it keeps only
    // what the collective dropped here.
    let n = sent.dim();
    let in_result = |i: &u32| red.result.indices().binary_search(i).is_ok();
    let outside: Vec<(u32, f32)> = sent.iter().filter(|(i, _)| !in_result(i)).collect();
    if red.result.nnz() > 0 {
        b.mask(c.memory.accumulator_mut(), &b.upload(red.result.indices())?)?;
    }
    let inside: Vec<(u32, f32)> = red.dropped.iter().filter(|(i, _)| in_result(i)).collect();
    for part in [outside, inside] {
        let (idx, val): (Vec<u32>, Vec<f32>) = part.into_iter().unzip();
        c.memory.restore(b, &SparseVec::new(n, idx, val)?)?;
    }
    Ok(())
}

/// A dense layer's update from the reduced sum: momentum SGD on the mean
/// (`b = m b + G; w -= lr b`, or `w -= lr (G + m b)` with Nesterov; plain
/// SGD for top-k SGD).
fn dense_apply<B: Backend<f32>, S>(
    b: &B,
    cfg: &Config,
    layer: &mut Layer<B, S>,
    sum: &[f32],
    p: f32,
    rep: &mut StepReport,
) -> Result<()> {
    let clock = Instant::now();
    let Part::Dense { u } = &mut layer.part else {
        return Err(Error::invalid(
            "layer",
            "a compressed layer in a dense bucket",
        ));
    };
    let mean: Vec<f32> = sum.iter().map(|&x| x / p).collect();
    let mut mean = b.upload(&mean)?;
    match cfg.rule {
        Rule::Rgc {
            momentum, nesterov, ..
        } if momentum != 0.0 => {
            b.scale(momentum, u)?;
            b.axpy(1.0, &mean, u)?;
            if nesterov {
                // w -= lr (G + m b), the sum formed first as PyTorch does.
                b.axpy(momentum, u, &mut mean)?;
                b.axpy(-cfg.lr, &mean, &mut layer.w)?;
            } else {
                b.axpy(-cfg.lr, u, &mut layer.w)?;
            }
        }
        _ => b.axpy(-cfg.lr, &mean, &mut layer.w)?,
    }
    rep.apply += clock.elapsed();
    Ok(())
}
