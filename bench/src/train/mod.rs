//! `sparse-bench train`: data-parallel training of an MLP or a CNN on the
//! UCI digits or Fashion-MNIST with every residual optimizer of
//! `residual-sgd` against dense SGD in the same run.
//!
//! Each of `P` ranks (threads, or MPI processes) trains on its own shard of
//! the training set from the same seed-derived initial weights; gradients
//! come from `burn` ([`model::Model`]) and go through a
//! [`residual_sgd::Trainer`] and back. A scheme is a residual optimizer
//! over a sparse allreduce; its dense counterpart is the same optimizer
//! settings (plain SGD for top-k SGD, momentum SGD for RGC and DGC) with
//! every layer reduced by the dense allreduce.

pub mod data;
pub mod durable;
pub mod idx;
pub mod model;
pub mod output;
mod rank;
pub mod run;

use data::{Data, Set};
use model::{Kind, Model};
pub use rank::train_rank;
use residual_sgd::Config;
use residual_sgd::recipe::{self, Hyper};
pub use residual_sgd::recipe::{Family, Run, Scheme, layer_collective, schemes, schemes_named};
use sparse_core::{Error, Result};

/// The named, seedable generator of the training runs (shuffles, initial
/// weights): ChaCha8, whose stream is fixed by its specification.
pub type Rng = rand_chacha::ChaCha8Rng;

/// Where `sparse-bench train` computes gradients and keeps the weights
/// (`--device`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum TrainDevice {
    /// burn's `Flex` CPU backend, the optimizer on `backend-cpu`: the
    /// gradients go through host vectors.
    #[default]
    Cpu,
    /// burn's wgpu backend (any Vulkan, Metal or DX12 device; Mesa's
    /// lavapipe without a GPU), the optimizer on `backend-cuda`'s wgpu
    /// kernels over the same device memory: only the selected pairs and
    /// the dense layers cross to the host. Needs the `wgpu` feature (a
    /// default).
    Wgpu,
    /// The same on burn's CUDA backend (the `cuda` feature).
    Cuda,
}

impl std::fmt::Display for TrainDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TrainDevice::Cpu => "cpu",
            TrainDevice::Wgpu => "wgpu",
            TrainDevice::Cuda => "cuda",
        })
    }
}

