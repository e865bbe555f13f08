//! `sparse-bench step`: one training step of a paper's model
//! ([`crate::models`]) with every residual optimizer of
//! [`crate::train::schemes`] against dense allreduce, at each rank count,
//! as RedSync's Fig. 7-9 plot speedup over dense per GPU count.
//!
//! # What is measured, modelled and simulated
//! A step is `compute + select + update + communicate`, one after the
//! other (no overlap of the backward pass with communication; the
//! overlapped bound `max(compute, communicate) + select + update`, which
//! RedSync notes hides ResNet-50's communication, is printed beside it).
//! Every phase of the headline step is on one device, the `--device`
//! ([`Device`]) whose throughput the compute model assumes, so the
//! headline speedup compares like with like:
//! - **compute**: `--compute-ms`, by default RedSync Table 1's forward
//!   GFlop per sample and batch per node at the device's assumed
//!   throughput (`3 x GFlop x batch / GFlop/s`; on the default P100 this
//!   is [`ModelPreset::default_compute_ms`]);
//! - **select and update on the device**: modelled ([`device_phases`]) as
//!   passes over memory at the device's bandwidth; the top-k's passes are
//!   radix top-k's time over one read of the array measured on an H200
//!   ([`MEASURED_TOPK`], `bench/RESULTS.md`); kernel launches and host
//!   round trips are not counted, so these are lower bounds;
//! - **select and update on this CPU** (separate, labelled columns, and
//!   a speedup of their own): measured on this machine, on one rank's real
//!   state: a [`residual_sgd::Trainer`] over the model's real layer sizes on
//!   the CPU backend ([`backend_cpu::Cpu`], `RadixTopK` selection as
//!   `sparse-bench train`), stepping a single-rank transport with the same
//!   heavy-tailed gradient (Student's t with 2 degrees of freedom,
//!   [`ValueDist::HeavyTailed`], every layer): the median of the
//!   [`residual_sgd::StepReport`]'s `select` (compensation, clipping, weight
//!   decay, selection) and `apply` over `--reps` steps after one warm-up.
//!   At one rank the update applies this rank's selection; at `P` ranks it
//!   applies the reduced result, up to `P k` entries per layer, which the
//!   figure does not include;
//! - **communicate**: simulated ([`sparse_coll::sim`]): every compressed
//!   layer's real collective on `P` threads over the recording transport,
//!   replayed over `--network`; each rank's input is a sparse vector of the
//!   layer's density (at least one entry), the ranks sharing `--overlap`
//!   of their indices ([`GradientSpec`]). The layers go one call each, one
//!   after the other, as RedSync communicates per layer; the dense layers
//!   of a scheme (those its keep-dense rules keep dense) go in one fused
//!   ring allreduce, as RedSync fuses small layers; the dense baseline is
//!   one ring allreduce of the whole model. A step's communication is the
//!   sum of its calls.
//!
//! # Scaling
//! 128 ranks' copies of a 138M-parameter layer do not fit this machine,
//! so a layer of `n > --max-dim` parameters is simulated at `n' =
//! --max-dim` with the same density and overlap, and its time scaled: under
//! the alpha-beta model a call's time is its latency part (rounds times
//! alpha, independent of `n`) plus its bandwidth part (bytes times beta),
//! and at a fixed density the bytes are a part proportional to `n` (the
//! pairs, the dense chunks) plus a part that is not (frame headers, length
//! prefixes, the entry round's words). The run's traces are replayed over
//! the network and over the same network with every latency 0 (the
//! bandwidth part `B(n')`); a second run at `n' / 2` gives the
//! proportional part `2 (B(n') - B(n' / 2))`, and the time at `n` is
//! `T(n') + (n / n' - 1) 2 (B(n') - B(n' / 2))`.
//! The report says which layers were scaled and by which factors;
//! `tests/step.rs` checks the scaling against an unscaled run.

