//! The step as production systems run it (issue 44, item 4): the layers in
//! buckets of at most `--bucket-mib` MiB filled in backward order, one
//! call per bucket, each call started when its bucket is ready
//! ([`super::timeline`]), against dense allreduce bucketed the same way,
//! as PyTorch DDP runs it.
//!
//! Three modes per run ([`Mode`]):
//! - **per layer**: today's step (the headline table's `step ms`): one
//!   call per compressed layer and the layers kept dense in one dense
//!   allreduce (the dense baseline: one of the whole model), nothing
//!   overlapped;
//! - **fused**: the buckets of `--bucket-mib`, one call each, nothing
//!   overlapped;
//! - **fused+overlap**: the same buckets, each call started as soon as
//!   its bucket is ready, during the rest of the backward pass (DDP's
//!   step for the dense baseline).
//!
//! Buckets ([`buckets`]): the layers are walked in backward order (the
//! reverse of the model's); a layer joins the open bucket of its kind
//! (compressed with its collective, or kept dense) unless that would take
//! the bucket past the cap, or its collective differs, in which case the
//! open bucket is closed and the layer opens a new one; a layer larger
//! than the cap is a bucket of its own, and a cap of 0 puts every layer
//! in a bucket of its own. A compressed bucket is one call of its
//! collective at the bucket's dimension (the layers' index spaces end to
//! end, each rank's input at the run's density); a dense bucket is one
//! dense allreduce (`--dense`). Its time is [`super::comm_time`]'s at that
//! dimension.
//!
//! Costs ([`costs`]): the compute time is split 1 : 2 between forward and
//! backward (the compute model's `3 x forward GFlop`), the backward time
//! among the layers by their forward FLOPs where the architecture gives
//! them, else by their parameters ([`super::flops`]). A compressed
//! bucket's selection and update are [`super::device_phases`]'s formula
//! at the bucket's dimension (compensation and radix top-k passes; the
//! reduced result's entries), a dense bucket's update is its dense update
//! passes, on the `--device`.

use super::RunPlan;
use super::comm::{AGREE_ROUNDS, Call, CommCache};
use super::device::{
    APPLY_BYTES_PER_ENTRY, Device, compensation_passes, dense_update_passes, reduced_entries,
    topk_passes,
};
use super::timeline::{self, BucketCost, StepCosts, Timeline};
use sparse_core::{Error, Result};

/// How a run's step communicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// One call per compressed layer, the dense layers in one dense
    /// allreduce, one after the other (today's `step ms`).
    PerLayer,
    /// One call per bucket, one after the other.
    Fused,
    /// One call per bucket, each started when its bucket is ready.
    Overlapped,
}

impl Mode {
    /// Every mode, in the table's order.
    pub const ALL: [Mode; 3] = [Mode::PerLayer, Mode::Fused, Mode::Overlapped];
    /// Its name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Mode::PerLayer => "per layer",
            Mode::Fused => "fused",
            Mode::Overlapped => "fused+overlap",
        }
    }
}

/// One bucket: layers of one kind filled in backward order.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    /// Its call: the compressed layers' collective, or the dense allreduce.
    pub call: Call,
    /// Its layers (indices in the model's order), in backward order: the
    /// last is the one whose backward makes the bucket ready.
    pub layers: Vec<usize>,
    /// Its parameters.
    pub len: usize,
}

impl Bucket {
    /// The layer whose backward makes the bucket ready.
    pub fn last_layer(&self) -> usize {
        self.layers.last().copied().unwrap_or(0)
    }
}

/// The bucket cap of `mib` MiB, bytes (`u64::MAX` for an infinite cap).
///
/// # Errors
/// [`Error::InvalidParameter`] for a cap that is negative or NaN.
pub fn cap_bytes(mib: f64) -> Result<u64> {
    if mib.is_nan() || mib < 0.0 {
        return Err(Error::invalid(
            "bucket-mib",
            format!("{mib} is not a size in MiB: give 0 (one layer a bucket) or more (DDP: 25)"),
        ));
    }
    // `as` saturates: an infinite or huge cap is u64::MAX.
    Ok((mib * (1u64 << 20) as f64) as u64)
}