/// The settings of a training run (`sparse-bench train`'s optimizer
/// flags; their defaults are [`TrainArgs::default`]'s).
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct TrainArgs {
    /// Epochs.
    #[arg(long, default_value_t = TrainArgs::default().epochs)]
    pub epochs: usize,
    /// The images: `digits` (embedded), `fashion-mnist` (Debian's
    /// `dataset-fashion-mnist`, /usr/share/datasets/fashion-mnist) or
    /// `fashion-mnist=DIR`.
    #[arg(long, default_value_t = Data::Digits)]
    pub data: Data,
    /// The network.
    #[arg(long, value_enum, default_value_t = Kind::Mlp)]
    pub model: Kind,
    /// Units of the hidden fully connected layer. Default: the MLP 128 on
    /// the digits and 256 on Fashion-MNIST (784-256-10, 203,530
    /// parameters); the CNN 64 (Fashion-MNIST: 114,314 parameters).
    /// 2048 makes the digits MLP a model of millions of parameters, for
    /// timing.
    #[arg(long)]
    pub hidden: Option<usize>,
    /// Images per rank per step (at least 1).
    #[arg(long, default_value_t = TrainArgs::default().batch, value_parser = at_least_one)]
    pub batch: usize,
    /// Learning rate.
    #[arg(long, default_value_t = TrainArgs::default().lr)]
    pub lr: f32,
    /// Momentum of RGC, DGC and their dense counterpart.
    #[arg(long, default_value_t = TrainArgs::default().momentum)]
    pub momentum: f32,
    /// Weight decay of RGC, DGC and their dense counterpart.
    #[arg(long, default_value_t = TrainArgs::default().weight_decay)]
    pub weight_decay: f32,
    /// RedSync's compress threshold in bytes, for the two RedSync schemes:
    /// their layers of at most this many bytes go dense. Default:
    /// RedSync's own 131072 on Fashion-MNIST; 0 on the digits, whose
    /// every layer is below 131072 (RedSync would send that MLP dense).
    /// Biases (one dimension) go dense in every scheme, as DGC does.
    #[arg(long)]
    pub compress_threshold: Option<usize>,
    /// DGC's clipping constant C (each rank clips its gradient to an L2
    /// norm of C / sqrt(P)).
    #[arg(long, default_value_t = TrainArgs::default().clip)]
    pub clip: f32,
    /// DGC's warm-up epochs (density max(c^(e+1), D), c = D^(1/(W+1))).
    #[arg(long, default_value_t = TrainArgs::default().warmup)]
    pub warmup: usize,
    /// Train on the first N training images only (a short run); the test
    /// set stays whole.
    #[arg(long)]
    pub train_images: Option<usize>,
    /// Save every rank's whole state every N steps (0: only at the end),
    /// and at the end, under `--checkpoint-dir` (one directory per run:
    /// `<run>-d<density>-s<seed>`).
    #[arg(long, requires = "checkpoint_dir")]
    pub checkpoint_every: Option<u64>,
    /// Where `--checkpoint-every` saves.
    #[arg(long)]
    pub checkpoint_dir: Option<std::path::PathBuf>,
    /// Keep only the K newest checkpoints of each run (at least 1; the
    /// older ones are removed after each save, never the one `LATEST`
    /// names; a removal that fails is a warning). Default: every one is
    /// kept.
    #[arg(long, requires = "checkpoint_dir", value_parser = clap::value_parser!(u64).range(1..))]
    pub keep_checkpoints: Option<u64>,
    /// Continue each run from its newest checkpoint under this directory
    /// up to `--epochs` (resharded first where another number of ranks
    /// saved it); the settings must be the checkpoint's.
    #[arg(long)]
    pub resume: Option<std::path::PathBuf>,
    /// With `--resume D`: start from step 0 where `D` holds no checkpoint
    /// of any of this job's runs (or does not exist), instead of the error
    /// naming what `D` holds. Every row says whether it resumed or started
    /// fresh.
    #[arg(long, requires = "resume")]
    pub allow_fresh: bool,
    /// Fuse layers into buckets of at least this many MiB, as PyTorch DDP
    /// does (25 is DDP's default), filled in backward order: compressed
    /// layers make one collective call per bucket
    /// (`residual_sgd::Config::buckets`) and the dense runs' layers one
    /// allreduce per bucket (`Config::fuse`). 0 (the default): a call per
    /// layer.
    #[arg(long, default_value_t = 0.0)]
    pub bucket_mib: f64,
    /// With `--bucket-mib`: one budget over each bucket (Ok-Topk's and
    /// gTopk's global top-k) instead of each layer's own share.
    #[arg(long, requires = "bucket_mib")]
    pub global_budget: bool,
    /// Pipelined steps (`Trainer::step_with`): the layers' gradients go in
    /// backward order and each bucket's collective starts when its last
    /// layer is in, while the next layers are selected.
    #[arg(long)]
    pub pipelined: bool,
    /// With `--pipelined`: the models' parameters hooked
    /// (`residual_sgd::burn_hook`), burn's backward pass run inside the
    /// step, each gradient going in as the pass completes it (without:
    /// after the pass, in backward order); on a GPU device each as a
    /// buffer over burn's memory (`OnDevice::backward_into`).
    #[arg(long, requires = "pipelined")]
    pub hooks: bool,
    /// Where gradients are computed and the weights kept: `cpu` (burn's
    /// CPU backend), `wgpu` or `cuda` (burn's GPU backends, the optimizer's
    /// kernels on the same device; gradients and weights never leave it).
    #[arg(long, value_enum, default_value_t = TrainDevice::Cpu)]
    pub device: TrainDevice,
    /// Fault injection on threads: this rank fails before its step
    /// `--fail-at-step` (counted from the start of the run), as a lost
    /// rank would; every other rank then fails too.
    #[arg(long, requires = "fail_at_step")]
    pub fail_rank: Option<usize>,
    /// The step at which `--fail-rank` fails.
    #[arg(long, requires = "fail_rank")]
    pub fail_at_step: Option<u64>,
    /// Seed of the initial weights and shuffles (set per run from the
    /// seeds to average over; not a flag).
    #[arg(skip = TrainArgs::default().seed)]
    pub seed: u64,
}

impl Default for TrainArgs {
    fn default() -> Self {
        let hyper = Hyper::default();
        Self {
            epochs: 40,
            data: Data::Digits,
            model: Kind::Mlp,
            hidden: None,
            batch: 16,
            lr: hyper.lr,
            momentum: hyper.momentum,
            weight_decay: hyper.weight_decay,
            compress_threshold: None,
            clip: hyper.clip,
            warmup: 4,
            train_images: None,
            checkpoint_every: None,
            checkpoint_dir: None,
            keep_checkpoints: None,
            resume: None,
            allow_fresh: false,
            bucket_mib: 0.0,
            global_budget: false,
            pipelined: false,
            hooks: false,
            device: TrainDevice::Cpu,
            fail_rank: None,
            fail_at_step: None,
            seed: 1,
        }
    }
}

