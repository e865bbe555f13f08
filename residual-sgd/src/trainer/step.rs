//! The step: the entry round, every layer's local work, the collectives,
//! the check of every result, the commit round and the update, all or
//! nothing on every rank ([`Trainer::step_buffers`]). One layer's work is
//! in `layer`; the pipelined step in `pipeline`.

use super::state::readable;
use super::{Bucket, Layer, LayerReport, Part, StepReport, Trainer};
use crate::{Config, Rule};
use sparse_coll::{JointCall, Reduced, Transport, agree, agree_or_fail, allreduce_jointly};
use sparse_core::backend::{check_finite, check_finite_buffers};
use sparse_core::{Backend, Error, Result, SparseVec};
use sparse_select::Selector;
use std::time::Instant;

mod layer;
mod pipeline;
use layer::{clip_factor, compress, compressed_apply, dense_apply};
pub use pipeline::Feed;

impl<B: Backend<f32>, S: Selector<B, f32>> Trainer<B, S> {
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
    /// whatever values its selector returned. A rank whose local work
    /// failed (a residual that overflowed to infinity, a backend error)
    /// sends empty selections and zero dense gradients, so that its peers'
    /// collectives complete, and its error reaches every rank in the commit
    /// round below, in step, before anything is applied; a residual that
    /// overflowed keeps failing the steps that follow. (No round of its own
    /// between the local work and the collectives: two rounds a step, as
    /// the pipelined [`Trainer::step_with`] makes.)
    ///
    /// The collectives (one per bucket: per compressed layer unless
    /// [`Config::buckets`] fuses them) are entered in one round for them
    /// all ([`sparse_coll::allreduce_jointly`]), where calls one by one
    /// would make one each: an invalid or non-finite selection, or a call
    /// that differs between ranks, fails every rank there, before any body
    /// runs. Then every call's body runs in bucket order, then the dense
    /// layers' allreduces in layer order.
    ///
    /// A step is all or nothing on every rank: every layer's collective
    /// (and the dense layers' allreduces) runs first, then every rank
    /// checks every reduced result (valid sparse vectors of the layer's
    /// dimension, every value finite: a sum that overflowed is
    /// [`Error::NonFinite`]) and the commit round shares every rank's
    /// failure and compares one digest of them all (results that differ
    /// between ranks are [`Error::Disagreement`] about `"results"`); only
    /// then does any rank apply anything. A step that fails anywhere
    /// before that leaves the weights as they were and every selection in
    /// its memory (the memories may hold this step's compensated
    /// gradient): nothing is lost. A failure on one rank only (a collective part way, a memory's
    /// or the backend's error) abandons the transport
    /// ([`sparse_coll::guard`]), so no peer waits on it; a failure every
    /// rank shares leaves it usable. Where a rank fails in the commit round
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
        let clock = Instant::now();
        self.enter(t, local)?;
        let start = t.traffic();
        let p = t.size() as f32;
        let mut rep = StepReport {
            agree: clock.elapsed(),
            ..StepReport::default()
        };
        let mut ready = Vec::with_capacity(grads.len());
        let prepared = grads
            .into_iter()
            .enumerate()
            .try_for_each(|(l, g)| {
                ready.push(Some(self.prepare(l, g, p, &mut rep)?));
                Ok(())
            })
            .and_then(|()| self.cut_to_budgets(&mut ready));
        // A rank whose local work failed sends nothing of it: empty
        // selections and zero dense gradients, so that every peer's
        // collectives complete (as a pipelined step's producer does); its
        // error reaches every rank in the commit round, before anything is
        // applied. No round of its own: two a step, not three.
        if prepared.is_err() {
            ready = (0..self.layers.len()).map(|_| None).collect();
        }
        // From here a failure on one rank only (a memory's or the backend's
        // error) abandons the transport, so that no peer waits on this rank
        // in a collective (each collective guards its own body, and the
        // local work below runs in `sparse_coll::guard`); a failure every
        // rank shares (a collective's entry agreement, the commit round)
        // leaves it usable.
        let outcome = match self.communicate(t, ready, &mut rep) {
            Ok(received) => {
                let local = prepared.and_then(|()| {
                    received
                        .into_iter()
                        .map(|r| r.ok_or_else(|| Error::invalid("layer", "no reduced result")))
                        .collect()
                });
                self.commit(t, local, p, &mut rep)
            }
            // Where a collective failed too, this rank's own failure names
            // the cause (the transport as the collective left it).
            Err(e) => Err(prepared.err().unwrap_or(e)),
        };
        self.settle(outcome)?;
        rep.traffic = t.traffic().since(&start);
        Ok(rep)
    }

    /// The entry round: the settings, the layers and the weights' history
    /// compared across ranks, with this rank's `local` failure shared.
    fn enter(&self, t: &mut dyn Transport, local: Result<()>) -> Result<()> {
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
                Err(Error::Disagreement {
                    what: "settings",
                    detail: "the ranks' settings hash differently".into(),
                })
            }
            other => other,
        }
    }

    /// A step's end: its results' digest folded into the weights' history,
    /// or, where it failed, every collective back to its first-call state.
    fn settle(&mut self, outcome: Result<u64>) -> Result<()> {
        match outcome {
            Ok(digest) => {
                self.history = sparse_core::hash::fnv1a(
                    [self.history, digest].iter().flat_map(|d| d.to_le_bytes()),
                );
                Ok(())
            }
            Err(e) => {
                // A collective that failed part way may have advanced its
                // state (a call count, thresholds, a planner's choice) on
                // some ranks only: every rank whose step fails returns its
                // collectives to their first-call state, so the next step
                // starts in step everywhere.
                for bucket in &mut self.buckets {
                    bucket.comm.reset();
                }
                Err(self.put_back(e))
            }
        }
    }

    /// A step that failed with `e`: its fused selections
    /// ([`Compressed::taken`]) back into their memories, scatter-added
    /// (`+0 + value`, exact), so that every memory holds what the
    /// separate calls would have left: its compensated accumulator,
    /// nothing taken out. Every layer is put back even where one fails;
    /// the error is `e`, or where a layer could not be put back an
    /// [`Error::Corrupt`] naming both.
    fn put_back(&mut self, e: Error) -> Error {
        let mut failed = None;
        for (l, layer) in self.layers.iter_mut().enumerate() {
            if let Part::Compressed(c) = &mut layer.part
                && let Some(t) = c.taken.take()
                && let Err(why) =
                    self.b
                        .scatter_add(c.memory.accumulator_mut(), &t.indices, &t.values)
            {
                failed.get_or_insert((l, why));
            }
        }
        match failed {
            None => e,
            Some((l, why)) => Error::corrupt(
                "training state",
                format!(
                    "the step failed ({e}), and putting layer {l}'s selection back into its \
                     memory failed too ({why}): this rank's residuals are not those before the \
                     step; load a checkpoint"
                ),
            ),
        }
    }

    /// The commit round and the update, once the step's collectives ran:
    /// every rank checks every layer's reduced result (or holds its own
    /// failure, `received`'s error), and the ranks compare one digest of
    /// them all; only when every rank holds the same valid results does
    /// any rank apply anything. A step is all or nothing on every rank.
    /// Returns the results' digest.
    fn commit(
        &mut self,
        t: &mut dyn Transport,
        received: Result<Vec<Received<B>>>,
        p: f32,
        rep: &mut StepReport,
    ) -> Result<u64> {
        let checked = received
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|r| self.check_received(r));
        let digest = *checked.as_ref().unwrap_or(&0);
        let clock = Instant::now();
        let agreed = agree_or_fail(t, &[("results", digest)], checked.map(drop));
        rep.agree += clock.elapsed();
        agreed?;
        let received = received?;
        sparse_coll::guard(t, |_| self.apply(received, p, rep))?;
        Ok(digest)
    }

    /// The step's communication, once every rank has done its local work:
    /// every bucket's collective (one per compressed layer unless
    /// [`Config::buckets`] fuses them), in bucket order with one entry
    /// round for them all ([`sparse_coll::allreduce_jointly`]), then the
    /// dense layers' (fused) allreduces, in layer order. Nothing is
    /// applied here. A layer with nothing `ready` (this rank's local work
    /// failed) goes out empty (dense: zeros) and gets no result (a
    /// compressed layer's bucket none at all), so that every peer's calls
    /// complete; an `Err` is a collective's, which every rank shares or
    /// which abandoned the transport.
    fn communicate(
        &mut self,
        t: &mut dyn Transport,
        mut ready: Vec<Option<Ready<B>>>,
        rep: &mut StepReport,
    ) -> Result<Vec<Option<Received<B>>>> {
        let n = self.layers.len();
        let mut received: Vec<Option<Received<B>>> = (0..n).map(|_| None).collect();
        // Each bucket's layers' selections (none at all where this rank's
        // local work failed), and what its call sends: one layer's as it
        // is, several laid end to end (empty where none).
        let mut outs: Vec<Vec<Outgoing<B>>> = Vec::with_capacity(self.buckets.len());
        let mut inputs = Vec::with_capacity(self.buckets.len());
        for bucket in &self.buckets {
            let mut mine = Vec::with_capacity(bucket.layers.len());
            for &m in &bucket.layers {
                match ready[m].take() {
                    Some(Ready::Compressed(o)) => mine.push(o),
                    None => {}
                    Some(Ready::Dense(_)) => {
                        let e = Error::invalid("layer", "prepared for another kind");
                        return sparse_coll::guard(t, |_| Err(e));
                    }
                }
            }
            if mine.len() != bucket.layers.len() {
                mine.clear();
            }
            let sents: Vec<&SparseVec<f32>> = mine.iter().map(|o| &o.sent).collect();
            inputs.push(sparse_coll::guard(t, |_| bucket_input(&sents, bucket))?);
            outs.push(mine);
        }
        let clock = Instant::now();
        let mut reds: Vec<Reduced<f32>> = inputs.iter().map(|_| Reduced::default()).collect();
        // No compressed layer, no call and no round (every rank has the
        // same layers: the entry round compared them).
        if !self.buckets.is_empty() {
            let mut calls: Vec<JointCall<'_, f32>> = self
                .buckets
                .iter_mut()
                .zip(&inputs)
                .zip(reds.iter_mut())
                .map(|((bucket, v), out)| JointCall {
                    alg: bucket.comm.as_mut(),
                    v,
                    out,
                })
                .collect();
            allreduce_jointly(t, &mut calls)?;
        }
        rep.communicate += clock.elapsed();
        let dims: Vec<usize> = self.layers.iter().map(|l| l.spec.len).collect();
        for ((bucket, red), mine) in self.buckets.iter().zip(reds).zip(outs) {
            let parts = split_result(red, bucket, &dims);
            for ((&m, part), out) in bucket.layers.iter().zip(parts).zip(mine) {
                received[m] = Some(Received::Compressed(Box::new((out, part))));
            }
        }
        for group in dense_groups(&self.layers, self.cfg.fusion) {
            let mut fused = Vec::new();
            for &m in &group {
                match ready[m].take() {
                    Some(Ready::Dense(g)) => fused.extend_from_slice(&g),
                    None => fused.resize(fused.len() + dims[m], 0.0),
                    Some(Ready::Compressed(_)) => {
                        let e = Error::invalid("layer", "prepared for another kind");
                        return sparse_coll::guard(t, |_| Err(e));
                    }
                }
            }
            let clock = Instant::now();
            dense_call(t, &group, &dims, &fused, &mut received)?;
            rep.communicate += clock.elapsed();
        }
        Ok(received)
    }

    /// With a global bucket budget ([`crate::BucketBudget::Global`]), each
    /// fused bucket keeps the `K` largest of its layers' candidates, `K`
    /// the density's share of the bucket; what a layer does not keep stays
    /// in its memory (its selection is cut to what it keeps).
    fn cut_to_budgets(&self, ready: &mut [Option<Ready<B>>]) -> Result<()> {
        for (j, bucket) in self.buckets.iter().enumerate() {
            let Some(k) = self.shared_budget(j) else {
                continue;
            };
            let mut outs: Vec<&mut Outgoing<B>> = Vec::with_capacity(bucket.layers.len());
            for (l, r) in ready.iter_mut().enumerate() {
                if let (true, Some(Ready::Compressed(out))) = (bucket.layers.contains(&l), r) {
                    outs.push(out);
                }
            }
            cut_bucket(&self.b, &mut outs, k)?;
        }
        Ok(())
    }

    /// Bucket `j`'s one budget, where its layers share one
    /// ([`crate::BucketBudget::Global`], several layers): the density's
    /// share of the bucket.
    fn shared_budget(&self, j: usize) -> Option<usize> {
        let global = self
            .cfg
            .buckets
            .is_some_and(|b| b.budget_rule() == crate::BucketBudget::Global);
        let bucket = &self.buckets[j];
        (global && bucket.layers.len() > 1).then(|| self.cfg.density.k_for(bucket.len))
    }

    /// The entries layer `l` selects: its density's share, or under a
    /// global bucket budget up to its bucket's (the candidates the bucket
    /// keeps its largest of).
    fn select_k(&self, l: usize, n: usize) -> usize {
        let shared = match &self.layers[l].part {
            Part::Compressed(c) => self.shared_budget(c.bucket),
            Part::Dense { .. } => None,
        };
        shared.map_or_else(|| self.cfg.density.k_for(n), |k| k.min(n))
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
                    // An entry a word: its index and its value's bits.
                    words.push(sparse_core::hash::digest_words(
                        red.result
                            .indices()
                            .iter()
                            .zip(red.result.values())
                            .map(|(&i, x)| u64::from(i) << 32 | u64::from(x.to_bits())),
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
                    words.push(sparse_core::hash::digest_f32(sum));
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

    /// Layer `l`'s local work of a step ([`prepare_layer`]), its report
    /// kept.
    fn prepare(
        &mut self,
        l: usize,
        g: Grad<'_, B>,
        p: f32,
        rep: &mut StepReport,
    ) -> Result<Ready<B>> {
        let clock = Instant::now();
        let env = LayerPrep {
            b: &self.b,
            cfg: &self.cfg,
            p,
            k: self.select_k(l, self.layers[l].spec.len),
        };
        let (ready, report) = prepare_layer(&env, &mut self.layers[l], g)?;
        rep.layers.push(report);
        rep.sent.push(SparseVec::zeros(report.len)?);
        rep.dropped.push(SparseVec::zeros(report.len)?);
        rep.select += clock.elapsed();
        Ok(ready)
    }

    /// The gradient buffers' number and lengths, and NaN or infinity with
    /// one reduction per layer on the backend, answered together
    /// ([`check_finite_buffers`]: one round trip on `backend-cuda`).
    fn check_buffers(&self, grads: &[B::Buffer<f32>]) -> Result<()> {
        self.check_lengths(grads.iter().map(|g| self.b.len(g)))?;
        check_finite_buffers(&self.b, &grads.iter().collect::<Vec<_>>())
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
    /// The positions to take out at the update; `None` where the memory's
    /// fused selection took them out already ([`Compressed::taken`]).
    indices: Option<B::Buffer<u32>>,
    sent: SparseVec<f32>,
    remainder: Option<SparseVec<f32>>,
    quantized: bool,
}

/// What a layer's update needs of the trainer: the backend, the
/// settings and the number of ranks.
struct Env<'a, B> {
    b: &'a B,
    cfg: &'a Config,
    p: f32,
}

/// The selections of a bucket's layers laid end to end (list order) in
/// one vector of the bucket's `len`.
fn join(sents: &[&SparseVec<f32>], len: usize) -> Result<SparseVec<f32>> {
    let nnz = sents.iter().map(|v| v.nnz()).sum();
    let (mut idx, mut val) = (Vec::with_capacity(nnz), Vec::with_capacity(nnz));
    let mut at = 0u32;
    for v in sents {
        idx.extend(v.indices().iter().map(|&i| i + at));
        val.extend_from_slice(v.values());
        at += v.dim() as u32;
    }
    SparseVec::new(len, idx, val)
}

/// The part of a bucket's reduced vector `v` (of the bucket's `len`) that
/// falls in `at..at + n`, as a vector of dimension `n`. A vector of
/// another dimension than the bucket's comes back as it is, for the
/// check of every result to name it.
fn cut(v: &SparseVec<f32>, at: usize, n: usize, len: usize) -> SparseVec<f32> {
    if v.dim() != len {
        return v.clone();
    }
    let span = v.span(at, n);
    SparseVec::new_unchecked(
        n,
        v.indices()[span.clone()]
            .iter()
            .map(|&i| i - at as u32)
            .collect(),
        v.values()[span].to_vec(),
    )
}

/// What a layer's local work needs of the trainer: the backend, the
/// settings, the number of ranks and the entries the layer selects.
struct LayerPrep<'a, B> {
    b: &'a B,
    cfg: &'a Config,
    p: f32,
    k: usize,
}

/// A layer's local work of a step: clipping and weight decay (on a copy
/// of a caller's gradient buffer), then for a compressed layer
/// compensation, selection of `env.k` and quantization (nothing taken
/// from its memory yet); a dense layer's gradient downloaded.
fn prepare_layer<B: Backend<f32>, S: Selector<B, f32>>(
    env: &LayerPrep<'_, B>,
    layer: &mut Layer<B, S>,
    g: Grad<'_, B>,
) -> Result<(Ready<B>, LayerReport)> {
    let LayerPrep { b, cfg, p, k } = *env;
    // DGC's local clipping to `c / sqrt(P)`: the factor from the norm
    // ([`sparse_core::ReduceOps::sum_squares`], on the device).
    let factor = match cfg.clip {
        Some(c) => clip_factor(b, g.get(), c / p.sqrt())?,
        None => None,
    };
    let decay = match cfg.rule {
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
    let report = LayerReport {
        compressed,
        len: layer.spec.len,
        sent: if compressed { 0 } else { layer.spec.len },
    };
    let ready = match &mut layer.part {
        Part::Compressed(c) => Ready::Compressed(compress(b, cfg, c, g, k)?),
        Part::Dense { .. } => Ready::Dense(b.download(g)?),
    };
    Ok((ready, report))
}

/// A bucket's layers' selections cut to the bucket's `k` largest
/// candidates ([`crate::bucket::global_cut`]); what a layer does not keep
/// stays in its memory (its selection's indices are what it keeps).
fn cut_bucket<B: Backend<f32>>(b: &B, outs: &mut [&mut Outgoing<B>], k: usize) -> Result<()> {
    let candidates: Vec<(&[u32], &[f32])> = outs
        .iter()
        .map(|o| (o.sent.indices(), o.sent.values()))
        .collect();
    let kept = crate::bucket::global_cut(&candidates, k);
    for (out, kept) in outs.iter_mut().zip(kept) {
        if kept.len() == out.sent.nnz() {
            continue;
        }
        let values: Vec<f32> = kept
            .iter()
            .map(|i| {
                let at = out.sent.indices().binary_search(i).expect("a candidate");
                out.sent.values()[at]
            })
            .collect();
        out.indices = Some(b.upload(&kept)?);
        out.sent = SparseVec::new(out.sent.dim(), kept, values)?;
    }
    Ok(())
}

/// A bucket's collective call on its layers' selections `sents` (list
/// order, [`bucket_input`]), the result and dropped entries cut back into
/// each layer's ([`split_result`]): the pipelined step's call, each
/// bucket's with its own entry round.
fn reduce_call(
    t: &mut dyn Transport,
    bucket: &mut Bucket,
    dims: &[usize],
    sents: &[&SparseVec<f32>],
) -> Result<Vec<Reduced<f32>>> {
    let input = sparse_coll::guard(t, |_| bucket_input(sents, bucket))?;
    let red = bucket.comm.allreduce(t, &input)?;
    Ok(split_result(red, bucket, dims))
}

/// A dense group's fused allreduce of `fused` (the gradients of its
/// `layers`, of lengths `dims[l]`, laid end to end), each layer's share of
/// the sum kept in `received`: both step paths' dense call.
fn dense_call<B: Backend<f32>>(
    t: &mut dyn Transport,
    layers: &[usize],
    dims: &[usize],
    fused: &[f32],
    received: &mut [Option<Received<B>>],
) -> Result<()> {
    let sum = t.allreduce_sum_f32(fused)?;
    let mut at = 0;
    for &l in layers {
        received[l] = Some(Received::Dense(sum[at..at + dims[l]].to_vec()));
        at += dims[l];
    }
    Ok(())
}

/// What a bucket's call sends: a single layer's selection as it is,
/// several laid end to end in one vector of the bucket's length, or (no
/// selections: this rank's local work failed) an empty vector of that
/// length.
fn bucket_input(sents: &[&SparseVec<f32>], bucket: &Bucket) -> Result<SparseVec<f32>> {
    match sents {
        [] => SparseVec::zeros(bucket.len),
        [one] => Ok((*one).clone()),
        _ => join(sents, bucket.len),
    }
}

/// A bucket call's outcome cut back into each of its layers' (list
/// order; `dims`: every layer's length, by position); a single layer's as
/// it is.
fn split_result(red: Reduced<f32>, bucket: &Bucket, dims: &[usize]) -> Vec<Reduced<f32>> {
    if let [_] = bucket.layers[..] {
        return vec![red];
    }
    let mut at = 0;
    bucket
        .layers
        .iter()
        .map(|&m| {
            let len = dims[m];
            let part = Reduced {
                result: cut(&red.result, at, len, bucket.len),
                dropped: cut(&red.dropped, at, len, bucket.len),
                ..Reduced::default()
            };
            at += len;
            part
        })
        .collect()
}

/// The dense layers of `layers` in the groups their allreduces fuse
/// ([`Config::fuse`]): consecutive dense layers until a group holds
/// `fusion` bytes or a compressed layer comes.
fn dense_groups<B: Backend<f32>, S>(layers: &[Layer<B, S>], fusion: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let (mut open, mut bytes) = (Vec::new(), 0usize);
    for (l, layer) in layers.iter().enumerate() {
        if let Part::Dense { .. } = layer.part {
            open.push(l);
            bytes += 4 * layer.spec.len;
        }
        let next_compressed = layers
            .get(l + 1)
            .is_some_and(|x| matches!(x.part, Part::Compressed(_)));
        if !open.is_empty() && (bytes >= fusion || next_compressed || l + 1 == layers.len()) {
            out.push(std::mem::take(&mut open));
            bytes = 0;
        }
    }
    out
}
