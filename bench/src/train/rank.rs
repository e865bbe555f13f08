//! One rank's training run ([`train_rank`]): its arguments checked, a
//! checkpoint resumed where asked, then every epoch's steps (each with its
//! Zen probe and checkpoint where due) and the epoch's evaluation.

use super::data::{self, Set};
use super::model::Model;
use super::{
    Family, LayerUse, PROBES_PER_EPOCH, RankRun, Run, Sparsity, TRAIN_LOSS_IMAGES, TrainArgs,
    TrainDevice, config, durable, layer_collective, order_seed, shard, steps_per_epoch,
    weight_hash,
};
use backend_cpu::Cpu;
use residual_sgd::{Feed, LayerSpec, StepReport, Trainer, dgc_density};
use sparse_coll::{Defaults, Registry, SparseAllreduce, Transport, agree_or_fail};
use sparse_core::{Backend, Error, Result};
use sparse_select::RadixTopK;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Trains one rank: every rank of `t` calls it with the same arguments.
/// `on_step` is called after each step (progress). On `--device cpu` the
/// model runs on burn's CPU backend and the optimizer on `backend-cpu`; on
/// `wgpu` or `cuda` both run on the device, sharing its memory
/// ([`Model::device_grads`]).
///
/// # Errors
/// Invalid settings, the model's, the optimizer's and the collectives'
/// errors (on every rank); [`Error::Device`] where the device is missing
/// or this build lacks its feature.
pub fn train_rank(
    t: &mut dyn Transport,
    run: &Run,
    a: &TrainArgs,
    train: &Set,
    test: &Set,
    on_step: &(dyn Fn() + Sync),
) -> Result<RankRun> {
    let job = Job {
        run,
        a,
        train,
        test,
        on_step,
    };
    match a.device {
        TrainDevice::Cpu => {
            let model = a.model(train.shape)?;
            train_on(t, &job, model, Cpu, Host)
        }
        #[cfg(feature = "wgpu")]
        TrainDevice::Wgpu => on_gpu::<residual_sgd::burn_device::WgpuRuntime>(
            t,
            &job,
            burn::tensor::Device::wgpu(Default::default()),
        ),
        #[cfg(feature = "cuda")]
        TrainDevice::Cuda => {
            on_gpu::<residual_sgd::burn_device::CudaRuntime>(t, &job, burn::tensor::Device::cuda(0))
        }
        #[allow(unreachable_patterns)]
        d => {
            let local = Err(Error::Device {
                backend: "burn",
                detail: format!(
                    "--device {d}: this sparse-bench was built without the `{d}` feature; \
                     rebuild with `--features {d}`"
                ),
            });
            agree_or_fail(t, &[("device", 1)], local).map(|()| RankRun::default())
        }
    }
}

/// What every rank trains: the run, its settings and the data.
struct Job<'a> {
    run: &'a Run,
    a: &'a TrainArgs,
    train: &'a Set,
    test: &'a Set,
    on_step: &'a (dyn Fn() + Sync),
}

/// [`train_rank`] on burn's `device` of runtime `R` (with autodiff), the
/// optimizer's kernels on the same client; a device missing on any rank
/// is an error on every rank.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn on_gpu<R: residual_sgd::burn_device::BurnRuntime>(
    t: &mut dyn Transport,
    job: &Job<'_>,
    device: burn::tensor::Device,
) -> Result<RankRun> {
    let device = device.autodiff();
    let on = residual_sgd::burn_device::OnDevice::<R>::new(&device);
    let local = on.as_ref().map(drop).map_err(|e| Error::Device {
        backend: "burn",
        detail: e.to_string(),
    });
    agree_or_fail(t, &[("device", 1)], local)?;
    let on = on?;
    let model = job.a.model_on(job.train.shape, device)?;
    train_on(t, job, model, on.backend().clone(), on)
}

