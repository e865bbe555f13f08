//! Error feedback for a framework's gradient buckets, one bucket at a time:
//! what a PyTorch DDP communication hook runs (the `sparse_comm` Python
//! package, `python/` in the repository), and any framework that hands
//! over its gradients as flat buckets of parameters.
//!
//! [`BucketFeedback`] keeps every parameter's memory (its residual, and
//! RGC's momentum) and selector keyed by the parameter, not by the bucket:
//! a framework that regroups its parameters into other buckets (DDP
//! rebuilds its buckets after the first iteration; a new DDP instance or
//! another bucket cap after a restart) maps every residual to its
//! parameter exactly. Each call reduces one bucket: every parameter of it
//! compensates its gradient and selects its share of the density
//! ([`Config::density`], as [`crate::BucketBudget::PerLayer`]), the
//! selections are laid end to end in the bucket's order and reduced by the
//! bucket's collective (one per distinct list of parameters, built from
//! the registry, its state kept across calls), what the collective dropped
//! goes back into the memory of the rank that holds it (SparDL's global
//! residual collection), and the call returns the mean of the reduced
//! result over the ranks, dense, in the bucket's layout: the gradient an
//! optimizer applies (plain SGD: the learning rate is the optimizer's).
//!
//! The arithmetic is [`crate::Trainer`]'s, bit for bit: a trainer over the
//! bucket's parameters as its layers, in one bucket in list order
//! ([`crate::FillOrder::List`]) with per-layer budgets, learning rate 1 and
//! zero weights ends a step with its weights the negated mean this returns
//! (`residual-sgd/tests/hook.rs` checks it step after step).
//!
//! A failed call keeps the rule of a failed step
//! ([`crate::Trainer::step_buffers`], "A failed step"): each parameter's
//! gradient that was accepted is absorbed into its memory (compensated,
//! nothing taken out), so the batch is dropped, not retried; a gradient
//! refused (another length, NaN or infinity, found before anything
//! changes) is in none.

use crate::memory::{self, Memory};
use crate::{Config, Rule};
use sparse_coll::{Defaults, Registry, SparseAllreduce, Transport};
use sparse_core::backend::check_finite;
use sparse_core::state::{Scope, State};
use sparse_core::{Backend, Error, Result, SparseVec};
use sparse_select::{Selection, Selector};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A bucket's input (its parameters' selections laid end to end) and
/// each parameter's selection.
type Selected<B> = (SparseVec<f32>, Vec<Selection<B, f32>>);

/// A selector for each parameter, made fresh.
pub type SelectorFactory<B> = Box<dyn Fn() -> Box<dyn Selector<B, f32> + Send> + Send>;

/// One parameter's part: its length, memory and selector.
struct Param<B: Backend<f32>> {
    name: String,
    len: usize,
    memory: Box<dyn Memory<B>>,
    selector: Box<dyn Selector<B, f32> + Send>,
}

/// What one bucket's call did on this rank.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BucketReport {
    /// The bucket's parameters' entries.
    pub len: usize,
    /// The entries this rank sent.
    pub sent: usize,
    /// Bytes this rank sent and received in the collective (its entry
    /// round included).
    pub bytes_sent: u64,
    /// Bytes received.
    pub bytes_recv: u64,
    /// Time compensating and selecting.
    pub select: Duration,
    /// Time in the collective.
    pub communicate: Duration,
    /// Time taking the selection out, collecting and writing the mean.
    pub update: Duration,
}

impl BucketReport {
    /// The density this rank sent.
    pub fn density(&self) -> f64 {
        if self.len == 0 {
            0.0
        } else {
            self.sent as f64 / self.len as f64
        }
    }
}

/// Error feedback for gradient buckets keyed by parameter (the module's
/// docs say what a call does).
pub struct BucketFeedback<B: Backend<f32>> {
    b: B,
    cfg: Config,
    spec: String,
    registry: Registry<f32>,
    params: Vec<Param<B>>,
    /// The collective of each distinct list of parameters.
    comms: BTreeMap<Vec<usize>, Box<dyn SparseAllreduce<f32>>>,
}

