//! `sparse-bench train`: data-parallel training of an MLP on the UCI digits
//! with every residual optimizer of `residual-sgd` against dense SGD in the
//! same run.
//!
//! Each of `P` ranks (threads, or MPI processes) trains on its own shard of
//! the training set from the same seed-derived initial weights; gradients
//! come from `burn` ([`model::Mlp`]) and go through a
//! [`residual_sgd::Trainer`] and back. A scheme is a residual optimizer
//! over a sparse allreduce; its dense counterpart is the same optimizer
//! settings (plain SGD for top-k SGD, momentum SGD for RGC and DGC) with
//! every layer reduced by the dense allreduce.

pub mod data;
pub mod idx;
pub mod model;
pub mod output;
pub mod run;

use backend_cpu::Cpu;
use data::Set;
use model::Mlp;
use residual_sgd::{Config, LayerSpec, Rule, StepReport, Trainer, dgc_density};
use sparse_coll::{Defaults, Registry, SparseAllreduce, Transport};
use sparse_core::{Error, Result};
use sparse_select::RadixTopK;
use std::time::Duration;

/// The named, seedable generator of the training runs (shuffles, initial
/// weights): ChaCha8, whose stream is fixed by its specification.
pub type Rng = rand_chacha::ChaCha8Rng;

/// The optimizer family of a scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// SparCML's top-k SGD (no momentum); dense counterpart: plain SGD.
    TopK,
    /// RedSync's RGC (momentum correction, factor masking).
    Rgc,
    /// RGC in RedSync's quantized mode (same-sign means, top-k/low-k).
    RgcQuantized,
    /// RGC with DGC's density warm-up and gradient clipping.
    Dgc,
    /// RGC over SparDL's collective with global residual collection.
    Spardl,
}

/// A residual optimizer over a sparse allreduce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheme {
    /// Name in reports.
    pub name: &'static str,
    /// The optimizer.
    pub family: Family,
    /// The collective (a registry name with parameters).
    pub collective: &'static str,
}

/// The schemes `sparse-bench train` runs by default: each residual
/// optimizer over the sparse allreduce of its paper.
pub fn schemes() -> Vec<Scheme> {
    vec![
        Scheme {
            name: "sparcml_topk_sgd",
            family: Family::TopK,
            collective: "ssar_recursive_double",
        },
        Scheme {
            name: "redsync_rgc",
            family: Family::Rgc,
            collective: "topk_a",
        },
        Scheme {
            name: "redsync_rgc_quantized",
            family: Family::RgcQuantized,
            collective: "topk_a:values=ssmean",
        },
        Scheme {
            name: "dgc",
            family: Family::Dgc,
            collective: "topk_a",
        },
        Scheme {
            name: "spardl_global_residual",
            family: Family::Spardl,
            collective: "spardl",
        },
    ]
}

/// The schemes `names` names, in [`schemes`]'s spelling (all when empty).
///
/// # Errors
/// [`Error::InvalidParameter`] for an unknown name, listing the known ones.
pub fn schemes_named(names: &[String]) -> Result<Vec<Scheme>> {
    let all = schemes();
    if names.is_empty() {
        return Ok(all);
    }
    names
        .iter()
        .map(|name| {
            all.iter().find(|s| s.name == name).cloned().ok_or_else(|| {
                let known: Vec<&str> = all.iter().map(|s| s.name).collect();
                Error::invalid(
                    "scheme",
                    format!("unknown {name:?}; known: {}", known.join(", ")),
                )
            })
        })
        .collect()
}

/// What a run trains.
#[derive(Debug, Clone, PartialEq)]
pub enum Run {
    /// Every layer through the transport's dense allreduce (the ring on
    /// threads, `MPI_Allreduce` under MPI); momentum SGD when
    /// `momentum` (else plain SGD).
    Dense {
        /// Momentum SGD (RGC's settings) or plain SGD.
        momentum: bool,
    },
    /// A scheme at a density.
    Sparse {
        /// The scheme.
        scheme: Scheme,
        /// Final density of the sent set.
        density: f64,
    },
}