/// [`train_rank`] with the optimizer on `b`, gradients from `place`.
fn train_on<B: Backend<f32> + Sync + 'static, P: Place<B>>(
    t: &mut dyn Transport,
    job: &Job<'_>,
    model: Model,
    b: B,
    place: P,
) -> Result<RankRun> {
    let (run, a, train, test, on_step) = (job.run, job.a, job.train, job.test, job.on_step);
    let mut r = RankLoop::new(t, run, a, train, (model, b, place))?;
    let loss_set = train.range(0..train.len().min(TRAIN_LOSS_IMAGES));
    if let Some(dir) = resume_dir(t, run, a)? {
        r.resume(t, &dir)?;
    }
    let first_epoch = r.pos.epoch;
    for epoch in first_epoch..a.epochs {
        if let Run::Sparse { scheme, density } = run
            && scheme.family == Family::Dgc
        {
            r.tr.set_density(dgc_density(epoch, *density, a.warmup))?;
        }
        let first_step = if epoch == first_epoch { r.pos.next } else { 0 };
        if first_step == 0 {
            r.acc.reset();
        }
        let order = data::permutation(r.mine.len(), order_seed(a.seed, epoch, t.rank()));
        for s in first_step..r.steps {
            r.step(t, epoch, s, &order)?;
            on_step();
        }
        r.end_epoch(t, &loss_set, test)?;
    }
    r.out.layers = layer_uses(run, a, &r.model.layers(), &r.acc.sent, r.steps)?;
    r.out.weights = r.tr.weights()?;
    Ok(r.out)
}

/// The epoch's accumulators: per layer, the density sent summed over the
/// epoch's steps and the [`Sparsity`] summed over its probes, and the
/// probes taken. A checkpoint saves them, so that a resumed epoch reports
/// what an unbroken one would.
struct Accumulators {
    sent: Vec<f64>,
    stats: Vec<Sparsity>,
    probes: usize,
}

impl Accumulators {
    /// Zeros for `layers` layers.
    fn new(layers: usize) -> Self {
        Self {
            sent: vec![0.0; layers],
            stats: vec![Sparsity::default(); layers],
            probes: 0,
        }
    }

    /// Zeros again, at the start of an epoch.
    fn reset(&mut self) {
        self.sent.iter_mut().for_each(|s| *s = 0.0);
        self.stats.iter_mut().for_each(|s| *s = Sparsity::default());
        self.probes = 0;
    }

    /// As a checkpoint's local entries.
    fn local(&self) -> [(&'static str, Vec<f64>); 3] {
        let flat: Vec<f64> = self
            .stats
            .iter()
            .flat_map(|x| [x.grad_density, x.overlap, x.densification])
            .collect();
        [
            ("sent", self.sent.clone()),
            ("stats", flat),
            ("probes", vec![self.probes as f64]),
        ]
    }

    /// Restores what the checkpoint of `dir` saved as `local` where this
    /// rank count saved it (absent after a reshard: the epoch's figures
    /// start afresh); of another length, the checkpoint is not this
    /// model's, an error on every rank.
    fn restore(
        &mut self,
        t: &mut dyn Transport,
        dir: &Path,
        local: &BTreeMap<String, Vec<f64>>,
    ) -> Result<()> {
        let (sent, stats) = (&mut self.sent, &mut self.stats);
        let acc = (local.get("sent"), local.get("stats"), local.get("probes"));
        let fits = match acc {
            (Some(se), Some(st), Some(pr))
                if se.len() != sent.len() || st.len() != 3 * stats.len() || pr.len() != 1 =>
            {
                Err(Error::corrupt(
                    "checkpoint",
                    format!(
                        "{}: the epoch's accumulators hold {}, {} and {} values, this model needs {}, {} and 1",
                        dir.display(),
                        se.len(),
                        st.len(),
                        pr.len(),
                        sent.len(),
                        3 * stats.len()
                    ),
                ))
            }
            _ => Ok(()),
        };
        agree_or_fail(t, &[("accumulators", 1)], fits)?;
        if let (Some(se), Some(st), Some(pr)) = acc {
            sent.copy_from_slice(se);
            for (x, c) in stats.iter_mut().zip(st.chunks_exact(3)) {
                *x = sparsity(c);
            }
            self.probes = pr.first().map_or(0, |&p| p as usize);
        }
        Ok(())
    }
}

/// The statistics saved as `[grad density, overlap, densification]`.
fn sparsity(c: &[f64]) -> Sparsity {
    Sparsity {
        grad_density: c[0],
        overlap: c[1],
        densification: c[2],
    }
}

/// A step's gradients: host vectors (burn's CPU backend) or buffers of
/// the optimizer's backend over the device memory burn computed them in.
#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
enum Grads<B: Backend<f32>> {
    Host(Vec<Vec<f32>>),
    Device(Vec<B::Buffer<f32>>),
    /// The loss after its forward pass, every parameter hooked: the
    /// backward pass runs in the pipelined step, each gradient going in
    /// as it completes (`residual_sgd::burn_hook`).
    Hooked(
        Box<(
            burn::tensor::Tensor<1>,
            residual_sgd::burn_hook::HookedGrads,
        )>,
    ),
}

/// Where a rank's gradients are computed (`--device`): at the trainer's
/// weights, on a batch.
trait Place<B: Backend<f32>>: Sync {
    /// The gradients of `batch`'s loss under `model` at `tr`'s weights;
    /// where `hooked` and the place has gradient hooks, the loss after
    /// its forward pass, hooked, for a pipelined step to run its backward
    /// pass.
    fn grads(
        &self,
        model: &Model,
        tr: &Trainer<B, RadixTopK>,
        batch: &Set,
        hooked: bool,
    ) -> Result<Grads<B>>;

