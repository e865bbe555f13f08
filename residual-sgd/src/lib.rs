#![doc = include_str!("../README.md")]
//!
//! ## How a step works
//!
//! The three parts are separate, as GRACE and DDP hooks separate them: the
//! residual memory (compensate: add the new gradient in; update: remove what
//! was sent, add back what the collective dropped), the compressor (the
//! selector, per layer) and the communicator (the allreduce, one per
//! compressed layer, or one per bucket of them with [`Config::buckets`],
//! so a stateful collective keeps one state per tensor or bucket it reduces).
//! [`Trainer::step`] runs them for every layer and returns what was sent,
//! what was dropped, the traffic and the time of each phase.
//!
//! Rules ([`Rule`]):
//! - **SparCML's top-k SGD** (SparCML Alg. 1): `acc = eps + lr g`;
//!   `eps = acc - TopK(acc)`; `w -= allreduce_sum(TopK(acc)) / P`. The
//!   listing applies the sum; dividing by `P` makes `lr` the learning rate
//!   of SGD on the mean gradient, so the same `lr` compares with dense SGD.
//! - **RedSync's RGC** (RedSync Alg. 4): weight decay into `G`
//!   (`G += wd w`); momentum correction `U = m U + G; V = V + U` (the
//!   listing's lines 12/15/18 add the raw gradient, which would drop the
//!   weight decay: `G` is used); Nesterov as `U = m (U + G); V = V + U + G`
//!   (the listing's `V += grad` after `V += U` is not Nesterov: with all
//!   entries sent each step this form equals PyTorch's `G + m b`); the
//!   selected entries leave the residual (`V[idx] = 0`) and, with factor
//!   masking, the momentum (`U[idx] = 0`); `w -= lr sum / P`.
//! - DGC's additions, as options of RGC: local gradient clipping to
//!   `C P^(-1/2)` of the L2 norm ([`Config::clip`]) and the density
//!   warm-up ([`dgc_density`]).
//!
//! Which layers are compressed ([`Config::compresses`]); the others go
//! through a dense allreduce and the rule's dense update (plain SGD for
//! top-k SGD, momentum SGD for RGC). Each rule that keeps a layer dense is
//! a setting, on where its source puts it:
//! - **RedSync's `compress_thd`** ([`Config::compress_threshold`]): a layer
//!   of at most that many bytes goes dense (RedSync Alg. 4,
//!   `size(w) > compress_thd` compresses; Sec. 5.4: 128 KiB, below which
//!   compression costs more than it saves). The default for
//!   [`Rule::Rgc`]; 0 for [`Rule::TopK`], as SparCML's Alg. 1 sparsifies
//!   the whole gradient.
//! - **DGC's dimensions rule** ([`Config::compress_min_dims`]`(2)`): only
//!   tensors of more than one dimension are compressed
//!   ([`LayerSpec::dims`]), as DGC's reference code hands its compressor
//!   only parameters with `dim() > 1`. Off unless asked for: none of the
//!   four papers states it.
//! - **Deliberate dense training** ([`Config::dense`]): every layer.
//!
//! A [`Trainer`] whose settings compress no layer and are not
//! [`Config::dense`] is an error at construction, naming the rule that kept
//! each layer dense, so dense SGD never passes for compression; each
//! step's [`StepReport::layers`] says which layers were compressed and the
//! density each sent ([`LayerReport::density`]).
//!
//! Global residual collection (SparDL Alg. 1): whatever the collective cut
//! ([`sparse_coll::Reduced::dropped`]) goes back into the residual of the
//! rank that holds it, so nothing is lost.
//!
//! Options: SparCML's `Q` ([`Config::qsgd`], QSGD with a fresh seed each
//! step, its error fed back or not), RedSync's quantized mode
//! ([`Config::quantized`]: top-k/low-k alternation and same-sign means,
//! the output layer excepted), tensor fusion of dense layers
//! ([`Config::fuse`]) and of compressed layers ([`Config::buckets`]: one
//! collective call per bucket of layers, as DDP buckets gradients, with
//! per-layer or global selection budgets, [`BucketBudget`]).
//!
//! SparDL's paper variant of residual collection is
//! [`Collection::Paper`].
//!
//! The parts are traits: a compressed layer's [`Memory`] (compensate,
//! remove, restore; [`memory::Residual`] and [`memory::Momentum`] are the
//! papers'), its [`sparse_select::Selector`] and its
//! [`sparse_coll::SparseAllreduce`]; [`Trainer::with_memory`] takes a
//! user's own memory. [`Trainer::step_buffers`] takes the gradients in the
//! backend's buffers, where a model on the same device computed them, and
//! the weights stay there ([`Trainer::weight_buffers`]); [`Trainer::step`]
//! is the host convenience that uploads them first; a burn model on
//! burn's wgpu or cuda backend hands its gradients over that way without
//! a copy (`residual_sgd::burn_device`, features `burn-wgpu` and
//! `burn-cuda`: burn's cubecl tensors and `backend-cuda`'s buffers share
//! one client and its memory). The finite check
//! ([`sparse_core::backend::check_finite_buffer`]), clipping
//! ([`sparse_core::ReduceOps::sum_squares`]), compensation, selection,
//! masking and the update run on the backend; what crosses to the host is
//! each compressed layer's selected pairs and each dense layer's gradient
//! for its allreduce, and what comes back is the reduced result (besides
//! the primitives' own small readbacks: counts, histograms, partial sums;
//! `backend-cuda` counts every byte, `residual-sgd/tests/kernels.rs`
//! checks a step's).
//!
//! ## Durable state
//!
//! Error feedback makes the optimizer stateful: each rank's residual (and
//! momentum) holds gradient mass not applied yet, and selectors and
//! collectives keep state across calls. [`Trainer::save_state`] gathers
//! all of it (weights, residuals, momenta, every part's state through
//! [`Memory::save_state`], [`sparse_select::Selector::save_state`] and
//! [`sparse_coll::SparseAllreduce::save_state`], the step counts that seed
//! QSGD, DGC's density) as a [`sparse_core::state::State`];
//! [`Trainer::load_state`] restores it on every rank, all or nothing.
//! [`checkpoint::save`] and [`checkpoint::load`] put it on disk
//! (safetensors, a manifest with CRC-32s, crash-safe writes, hostile
//! reads: the [`checkpoint`] module's docs say what each guarantees);
//! [`checkpoint::prune`] removes old ones; [`checkpoint::reshard`] moves a
//! checkpoint of `P` ranks to `P'`. In
//! a training loop, on threads or under MPI alike (every rank calls
//! them; under MPI the directory must be on a file system every rank
//! reads):
//!
//! ```no_run
//! # use residual_sgd::{checkpoint, Trainer};
//! # fn f(t: &mut dyn sparse_coll::Transport, tr: &mut Trainer<backend_cpu::Cpu, sparse_select::RadixTopK>,
//! #      step: u64, dir: &std::path::Path) -> sparse_core::Result<()> {
//! if step % 500 == 0 {
//!     let meta = [("step".to_string(), step.to_string())].into();
//!     checkpoint::save(t, dir, &format!("step-{step:08}"), &tr.save_state()?, &meta)?;
//!     // The two newest stay (names of 8 digits sort as their steps);
//!     // the one LATEST names is never removed.
//!     let oldest = format!("step-{:08}", step.saturating_sub(500));
//!     checkpoint::prune(t, dir, |name| name >= oldest.as_str())?;
//! }
//! // After a restart, the trainer built as before:
//! let (state, manifest) = checkpoint::load(t, dir)?; // LATEST, checked
//! tr.load_state(t, &state)?;
//! let step: u64 = manifest.meta["step"].parse().unwrap_or(0);
//! # let _ = step; Ok(()) }
//! ```
//!
//! With burn, the weights the trainer holds are the model's
//! (`residual_sgd::burn::load`, feature `burn`, puts them in a module
//! before each step), so the
//! trainer's state is the whole training state; the data order and any
//! schedule (DGC's warm-up by epoch) must be derived from the step, as
//! `sparse-bench train` does (`--checkpoint-every`, `--resume`).
//!
//! The guarantees: a trainer built alike that loads the state takes the
//! same next steps, bit for bit (on every backend; `tests/state.rs`,
//! `tests/kernels.rs`); a state that does not fit is an error on every
//! rank naming what disagrees, and no rank's trainer changes: another
//! setting, layer, part or rank count is [`sparse_core::Error::Mismatch`]
//! with both values as numbers (`setting "lr"`: saved `2`, here `4`), a
//! NaN or infinite weight, momentum or residual and a corrupted file are
//! [`sparse_core::Error::Corrupt`], and ranks that loaded different
//! settings (a density that differs between ranks) or weights are
//! [`sparse_core::Error::Disagreement`] naming the setting with each
//! rank's value (`tests/load_settings.rs`). On disk: every rank saves the
//! same checkpoint or none does; a save refuses what a load would and
//! reports its outcome (`Ok` only once `LATEST` has moved, an error only
//! while it has not); one save or prune of a directory at a time; a prune
//! never removes the checkpoint `LATEST` names, nor anything while
//! `LATEST` names none; a load follows `LATEST` only to the checkpoint
//! saved under that name, opens only regular files, checks each rank
//! file's length and CRC-32 before it holds or parses it (the manifest,
//! which holds its own CRC, is parsed into typed fields first), and
//! allocates a small multiple of a file at most
//! (`tests/checkpoint_probe.rs`, `tests/checkpoint_bounds.rs`). A reshard
//! writes one new rank's state at a time (its memory does not grow with
//! `P'`, `tests/reshard_memory.rs`) and keeps
//! the weights, and the sum over ranks of residuals and momenta (old rank
//! `r` summed into new rank `r mod P'`: exact where the additions are,
//! as on dyadic values; within one rounding per addition otherwise), and
//! rebuilds what depends on `P` as on a first call. The sum is what is
//! conserved, not the mean: a step applies the ranks' summed values divided
//! by the rank count, so the mass still pending after a reshard from `P`
//! to `P'` ranks is applied at `P / P'` times the weight `P` ranks would
//! have given it (more when ranks were lost). Momenta follow the same
//! rule.