impl<B: Backend<f32> + 'static> BucketFeedback<B> {
    /// Feedback for parameters named `names` of lengths `lens` (their
    /// order is the framework's, the same on every rank), with `cfg`'s
    /// rule and density, each parameter selecting with a selector
    /// `selector` makes, and each bucket reduced by the registry's
    /// `collective` (`"spardl"`, `"auto"`, `"topk_a:values=f16"`) built
    /// with `cfg`'s budget. Top-k SGD's memory gains 1 (the learning rate
    /// is the optimizer's); RGC's is its momentum (pair it with plain
    /// SGD, no momentum of the optimizer's own).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] if `names` and `lens` differ in length;
    /// [`Error::InvalidParameter`] for an unknown collective or a bad
    /// parameter, or weight decay in `cfg` (it belongs to the optimizer:
    /// the gradients here come without the weights); backend errors.
    pub fn new(
        b: B,
        cfg: Config,
        names: &[String],
        lens: &[usize],
        selector: SelectorFactory<B>,
        registry: Registry<f32>,
        collective: &str,
    ) -> Result<Self> {
        if names.len() != lens.len() {
            return Err(Error::LengthMismatch {
                what: "parameter names",
                expected: lens.len(),
                got: names.len(),
            });
        }
        if let Rule::Rgc { weight_decay, .. } = cfg.rule()
            && weight_decay != 0.0
        {
            return Err(Error::invalid(
                "weight_decay",
                "the optimizer applies weight decay: a hook's gradients come without the weights",
            ));
        }
        // The collective is checked once here, so that a bad spec fails at
        // construction, not at the first bucket.
        registry.build(collective, Defaults::with_budget(cfg.budget()))?;
        let params = names
            .iter()
            .zip(lens)
            .map(|(name, &len)| {
                Ok(Param {
                    name: name.clone(),
                    len,
                    memory: memory::for_rule(&b, cfg.rule(), 1.0, len)?,
                    selector: selector(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            b,
            cfg,
            spec: collective.into(),
            registry,
            params,
            comms: BTreeMap::new(),
        })
    }

    /// The parameters' names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.params.iter().map(|p| p.name.as_str()).collect()
    }

    /// The parameters' lengths, in order.
    pub fn lens(&self) -> Vec<usize> {
        self.params.iter().map(|p| p.len).collect()
    }

    /// Reduces one bucket on every rank: `grad` holds the gradients of the
    /// parameters `params` (indices into this feedback's parameters, in
    /// the bucket's order) laid end to end; `out` (of `grad`'s length)
    /// receives the mean over the ranks of the reduced result, dense.
    /// Every rank calls it for the same buckets in the same order.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a parameter out of range or given
    /// twice, [`Error::LengthMismatch`] for a bucket of another length
    /// than its parameters', [`Error::NonFinite`] for a NaN or an
    /// infinity (this rank; the others get [`Error::PeerError`] from the
    /// collective's entry round); the collective's and the backend's
    /// errors. After any error the accepted gradients are in their
    /// memories (the module's docs).
    pub fn reduce(
        &mut self,
        t: &mut dyn Transport,
        params: &[usize],
        grad: &[f32],
        out: &mut [f32],
    ) -> Result<BucketReport> {
        let len = self.check(params, grad, out);
        let clock = Instant::now();
        // A refused bucket still enters its collective, with nothing, so
        // that the peers' calls fail at their entry and no rank waits.
        let (input, sels) = match len.and_then(|len| self.select(params, grad, len)) {
            Ok(x) => x,
            Err(e) => return Err(self.fail_entry(t, params, grad.len(), e)),
        };
        let select = clock.elapsed();
        let clock = Instant::now();
        let before = t.traffic();
        let comm = self.comm(params)?;
        let red = match comm.allreduce(t, &input) {
            Ok(red) => red,
            Err(e) => {
                // A call that failed part way may have advanced its state
                // on some ranks only: back to a first call's, as a failed
                // step's collectives go.
                comm.reset();
                return Err(e);
            }
        };
        let traffic = t.traffic().since(&before);
        let communicate = clock.elapsed();
        // What the collective returned is checked before anything moves:
        // a result of another dimension, unsorted or not finite is an
        // error, the gradients absorbed as after any failure.
        for (what, v) in [("reduced result", &red.result), ("dropped", &red.dropped)] {
            v.check()?;
            if v.dim() != input.dim() {
                return Err(Error::LengthMismatch {
                    what,
                    expected: input.dim(),
                    got: v.dim(),
                });
            }
            check_finite(v.values())?;
        }
        let clock = Instant::now();
        let p = t.size() as f32;
        let mut at = 0;
        for (&m, sel) in params.iter().zip(sels) {
            let n = self.params[m].len;
            let dropped = crate::trainer::cut(&red.dropped, at, n, input.dim());
            let param = &mut self.params[m];
            param.memory.remove(&self.b, &sel.indices)?;
            param.memory.restore(&self.b, &dropped)?;
            at += n;
        }
        out.fill(0.0);
        for (&i, &x) in red.result.indices().iter().zip(red.result.values()) {
            out[i as usize] = x / p;
        }
        Ok(BucketReport {
            len: grad.len(),
            sent: input.nnz(),
            bytes_sent: traffic.bytes_sent,
            bytes_recv: traffic.bytes_recv,
            select,
            communicate,
            update: clock.elapsed(),
        })
    }

    /// The bucket's length, where its parameters, gradient and output fit
    /// and its gradient is finite.
    fn check(&self, params: &[usize], grad: &[f32], out: &[f32]) -> Result<usize> {
        let mut seen = vec![false; self.params.len()];
        let mut len = 0usize;
        for &m in params {
            let Some(p) = self.params.get(m) else {
                return Err(Error::invalid(
                    "parameter",
                    format!("{m} is not a parameter: there are {}", self.params.len()),
                ));
            };
            if std::mem::replace(&mut seen[m], true) {
                return Err(Error::invalid(
                    "parameter",
                    format!("{m} ({}) is twice in one bucket", p.name),
                ));
            }
            len += p.len;
        }
        for (what, got) in [
            ("bucket gradient", grad.len()),
            ("bucket output", out.len()),
        ] {
            if got != len {
                return Err(Error::LengthMismatch {
                    what,
                    expected: len,
                    got,
                });
            }
        }
        check_finite(grad)?;
        Ok(len)
    }

    /// Every parameter's compensation and selection of its share, and the
    /// bucket's input: the selections (the accumulator's values at the
    /// selected indices) laid end to end.
    fn select(&mut self, params: &[usize], grad: &[f32], len: usize) -> Result<Selected<B>> {
        let (mut idx, mut val) = (Vec::new(), Vec::new());
        let mut sels = Vec::with_capacity(params.len());
        let mut at = 0usize;
        for &m in params {
            let param = &mut self.params[m];
            let n = param.len;
            let g = self.b.upload(&grad[at..at + n])?;
            param.memory.compensate(&self.b, &g)?;
            let k = self.cfg.density.k_for(n);
            let sel = param
                .selector
                .select(&self.b, param.memory.accumulator(), k)?;
            let values = self.b.gather(param.memory.accumulator(), &sel.indices)?;
            let sel = Selection { values, ..sel };
            let sent = sel.to_sparse(&self.b, n)?;
            idx.extend(sent.indices().iter().map(|&i| i + at as u32));
            val.extend_from_slice(sent.values());
            sels.push(sel);
            at += n;
        }
        Ok((SparseVec::new(len, idx, val)?, sels))
    }

    /// This rank's refusal of a bucket, `e`, shared with the peers through
    /// the collective's entry round (they get [`Error::PeerError`]).
    fn fail_entry(
        &mut self,
        t: &mut dyn Transport,
        params: &[usize],
        len: usize,
        e: Error,
    ) -> Error {
        let Ok(comm) = self.comm(params) else {
            return e;
        };
        let Ok(empty) = SparseVec::zeros(len) else {
            return e;
        };
        match comm.enter_failing(t, &empty, e.clone()) {
            Ok(()) => e,
            Err(e) => e,
        }
    }

    /// The collective of the bucket `params`, built at its first call.
    fn comm(&mut self, params: &[usize]) -> Result<&mut Box<dyn SparseAllreduce<f32>>> {
        if !self.comms.contains_key(params) {
            let comm = self
                .registry
                .build(&self.spec, Defaults::with_budget(self.cfg.budget()))?;
            self.comms.insert(params.to_vec(), comm);
        }
        Ok(self.comms.get_mut(params).expect("inserted above"))
    }

    /// Every parameter's residual (its memory's accumulator), downloaded.
    ///
    /// # Errors
    /// Backend errors.
    pub fn residuals(&self) -> Result<Vec<Vec<f32>>> {
        self.params
            .iter()
            .map(|p| self.b.download(p.memory.accumulator()))
            .collect()
    }

    /// Everything that makes this rank's next calls what they will be, as
    /// data: each parameter's memory and selector (by name), and each
    /// bucket's collective (by its parameters' names).
    ///
    /// # Errors
    /// The parts' errors.
    pub fn save_state(&self) -> Result<State> {
        let mut s = State::new(KIND, 1);
        s.put_u64("parameters", Scope::Shared, self.params.len() as u64);
        for (i, p) in self.params.iter().enumerate() {
            let mut c = State::new("parameter", 1);
            c.put_u64("len", Scope::Shared, p.len as u64);
            c.put_child("memory", p.memory.save_state(&self.b)?);
            c.put_child("selector", p.selector.save_state()?);
            s.put_child(format!("p{i}"), c);
        }
        let mut buckets = State::new("buckets", 1);
        for (params, comm) in &self.comms {
            let key: Vec<u64> = params.iter().map(|&m| m as u64).collect();
            let mut c = State::new("bucket", 1);
            c.put(
                "parameters",
                Scope::Shared,
                sparse_core::state::Tensor::U64(key),
            );
            c.put_child("collective", comm.save_state()?);
            buckets.put_child(format!("b{}", bucket_name(params)), c);
        }
        s.put_child("buckets", buckets);
        Ok(s)
    }

    /// Restores what [`BucketFeedback::save_state`] saved into feedback
    /// built alike: all or nothing on this rank (a part that refuses its
    /// state leaves every part as it was).
    ///
    /// # Errors
    /// [`Error::Mismatch`] for another number or length of parameters;
    /// the parts' errors.
    pub fn load_state(&mut self, s: &State) -> Result<()> {
        s.expect(KIND, 1)?;
        let n = s.u64("parameters")? as usize;
        if n != self.params.len() {
            return Err(Error::Mismatch {
                what: "the hook's parameters".into(),
                saved: n.to_string(),
                here: self.params.len().to_string(),
                hint: "load the state into a hook over the same model".into(),
            });
        }
        let saved = self.save_state()?;
        let out = self.load_parts(s);
        if out.is_err() {
            // Put back what was there; its own state always loads.
            let _ = self.load_parts(&saved);
        }
        out
    }

    fn load_parts(&mut self, s: &State) -> Result<()> {
        for (i, p) in self.params.iter_mut().enumerate() {
            let c = s.child(&format!("p{i}"))?;
            let len = c.u64("len")? as usize;
            if len != p.len {
                return Err(Error::Mismatch {
                    what: format!("parameter {i} ({}): its length", p.name),
                    saved: len.to_string(),
                    here: p.len.to_string(),
                    hint: "load the state into a hook over the same model".into(),
                });
            }
            p.memory.load_state(&self.b, c.child("memory")?)?;
            p.selector.load_state(c.child("selector")?)?;
        }
        let mut comms = BTreeMap::new();
        for (_, c) in s.child("buckets")?.children() {
            let params: Vec<usize> = c.u64s("parameters")?.iter().map(|&m| m as usize).collect();
            if params.iter().any(|&m| m >= self.params.len()) {
                return Err(Error::corrupt(
                    "hook state",
                    "a bucket of parameters out of range",
                ));
            }
            let mut comm = self
                .registry
                .build(&self.spec, Defaults::with_budget(self.cfg.budget()))?;
            comm.load_state(c.child("collective")?)?;
            comms.insert(params, comm);
        }
        self.comms = comms;
        Ok(())
    }
}

/// The state's kind.
const KIND: &str = "bucket_feedback";

/// A bucket's name in a state: its parameters joined by `_`.
fn bucket_name(params: &[usize]) -> String {
    params
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join("_")
}