use crate::models::{self, ModelPreset};
use crate::train::{self, Family, Run, Scheme, TrainArgs};
use backend_cpu::Cpu;
use residual_sgd::{Config, KeptDense, LayerSpec, Trainer};
use sparse_coll::sim::{self, Network, Route};
use sparse_coll::{Defaults, Registry, SimCluster, ThreadCluster, Transport, dense};
use sparse_core::generate::{GradientSpec, ValueDist};
use sparse_core::{Error, Result, SparseVec};
use sparse_select::RadixTopK;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// RedSync's compress threshold (Sec. 5.4, `Config::new`'s default for
/// RGC): layers of at most 128 KiB go dense in every RGC scheme; SparCML's
/// top-k SGD has none (0).
pub const REDSYNC_COMPRESS_THRESHOLD: usize = 128 << 10;

/// The scale of the synthetic gradients' Student-t values.
const GRADIENT_SCALE: f64 = 1e-3;

pub mod device;
pub use device::{
    APPLY_BYTES_PER_ENTRY, DEVICES, Device, MEASURED_TOPK, compensation_passes,
    dense_update_passes, device, device_note, device_phases, reduced_entries, topk_passes,
};

/// `sparse-bench step`'s flags.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct StepArgs {
    /// The model: resnet50, vgg16, alexnet, lstm_ptb or bert_base.
    #[arg(long)]
    pub model: String,
    /// Rank counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [8usize, 16, 32, 64, 128])]
    pub ranks: Vec<usize>,
    /// The simulated network (1gbe, 10gbe, 25gbe, ib100, nvlink8-25gbe,
    /// nvlink8-ib100).
    #[arg(long, default_value = "25gbe")]
    pub network: String,
    /// Density of every compressed layer's sent set, in (0, 1].
    #[arg(long, default_value_t = 0.001)]
    pub density: f64,
    /// The device the step runs on (p100, h100, h200): its throughput
    /// gives the compute time and its memory bandwidth the modelled select
    /// and update of the headline columns.
    #[arg(long, default_value = "p100")]
    pub device: String,
    /// Forward plus backward time per step, ms (default: the model's, from
    /// RedSync Table 1's GFlop per sample and batch per node at half the
    /// device's FP32 peak; see `bench::models::DEVICE_GFLOPS`).
    #[arg(long)]
    pub compute_ms: Option<f64>,
    /// The largest layer dimension simulated whole; larger layers are
    /// simulated at this dimension and scaled.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_dim: usize,
    /// Fraction of each rank's selected indices that all ranks share
    /// (Zen's overlap ratio), in [0, 1]; 0: disjoint selections, the
    /// largest sums.
    #[arg(long, default_value_t = 0.0)]
    pub overlap: f64,
    /// Only these schemes (one per flag: repeat the flag for more):
    /// sparcml_topk_sgd, redsync_rgc, redsync_rgc_quantized, dgc,
    /// spardl_global_residual. All when absent.
    #[arg(long = "scheme")]
    pub schemes: Vec<String>,
    /// Measured steps of the local phases (after one warm-up step).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Seed of the gradients and the simulated inputs.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl StepArgs {
    /// Defaults for `model` (those of the command line).
    pub fn new(model: &str) -> Self {
        Self {
            model: model.into(),
            ranks: vec![8, 16, 32, 64, 128],
            network: "25gbe".into(),
            density: 0.001,
            device: "p100".into(),
            compute_ms: None,
            max_dim: 1 << 20,
            overlap: 0.0,
            schemes: Vec::new(),
            reps: 3,
            seed: 1,
        }
    }
}

/// One layer of a run: whether it is compressed, and how its
/// communication is simulated.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerPlan {
    /// The layer.
    pub spec: LayerSpec,
    /// The rule that keeps it dense, or `None` when compressed.
    pub kept_dense: Option<KeptDense>,
    /// The collective of a compressed layer.
    pub collective: &'static str,
}

/// A run's layers ([`plan`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RunPlan {
    /// The run (a scheme at the density, or a dense baseline).
    pub run: Run,
    /// The optimizer settings (the real `residual_sgd::Config`).
    pub config: Config,
    /// Every layer.
    pub layers: Vec<LayerPlan>,
}

impl RunPlan {
    /// The layers kept dense by `which` rule (`"threshold"`, `"dims"`,
    /// `"dense"` for a dense baseline): count and bytes.
    pub fn dense_by(&self, which: &str) -> (usize, usize) {
        self.layers
            .iter()
            .filter(|l| l.kept_dense.is_some_and(|k| rule_name(&k) == which))
            .fold((0, 0), |(c, b), l| (c + 1, b + 4 * l.spec.len))
    }
    /// Parameters of the layers kept dense.
    pub fn dense_len(&self) -> usize {
        self.layers
            .iter()
            .filter(|l| l.kept_dense.is_some())
            .map(|l| l.spec.len)
            .sum()
    }
}

