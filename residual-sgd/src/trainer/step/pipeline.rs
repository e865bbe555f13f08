//! The pipelined step (issue 44): layers come in as a backward pass
//! produces them ([`Trainer::step_with`]; [`Trainer::step_overlapped`]
//! for gradients in hand), each bucket's collective (and each dense
//! group's allreduce, as DDP's buckets) starts as soon as its last layer
//! is in, and while it is in flight the producer thread goes on
//! producing and selecting the next layers.
//!
//! The transport stays on the caller's thread (a [`Transport`] need not be
//! `Send`), so the producer (the caller's backward pass and every layer's
//! local work: compensation, selection, the global cut) runs on a scoped
//! thread and hands each complete bucket over a channel. All or nothing
//! holds as in [`Trainer::step_buffers`]: a producer that fails (a bad or
//! missing gradient, a residual that overflowed, a backend error) sends
//! empty selections for the buckets it has not finished, so every peer's
//! collectives still complete, and its error reaches every rank in the
//! results round, before anything is applied.

use super::calls::{cut_bucket, dense_call, dense_groups, reduce_call};
use super::layer;
use super::work::{Ctx, Grad, Outgoing, Ready, Received};
use crate::Config;
use crate::trainer::report::Fate;
use crate::trainer::{Bucket, Layer, LayerReport, Part, StepReport, Trainer};
use sparse_coll::Transport;
use sparse_core::backend::{check_finite, check_finite_buffer};
use sparse_core::{Backend, Error, Result, SparseVec};
use sparse_select::Selector;
use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

/// One collective call of a pipelined step: its bucket (`None`: a dense
/// group's allreduce, `calls::dense_groups`), its layers (list order)
/// and how many of them are not in yet.
struct Call {
    bucket: Option<usize>,
    layers: Vec<usize>,
    missing: usize,
    /// The bucket's budget where one is shared ([`crate::BucketBudget::Global`]).
    global_k: Option<usize>,
}

/// What the producer hands over for a call: a bucket's selections, or a
/// dense group's gradients laid end to end.
enum Payload<B: Backend<f32>> {
    Sparse(Vec<Outgoing<B>>),
    Dense(Vec<f32>),
}

/// A call as the collectives' side runs it: its bucket (`None`: dense),
/// its layers and their total length.
struct Order {
    bucket: Option<usize>,
    layers: Vec<usize>,
    len: usize,
}

/// Where a pipelined step's producer hands over each layer's gradient
/// ([`Trainer::step_with`]): [`Feed::push`] a device buffer or
/// [`Feed::push_host`] a host slice, every layer once, in any order
/// (backward order, the reverse of the layer list, lets the first
/// buckets start earliest). Each push runs the layer's local work on the
/// producer's thread; a bucket whose last layer is in goes to its
/// collective at once.
pub struct Feed<'a, B: Backend<f32>, S> {
    b: &'a B,
    cfg: &'a Config,
    p: f32,
    layers: &'a mut [Layer<B, S>],
    /// Per layer: the entries it selects and its call.
    ks: Vec<usize>,
    call_of: Vec<Option<usize>>,
    calls: Vec<Call>,
    ready: Vec<Option<Ready<B>>>,
    reports: Vec<Option<LayerReport>>,
    /// Per layer, what becomes of its gradient if the step fails: held
    /// by the step, so that a producer that panics leaves it.
    fates: &'a Mutex<Vec<Fate>>,
    select: Duration,
    failed: Option<Error>,
    tx: mpsc::Sender<(usize, Payload<B>)>,
}

/// What the producer left when it finished: each layer's report, the
/// time of the local work and its first error.
struct Produced {
    reports: Vec<Option<LayerReport>>,
    select: Duration,
    failed: Option<Error>,
}