/// `plan`'s layers in buckets ([module](self) doc): compressed layers up
/// to `sparse_cap` bytes, layers kept dense up to `dense_cap`, in the
/// order they become ready (the last layer first).
pub fn buckets(plan: &RunPlan, sparse_cap: u64, dense_cap: u64) -> Vec<Bucket> {
    let mut done: Vec<Bucket> = Vec::new();
    let (mut sparse, mut dense): (Option<Bucket>, Option<Bucket>) = (None, None);
    for (i, l) in plan.layers.iter().enumerate().rev() {
        let (call, cap, open) = match l.kept_dense {
            None => (Call::Sparse(l.collective), sparse_cap, &mut sparse),
            Some(_) => (Call::Dense, dense_cap, &mut dense),
        };
        let bytes = |len: usize| 4 * len as u64;
        if let Some(b) = open.take_if(|b| b.call != call || bytes(b.len + l.spec.len) > cap) {
            done.push(b);
        }
        let b = open.get_or_insert_with(|| Bucket {
            call,
            layers: Vec::new(),
            len: 0,
        });
        b.layers.push(i);
        b.len += l.spec.len;
    }
    done.extend(sparse);
    done.extend(dense);
    // Ready order: the bucket whose last layer comes later in the model
    // is ready first.
    done.sort_by_key(|b| std::cmp::Reverse(b.last_layer()));
    done
}

/// The buckets of `plan` in `mode` at a cap of `cap` bytes.
pub fn buckets_of(plan: &RunPlan, mode: Mode, cap: u64) -> Vec<Bucket> {
    match mode {
        Mode::PerLayer => buckets(plan, 0, u64::MAX),
        Mode::Fused | Mode::Overlapped => buckets(plan, cap, cap),
    }
}

/// What the costs of a step depend on beside the buckets.
#[derive(Debug, Clone, PartialEq)]
pub struct CostModel {
    /// Forward plus backward, ms.
    pub compute_ms: f64,
    /// Each layer's weight in the backward pass, in the model's order
    /// ([`super::flops::backward_shares`]).
    pub backward_weights: Vec<f64>,
    /// The device of the selection and the update.
    pub device: Device,
    /// Ranks.
    pub ranks: usize,
    /// The ranks' shared fraction of indices.
    pub overlap: f64,
}

/// A bucket's selection and update on the device, ms
/// ([`super::device_phases`]'s formula at the bucket's dimension).
pub fn bucket_device_ms(plan: &RunPlan, b: &Bucket, m: &CostModel) -> (f64, f64) {
    let n = b.len;
    let bytes = 4.0 * n as f64;
    let density = plan.run.density();
    let (select, update) = match b.call {
        Call::Dense => (0.0, dense_update_passes(&plan.run) * bytes),
        Call::Agree | Call::Joint => (0.0, 0.0),
        Call::Sparse(_) | Call::SparseBody(_) => (
            (compensation_passes(&plan.run) + topk_passes(n, density)) * bytes,
            APPLY_BYTES_PER_ENTRY * reduced_entries(n, density, m.ranks, m.overlap),
        ),
    };
    let ms = |b: f64| b / m.device.bandwidth * 1e3;
    (ms(select), ms(update))
}

/// The costs of `plan`'s step over `buckets`: the compute split as the
/// [module](self) doc says, each bucket's selection, call (`comm`) and
/// update. With `joint` (`Trainer::step`: the per layer and fused modes)
/// the compressed buckets' calls are entered in one round
/// ([`Call::Joint`]): each call is its body alone
/// ([`Call::SparseBody`]), and the first compressed bucket's call carries
/// the joint round; without it (the pipelined step) each call makes its
/// own entry round.
///
/// # Errors
/// The simulation's errors.
pub fn costs(
    plan: &RunPlan,
    buckets: &[Bucket],
    m: &CostModel,
    comm: &mut CommCache,
    joint: bool,
) -> Result<StepCosts> {
    if m.backward_weights.len() != plan.layers.len() {
        return Err(Error::invalid(
            "backward_weights",
            format!(
                "{} weights for {} layers: give one per layer",
                m.backward_weights.len(),
                plan.layers.len()
            ),
        ));
    }
    let total: f64 = m.backward_weights.iter().sum();
    let backward = m.compute_ms * 2.0 / 3.0;
    let backward_ms = m
        .backward_weights
        .iter()
        .map(|w| {
            if total > 0.0 {
                backward * w / total
            } else {
                0.0
            }
        })
        .collect();
    let mut out = StepCosts {
        forward_ms: m.compute_ms / 3.0,
        backward_ms,
        buckets: Vec::with_capacity(buckets.len()),
        update_ms: 0.0,
        agree_ms: comm.time(Call::Agree, 1)?.seconds * 1e3,
    };
    let mut entry_ms = if joint && buckets.iter().any(|b| matches!(b.call, Call::Sparse(_))) {
        comm.time(Call::Joint, 1)?.seconds * 1e3
    } else {
        0.0
    };
    for b in buckets {
        let (select_ms, update_ms) = bucket_device_ms(plan, b, m);
        out.update_ms += update_ms;
        let (call, entry) = match b.call {
            Call::Sparse(_) if joint => (b.call.in_joint_entry(), std::mem::take(&mut entry_ms)),
            call => (call, 0.0),
        };
        out.buckets.push(BucketCost {
            last_layer: b.last_layer(),
            select_ms,
            comm_ms: entry + comm.time(call, b.len)?.seconds * 1e3,
        });
    }
    Ok(out)
}