    /// The hooked loss's backward pass (a [`Grads::Hooked`] of this
    /// place), each gradient pushed to `feed` as the pass completes it;
    /// how long the pass took.
    fn backward_into(
        &self,
        loss: burn::tensor::Tensor<1>,
        grads: residual_sgd::burn_hook::HookedGrads,
        feed: &mut Feed<'_, B, RadixTopK>,
    ) -> Result<Duration>;
}

/// burn's CPU backend: the weights downloaded (a copy), the gradients
/// taken out as host vectors.
struct Host;

impl Place<Cpu> for Host {
    fn grads(
        &self,
        model: &Model,
        tr: &Trainer<Cpu, RadixTopK>,
        batch: &Set,
        hooked: bool,
    ) -> Result<Grads<Cpu>> {
        let w = tr.weights()?;
        if hooked {
            let (loss, grads) = model.hooked_loss(&w, batch)?;
            return Ok(Grads::Hooked(Box::new((loss, grads))));
        }
        Ok(Grads::Host(model.loss_and_grads(&w, batch)?.1))
    }

    fn backward_into(
        &self,
        loss: burn::tensor::Tensor<1>,
        grads: residual_sgd::burn_hook::HookedGrads,
        feed: &mut Feed<'_, Cpu, RadixTopK>,
    ) -> Result<Duration> {
        residual_sgd::burn_hook::backward_into(loss, grads, feed)
    }
}

/// burn's GPU backends: the trainer's weight buffers copied into the
/// module and the gradients handed over on the device.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
impl<R: residual_sgd::burn_device::BurnRuntime> Place<backend_cuda::CubeBackend<R>>
    for residual_sgd::burn_device::OnDevice<R>
{
    fn grads(
        &self,
        model: &Model,
        tr: &Trainer<backend_cuda::CubeBackend<R>, RadixTopK>,
        batch: &Set,
        hooked: bool,
    ) -> Result<Grads<backend_cuda::CubeBackend<R>>> {
        if hooked {
            let (loss, grads) = model.device_hooked_loss(self, &tr.weight_buffers(), batch)?;
            return Ok(Grads::Hooked(Box::new((loss, grads))));
        }
        let g = model.device_grads(self, &tr.weight_buffers(), batch)?;
        Ok(Grads::Device(g))
    }

    fn backward_into(
        &self,
        loss: burn::tensor::Tensor<1>,
        grads: residual_sgd::burn_hook::HookedGrads,
        feed: &mut Feed<'_, backend_cuda::CubeBackend<R>, RadixTopK>,
    ) -> Result<Duration> {
        residual_sgd::burn_device::OnDevice::backward_into(self, loss, grads, feed)
    }
}

/// A rank's run under way: what it trains (the run's settings, the model,
/// the optimizer, this rank's shard), where it stands, and what it has
/// recorded.
struct RankLoop<'a, B: Backend<f32>, P> {
    a: &'a TrainArgs,
    model: Model,
    tr: Trainer<B, RadixTopK>,
    place: P,
    mine: Set,
    /// Steps per epoch.
    steps: usize,
    /// Steps between two probes.
    probe_every: usize,
    /// The settings a checkpoint is saved under.
    meta: BTreeMap<String, String>,
    /// Where checkpoints go (`--checkpoint-dir`).
    ckpt_dir: Option<PathBuf>,
    pos: durable::Position,
    acc: Accumulators,
    out: RankRun,
}