impl<B: Backend<f32>, S: Selector<B, f32>> Feed<'_, B, S> {
    /// Layer `layer`'s gradient in a backend buffer (only read).
    ///
    /// # Errors
    /// A layer out of range or pushed twice, a gradient of another length,
    /// NaN or infinity, the layer's local work's errors; after one error
    /// every later push returns it. Any error fails the step on every
    /// rank.
    pub fn push(&mut self, layer: usize, g: &B::Buffer<f32>) -> Result<()> {
        let out = self.take(layer, Grad::Borrowed(g), || check_finite_buffer(self.b, g));
        self.note(out)
    }

    /// Layer `layer`'s gradient on the host (uploaded).
    ///
    /// # Errors
    /// As [`Feed::push`].
    pub fn push_host(&mut self, layer: usize, g: &[f32]) -> Result<()> {
        let out = self
            .b
            .upload(g)
            .and_then(|buf| self.take(layer, Grad::Owned(buf), || check_finite(g)));
        self.note(out)
    }

    /// The layers not pushed yet in this step, in list order.
    pub fn missing(&self) -> Vec<usize> {
        (0..self.reports.len())
            .filter(|&l| self.reports[l].is_none())
            .collect()
    }

    /// Layer `layer`'s gradient as zeros, cleared by the backend (on a
    /// device, nothing crosses from the host): a parameter the loss does
    /// not reach ([`crate::burn::gradients`] reads zeros for it too).
    ///
    /// # Errors
    /// As [`Feed::push_host`].
    pub fn push_zeros(&mut self, layer: usize) -> Result<()> {
        let len = self.layers.get(layer).map_or(0, |l| l.spec.len);
        let out = self
            .b
            .zeros::<f32>(len)
            .and_then(|buf| self.take(layer, Grad::Owned(buf), || Ok(())));
        self.note(out)
    }

    /// `out`, kept as the step's failure if it is the first.
    fn note(&mut self, out: Result<()>) -> Result<()> {
        if let (Err(e), None) = (&out, &self.failed) {
            self.failed = Some(e.clone());
        }
        out
    }

    fn take(
        &mut self,
        l: usize,
        g: Grad<'_, B>,
        finite: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.accept(l, &g, finite)?;
        let clock = Instant::now();
        let ctx = Ctx {
            b: self.b,
            cfg: self.cfg,
            p: self.p,
        };
        let (ready, report) = layer::prepare(&ctx, self.ks[l], &mut self.layers[l], g)
            .inspect_err(|_| self.fate(l, Fate::Failed))?;
        self.fate(l, Fate::Absorbed);
        self.select += clock.elapsed();
        self.reports[l] = Some(report);
        self.ready[l] = Some(ready);
        if let Some(c) = self.call_of[l] {
            self.calls[c].missing -= 1;
            if self.calls[c].missing == 0 {
                self.send(c)?;
            }
        }
        Ok(())
    }

    /// Whether layer `l` takes `g` in this step: a layer of the trainer
    /// not pushed yet, a gradient of its length, finite; a refused
    /// gradient is noted so (it goes in no memory).
    fn accept(
        &mut self,
        l: usize,
        g: &Grad<'_, B>,
        finite: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let n = self.layers.len();
        let Some(layer) = self.layers.get(l) else {
            return Err(Error::invalid(
                "layer",
                format!("{l} is not a layer: the trainer has {n}"),
            ));
        };
        if self.reports[l].is_some() {
            return Err(Error::invalid(
                "layer",
                format!("layer {l} ({}) pushed twice in one step", layer.spec.name),
            ));
        }
        let checked = match self.b.len(g.get()) {
            got if got != layer.spec.len => Err(Error::LengthMismatch {
                what: "layer gradient",
                expected: layer.spec.len,
                got,
            }),
            _ => finite(),
        };
        if checked.is_err() {
            self.fate(l, Fate::Refused);
        }
        checked
    }

    /// Layer `l`'s gradient's fate, noted for the step.
    fn fate(&self, l: usize, fate: Fate) {
        self.fates.lock().unwrap_or_else(PoisonError::into_inner)[l] = fate;
    }

    /// Call `c`'s layers' selections (cut to a shared budget) to its
    /// collective, or a dense group's gradients to its allreduce.
    fn send(&mut self, c: usize) -> Result<()> {
        let call = &self.calls[c];
        let payload = if call.bucket.is_some() {
            let mut outs = Vec::with_capacity(call.layers.len());
            for &l in &call.layers {
                match self.ready[l].take() {
                    Some(Ready::Compressed(o)) => outs.push(o),
                    _ => return Err(Error::invalid("layer", "prepared for another kind")),
                }
            }
            if let Some(k) = call.global_k {
                let mut refs: Vec<&mut Outgoing<B>> = outs.iter_mut().collect();
                cut_bucket(self.b, &mut refs, k)?;
            }
            Payload::Sparse(outs)
        } else {
            let mut fused = Vec::new();
            for &l in &call.layers {
                match self.ready[l].take() {
                    Some(Ready::Dense(g)) => fused.extend_from_slice(&g),
                    _ => return Err(Error::invalid("layer", "prepared for another kind")),
                }
            }
            Payload::Dense(fused)
        };
        // The receiver is gone only once the step has ended on its side.
        let _ = self.tx.send((c, payload));
        Ok(())
    }

    /// What is left once the producer returned `produced`: a layer never
    /// pushed is an error.
    fn finish(self, produced: Result<()>) -> Produced {
        let mut failed = self.failed.or(produced.err());
        if failed.is_none()
            && let Some(l) = self.reports.iter().position(Option::is_none)
        {
            failed = Some(Error::invalid(
                "layer",
                format!(
                    "layer {l} ({}) was not pushed: a step takes every layer's gradient once",
                    self.layers[l].spec.name
                ),
            ));
        }
        Produced {
            reports: self.reports,
            select: self.select,
            failed,
        }
    }
}

