//! One step as a timeline of phases on two lanes, the device and the
//! network: the arithmetic of `sparse-bench step`'s bucketed rows, apart
//! from where the costs come from ([`super::bucket`] gives them).
//!
//! [`overlapped`] runs the step as PyTorch DDP does: the forward pass, then
//! the backward pass layer by layer in reverse order; a bucket whose last
//! layer (in backward order) is done is ready, after its selection when it
//! is compressed; the selection runs on the device, between the layers'
//! backward passes (the device does one thing at a time); a ready bucket's
//! call starts as soon as the network is free, the calls one at a time in
//! the order they became ready (FIFO); the update starts once the device
//! and the network are both done. [`sequential`] runs the same phases one
//! after the other, as `Trainer::step` does. Both have the trainer's
//! agreement rounds on the network lane, the device waiting on them: the
//! entry round after the forward pass (in [`sequential`], after the
//! backward pass: `Trainer::step` takes every gradient at once) and the
//! commit round before the update.

use sparse_core::{Error, Result};

/// Where a phase runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// The device: forward, backward, selection, update.
    Device,
    /// The network: the buckets' calls.
    Network,
}

/// What a phase is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The forward pass.
    Forward,
    /// Backward of consecutive layers (between two selections).
    Backward,
    /// A compressed bucket's compensation and selection.
    Select,
    /// A bucket's call.
    Comm,
    /// The update of every layer.
    Update,
    /// One of the trainer's agreement rounds.
    Agree,
}

impl Kind {
    /// Its name, as the timeline's legend gives it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Forward => "forward",
            Kind::Backward => "backward",
            Kind::Select => "select",
            Kind::Comm => "communication",
            Kind::Update => "update",
            Kind::Agree => "agreement",
        }
    }
}

/// One phase: `[start, end)` in ms from the step's start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phase {
    /// Where it runs.
    pub lane: Lane,
    /// What it is.
    pub kind: Kind,
    /// The bucket of a selection or a call.
    pub bucket: Option<usize>,
    /// Start, ms.
    pub start: f64,
    /// End, ms.
    pub end: f64,
}

/// A bucket's costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketCost {
    /// Its last layer in backward order (the first of the model's order it
    /// holds): the bucket is ready when this layer's backward is done.
    pub last_layer: usize,
    /// Its selection on the device, ms (0 for a dense bucket).
    pub select_ms: f64,
    /// Its call, ms.
    pub comm_ms: f64,
}

/// What a step costs.
#[derive(Debug, Clone, PartialEq)]
pub struct StepCosts {
    /// The forward pass, ms.
    pub forward_ms: f64,
    /// Each layer's backward, ms, in the model's order (backward runs it
    /// from the last).
    pub backward_ms: Vec<f64>,
    /// The buckets, in the order they are filled (backward order).
    pub buckets: Vec<BucketCost>,
    /// The update, ms.
    pub update_ms: f64,
    /// One agreement round, ms.
    pub agree_ms: f64,
}

impl StepCosts {
    /// Forward plus backward, ms.
    pub fn compute_ms(&self) -> f64 {
        self.forward_ms + self.backward_ms.iter().sum::<f64>()
    }
    /// Every selection, ms.
    pub fn select_ms(&self) -> f64 {
        self.buckets.iter().map(|b| b.select_ms).sum()
    }
    /// Every call, ms.
    pub fn comm_ms(&self) -> f64 {
        self.buckets.iter().map(|b| b.comm_ms).sum()
    }
}

/// The phases of one step; phases of no duration are left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    /// Every phase, device and network, in the order they were placed.
    pub phases: Vec<Phase>,
}

impl Timeline {
    /// Places a phase of `ms` at `start` (none when `ms` is not positive);
    /// its end.
    fn push(&mut self, lane: Lane, kind: Kind, bucket: Option<usize>, start: f64, ms: f64) -> f64 {
        if ms > 0.0 {
            self.phases.push(Phase {
                lane,
                kind,
                bucket,
                start,
                end: start + ms,
            });
        }
        start + ms.max(0.0)
    }
    /// The step's end, ms: the last phase's end (0 when empty).
    pub fn step_ms(&self) -> f64 {
        self.phases.iter().map(|p| p.end).fold(0.0, f64::max)
    }
    /// The phases on `lane`.
    pub fn on(&self, lane: Lane) -> impl Iterator<Item = &Phase> {
        self.phases.iter().filter(move |p| p.lane == lane)
    }
}