/// RedSync's compress threshold (Sec. 5.4): 128 KiB.
pub const REDSYNC_COMPRESS_THRESHOLD: usize = 128 << 10;

impl TrainArgs {
    /// The recipe's settings of this command line.
    ///
    /// # Errors
    /// As [`TrainArgs::bucket_bytes`].
    pub fn hyper(&self) -> Result<Hyper> {
        Ok(Hyper {
            lr: self.lr,
            momentum: self.momentum,
            weight_decay: self.weight_decay,
            clip: self.clip,
            bucket_bytes: self.bucket_bytes()?,
            global_budget: self.global_budget,
        })
    }

    /// The bucket cap in bytes (`--bucket-mib`), `None` for a call per
    /// layer.
    ///
    /// # Errors
    /// A negative or non-finite size.
    pub fn bucket_bytes(&self) -> Result<Option<usize>> {
        let mib = self.bucket_mib;
        if !(mib.is_finite() && mib >= 0.0) {
            return Err(Error::invalid(
                "bucket-mib",
                format!(
                    "{mib} is not a size: give 0 (a call per layer) or a positive number of MiB"
                ),
            ));
        }
        Ok((mib > 0.0).then(|| ((mib * (1u64 << 20) as f64).round() as usize).max(1)))
    }
    /// The hidden layer's units ([`TrainArgs::hidden`] or its default).
    pub fn hidden(&self) -> usize {
        self.hidden.unwrap_or(match (&self.data, self.model) {
            (Data::Digits, Kind::Mlp) => 128,
            (Data::FashionMnist(_), Kind::Mlp) => 256,
            (_, Kind::Cnn) => 64,
        })
    }
    /// The compress threshold of the RedSync schemes
    /// ([`TrainArgs::compress_threshold`] or its default).
    pub fn redsync_threshold(&self) -> usize {
        self.compress_threshold.unwrap_or(match self.data {
            Data::Digits => 0,
            Data::FashionMnist(_) => REDSYNC_COMPRESS_THRESHOLD,
        })
    }
    /// The model these settings train on images of `shape`.
    ///
    /// # Errors
    /// As [`Model::new`].
    pub fn model(&self, shape: [usize; 2]) -> Result<Model> {
        Model::new(self.model, shape, self.hidden())
    }
    /// [`TrainArgs::model`] on burn's `device`.
    ///
    /// # Errors
    /// As [`Model::new`].
    pub fn model_on(&self, shape: [usize; 2], device: burn::tensor::Device) -> Result<Model> {
        Model::on(self.model, shape, self.hidden(), device)
    }
}

/// How one layer went in a run ([`RankRun::layers`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LayerUse {
    /// The layer's name.
    pub name: String,
    /// Its parameters.
    pub len: usize,
    /// Why it went dense (`residual_sgd::KeptDense`'s words), or `None`
    /// for a compressed layer.
    pub dense: Option<String>,
    /// The mean density this rank sent in the last epoch (1 when dense).
    pub density: f64,
}

/// Zen's sparsity statistics of one layer in one epoch, means over the
/// epoch's probe steps ([`PROBES_PER_EPOCH`]) and the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Sparsity {
    /// Density of the gradient (Zen Def. 2): its entries that are not
    /// exactly zero over its length, before any selection.
    pub grad_density: f64,
    /// Overlap ratio of the selected sets (Zen Def. 3,
    /// `|I_a ∩ I_b| / min(|I_a|, |I_b|)`), mean over pairs of ranks; NaN
    /// for a dense layer.
    pub overlap: f64,
    /// Densification ratio of the selected sets (Zen Def. 4: the union's
    /// size over the mean size); NaN for a dense layer.
    pub densification: f64,
}

/// Steps of each epoch at which every rank gathers its gradients' nonzero
/// counts and selected sets for [`Sparsity`] (outside the timed step and
/// its counted traffic).
pub const PROBES_PER_EPOCH: usize = 4;

/// Images of the training set (its first ones) whose loss is reported
/// after each epoch.
pub const TRAIN_LOSS_IMAGES: usize = 10_000;