impl<B, S> Trainer<B, S>
where
    B: Backend<f32> + Sync,
    S: Selector<B, f32> + Send,
{
    /// [`Trainer::step_buffers`], pipelined: the layers go in backward
    /// order (the reverse of the layer list) through [`Trainer::step_with`],
    /// so while a bucket's collective is in flight the next bucket is
    /// selected. Bit for bit the result of [`Trainer::step_buffers`].
    ///
    /// # Errors
    /// As [`Trainer::step_buffers`].
    pub fn step_overlapped(
        &mut self,
        t: &mut dyn Transport,
        grads: &[B::Buffer<f32>],
    ) -> Result<StepReport> {
        let n = self.layers.len();
        let out = self.step_with(t, |feed| {
            if grads.len() != n {
                return Err(Error::LengthMismatch {
                    what: "gradients",
                    expected: n,
                    got: grads.len(),
                });
            }
            (0..n).rev().try_for_each(|l| feed.push(l, &grads[l]))
        });
        // The gradients were handed over with the call, as to
        // `step_buffers`: where the entry round failed before the producer
        // ran, they are accepted or refused together there too.
        match out {
            Err(e)
                if self
                    .failure
                    .as_ref()
                    .is_some_and(|f| f.not_received.len() == n) =>
            {
                let (left, fates) = match self.check_buffers(grads) {
                    Ok(()) => (
                        grads.iter().map(|g| Some(Grad::Borrowed(g))).collect(),
                        vec![Fate::Absorbed; n],
                    ),
                    Err(_) => (Vec::new(), vec![Fate::Refused; n]),
                };
                Err(self.failed(e, left, &fates, t.size() as f32))
            }
            out => out,
        }
    }

    /// One step whose gradients `produce` hands over layer by layer as it
    /// computes them ([`Feed::push`]), on a thread of its own: a
    /// framework's backward pass with a hook per parameter overlaps its
    /// computation with the step's communication. Each bucket's collective
    /// ([`Config::buckets`]; without buckets each compressed layer is one)
    /// and each dense group's allreduce ([`Config::fuse`]) starts, on this
    /// thread, as soon as its last layer is in; while it runs, the producer
    /// goes on. The calls run in the order a backward pass readies them
    /// (the call whose first layer comes later in the list first), the
    /// same on every rank.
    ///
    /// The step is all or nothing on every rank, as
    /// [`Trainer::step_buffers`]: nothing is applied until every rank
    /// holds every result, checked, and the producer succeeded everywhere.
    /// A producer's error (its own, or a push's) fails the step on every
    /// rank with no weight moved; results are checked while later buckets
    /// are in flight, but applied only after the commit round, so no
    /// bucket's update is applied early. A failed step keeps the rule of
    /// [`Trainer::step_buffers`] ("A failed step"): each gradient a push
    /// accepted is in its layer's memory (the push compensated it), a
    /// refused one or one never pushed in none ([`Trainer::last_failure`]).
    ///
    /// # Errors
    /// As [`Trainer::step_buffers`]; the producer's errors; a layer not
    /// pushed; [`Error::Panicked`] if the producer panicked.
    pub fn step_with<F>(&mut self, t: &mut dyn Transport, produce: F) -> Result<StepReport>
    where
        F: for<'f> FnOnce(&mut Feed<'f, B, S>) -> Result<()> + Send,
    {
        let clock = Instant::now();
        let p = t.size() as f32;
        // Until the producer runs, no gradient has reached the trainer.
        let fates = Mutex::new(vec![Fate::NotReceived; self.layers.len()]);
        let fates_now =
            |f: &Mutex<Vec<Fate>>| f.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if let Err(e) = self.enter(t, Ok(())) {
            return Err(self.failed(e, Vec::new(), &fates_now(&fates), p));
        }
        let start = t.traffic();
        let mut rep = StepReport {
            agree: clock.elapsed(),
            ..StepReport::default()
        };
        let outcome = self.pipelined(t, produce, p, &mut rep, &fates);
        if let Err(e) = self.settle(outcome) {
            // Every gradient a push accepted was compensated there.
            return Err(self.failed(e, Vec::new(), &fates_now(&fates), p));
        }
        self.failure = None;
        rep.traffic = t.traffic().since(&start);
        Ok(rep)
    }

    /// The calls of a pipelined step in the order they run: every
    /// bucket's and every dense group's, the call whose first layer comes
    /// later in the list first (the order a backward pass readies them;
    /// buckets filled in backward order keep theirs).
    fn calls(&self) -> Vec<Call> {
        // The sort below fixes the order (the calls' layers are disjoint,
        // so no two share a first layer).
        let mut calls: Vec<Call> = (0..self.buckets.len())
            .map(|j| {
                let b = &self.buckets[j];
                Call {
                    bucket: Some(j),
                    layers: b.layers.clone(),
                    missing: b.layers.len(),
                    global_k: self.shared_budget(j),
                }
            })
            .collect();
        calls.extend(
            dense_groups(&self.layers, self.cfg.fusion)
                .into_iter()
                .map(|layers| Call {
                    bucket: None,
                    missing: layers.len(),
                    layers,
                    global_k: None,
                }),
        );
        calls.sort_by_key(|c| std::cmp::Reverse(c.layers.iter().min().copied()));
        calls
    }

    /// The pipelined step after its entry round: the producer on a scoped
    /// thread, the collectives here, then the dense allreduces, the
    /// commit round and the update. Returns the results' digest.
    fn pipelined<F>(
        &mut self,
        t: &mut dyn Transport,
        produce: F,
        p: f32,
        rep: &mut StepReport,
        fates: &Mutex<Vec<Fate>>,
    ) -> Result<u64>
    where
        F: for<'f> FnOnce(&mut Feed<'f, B, S>) -> Result<()> + Send,
    {
        let n = self.layers.len();
        let calls = self.calls();
        let mut call_of = vec![None; n];
        for (c, call) in calls.iter().enumerate() {
            for &l in &call.layers {
                call_of[l] = Some(c);
            }
        }
        let ks: Vec<usize> = (0..n)
            .map(|l| self.select_k(l, self.layers[l].spec.len))
            .collect();
        let dims: Vec<usize> = self.layers.iter().map(|l| l.spec.len).collect();
        let order: Vec<Order> = calls
            .iter()
            .map(|c| Order {
                bucket: c.bucket,
                layers: c.layers.clone(),
                len: c.layers.iter().map(|&l| dims[l]).sum(),
            })
            .collect();
        let (tx, rx) = mpsc::channel();
        let Trainer {
            b,
            cfg,
            layers,
            buckets,
            ..
        } = self;
        let feed = Feed {
            b: &*b,
            cfg: &*cfg,
            p,
            layers: &mut layers[..],
            ks,
            call_of,
            calls,
            ready: (0..n).map(|_| None).collect(),
            reports: vec![None; n],
            fates,
            select: Duration::ZERO,
            failed: None,
            tx,
        };
        let mut received: Vec<Option<Received<B>>> = (0..n).map(|_| None).collect();
        let (collectives, produced) = std::thread::scope(|s| {
            let producer = s.spawn(move || {
                let mut feed = feed;
                let out = produce(&mut feed);
                feed.finish(out)
            });
            let collectives = run_calls(t, buckets, &order, &dims, &rx, &mut received, rep);
            let rank = t.rank();
            let produced = producer.join().unwrap_or_else(|panic| Produced {
                reports: Vec::new(),
                select: Duration::ZERO,
                failed: Some(Error::Panicked {
                    rank,
                    message: format!(
                        "in the step's producer: {}",
                        panic
                            .downcast_ref::<&str>()
                            .map(|s| (*s).to_string())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_default()
                    ),
                }),
            });
            (collectives, produced)
        });
        collectives?;
        rep.select += produced.select;
        for (l, r) in produced.reports.iter().enumerate() {
            let len = self.layers[l].spec.len;
            rep.layers.push(r.unwrap_or(LayerReport {
                compressed: matches!(self.layers[l].part, Part::Compressed(_)),
                len,
                sent: 0,
            }));
            rep.sent.push(SparseVec::zeros(len)?);
            rep.dropped.push(SparseVec::zeros(len)?);
        }
        let local = match produced.failed {
            Some(e) => Err(e),
            None => received
                .into_iter()
                .enumerate()
                .map(|(l, r)| {
                    r.ok_or_else(|| {
                        Error::invalid("layer", format!("layer {l}: no reduced result"))
                    })
                })
                .collect(),
        };
        self.commit(t, local, p, rep)
    }
}