/// The short name of a keep-dense rule: `threshold` (RedSync's compress
/// threshold), `dims` (DGC's one-dimension rule), `dense` (a dense
/// baseline).
pub fn rule_name(k: &KeptDense) -> &'static str {
    match k {
        KeptDense::Threshold { .. } => "threshold",
        KeptDense::Dims { .. } => "dims",
        _ => "dense",
    }
}

/// The optimizer settings of `run`: `sparse-bench train`'s
/// ([`train::config`]), with RedSync's compress threshold for the RGC
/// families and none for top-k SGD (each rule's paper's), and DGC's
/// one-dimension rule for all.
///
/// # Errors
/// Invalid settings (a density outside `(0, 1]`).
pub fn config(run: &Run) -> Result<Config> {
    let threshold = match run {
        Run::Sparse { scheme, .. } if scheme.family == Family::TopK => 0,
        _ => REDSYNC_COMPRESS_THRESHOLD,
    };
    train::config_with_threshold(run, &TrainArgs::default(), threshold)
}

/// Which layers of `model` `run` compresses, by the real settings'
/// rules ([`Config::kept_dense`]), and each compressed layer's
/// collective.
///
/// # Errors
/// As [`config`].
pub fn plan(run: &Run, model: &ModelPreset) -> Result<RunPlan> {
    let config = config(run)?;
    let specs = model.specs();
    // The output layer, as the trainer finds it: the last of more than one
    // dimension.
    let output = specs.iter().rposition(|s| s.dims > 1);
    let layers = specs
        .into_iter()
        .enumerate()
        .map(|(i, spec)| LayerPlan {
            kept_dense: config.kept_dense(&spec),
            collective: train::layer_collective(run, Some(i) == output),
            spec,
        })
        .collect();
    Ok(RunPlan {
        run: run.clone(),
        config,
        layers,
    })
}

/// What a simulated call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Call {
    /// A sparse allreduce by registry name, each rank's input of the
    /// step's density.
    Sparse(&'static str),
    /// The dense ring allreduce ([`dense::ring_allreduce`]).
    Ring,
}

/// A call's simulated time at a layer's dimension.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CommTime {
    /// The dimension simulated (`min(n, max_dim)`).
    pub sim_dim: usize,
    /// `n / sim_dim` (1 when simulated whole).
    pub scale: f64,
    /// The simulated time at `sim_dim`, seconds (slowest rank).
    pub at_sim_dim: f64,
    /// Its bandwidth part: the same traces with every latency 0.
    pub bandwidth: f64,
    /// The share of the bandwidth part that grows with the dimension:
    /// twice the difference between the bandwidth parts at `sim_dim` and
    /// at `sim_dim / 2` (`bandwidth` when simulated whole).
    pub proportional: f64,
    /// The time at `n`: `at_sim_dim + (scale - 1) proportional`.
    pub seconds: f64,
}

/// The network `net` with every latency 0: a replay over it gives a
/// run's bandwidth part.
#[derive(Debug)]
struct Bandwidth<'a>(&'a dyn Network);

impl Network for Bandwidth<'_> {
    fn label(&self) -> String {
        format!("{}, latency 0", self.0.label())
    }
    fn route(&self, from: usize, to: usize) -> Route {
        Route {
            alpha: 0.0,
            ..self.0.route(from, to)
        }
    }
}

/// The settings of the simulated calls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimSettings {
    /// Ranks.
    pub ranks: usize,
    /// Density of each rank's input.
    pub density: f64,
    /// Fraction of indices all ranks share.
    pub overlap: f64,
    /// The largest dimension simulated whole.
    pub max_dim: usize,
    /// Seed of the inputs.
    pub seed: u64,
}