/// One rank's record of a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankRun {
    /// Test accuracy after each epoch (rank 0 only; empty elsewhere).
    pub test_acc: Vec<f64>,
    /// Loss on the whole training set after each epoch (rank 0 only).
    pub train_loss: Vec<f64>,
    /// A hash of this rank's weights after each epoch.
    pub weight_hash: Vec<u64>,
    /// Bytes this rank sent, per step.
    pub bytes_sent: Vec<u64>,
    /// Per step: forward and backward, select, communicate, apply, the
    /// agreement rounds ([`residual_sgd::StepReport::agree`]) and the
    /// whole step (from the forward pass to the trainer's return), in
    /// milliseconds.
    pub phases: Vec<[f64; 6]>,
    /// Per step: the CPU time of this rank's process (every thread) in
    /// milliseconds; NaN where the platform has no per-process clock.
    pub cpu_ms: Vec<f64>,
    /// Which layers went dense.
    pub dense_layers: Vec<bool>,
    /// How each layer went.
    pub layers: Vec<LayerUse>,
    /// Per epoch and layer, Zen's statistics (rank 0 only; empty
    /// elsewhere).
    pub sparsity: Vec<Vec<Sparsity>>,
    /// The final weights.
    pub weights: Vec<Vec<f32>>,
    /// The step this run resumed from (`--resume`), and the ranks that
    /// saved it.
    pub resumed: Option<(u64, usize)>,
    /// Steps taken after the checkpoint it resumed from, and lost.
    pub lost_steps: u64,
}

/// The optimizer settings a run uses ([`residual_sgd::recipe::config`]
/// with this command line's settings and RedSync's compress threshold,
/// [`TrainArgs::redsync_threshold`]).
///
/// # Errors
/// Invalid settings.
pub fn config(run: &Run, a: &TrainArgs) -> Result<Config> {
    recipe::config(run, &a.hyper()?, a.redsync_threshold())
}

/// FNV-1a over the weights' bits.
pub fn weight_hash(w: &[Vec<f32>]) -> u64 {
    sparse_core::hash::fnv1a(w.iter().flatten().flat_map(|x| x.to_bits().to_le_bytes()))
}

/// The training shard of `rank` of `p`: every `p`-th image of the training
/// set, all shards cut to the same length so every rank takes the same
/// number of steps.
pub fn shard(train: &Set, rank: usize, p: usize) -> Set {
    let len = train.len() / p;
    let rows: Vec<usize> = (0..len).map(|i| i * p + rank).collect();
    train.rows(&rows)
}

/// The steps of one epoch for `shard_len` images in batches of `batch`.
/// No steps for a batch of 0 (which `train_rank` refuses).
pub fn steps_per_epoch(shard_len: usize, batch: usize) -> usize {
    shard_len.checked_div(batch).unwrap_or(0)
}

/// A count given on the command line that must be at least 1.
fn at_least_one(s: &str) -> std::result::Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(v) => Ok(v),
        Err(e) => Err(e.to_string()),
    }
}

/// The seed of `rank`'s shuffle of its shard in `epoch`.
pub fn order_seed(seed: u64, epoch: usize, rank: usize) -> u64 {
    seed ^ (epoch as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ((rank as u64) << 48)
}

/// Single-process SGD on the union of the ranks' batches, step by step (the
/// oracle of dense data-parallel SGD): the weights after `steps` steps
/// (within the first epoch) of `P` ranks' dense plain SGD.
///
/// # Errors
/// The model's errors.
pub fn full_batch_sgd(a: &TrainArgs, p: usize, train: &Set, steps: usize) -> Result<Vec<Vec<f32>>> {
    let model = a.model(train.shape)?;
    let mut w = model.init(a.seed);
    let shards: Vec<Set> = (0..p).map(|r| shard(train, r, p)).collect();
    let orders: Vec<Vec<usize>> = (0..p)
        .map(|r| data::permutation(shards[r].len(), order_seed(a.seed, 0, r)))
        .collect();
    for s in 0..steps {
        let mut x = Vec::new();
        let mut y = Vec::new();
        for r in 0..p {
            let b = shards[r].rows(&orders[r][s * a.batch..(s + 1) * a.batch]);
            x.extend(b.x);
            y.extend(b.y);
        }
        let (_, g) = model.loss_and_grads(
            &w,
            &Set {
                x,
                y,
                shape: train.shape,
            },
        )?;
        for (wl, gl) in w.iter_mut().zip(g) {
            for (wi, gi) in wl.iter_mut().zip(gl) {
                *wi -= a.lr * gi;
            }
        }
    }
    Ok(w)
}