pub mod bucket;
#[cfg(feature = "burn")]
pub mod burn;
#[cfg(any(feature = "burn-wgpu", feature = "burn-cuda"))]
pub mod burn_device;
#[cfg(feature = "burn")]
pub mod burn_hook;
pub mod checkpoint;
mod config;
pub mod hook;
mod layer;
pub mod memory;
pub mod recipe;
mod trainer;

pub use bucket::{BucketBudget, Buckets, FillOrder};
pub use config::{Collection, Config, KeptDense, Rule, dgc_density};
pub use layer::LayerSpec;
pub use memory::Memory;
pub use trainer::{Feed, LayerReport, StepFailure, StepReport, Trainer};

/// The agreement rounds ([`sparse_coll::agree_or_fail`], one small
/// allgather among all ranks each where every rank succeeds; a failure
/// adds one carrying its words) that every step makes beyond its
/// collectives, [`Trainer::step`], [`Trainer::step_buffers`] and the
/// pipelined [`Trainer::step_with`] alike: the entry round (settings,
/// layers, the weights' history, this rank's gradients' check) and the
/// commit round (every rank's failure, the results' digest).
/// [`StepReport::agree`] times them; `sparse-bench step` simulates them.
/// Each collective call starts with an entry round of its own (its
/// agreement on the call): the pipelined step's calls each make theirs, as
/// their buckets become ready, while [`Trainer::step`] and
/// [`Trainer::step_buffers`] enter all of a step's calls in one round
/// ([`sparse_coll::allreduce_jointly`]), one round a step in place of one
/// a call.
pub const AGREEMENT_ROUNDS: usize = 2;