/// `call` on `s.ranks` simulated ranks for a layer of `n` parameters over
/// `net`, simulated at `min(n, s.max_dim)` and scaled (see the
/// [module](self) doc). Sparse inputs are one-signed (absolute values)
/// for a collective that sends same-sign means (`values=ssmean`), as
/// RedSync's quantized selection makes them.
///
/// # Errors
/// [`Error::InvalidParameter`] for `n == 0` or `s.max_dim < 2`; the
/// generator's, the collective's and the replay's errors.
pub fn comm_time(net: &dyn Network, call: Call, n: usize, s: &SimSettings) -> Result<CommTime> {
    if n == 0 || s.max_dim < 2 {
        return Err(Error::invalid(
            "dimension",
            "layers must have a parameter and --max-dim must be at least 2",
        ));
    }
    let sim_dim = n.min(s.max_dim);
    let (at_sim_dim, bandwidth) = simulate(net, call, sim_dim, s)?;
    if sim_dim == n {
        return Ok(CommTime {
            sim_dim,
            scale: 1.0,
            at_sim_dim,
            bandwidth,
            proportional: bandwidth,
            seconds: at_sim_dim,
        });
    }
    let (_, half) = simulate(net, call, sim_dim / 2, s)?;
    let proportional = (2.0 * (bandwidth - half)).clamp(0.0, bandwidth);
    let scale = n as f64 / sim_dim as f64;
    Ok(CommTime {
        sim_dim,
        scale,
        at_sim_dim,
        bandwidth,
        proportional,
        seconds: at_sim_dim + (scale - 1.0) * proportional,
    })
}

/// `call` at dimension `dim` on `s.ranks` simulated ranks: its time over
/// `net` and over `net` with every latency 0 (its bandwidth part),
/// seconds, the slowest rank's.
fn simulate(net: &dyn Network, call: Call, dim: usize, s: &SimSettings) -> Result<(f64, f64)> {
    let cluster = SimCluster::new(s.ranks)?;
    let run = match call {
        Call::Ring => {
            let x = vec![1.0f32; dim];
            cluster.run(|t| {
                t.mark();
                dense::ring_allreduce(t, &x)?;
                t.mark();
                Ok(())
            })?
        }
        Call::Sparse(spec) => {
            // At least one entry per rank, as a selection keeps.
            let density = s.density.max(1.0 / dim as f64);
            let mut ins: Vec<SparseVec<f32>> = GradientSpec {
                overlap: s.overlap,
                values: ValueDist::HeavyTailed {
                    scale: GRADIENT_SCALE,
                },
                ..GradientSpec::new(dim, density, s.seed)
            }
            .generate(s.ranks)?;
            if spec.contains("ssmean") {
                for v in &mut ins {
                    v.values_mut().iter_mut().for_each(|x| *x = x.abs());
                }
            }
            cluster.run(|t| {
                let mut a = Registry::builtin().build(spec, Defaults::density(s.density)?)?;
                let mine = &ins[t.rank()];
                t.mark();
                a.allreduce(t, mine)?;
                t.mark();
                Ok(())
            })?
        }
    };
    for r in &run.results {
        if let Err(e) = r {
            return Err(e.clone());
        }
    }
    let span = |net: &dyn Network| -> Result<f64> {
        sim::replay(&run.traces, net)?
            .span(0)
            .ok_or_else(|| Error::invalid("traces", "no rank marked the call"))
    };
    Ok((span(net)?, span(&Bandwidth(net))?))
}

