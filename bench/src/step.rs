//! `sparse-bench step`: one training step of a paper's model
//! ([`crate::models`]) with every residual optimizer of
//! [`residual_sgd::recipe::schemes`] against dense allreduce, at each rank count,
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
//!   of their indices ([`GradientSpec`](sparse_core::generate::GradientSpec)).
//!   The layers go one call each, one after the other, as RedSync communicates per layer; the dense layers
//!   of a scheme (those its keep-dense rules keep dense) go in one fused
//!   dense allreduce, as RedSync fuses small layers; the dense baseline is
//!   one dense allreduce of the whole model. The dense allreduce is the
//!   ring, or MPICH's with `--dense mpich` ([`DenseAlgo`]: what `train
//!   --transport mpi` runs). A step's communication is the sum of its
//!   calls.
//!
//! # Bucketed, as DDP runs it
//! A second table ([`bucket`], `--bucket-mib`, default 25, DDP's) gives
//! every run three rows: `per layer` (the step above), `fused` (the
//! layers in buckets filled in backward order, one call per bucket, nothing
//! overlapped) and `fused+overlap` (each bucket's call started when the
//! backward pass has produced its last layer and the device has selected
//! it, the calls queued on the network one at a time: [`timeline`]; the
//! backward pass shared among the layers by their FLOPs, [`flops`]); the
//! dense baseline is bucketed the same way, so its `fused+overlap` row is
//! DDP's step. `--timeline FILE.svg` draws the `fused+overlap` step of
//! every run at the largest rank count ([`write_timeline`]).
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
//! `T(n') + (n / n' - 1) 2 (B(n') - B(n' / 2))`. With links shared
//! max-min the two parts interact (which messages overlap on a link
//! depends on their start times, whose latencies are not scaled), so the
//! scaling is approximate: within 8% of an unscaled run in the test.
//! The report says which layers were scaled and by which factors;
//! `tests/step.rs` checks the scaling against an unscaled run.

use crate::models::{self, ModelPreset};
use backend_cpu::Cpu;
use residual_sgd::recipe::{self, Family, Hyper, Run, Scheme};
use residual_sgd::{Config, KeptDense, LayerSpec, Trainer};
use sparse_coll::sim;
use sparse_coll::{Defaults, Registry, ThreadCluster};
use sparse_core::generate::ValueDist;
use sparse_core::{Error, Result};
use sparse_select::RadixTopK;
use std::time::{Duration, Instant};

/// RedSync's compress threshold (Sec. 5.4, `Config::new`'s default for
/// RGC): layers of at most 128 KiB go dense in every RGC scheme; SparCML's
/// top-k SGD has none (0).
pub const REDSYNC_COMPRESS_THRESHOLD: usize = 128 << 10;

/// The scale of the synthetic gradients' Student-t values.
const GRADIENT_SCALE: f64 = 1e-3;

pub mod bucket;
mod comm;
pub mod device;
mod figure;
pub mod flops;
mod output;
pub mod timeline;
pub use bucket::{BucketRow, CostModel, Mode};
use comm::comm_of;
pub use comm::{AGREE_ROUNDS, Call, CommCache, CommTime, DenseAlgo, SimSettings, comm_time};
pub use device::{
    APPLY_BYTES_PER_ENTRY, DEVICES, Device, MEASURED_TOPK, compensation_passes,
    dense_update_passes, device, device_note, device_phases, reduced_entries, topk_passes,
};
pub use figure::{timeline_svg, write_timeline};
pub use output::{BUCKET_HEADER, HEADER, bucket_json_rows, bucket_table, json_rows, print, table};
pub use timeline::Timeline;