/// One run in one mode at one rank count.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketRow {
    /// Ranks.
    pub ranks: usize,
    /// The run's name.
    pub scheme: String,
    /// The dense baseline it is compared with.
    pub baseline: String,
    /// How it communicates.
    pub mode: Mode,
    /// Calls on the network a step.
    pub calls: usize,
    /// Forward plus backward, ms.
    pub compute_ms: f64,
    /// Selections on the device, ms (modelled).
    pub select_ms: f64,
    /// Update on the device, ms (modelled).
    pub update_ms: f64,
    /// Every call and the trainer's agreement rounds, ms (simulated).
    pub comm_ms: f64,
    /// The agreement rounds among them, ms (simulated): the entry and
    /// commit rounds, in every mode.
    pub agree_ms: f64,
    /// What the step spends beyond compute, select and update: the
    /// communication not hidden behind the backward pass, ms.
    pub exposed_comm_ms: f64,
    /// The step, ms.
    pub step_ms: f64,
    /// The baseline's step in the same mode over this one's.
    pub speedup: f64,
    /// The baseline's `fused+overlap` step (DDP's) over this one's.
    pub speedup_vs_ddp: f64,
}

/// `plan`'s step in `mode` at cap `cap`: its row (speedups 1, set by
/// [`bucket_rows`]) and its timeline.
///
/// # Errors
/// As [`costs`].
pub fn step_of(
    plan: &RunPlan,
    mode: Mode,
    cap: u64,
    m: &CostModel,
    comm: &mut CommCache,
) -> Result<(BucketRow, Timeline)> {
    let b = buckets_of(plan, mode, cap);
    let c = costs(plan, &b, m, comm, mode != Mode::Overlapped)?;
    let tl = match mode {
        Mode::Overlapped => timeline::overlapped(&c)?,
        Mode::PerLayer | Mode::Fused => timeline::sequential(&c)?,
    };
    let step_ms = tl.step_ms();
    let local = c.compute_ms() + c.select_ms() + c.update_ms;
    let agree_ms = AGREE_ROUNDS as f64 * c.agree_ms;
    let row = BucketRow {
        ranks: m.ranks,
        scheme: plan.run.name(),
        baseline: plan.run.dense().name(),
        mode,
        calls: b.len(),
        compute_ms: c.compute_ms(),
        select_ms: c.select_ms(),
        update_ms: c.update_ms,
        comm_ms: c.comm_ms() + agree_ms,
        agree_ms,
        exposed_comm_ms: (step_ms - local).max(0.0),
        step_ms,
        speedup: 1.0,
        speedup_vs_ddp: 1.0,
    };
    Ok((row, tl))
}

/// Every plan's rows in every mode at `m.ranks` (the baselines first in
/// `plans`), with their speedups over their baseline, and the
/// `fused+overlap` timelines, one per plan.
///
/// # Errors
/// As [`costs`].
pub fn bucket_rows(
    plans: &[RunPlan],
    cap: u64,
    m: &CostModel,
    comm: &mut CommCache,
) -> Result<(Vec<BucketRow>, Vec<Timeline>)> {
    let (mut rows, mut timelines): (Vec<BucketRow>, Vec<Timeline>) = (Vec::new(), Vec::new());
    for p in plans {
        for mode in Mode::ALL {
            let (row, tl) = step_of(p, mode, cap, m, comm)?;
            if mode == Mode::Overlapped {
                timelines.push(tl);
            }
            rows.push(row);
        }
    }
    let base = rows.clone();
    let step = |scheme: &str, mode: Mode| {
        base.iter()
            .find(|r| r.scheme == scheme && r.mode == mode)
            .map(|r| r.step_ms)
    };
    for r in &mut rows {
        if let Some(b) = step(&r.baseline, r.mode) {
            r.speedup = b / r.step_ms;
        }
        if let Some(b) = step(&r.baseline, Mode::Overlapped) {
            r.speedup_vs_ddp = b / r.step_ms;
        }
    }
    Ok((rows, timelines))
}