/// One run at one rank count.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRow {
    /// Ranks.
    pub ranks: usize,
    /// The run's name (a scheme, or `dense_sgd` / `dense_momentum_sgd`).
    pub scheme: String,
    /// Its collective (`dense_allreduce` for the baselines).
    pub collective: String,
    /// The dense baseline it is compared with.
    pub baseline: String,
    /// Density of the compressed layers (1 for the baselines).
    pub density: f64,
    /// Forward plus backward, ms (given, or modelled on the device).
    pub compute_ms: f64,
    /// Selection (with compensation), ms, modelled on the device
    /// ([`device_phases`]).
    pub device_select_ms: f64,
    /// Update, ms, modelled on the device.
    pub device_update_ms: f64,
    /// Selection (with compensation), ms, measured on this machine's CPU.
    pub cpu_select_ms: f64,
    /// Update, ms, measured on this machine's CPU.
    pub cpu_update_ms: f64,
    /// The compressed layers' collectives, ms, simulated.
    pub comm_sparse_ms: f64,
    /// The dense layers' fused ring allreduce, ms, simulated.
    pub comm_dense_ms: f64,
    /// `compute + select + update + comm`, ms, every phase on the device.
    pub step_ms: f64,
    /// `max(compute, comm) + select + update`, ms, on the device.
    pub overlapped_ms: f64,
    /// `step_ms` with this CPU's measured select and update.
    pub cpu_step_ms: f64,
    /// The baseline's `step_ms` over this one's: the headline.
    pub speedup: f64,
    /// The same for `overlapped_ms`.
    pub speedup_overlapped: f64,
    /// The same for `compute + comm` alone (select and update left out).
    pub speedup_comm: f64,
    /// The same for `cpu_step_ms`: this CPU's select and update beside a
    /// device's compute, not like with like (kept for reference).
    pub speedup_cpu: f64,
    /// Layers whose communication was simulated at a reduced dimension and
    /// scaled (the fused dense call counts as one).
    pub scaled_calls: usize,
    /// The largest scale factor (1 when nothing was scaled).
    pub max_scale: f64,
}

impl StepRow {
    /// All communication, ms.
    pub fn comm_ms(&self) -> f64 {
        self.comm_sparse_ms + self.comm_dense_ms
    }
}

/// The whole report.
#[derive(Debug, Clone)]
pub struct StepReport {
    /// The model's name.
    pub model: String,
    /// Its parameters.
    pub params: usize,
    /// The label every simulated figure carries (`simulated (25gbe: ...)`).
    pub network: String,
    /// Forward plus backward, ms, and where it comes from.
    pub compute: (f64, String),
    /// The device of the compute and the modelled select and update.
    pub device: Device,
    /// Every run's layers.
    pub plans: Vec<RunPlan>,
    /// One row per rank count and run.
    pub rows: Vec<StepRow>,
    /// Wall time of the whole run.
    pub wall: Duration,
}

/// The median of the durations, ms.
fn median_ms(mut d: Vec<Duration>) -> f64 {
    d.sort_unstable();
    d.get(d.len() / 2).map_or(0.0, |x| x.as_secs_f64() * 1e3)
}

/// The heavy-tailed gradient of every layer (Student's t, 2 degrees of
/// freedom, scale 1e-3), seeded per layer.
pub fn gradients(model: &ModelPreset, seed: u64) -> Vec<Vec<f32>> {
    model
        .layers
        .iter()
        .enumerate()
        .map(|(i, l)| {
            sparse_core::generate::dense_values(
                l.len(),
                ValueDist::HeavyTailed {
                    scale: GRADIENT_SCALE,
                },
                seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i as u64,
            )
        })
        .collect()
}

/// Select and update times, ms (medians over `reps` steps after one
/// warm-up), of `plan`'s optimizer on one rank: a real [`Trainer`] over
/// the model's layers, on the CPU backend, over a single-rank transport.
///
/// # Errors
/// The trainer's errors.
pub fn local_phases(plan: &RunPlan, grads: &[Vec<f32>], reps: usize) -> Result<(f64, f64)> {
    let specs: Vec<LayerSpec> = plan.layers.iter().map(|l| l.spec.clone()).collect();
    let density = plan.run.density();
    let mut out = ThreadCluster::new(1).run(|t| {
        let mut tr = {
            let w0: Vec<Vec<f32>> = specs.iter().map(|s| vec![0.0; s.len]).collect();
            Trainer::new(
                Cpu,
                plan.config,
                specs.clone(),
                &w0,
                RadixTopK::magnitude(),
                |spec| {
                    let collective = plan
                        .layers
                        .iter()
                        .find(|l| l.spec.name == spec.name)
                        .map_or("topk_a", |l| l.collective);
                    Registry::builtin().build(collective, Defaults::density(density)?)
                },
            )?
        };
        let (mut select, mut apply) = (Vec::new(), Vec::new());
        for i in 0..=reps {
            let rep = tr.step(t, grads)?;
            if i > 0 {
                select.push(rep.select);
                apply.push(rep.apply);
            }
        }
        Ok((median_ms(select), median_ms(apply)))
    });
    out.pop()
        .unwrap_or_else(|| Err(Error::invalid("ranks", "no rank ran")))
}