impl Run {
    /// The report's name of the run.
    pub fn name(&self) -> String {
        match self {
            Run::Dense { momentum: true } => "dense_momentum_sgd".into(),
            Run::Dense { momentum: false } => "dense_sgd".into(),
            Run::Sparse { scheme, .. } => scheme.name.into(),
        }
    }
    /// The collective's name.
    pub fn collective(&self) -> String {
        match self {
            Run::Dense { .. } => "dense_allreduce".into(),
            Run::Sparse { scheme, .. } => scheme.collective.into(),
        }
    }
    /// The final density of the sent set (1 for dense runs).
    pub fn density(&self) -> f64 {
        match self {
            Run::Sparse { density, .. } => *density,
            Run::Dense { .. } => 1.0,
        }
    }
    /// The dense counterpart (same optimizer settings, dense allreduce).
    pub fn dense(&self) -> Run {
        match self {
            Run::Sparse { scheme, .. } => Run::Dense {
                momentum: scheme.family != Family::TopK,
            },
            d => d.clone(),
        }
    }
}

/// The settings of a training run (`sparse-bench train`'s optimizer
/// flags; their defaults are [`TrainArgs::default`]'s).
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct TrainArgs {
    /// Epochs.
    #[arg(long, default_value_t = TrainArgs::default().epochs)]
    pub epochs: usize,
    /// Hidden units of the MLP 64 -> hidden -> 10 (2048 for a model of
    /// millions of parameters, for timing).
    #[arg(long, default_value_t = TrainArgs::default().hidden)]
    pub hidden: usize,
    /// Images per rank per step.
    #[arg(long, default_value_t = TrainArgs::default().batch)]
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
    /// RedSync's compress threshold in bytes: layers of at most this
    /// many bytes go dense (RedSync uses 131072 for ImageNet-size
    /// layers, which would send every layer of a small MLP dense).
    /// Biases (one dimension) always go dense, as DGC does.
    #[arg(long, default_value_t = TrainArgs::default().compress_threshold)]
    pub compress_threshold: usize,
    /// DGC's clipping constant C (each rank clips its gradient to an L2
    /// norm of C / sqrt(P)).
    #[arg(long, default_value_t = TrainArgs::default().clip)]
    pub clip: f32,
    /// DGC's warm-up epochs (density max(c^(e+1), D), c = D^(1/(W+1))).
    #[arg(long, default_value_t = TrainArgs::default().warmup)]
    pub warmup: usize,
    /// Seed of the initial weights and shuffles (set per run from the
    /// seeds to average over; not a flag).
    #[arg(skip = TrainArgs::default().seed)]
    pub seed: u64,
}

impl Default for TrainArgs {
    fn default() -> Self {
        Self {
            epochs: 40,
            hidden: 128,
            batch: 16,
            lr: 0.1,
            momentum: 0.9,
            weight_decay: 1e-4,
            compress_threshold: 0,
            clip: 5.0,
            warmup: 4,
            seed: 1,
        }
    }
}

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
    /// Per step: select, communicate, apply, in milliseconds.
    pub phases: Vec<[f64; 3]>,
    /// Which layers went dense.
    pub dense_layers: Vec<bool>,
    /// The final weights.
    pub weights: Vec<Vec<f32>>,
}