/// `sparse-bench step`'s flags.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct StepArgs {
    /// The model: resnet50, vgg16, alexnet, lstm_ptb or bert_base, or
    /// train's Fashion-MNIST networks fashion_mlp and fashion_cnn (with an
    /// optional `:hidden=N`).
    #[arg(long)]
    pub model: String,
    /// Rank counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [8usize, 16, 32, 64, 128])]
    pub ranks: Vec<usize>,
    /// The simulated network (1gbe, 10gbe, 25gbe, ib100, nvlink8-25gbe,
    /// nvlink8-ib100), or a network file (`sparse-bench calibrate --out`).
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
    /// Bucket cap, MiB, of the bucketed rows (`fused`, `fused+overlap`):
    /// layers filled in backward order up to this size, one call per
    /// bucket; 25 is PyTorch DDP's default; 0 puts each layer in a bucket
    /// of its own.
    #[arg(long, default_value_t = 25.0)]
    pub bucket_mib: f64,
    /// Write the timeline of one `fused+overlap` step of every run, at the
    /// largest rank count, to this SVG file.
    #[arg(long)]
    pub timeline: Option<std::path::PathBuf>,
    /// The dense allreduce (the baseline and the layers kept dense): ring,
    /// or mpich (MPICH's `MPI_Allreduce`, what `train --transport mpi`
    /// runs; it differs from the ring where P is not a power of two).
    #[arg(long, value_enum, default_value_t = DenseAlgo::Ring)]
    pub dense: DenseAlgo,
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
            bucket_mib: 25.0,
            timeline: None,
            dense: DenseAlgo::Ring,
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
/// ([`recipe::config_with_threshold`] with [`Hyper`]'s defaults), with RedSync's compress threshold for the RGC
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
    recipe::config_with_threshold(run, &Hyper::default(), threshold)
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
            collective: recipe::layer_collective(run, Some(i) == output),
            spec,
        })
        .collect();
    Ok(RunPlan {
        run: run.clone(),
        config,
        layers,
    })
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
    /// The trainer's two agreement rounds a step (the entry round and the
    /// commit round), ms, simulated ([`Call::Agree`]).
    pub agree_ms: f64,
    /// `compute + select + update + comm`, ms, every phase on the device.
    pub step_ms: f64,
    /// `max(compute, collectives) + agreement rounds + select + update`,
    /// ms, on the device (the rounds overlap nothing).
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
    /// All communication, ms: the collectives and the agreement rounds.
    pub fn comm_ms(&self) -> f64 {
        self.comm_sparse_ms + self.comm_dense_ms + self.agree_ms
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
    /// The bucket cap, MiB (`--bucket-mib`).
    pub bucket_mib: f64,
    /// What the backward pass is shared among the layers by
    /// ([`flops::backward_shares`]): `"FLOPs"` or `"parameters"`.
    pub backward_by: &'static str,
    /// One row per rank count, run and [`Mode`] ([`bucket`]).
    pub bucket_rows: Vec<BucketRow>,
    /// The rank count of [`StepReport::timelines`]: the largest of
    /// `--ranks`.
    pub timeline_ranks: usize,
    /// The `fused+overlap` step of each run (in `plans`' order) at
    /// `timeline_ranks` ranks.
    pub timelines: Vec<Timeline>,
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
    // The collectives keep the settings' budget (the density is given once).
    let defaults = Defaults::with_budget(plan.config.budget());
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
                    let layer = plan.layers.iter().find(|l| l.spec.name == spec.name);
                    let layer = layer.ok_or_else(|| {
                        Error::invalid("layer", format!("{} is not in the plan", spec.name))
                    })?;
                    Registry::builtin().build(layer.collective, defaults)
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
    let net = sim::network(&a.network)?;
    check(a)?;
    let device = device(&a.device)?;
    let compute = compute_ms(model, a, &device)?;
    let plans = runs(&recipe::schemes_named(&a.schemes)?, a.density)
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
    let cap = bucket::cap_bytes(a.bucket_mib)?;
    let (mut rows, mut bucket_rows, mut timelines) = (Vec::new(), Vec::new(), Vec::new());
    let timeline_ranks = a.ranks.iter().copied().max().unwrap_or(1);
    let shares = flops::backward_shares(model);
    for &ranks in &a.ranks {
        let mut comm = CommCache::new(&*net, sim_settings(a, ranks));
        rows.extend(rows_at(&mut comm, a, &plans, &local, compute.0, &device)?);
        let m = CostModel {
            compute_ms: compute.0,
            backward_weights: shares.weights.clone(),
            device,
            ranks,
            overlap: a.overlap,
        };
        let (b, t) = bucket::bucket_rows(&plans, cap, &m, &mut comm)?;
        bucket_rows.extend(b);
        if ranks == timeline_ranks {
            timelines = t;
        }
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
        bucket_mib: a.bucket_mib,
        backward_by: shares.by,
        bucket_rows,
        timeline_ranks,
        timelines,
        wall: start.elapsed(),
    })
}