/// The runs of `schemes` at `density` and their dense baselines (each
/// baseline once, first).
pub fn runs(schemes: &[Scheme], density: f64) -> Vec<Run> {
    let sparse: Vec<Run> = schemes
        .iter()
        .map(|s| Run::Sparse {
            scheme: s.clone(),
            density,
        })
        .collect();
    let mut out: Vec<Run> = Vec::new();
    for d in sparse.iter().map(Run::dense) {
        if !out.contains(&d) {
            out.push(d);
        }
    }
    out.extend(sparse);
    out
}

/// The simulated communication of `plan`, ms: its compressed layers'
/// calls and its dense layers' fused ring, with the calls scaled and the
/// largest scale factor. `time` gives a call's time at a dimension.
fn comm_of(
    plan: &RunPlan,
    time: &mut dyn FnMut(Call, usize) -> Result<CommTime>,
) -> Result<(f64, f64, usize, f64)> {
    let (mut sparse, mut scaled, mut max_scale) = (0.0, 0, 1.0f64);
    let mut count = |t: &CommTime| {
        if t.scale > 1.0 {
            scaled += 1;
            max_scale = max_scale.max(t.scale);
        }
        t.seconds * 1e3
    };
    for l in plan.layers.iter().filter(|l| l.kept_dense.is_none()) {
        sparse += count(&time(Call::Sparse(l.collective), l.spec.len)?);
    }
    let dense_len = plan.dense_len();
    let dense = if dense_len > 0 {
        count(&time(Call::Ring, dense_len)?)
    } else {
        0.0
    };
    Ok((sparse, dense, scaled, max_scale))
}

/// Runs `sparse-bench step` for the preset `a.model`.
///
/// # Errors
/// An unknown model, scheme or network; bad settings; the trainer's and the
/// simulation's errors.
pub fn run_named(a: &StepArgs) -> Result<StepReport> {
    run(&models::preset(&a.model)?, a)
}

/// Runs `sparse-bench step` for `model` (`a.model` is not read).
///
/// # Errors
/// As [`run_named`].
pub fn run(model: &ModelPreset, a: &StepArgs) -> Result<StepReport> {
    let start = Instant::now();
    let net = sim::preset(&a.network)?;
    if a.ranks.is_empty() || a.ranks.contains(&0) {
        return Err(Error::invalid("ranks", "give rank counts of at least 1"));
    }
    if !(0.0..=1.0).contains(&a.overlap) {
        return Err(Error::invalid(
            "overlap",
            format!("{} not in [0, 1]", a.overlap),
        ));
    }
    let device = device(&a.device)?;
    let compute = match a.compute_ms {
        Some(ms) if ms.is_finite() && ms >= 0.0 => (ms, "--compute-ms".to_string()),
        Some(ms) => {
            return Err(Error::invalid(
                "compute-ms",
                format!("{ms} is not finite and non-negative"),
            ));
        }
        None => (
            3.0 * model.forward_gflop * model.batch as f64 / device.gflops * 1e3,
            format!(
                "modelled: 3 x {} GFlop per sample x batch {} at {} GFlop/s, half the {}'s FP32 peak",
                model.forward_gflop, model.batch, device.gflops, device.name
            ),
        ),
    };
    let plans = runs(&train::schemes_named(&a.schemes)?, a.density)
        .iter()
        .map(|r| plan(r, model))
        .collect::<Result<Vec<_>>>()?;
    let grads = gradients(model, a.seed);
    let mut progress = crate::Progress::new((plans.len() * (1 + a.ranks.len())) as u64, "step");
    let mut local = Vec::with_capacity(plans.len());
    for p in &plans {
        local.push(local_phases(p, &grads, a.reps.max(1))?);
        progress.inc();
    }
    drop(grads);
    let mut rows = Vec::new();
    for &ranks in &a.ranks {
        let s = SimSettings {
            ranks,
            density: a.density,
            overlap: a.overlap,
            max_dim: a.max_dim,
            seed: a.seed,
        };
        // Layers of the same dimension and collective take the same time.
        let mut cache: HashMap<(Call, usize), CommTime> = HashMap::new();
        let mut time = |call: Call, n: usize| -> Result<CommTime> {
            if let Some(t) = cache.get(&(call, n)) {
                return Ok(*t);
            }
            let t = comm_time(&*net, call, n, &s)?;
            cache.insert((call, n), t);
            Ok(t)
        };
        let mut ranks_rows: Vec<StepRow> = Vec::new();
        for (p, &(cpu_select_ms, cpu_update_ms)) in plans.iter().zip(&local) {
            let (sparse, dense, scaled, max_scale) = comm_of(p, &mut time)?;
            let (select_ms, update_ms) = device_phases(p, &device, ranks, a.overlap);
            let comm = sparse + dense;
            let baseline = p.run.dense().name();
            let step_ms = compute.0 + select_ms + update_ms + comm;
            let overlapped_ms = compute.0.max(comm) + select_ms + update_ms;
            let cpu_step_ms = compute.0 + cpu_select_ms + cpu_update_ms + comm;
            let base = ranks_rows
                .iter()
                .find(|r| r.scheme == baseline)
                .map_or((step_ms, overlapped_ms, comm, cpu_step_ms), |b| {
                    (b.step_ms, b.overlapped_ms, b.comm_ms(), b.cpu_step_ms)
                });
            ranks_rows.push(StepRow {
                ranks,
                scheme: p.run.name(),
                collective: p.run.collective(),
                baseline,
                density: p.run.density(),
                compute_ms: compute.0,
                device_select_ms: select_ms,
                device_update_ms: update_ms,
                cpu_select_ms,
                cpu_update_ms,
                comm_sparse_ms: sparse,
                comm_dense_ms: dense,
                step_ms,
                overlapped_ms,
                cpu_step_ms,
                speedup: base.0 / step_ms,
                speedup_overlapped: base.1 / overlapped_ms,
                speedup_comm: (compute.0 + base.2) / (compute.0 + comm),
                speedup_cpu: base.3 / cpu_step_ms,
                scaled_calls: scaled,
                max_scale,
            });
        }
        rows.extend(ranks_rows);
        progress.inc();
    }
    progress.finish();
    Ok(StepReport {
        model: model.name.to_string(),
        params: model.total(),
        network: format!("simulated ({})", net.label()),
        compute,
        device,
        plans,
        rows,
        wall: start.elapsed(),
    })
}

