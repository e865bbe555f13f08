//! The step, top to bottom ([`Trainer::step_buffers`]): the entry round,
//! every layer's local work, the collectives, the check of every result,
//! the commit round and the update, all or nothing on every rank.
//!
//! Each part is in one place, which both forms of the step (this one and
//! the pipelined one, `pipeline`) use: what a layer's work hands on in
//! `work`, one layer's local work, update and put-back in `layer`, the
//! budgets in `budget`, the calls (a bucket's input and result split, the
//! reduce and dense calls) in `calls`, the checks in `check`, the entry
//! and commit rounds and the step's end in `rounds`.

use super::{Part, StepReport, Trainer};
use sparse_coll::{JointCall, Reduced, Transport, allreduce_jointly};
use sparse_core::{Backend, Error, Result, SparseVec};
use sparse_select::Selector;
use std::time::Instant;

mod budget;
mod calls;
mod check;
mod layer;
mod pipeline;
mod rounds;
mod work;
use super::report::Fate;
pub(crate) use calls::cut;
use calls::{bucket_input, dense_call, dense_groups, split_result};
use layer::{compressed_apply, dense_apply};
pub use pipeline::Feed;
use work::{Ctx, Grad, Outgoing, Ready, Received};

impl<B: Backend<f32>, S: Selector<B, f32>> Trainer<B, S> {
    /// One step with every layer's gradient on the host: uploads them and
    /// runs [`Trainer::step_buffers`], the NaN and infinity check done on
    /// the host before the upload (it names the first non-finite value).
    /// A failed step keeps the rule of [`Trainer::step_buffers`] ("A
    /// failed step": the accepted gradients in the compressed layers'
    /// memories; [`Trainer::last_failure`]).
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
    /// [`Config::buckets`](crate::Config::buckets) fuses them) are entered in one round for them
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
    /// then does any rank apply anything.
    ///
    /// **A failed step**, by one rule in every form of the step (this one,
    /// [`Trainer::step`], [`Trainer::step_with`],
    /// [`Trainer::step_overlapped`]; with or without buckets and fused
    /// feedback) and at every point it can fail (the entry round, a
    /// rank's local work, a collective, the commit round): every rank's
    /// weights and dense momenta stay as they were, and every gradient the
    /// trainer accepted for a compressed layer is absorbed into that
    /// layer's memory: compensated in (clipped and decayed as a step does
    /// it), nothing taken out, as if the step had sent nothing. Nothing is
    /// lost, and nothing may be given twice: drop the batch, do not retry
    /// it. A gradient the trainer refused (another length, NaN or
    /// infinity: this form accepts or refuses a call's gradients together),
    /// or never received (a pipelined producer that did not push it, or
    /// the entry round failed before the producer ran), is in no memory; a
    /// dense layer's accepted gradient is dropped (it keeps no residual); a
    /// layer whose own local work failed on this rank (a residual that
    /// overflowed, a backend error) holds what that work left.
    /// [`Trainer::last_failure`] says, per layer, which of these became of
    /// this rank's gradients. A failure on one rank only (a collective part way, a memory's
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
        let n = self.layers.len();
        // What becomes of each gradient if the step fails: every one of a
        // call is accepted or refused together.
        let (mut grads, local, mut fates) = match grads {
            Ok(g) => (
                g.into_iter().map(Some).collect(),
                Ok(()),
                vec![Fate::Absorbed; n],
            ),
            Err(e) => (
                (0..n).map(|_| None).collect(),
                Err(e),
                vec![Fate::Refused; n],
            ),
        };
        let p = t.size() as f32;
        let clock = Instant::now();
        if let Err(e) = self.enter(t, local) {
            return Err(self.failed(e, grads, &fates, p));
        }
        let start = t.traffic();
        let mut rep = StepReport {
            agree: clock.elapsed(),
            ..StepReport::default()
        };
        let mut ready = Vec::with_capacity(n);
        let mut prepared = Ok(());
        for l in 0..n {
            let g = grads[l].take().expect("every layer's gradient, accepted");
            match self.prepare(l, g, p, &mut rep) {
                Ok(r) => ready.push(Some(r)),
                Err(e) => {
                    fates[l] = Fate::Failed;
                    prepared = Err(e);
                    break;
                }
            }
        }
        let prepared = prepared.and_then(|()| self.cut_to_budgets(&mut ready));
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
        if let Err(e) = self.settle(outcome) {
            // The layers after one whose local work failed: their
            // gradients, accepted, absorbed as the others are.
            return Err(self.failed(e, grads, &fates, p));
        }
        self.failure = None;
        rep.traffic = t.traffic().since(&start);
        Ok(rep)
    }

    /// The step's communication, once every rank has done its local work:
    /// every bucket's collective (one per compressed layer unless
    /// [`Config::buckets`](crate::Config::buckets) fuses them), in bucket order with one entry
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

    /// Applies every layer's checked result: a compressed layer's selection
    /// leaves its memory, the collection, the update; a dense layer's
    /// momentum SGD.
    fn apply(&mut self, received: Vec<Received<B>>, p: f32, rep: &mut StepReport) -> Result<()> {
        for (l, r) in received.into_iter().enumerate() {
            let layer = &mut self.layers[l];
            match (&mut layer.part, r) {
                (Part::Compressed(c), Received::Compressed(sent)) => {
                    let (out, red) = *sent;
                    let ctx = Ctx {
                        b: &self.b,
                        cfg: &self.cfg,
                        p,
                    };
                    let (sent, dropped) = compressed_apply(&ctx, c, &mut layer.w, out, red, rep)?;
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

    /// Layer `l`'s local work of a step (`layer::prepare`), its report
    /// kept.
    fn prepare(
        &mut self,
        l: usize,
        g: Grad<'_, B>,
        p: f32,
        rep: &mut StepReport,
    ) -> Result<Ready<B>> {
        let clock = Instant::now();
        let ctx = Ctx {
            b: &self.b,
            cfg: &self.cfg,
            p,
        };
        let k = self.select_k(l, self.layers[l].spec.len);
        let (ready, report) = layer::prepare(&ctx, k, &mut self.layers[l], g)?;
        rep.layers.push(report);
        rep.sent.push(SparseVec::zeros(report.len)?);
        rep.dropped.push(SparseVec::zeros(report.len)?);
        rep.select += clock.elapsed();
        Ok(ready)
    }
}