/// The settings of `a`'s simulated calls at `ranks` ranks.
fn sim_settings(a: &StepArgs, ranks: usize) -> SimSettings {
    SimSettings {
        ranks,
        density: a.density,
        overlap: a.overlap,
        max_dim: a.max_dim,
        seed: a.seed,
        dense: a.dense,
    }
}

/// The rank counts and the overlap of `a`: rank counts of at least 1, an
/// overlap in `[0, 1]`.
fn check(a: &StepArgs) -> Result<()> {
    if a.ranks.is_empty() || a.ranks.contains(&0) {
        return Err(Error::invalid("ranks", "give rank counts of at least 1"));
    }
    if !(0.0..=1.0).contains(&a.overlap) {
        return Err(Error::invalid(
            "overlap",
            format!("{} not in [0, 1]", a.overlap),
        ));
    }
    bucket::cap_bytes(a.bucket_mib).map(|_| ())
}

/// Forward plus backward, ms, and where it comes from: `--compute-ms`,
/// or modelled from the model's GFlop per sample and batch at `device`'s
/// throughput.
fn compute_ms(model: &ModelPreset, a: &StepArgs, device: &Device) -> Result<(f64, String)> {
    Ok(match a.compute_ms {
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
    })
}

/// The rows of every plan at `comm`'s rank count: each plan's simulated
/// communication (`comm`), its device phases, `local` (its measured CPU
/// phases) and `compute` ms, and its speedups over its dense baseline
/// (the baselines come first in `plans`).
fn rows_at(
    comm: &mut CommCache,
    a: &StepArgs,
    plans: &[RunPlan],
    local: &[(f64, f64)],
    compute: f64,
    device: &Device,
) -> Result<Vec<StepRow>> {
    let ranks = comm.settings().ranks;
    let mut time = |call: Call, n: usize| comm.time(call, n);
    let mut ranks_rows: Vec<StepRow> = Vec::new();
    let agree = AGREE_ROUNDS as f64 * time(Call::Agree, 1)?.seconds * 1e3;
    for (p, &(cpu_select_ms, cpu_update_ms)) in plans.iter().zip(local) {
        let (sparse, dense, scaled, max_scale) = comm_of(p, &mut time)?;
        let (select_ms, update_ms) = device_phases(p, device, ranks, a.overlap);
        let comm = sparse + dense + agree;
        let baseline = p.run.dense().name();
        let step_ms = compute + select_ms + update_ms + comm;
        // The agreement rounds hide behind nothing: the entry round holds
        // the step back, the commit round the update.
        let overlapped_ms = compute.max(sparse + dense) + agree + select_ms + update_ms;
        let cpu_step_ms = compute + cpu_select_ms + cpu_update_ms + comm;
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
            compute_ms: compute,
            device_select_ms: select_ms,
            device_update_ms: update_ms,
            cpu_select_ms,
            cpu_update_ms,
            comm_sparse_ms: sparse,
            comm_dense_ms: dense,
            agree_ms: agree,
            step_ms,
            overlapped_ms,
            cpu_step_ms,
            speedup: base.0 / step_ms,
            speedup_overlapped: base.1 / overlapped_ms,
            speedup_comm: (compute + base.2) / (compute + comm),
            speedup_cpu: base.3 / cpu_step_ms,
            scaled_calls: scaled,
            max_scale,
        });
    }
    Ok(ranks_rows)
}