/// The table's column names: the headline columns (device) first, then
/// this CPU's measured select and update and their speedup, labelled.
pub const HEADER: [&str; 17] = [
    "model",
    "P",
    "scheme",
    "density",
    "compute ms (model)",
    "select ms (device, modelled)",
    "update ms (device, modelled)",
    "comm ms (sim)",
    "step ms (device)",
    "speedup (device, modelled)",
    "speedup overlapped",
    "speedup compute+comm",
    "select ms (CPU, measured)",
    "update ms (CPU, measured)",
    "step ms (CPU phases)",
    "speedup (CPU phases)",
    "scaled",
];

/// The table's rows, in [`HEADER`]'s order.
pub fn table(rep: &StepReport) -> Vec<Vec<String>> {
    rep.rows
        .iter()
        .map(|r| {
            vec![
                rep.model.clone(),
                r.ranks.to_string(),
                r.scheme.clone(),
                format!("{}", r.density),
                format!("{:.1}", r.compute_ms),
                format!("{:.3}", r.device_select_ms),
                format!("{:.3}", r.device_update_ms),
                format!("{:.2}", r.comm_ms()),
                format!("{:.1}", r.step_ms),
                format!("{:.2}x", r.speedup),
                format!("{:.2}x", r.speedup_overlapped),
                format!("{:.2}x", r.speedup_comm),
                format!("{:.1}", r.cpu_select_ms),
                format!("{:.1}", r.cpu_update_ms),
                format!("{:.1}", r.cpu_step_ms),
                format!("{:.2}x", r.speedup_cpu),
                if r.scaled_calls == 0 {
                    "no".into()
                } else {
                    format!("{} calls, up to x{:.1}", r.scaled_calls, r.max_scale)
                },
            ]
        })
        .collect()
}