impl<'a, B: Backend<f32> + Sync + 'static, P: Place<B>> RankLoop<'a, B, P> {
    /// The run at its start, its arguments checked (the same on every
    /// rank: an error on all of them), `model` trained by a trainer on `b`
    /// with gradients from `place`.
    fn new(
        t: &dyn Transport,
        run: &'a Run,
        a: &'a TrainArgs,
        train: &Set,
        (model, b, place): (Model, B, P),
    ) -> Result<Self> {
        let (p, rank) = (t.size(), t.rank());
        if a.batch == 0 || a.hidden() == 0 {
            return Err(Error::invalid("batch, hidden", "must be at least 1"));
        }
        if let Some(r) = a.fail_rank.filter(|&r| r >= p) {
            // Every rank sees the same: an error on all, not a run where the
            // fault asked for never happens.
            return Err(Error::invalid(
                "--fail-rank",
                format!("{r} is not a rank of {p}"),
            ));
        }
        let tr = trainer(b, run, a, &model)?;
        let layers = model.layers().len();
        let mine = shard(train, rank, p);
        let steps = steps_per_epoch(mine.len(), a.batch);
        if steps == 0 {
            return Err(Error::invalid(
                "batch",
                format!(
                    "{} images per rank cannot fill a batch of {}",
                    mine.len(),
                    a.batch
                ),
            ));
        }
        let out = RankRun {
            dense_layers: tr.compressed().iter().map(|c| !c).collect(),
            ..RankRun::default()
        };
        Ok(Self {
            a,
            model,
            tr,
            place,
            mine,
            steps,
            probe_every: steps.div_ceil(PROBES_PER_EPOCH),
            meta: durable::settings(run, a),
            ckpt_dir: a
                .checkpoint_dir
                .as_ref()
                .map(|d| durable::run_dir(d, run, a.seed)),
            pos: durable::Position {
                steps,
                ..durable::Position::default()
            },
            acc: Accumulators::new(layers),
            out,
        })
    }

    /// Continues from the newest checkpoint of `dir`: the trainer's state,
    /// the position, rank 0's history and the epoch's accumulators.
    fn resume(&mut self, t: &mut dyn Transport, dir: &Path) -> Result<()> {
        let r = durable::resume(t, dir, &self.meta, self.steps)?;
        self.tr.load_state(t, &r.trainer)?;
        self.out.resumed = Some((r.pos.global, r.from_ranks));
        self.out.lost_steps = r.lost_steps;
        self.pos = r.pos;
        let h = &self.pos.history;
        self.out.weight_hash = h.weight_hash.clone();
        if t.rank() == 0 {
            self.out.test_acc = h.test_acc.clone();
            self.out.train_loss = h.train_loss.clone();
            self.out.sparsity = h
                .sparsity
                .iter()
                .map(|e| e.iter().map(|x| sparsity(x)).collect())
                .collect();
        }
        self.acc.restore(t, dir, &r.local)
    }

    /// Step `s` of `epoch`, the batch taken from this rank's shard in
    /// `order`: forward and backward, the optimizer's step, its record,
    /// the probe and the checkpoint where due.
    fn step(
        &mut self,
        t: &mut dyn Transport,
        epoch: usize,
        s: usize,
        order: &[usize],
    ) -> Result<()> {
        let (a, rank) = (self.a, t.rank());
        if a.fail_rank == Some(rank) && a.fail_at_step == Some(self.pos.global + 1) {
            return Err(Error::Injected {
                rank,
                step: self.pos.global + 1,
            });
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let rows = &order[s * a.batch..(s + 1) * a.batch];
        let batch = self.mine.rows(rows);
        let cpu = process_cpu_ms();
        let clock = std::time::Instant::now();
        // Pipelined with hooks (burn's CPU or GPU backend): the backward pass
        // runs in the step, each gradient going in as it completes, but
        // on the steps a probe reads the gradients.
        let probed = s.is_multiple_of(self.probe_every);
        let hooked = a.pipelined && a.hooks && !probed;
        let grads = self.place.grads(&self.model, &self.tr, &batch, hooked)?;
        let mut grad = clock.elapsed();
        // Pipelined: backward order, the last layer's gradient first.
        let (rep, kept): (StepReport, Option<Grads<B>>) = match grads {
            Grads::Hooked(hooked) => {
                let (loss, hooked) = *hooked;
                let mut pass = Duration::ZERO;
                let rep = self.tr.step_with(t, |feed| {
                    pass = self.place.backward_into(loss, hooked, feed)?;
                    Ok(())
                })?;
                // The forward and the backward pass, as the other steps'
                // `grad` (the selection overlapped the backward pass).
                grad += pass;
                (rep, None)
            }
            Grads::Host(g) => {
                let rep = if a.pipelined {
                    self.tr.step_with(t, |feed| {
                        (0..g.len())
                            .rev()
                            .try_for_each(|l| feed.push_host(l, &g[l]))
                    })?
                } else {
                    self.tr.step(t, &g)?
                };
                (rep, Some(Grads::Host(g)))
            }
            Grads::Device(g) => {
                let rep = if a.pipelined {
                    self.tr.step_with(t, |feed| {
                        (0..g.len()).rev().try_for_each(|l| feed.push(l, &g[l]))
                    })?
                } else {
                    self.tr.step_buffers(t, &g)?
                };
                (rep, Some(Grads::Device(g)))
            }
        };
        self.out.bytes_sent.push(rep.traffic.bytes_sent);
        self.out.phases.push([
            ms(grad),
            ms(rep.select),
            ms(rep.communicate),
            ms(rep.apply),
            ms(rep.agree),
            ms(clock.elapsed()),
        ]);
        self.out.cpu_ms.push(process_cpu_ms() - cpu);
        for (acc, l) in self.acc.sent.iter_mut().zip(&rep.layers) {
            *acc += l.density();
        }
        // On a device the probe's gradients are downloaded, outside the
        // timed step and its counted transfers.
        let host = match kept {
            Some(Grads::Host(g)) if probed => Some(g),
            Some(Grads::Device(g)) if probed => Some(
                g.iter()
                    .map(|b| self.tr.backend().download(b))
                    .collect::<Result<_>>()?,
            ),
            _ => None,
        };
        if let Some(host) = host {
            probe(t, &host, &rep, &mut self.acc.stats)?;
            self.acc.probes += 1;
        }
        let pos = &mut self.pos;
        pos.global = pos.global.saturating_add(1);
        (pos.epoch, pos.next) = (epoch, s + 1);
        if let Some(dir) = &self.ckpt_dir {
            if rank == 0 {
                durable::progress(dir, pos.global);
            }
            let last = epoch + 1 == a.epochs && s + 1 == self.steps;
            if a.checkpoint_every
                .is_some_and(|n| n > 0 && pos.global.is_multiple_of(n))
                || last
            {
                self.save_checkpoint(t, dir)?;
            }
        }
        Ok(())
    }

    /// The end of an epoch: every rank's weight digest; rank 0's loss on
    /// `loss_set`, accuracy on `test` and the epoch's mean statistics.
    fn end_epoch(&mut self, t: &dyn Transport, loss_set: &Set, test: &Set) -> Result<()> {
        let w = self.tr.weights()?;
        self.out.weight_hash.push(weight_hash(&w));
        if t.rank() == 0 {
            let (loss, _) = self.model.evaluate(&w, loss_set)?;
            let (_, acc) = self.model.evaluate(&w, test)?;
            self.out.train_loss.push(loss);
            self.out.test_acc.push(acc);
            let mut avg = self.acc.stats.clone();
            // No probe in this epoch (resumed at its end after a reshard):
            // its statistics are unknown, NaN.
            let probes = self.acc.probes;
            let n = if probes == 0 { f64::NAN } else { probes as f64 };
            for x in &mut avg {
                x.grad_density /= n;
                x.overlap /= n;
                x.densification /= n;
            }
            self.out.sparsity.push(avg);
        }
        Ok(())
    }

    /// Saves the checkpoint of this rank at its position in `dir`: the
    /// trainer's state, the epoch's accumulators, and rank 0's history (in
    /// the manifest); then prunes old ones where `--keep-checkpoints`
    /// asks.
    fn save_checkpoint(&self, t: &mut dyn Transport, dir: &Path) -> Result<()> {
        let out = &self.out;
        let mut pos = self.pos.clone();
        pos.history = durable::History {
            test_acc: out.test_acc.clone(),
            train_loss: out.train_loss.clone(),
            weight_hash: out.weight_hash.clone(),
            sparsity: out
                .sparsity
                .iter()
                .map(|e| {
                    e.iter()
                        .map(|x| [x.grad_density, x.overlap, x.densification])
                        .collect()
                })
                .collect(),
        };
        let local = self.acc.local();
        durable::save(t, dir, &self.meta, self.tr.save_state(), &pos, &local)?;
        // A checkpoint that cannot be pruned is still saved: every rank warns
        // (the same error on every rank) and trains on.
        if let Some(k) = self.a.keep_checkpoints
            && let Err(e) = durable::prune(t, dir, k, pos.global)
            && t.rank() == 0
        {
            eprintln!(
                "warning: {}: old checkpoints not removed: {e}",
                dir.display()
            );
        }
        Ok(())
    }
}