/// The collectives of a pipelined step, in `order`, each as soon as the
/// producer delivered its bucket (or, once the producer has stopped
/// without it, on empty selections, so that peers complete theirs).
fn run_calls<B: Backend<f32>>(
    t: &mut dyn Transport,
    buckets: &mut [Bucket],
    order: &[Order],
    dims: &[usize],
    rx: &mpsc::Receiver<(usize, Payload<B>)>,
    received: &mut [Option<Received<B>>],
    rep: &mut StepReport,
) -> Result<()> {
    let mut early: BTreeMap<usize, Payload<B>> = BTreeMap::new();
    let mut closed = false;
    for (c, call) in order.iter().enumerate() {
        let payload = loop {
            if let Some(o) = early.remove(&c) {
                break Some(o);
            }
            if closed {
                break None;
            }
            match rx.recv() {
                Ok((i, o)) => {
                    early.insert(i, o);
                }
                Err(_) => closed = true,
            }
        };
        let clock = Instant::now();
        match (call.bucket, payload) {
            (Some(j), Some(Payload::Sparse(outs))) => {
                let sents: Vec<&SparseVec<f32>> = outs.iter().map(|o| &o.sent).collect();
                let reds = reduce_call(t, &mut buckets[j], dims, &sents)?;
                for ((&l, out), red) in call.layers.iter().zip(outs).zip(reds) {
                    received[l] = Some(Received::Compressed(Box::new((out, red))));
                }
            }
            // Nothing where this rank's local work failed: an empty vector
            // of the bucket's length goes out, and no result is kept.
            (Some(j), None) => {
                reduce_call(t, &mut buckets[j], dims, &[])?;
            }
            (None, Some(Payload::Dense(fused))) => {
                dense_call(t, &call.layers, dims, &fused, received)?;
            }
            // Zeros where this rank's local work failed.
            (None, None) => {
                t.allreduce_sum_f32(&vec![0.0; call.len])?;
            }
            (_, Some(_)) => {
                let e = Error::invalid("layer", "prepared for another kind");
                return sparse_coll::guard(t, |_| Err(e));
            }
        }
        rep.communicate += clock.elapsed();
    }
    Ok(())
}