/// The buckets that become ready after each layer's backward, by layer.
///
/// # Errors
/// [`Error::InvalidParameter`] for a bucket whose last layer is not a layer.
fn ready_after(c: &StepCosts) -> Result<Vec<Vec<usize>>> {
    let n = c.backward_ms.len();
    let mut at = vec![Vec::new(); n];
    for (j, b) in c.buckets.iter().enumerate() {
        at.get_mut(b.last_layer)
            .ok_or_else(|| {
                Error::invalid(
                    "bucket",
                    format!(
                        "bucket {j}'s last layer {} is not one of the {n} layers",
                        b.last_layer
                    ),
                )
            })?
            .push(j);
    }
    Ok(at)
}

/// The step as DDP runs it (the [module](self) doc): backward layer by
/// layer from the last, each bucket's selection on the device after its
/// last layer, each call as soon as its bucket is ready and the network
/// is free, the update after both lanes are done.
///
/// # Errors
/// [`Error::InvalidParameter`] for a bucket whose last layer is not a layer.
pub fn overlapped(c: &StepCosts) -> Result<Timeline> {
    let at = ready_after(c)?;
    let mut tl = Timeline::default();
    let t = tl.push(Lane::Device, Kind::Forward, None, 0.0, c.forward_ms);
    // The entry round after the forward pass: the backward pass waits for it.
    let mut t = tl.push(Lane::Network, Kind::Agree, None, t, c.agree_ms);
    let mut segment = t;
    let mut ready = vec![0.0; c.buckets.len()];
    for (i, buckets) in at.iter().enumerate().rev() {
        t += c.backward_ms[i].max(0.0);
        for &j in buckets {
            if c.buckets[j].select_ms > 0.0 {
                tl.push(Lane::Device, Kind::Backward, None, segment, t - segment);
                t = tl.push(
                    Lane::Device,
                    Kind::Select,
                    Some(j),
                    t,
                    c.buckets[j].select_ms,
                );
                segment = t;
            }
            ready[j] = t;
        }
    }
    tl.push(Lane::Device, Kind::Backward, None, segment, t - segment);
    // FIFO: the calls in the order their buckets became ready.
    let mut order: Vec<usize> = (0..c.buckets.len()).collect();
    order.sort_by(|&x, &y| ready[x].total_cmp(&ready[y]).then(x.cmp(&y)));
    let mut free = 0.0f64;
    for j in order {
        free = tl.push(
            Lane::Network,
            Kind::Comm,
            Some(j),
            ready[j].max(free),
            c.buckets[j].comm_ms,
        );
    }
    let commit = tl.push(Lane::Network, Kind::Agree, None, t.max(free), c.agree_ms);
    tl.push(Lane::Device, Kind::Update, None, commit, c.update_ms);
    Ok(tl)
}

/// The same phases one after the other, nothing overlapped, as
/// `Trainer::step` runs them: forward, backward, the entry round, every
/// bucket's selection, every bucket's call in bucket order, the commit
/// round, the update. Its end is `compute + select + comm + 2 agree +
/// update`.
///
/// # Errors
/// As [`overlapped`].
pub fn sequential(c: &StepCosts) -> Result<Timeline> {
    ready_after(c)?;
    let mut tl = Timeline::default();
    let mut t = tl.push(Lane::Device, Kind::Forward, None, 0.0, c.forward_ms);
    let backward: f64 = c.backward_ms.iter().map(|b| b.max(0.0)).sum();
    t = tl.push(Lane::Device, Kind::Backward, None, t, backward);
    t = tl.push(Lane::Network, Kind::Agree, None, t, c.agree_ms);
    for (j, b) in c.buckets.iter().enumerate() {
        t = tl.push(Lane::Device, Kind::Select, Some(j), t, b.select_ms);
    }
    for (j, b) in c.buckets.iter().enumerate() {
        t = tl.push(Lane::Network, Kind::Comm, Some(j), t, b.comm_ms);
    }
    t = tl.push(Lane::Network, Kind::Agree, None, t, c.agree_ms);
    tl.push(Lane::Device, Kind::Update, None, t, c.update_ms);
    Ok(tl)
}