/// The run directory to resume `run` from, if any: `--resume D`'s, where
/// it holds a checkpoint. A run the interrupted job never checkpointed (it
/// had not started) starts from the beginning; a missing directory is an
/// error (unless `--allow-fresh`). Every rank must see the same: the round
/// makes any difference an error on every rank.
fn resume_dir(t: &mut dyn Transport, run: &Run, a: &TrainArgs) -> Result<Option<PathBuf>> {
    let (resume_dir, found) = match &a.resume {
        Some(from) if !from.is_dir() && a.allow_fresh => (None, Ok(())),
        Some(from) if !from.is_dir() => (
            None,
            Err(Error::invalid(
                "--resume",
                format!(
                    "{}: no such checkpoint directory (--allow-fresh starts afresh)",
                    from.display()
                ),
            )),
        ),
        Some(from) => {
            let d = durable::run_dir(from, run, a.seed);
            let has = durable::has_checkpoint(&d);
            (has.then_some(d), Ok(()))
        }
        None => (None, Ok(())),
    };
    agree_or_fail(t, &[("resume", u64::from(resume_dir.is_some()))], found)?;
    Ok(resume_dir)
}

/// The optimizer of `run` for `model` on `b`: RadixTopK selection and each
/// layer's collective (TopkA for the dense runs and for the output layer
/// of RedSync's quantized mode), from the initial weights of `a.seed`.
fn trainer<B: Backend<f32> + 'static>(
    b: B,
    run: &Run,
    a: &TrainArgs,
    model: &Model,
) -> Result<Trainer<B, RadixTopK>> {
    let layers = model.layers();
    let cfg = config(run, a)?;
    // The collectives keep the settings' budget (the density is given once).
    let defaults = Defaults::with_budget(cfg.budget());
    let last = layers.len() - 1;
    let comm = |l: &LayerSpec| -> Result<Box<dyn SparseAllreduce<f32>>> {
        let spec = layer_collective(run, l.name == layers[last].name);
        Registry::builtin().build(spec, defaults)
    };
    let w0 = model.init(a.seed);
    Trainer::new(b, cfg, layers.clone(), &w0, RadixTopK::magnitude(), comm)
}