/// The optimizer settings a run uses.
///
/// # Errors
/// Invalid settings.
pub fn config(run: &Run, a: &TrainArgs) -> Result<Config> {
    let rgc = Rule::Rgc {
        momentum: a.momentum,
        nesterov: false,
        weight_decay: a.weight_decay,
        factor_masking: true,
    };
    Ok(match run {
        Run::Dense { momentum: false } => Config::dense(a.lr, Rule::TopK)?,
        Run::Dense { momentum: true } => Config::dense(a.lr, rgc)?,
        Run::Sparse { scheme, density } => {
            let rule = if scheme.family == Family::TopK {
                Rule::TopK
            } else {
                rgc
            };
            // Biases go dense in every scheme (DGC's rule, as this
            // benchmark has always run them; `dense_layers` reports it).
            let cfg = Config::new(a.lr, *density, rule)?
                .compress_threshold(a.compress_threshold)
                .compress_min_dims(2);
            match scheme.family {
                Family::RgcQuantized => cfg.quantized()?,
                Family::Dgc => cfg.clip(a.clip)?,
                _ => cfg,
            }
        }
    })
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
pub fn steps_per_epoch(shard_len: usize, batch: usize) -> usize {
    shard_len / batch
}

/// The seed of `rank`'s shuffle of its shard in `epoch`.
pub fn order_seed(seed: u64, epoch: usize, rank: usize) -> u64 {
    seed ^ (epoch as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ((rank as u64) << 48)
}

/// The collective a compressed layer of `run` goes through: the scheme's,
/// except TopkA for the output layer (`output`) in RedSync's quantized
/// mode, which leaves that layer exact; TopkA for the dense runs (which
/// compress no layer).
pub fn layer_collective(run: &Run, output: bool) -> &'static str {
    match run {
        Run::Sparse { scheme, .. } if !(scheme.family == Family::RgcQuantized && output) => {
            scheme.collective
        }
        _ => "topk_a",
    }
}

/// The optimizer of `run` for `mlp`: RadixTopK selection and each layer's
/// collective (TopkA for the dense runs and for the output layer of
/// RedSync's quantized mode), from the initial weights of `a.seed`.
fn trainer(run: &Run, a: &TrainArgs, mlp: &Mlp) -> Result<Trainer<Cpu, RadixTopK>> {
    let layers = mlp.layers();
    let cfg = config(run, a)?;
    let density = run.density();
    let last = layers.len() - 1;
    let comm = |l: &LayerSpec| -> Result<Box<dyn SparseAllreduce<f32>>> {
        let spec = layer_collective(run, l.name == layers[last].name);
        Registry::builtin().build(spec, Defaults::density(density)?)
    };
    let w0 = mlp.init(a.seed);
    Trainer::new(Cpu, cfg, layers.clone(), &w0, RadixTopK::magnitude(), comm)
}

/// Trains one rank: every rank of `t` calls it with the same arguments.
/// `on_step` is called after each step (progress).
///
/// # Errors
/// Invalid settings, the model's, the optimizer's and the collectives'
/// errors (on every rank).
pub fn train_rank(
    t: &mut dyn Transport,
    run: &Run,
    a: &TrainArgs,
    train: &Set,
    test: &Set,
    on_step: &(dyn Fn() + Sync),
) -> Result<RankRun> {
    let (p, rank) = (t.size(), t.rank());
    if a.batch == 0 || a.hidden == 0 {
        return Err(Error::invalid("batch, hidden", "must be at least 1"));
    }
    let mlp = Mlp::new(a.hidden);
    let mut tr = trainer(run, a, &mlp)?;
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
    let mut out = RankRun {
        dense_layers: tr.compressed().iter().map(|c| !c).collect(),
        ..RankRun::default()
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for epoch in 0..a.epochs {
        if let Run::Sparse { scheme, density } = run
            && scheme.family == Family::Dgc
        {
            tr.set_density(dgc_density(epoch, *density, a.warmup))?;
        }
        let order = data::permutation(mine.len(), order_seed(a.seed, epoch, rank));
        for s in 0..steps {
            let rows = &order[s * a.batch..(s + 1) * a.batch];
            let batch = mine.rows(rows);
            let w = tr.weights()?;
            let (_, grads) = mlp.loss_and_grads(&w, &batch)?;
            let rep: StepReport = tr.step(t, &grads)?;
            out.bytes_sent.push(rep.traffic.bytes_sent);
            out.phases
                .push([ms(rep.select), ms(rep.communicate), ms(rep.apply)]);
            on_step();
        }
        let w = tr.weights()?;
        out.weight_hash.push(weight_hash(&w));
        if rank == 0 {
            let (loss, _) = mlp.evaluate(&w, train)?;
            let (_, acc) = mlp.evaluate(&w, test)?;
            out.train_loss.push(loss);
            out.test_acc.push(acc);
        }
    }
    out.weights = tr.weights()?;
    Ok(out)
}

/// Single-process SGD on the union of the ranks' batches, step by step (the
/// oracle of dense data-parallel SGD): the weights after `steps` steps
/// (within the first epoch) of `P` ranks' dense plain SGD.
///
/// # Errors
/// The model's errors.
pub fn full_batch_sgd(a: &TrainArgs, p: usize, train: &Set, steps: usize) -> Result<Vec<Vec<f32>>> {
    let mlp = Mlp::new(a.hidden);
    let mut w = mlp.init(a.seed);
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
        let (_, g) = mlp.loss_and_grads(&w, &Set { x, y })?;
        for (wl, gl) in w.iter_mut().zip(g) {
            for (wi, gi) in wl.iter_mut().zip(gl) {
                *wi -= a.lr * gi;
            }
        }
    }
    Ok(w)
}