/// One JSON object per run and rank count (`"kind": "step"`).
pub fn json_rows(rep: &StepReport) -> Vec<serde_json::Value> {
    rep.rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "kind": "step",
                "model": rep.model,
                "ranks": r.ranks,
                "scheme": r.scheme,
                "collective": r.collective,
                "baseline": r.baseline,
                "density": r.density,
                "device": rep.device.name,
                "compute_ms": r.compute_ms,
                "compute": rep.compute.1,
                "device_select_ms": r.device_select_ms,
                "device_update_ms": r.device_update_ms,
                "device_phases": device_note(&rep.device),
                "cpu_select_ms": r.cpu_select_ms,
                "cpu_update_ms": r.cpu_update_ms,
                "cpu_phases": "measured on this machine's CPU (CPU backend, one rank)",
                "comm_ms": r.comm_ms(),
                "comm_sparse_ms": r.comm_sparse_ms,
                "comm_dense_ms": r.comm_dense_ms,
                "step_ms": r.step_ms,
                "overlapped_ms": r.overlapped_ms,
                "cpu_step_ms": r.cpu_step_ms,
                "speedup": r.speedup,
                "speedup_overlapped": r.speedup_overlapped,
                "speedup_compute_comm": r.speedup_comm,
                "speedup_cpu_phases": r.speedup_cpu,
                "scaled_calls": r.scaled_calls,
                "max_scale": r.max_scale,
                "comm": rep.network,
            })
        })
        .collect()
}

/// Prints the report: a table with its header lines, or JSON lines (one
/// object per run and rank count, `"kind": "step"`, then one per run with
/// the layers kept dense, `"kind": "dense_layers"`).
pub fn print(rep: &StepReport, json: bool) {
    if json {
        for obj in json_rows(rep) {
            crate::out!("{obj}");
        }
        for p in &rep.plans {
            crate::out!("{}", dense_layers_json(rep, p));
        }
        return;
    }
    crate::out!(
        "# step of {} ({} parameters) on the {}; communication {}; compute {:.1} ms ({}); \
         step = compute + select + update + comm (no overlap); overlapped = \
         max(compute, comm) + select + update; compute+comm leaves select and update \
         out; wall {:.1} s",
        rep.model,
        rep.params,
        rep.device.name,
        rep.network,
        rep.compute.0,
        rep.compute.1,
        rep.wall.as_secs_f64()
    );
    crate::out!("# device columns: {}", device_note(&rep.device));
    crate::out!(
        "# CPU columns: select and update measured on this machine's CPU (CPU backend, one \
         rank's real state), beside the device's compute: not like with like, for reference"
    );
    crate::print_table(&HEADER, &table(rep));
    crate::out!("# layers kept dense (fused into one ring allreduce), by rule:");
    for p in &rep.plans {
        let (tc, tb) = p.dense_by("threshold");
        let (dc, db) = p.dense_by("dims");
        let (bc, bb) = p.dense_by("dense");
        let compressed = p.layers.iter().filter(|l| l.kept_dense.is_none()).count();
        crate::out!(
            "#   {}: {compressed} compressed; RedSync's compress threshold {tc} layers \
             ({tb} bytes); DGC's one-dimension rule {dc} layers ({db} bytes){}",
            p.run.name(),
            if bc > 0 {
                format!("; dense baseline {bc} layers ({bb} bytes)")
            } else {
                String::new()
            }
        );
    }
    crate::out!(
        "# scaled: a layer above --max-dim is simulated at --max-dim and its bandwidth \
         part scaled by n / max-dim (the factor shown); the fused dense call likewise"
    );
}

/// The layers `p` keeps dense, as a JSON object (`"kind": "dense_layers"`).
fn dense_layers_json(rep: &StepReport, p: &RunPlan) -> serde_json::Value {
    let layers: Vec<serde_json::Value> = p
        .layers
        .iter()
        .filter_map(|l| {
            let k = l.kept_dense?;
            Some(serde_json::json!({
                "layer": l.spec.name,
                "params": l.spec.len,
                "dims": l.spec.dims,
                "rule": rule_name(&k),
            }))
        })
        .collect();
    let by = |w: &str| {
        let (count, bytes) = p.dense_by(w);
        serde_json::json!({"count": count, "bytes": bytes})
    };
    serde_json::json!({
        "kind": "dense_layers",
        "model": rep.model,
        "scheme": p.run.name(),
        "threshold": by("threshold"),
        "dims": by("dims"),
        "layers": layers,
    })
}