/// How each layer of `run` goes: dense and why, or compressed at the
/// density `sent` (per layer, summed over the last epoch's `steps`).
fn layer_uses(
    run: &Run,
    a: &TrainArgs,
    layers: &[LayerSpec],
    sent: &[f64],
    steps: usize,
) -> Result<Vec<LayerUse>> {
    let cfg = config(run, a)?;
    Ok(layers
        .iter()
        .zip(sent)
        .map(|(l, &s)| LayerUse {
            name: l.name.clone(),
            len: l.len,
            dense: cfg.kept_dense(l).map(|k| k.to_string()),
            density: s / steps.max(1) as f64,
        })
        .collect())
}

/// Gathers every rank's nonzero counts of `grads` and selected sets of
/// `rep` (outside the step's counted traffic) and, on rank 0, adds this
/// probe's [`Sparsity`] of each layer to `acc`.
fn probe(
    t: &mut dyn Transport,
    grads: &[Vec<f32>],
    rep: &StepReport,
    acc: &mut [Sparsity],
) -> Result<()> {
    let mut bytes = Vec::new();
    for (l, g) in grads.iter().enumerate() {
        let nnz = g.iter().filter(|x| **x != 0.0).count() as u64;
        bytes.extend(nnz.to_le_bytes());
        let idx: &[u32] = match rep.layers.get(l) {
            Some(r) if r.compressed => rep.sent[l].indices(),
            _ => &[],
        };
        bytes.extend((idx.len() as u64).to_le_bytes());
        bytes.extend(idx.iter().flat_map(|i| i.to_le_bytes()));
    }
    let all = sparse_coll::dense::bruck_allgather(t, &bytes)?;
    if t.rank() != 0 {
        return Ok(());
    }
    let short = || Error::invalid("train", "a rank sent a short sparsity probe");
    let p = all.len();
    let mut at = vec![0usize; p];
    let mut take = |r: usize, n: usize| -> Result<&[u8]> {
        let b = all[r].get(at[r]..at[r] + n).ok_or_else(short)?;
        at[r] += n;
        Ok(b)
    };
    for (l, g) in grads.iter().enumerate() {
        let mut sets: Vec<Vec<u32>> = Vec::with_capacity(p);
        let mut nnz = 0u64;
        for r in 0..p {
            let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
            nnz += word(take(r, 8)?);
            let n = usize::try_from(word(take(r, 8)?)).map_err(|_| short())?;
            let raw = take(r, n.checked_mul(4).ok_or_else(short)?)?;
            sets.push(
                raw.chunks_exact(4)
                    .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
                    .collect(),
            );
        }
        let a = &mut acc[l];
        a.grad_density += nnz as f64 / (p * g.len().max(1)) as f64;
        if sets.iter().all(Vec::is_empty) {
            a.overlap = f64::NAN;
            a.densification = f64::NAN;
            continue;
        }
        let (mut sum, mut pairs) = (0.0, 0usize);
        for i in 0..p {
            for j in i + 1..p {
                sum += sparse_core::stats::overlap_ratio(&sets[i], &sets[j]);
                pairs += 1;
            }
        }
        a.overlap += if pairs == 0 { 1.0 } else { sum / pairs as f64 };
        let mean = sets.iter().map(Vec::len).sum::<usize>() as f64 / p as f64;
        let mut union: Vec<u32> = sets.concat();
        union.sort_unstable();
        union.dedup();
        a.densification += if mean == 0.0 {
            0.0
        } else {
            union.len() as f64 / mean
        };
    }
    Ok(())
}

/// The CPU time this process (every thread) has used, in milliseconds:
/// `clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`, which counts a running
/// thread's current slice (unlike `/proc/*/schedstat`, updated only at
/// ticks and switches).
#[cfg(unix)]
fn process_cpu_ms() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec it is given, which
    // lives for the call.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 * 1e-6
}

/// No per-process CPU clock here.
#[cfg(not(unix))]
fn process_cpu_ms() -> f64 {
    f64::NAN
}
