//! The simulated communication of `sparse-bench step`: a call's time on
//! `P` simulated ranks at a layer's dimension, simulated at most at
//! `--max-dim` and scaled (the [module](super) doc says how), and a run's
//! calls summed ([`comm_of`]).

use super::{GRADIENT_SCALE, RunPlan};
use sparse_coll::sim::{self, Network, Route};
use sparse_coll::{Defaults, Reduced, Registry, SimCluster, Transport, dense};
use sparse_core::generate::{GradientSpec, ValueDist};
use sparse_core::{Error, Result, SparseVec};
use std::collections::HashMap;

/// What a simulated call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Call {
    /// A sparse allreduce by registry name, each rank's input of the
    /// step's density: the call with its own entry round, as the
    /// pipelined `Trainer::step_with` makes each bucket's.
    Sparse(&'static str),
    /// The same call's body alone, timed from the end of its entry round:
    /// a call of `Trainer::step`, which enters all of a step's calls in
    /// one round ([`Call::Joint`]).
    SparseBody(&'static str),
    /// The one entry round of all of `Trainer::step`'s collective calls
    /// ([`sparse_coll::allreduce_jointly`]: an agreement on the number of
    /// calls, the number admitted and one word for their fields, a Bruck
    /// allgather of 32 bytes a rank); its dimension is not read.
    /// The dense allreduce of the layers kept dense (and of the dense
    /// baseline): [`SimSettings::dense`]'s algorithm.
    Dense,
    /// One of the trainer's agreement rounds
    /// ([`sparse_coll::agree_or_fail`] with one field: a Bruck allgather
    /// of 16 bytes a rank, each framed with its 4-byte length, `ceil(lg
    /// P)` rounds); its dimension is not
    /// read. A step makes [`AGREE_ROUNDS`] of them, `Trainer::step` and
    /// the pipelined `Trainer::step_with` alike.
    Agree,
    /// See [`Call::SparseBody`].
    Joint,
}

impl Call {
    /// The call `Trainer::step` makes for this one: a sparse allreduce's
    /// body alone (its entry is the step's [`Call::Joint`] round); any
    /// other call as it is.
    pub fn in_joint_entry(self) -> Call {
        match self {
            Call::Sparse(spec) => Call::SparseBody(spec),
            other => other,
        }
    }
}

/// The agreement rounds of a step (`Trainer::step` and the pipelined
/// `Trainer::step_with`): the entry round and the commit round
/// ([`residual_sgd::AGREEMENT_ROUNDS`]). Until `Trainer::step` lost its
/// round after selection (a failure in a rank's local work now travels
/// to the commit round), it made three.
pub const AGREE_ROUNDS: usize = residual_sgd::AGREEMENT_ROUNDS;

/// The dense allreduce a simulated step assumes (`sparse-bench step
/// --dense`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, clap::ValueEnum)]
pub enum DenseAlgo {
    /// The ring ([`dense::ring_allreduce`]): `2 (P - 1)` rounds of `n / P`
    /// elements, at any `P`.
    #[default]
    Ring,
    /// MPICH's `MPI_Allreduce` at these sizes
    /// ([`dense::rabenseifner_allreduce`]): recursive halving and doubling
    /// among the largest power of two `p' <= P` of ranks, the other `P - p'`
    /// first folding their whole vector into a partner and getting the
    /// result back (at `P = 3`: `3 n` elements a rank against the ring's
    /// `4 n / 3`; the partners' first reduce-scatter messages, sent at
    /// once, share the folded rank's link with the fold and add up to
    /// `(p' - 1) / p'` of the whole vector's transfer time more). What the
    /// trainer's dense layers cost under `--transport mpi`. MPICH's switch
    /// to recursive doubling below 2 KiB is not modelled: a small dense
    /// bucket is simulated as Rabenseifner's too.
    Mpich,
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
    /// The dense allreduce ([`Call::Dense`]).
    pub dense: DenseAlgo,
}

/// `call` on `s.ranks` simulated ranks for a layer of `n` parameters over
/// `net`, simulated at `min(n, s.max_dim)` and scaled (see the
/// [module](super) doc). Sparse inputs are one-signed (absolute values)
/// for a collective that sends same-sign means (`values=ssmean`), as
/// RedSync's quantized selection makes them.
///
/// # Errors
/// [`Error::InvalidParameter`] for `n == 0` or `s.max_dim < 2`; the
/// generator's, the collective's and the replay's errors.
pub fn comm_time(net: &dyn Network, call: Call, n: usize, s: &SimSettings) -> Result<CommTime> {
    scaled(n, s.max_dim, &mut |dim| simulate(net, call, dim, s))
}

/// A call's time at `n` from `sim` (a call's time and bandwidth part at a
/// dimension), simulated at `min(n, max_dim)` and scaled as
/// [`comm_time`] says.
fn scaled(
    n: usize,
    max_dim: usize,
    sim: &mut dyn FnMut(usize) -> Result<(f64, f64)>,
) -> Result<CommTime> {
    if n == 0 || max_dim < 2 {
        return Err(Error::invalid(
            "dimension",
            "layers must have a parameter and --max-dim must be at least 2",
        ));
    }
    let sim_dim = n.min(max_dim);
    let (at_sim_dim, bandwidth) = sim(sim_dim)?;
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
    let (_, half) = sim(sim_dim / 2)?;
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

/// [`comm_time`] over one network and one rank count, each simulation
/// (a call at a simulated dimension) run once: the layers and buckets
/// above `--max-dim` share the simulations at `max_dim` and `max_dim / 2`.
/// The times are those of [`comm_time`] (the simulation is deterministic).
pub struct CommCache<'a> {
    net: &'a dyn Network,
    settings: SimSettings,
    sims: HashMap<(Call, usize), (f64, f64)>,
}

impl<'a> CommCache<'a> {
    /// No simulation run yet.
    pub fn new(net: &'a dyn Network, settings: SimSettings) -> Self {
        Self {
            net,
            settings,
            sims: HashMap::new(),
        }
    }
    /// The settings of the simulated calls.
    pub fn settings(&self) -> &SimSettings {
        &self.settings
    }
    /// `call` at `n` parameters, as [`comm_time`].
    ///
    /// # Errors
    /// As [`comm_time`].
    pub fn time(&mut self, call: Call, n: usize) -> Result<CommTime> {
        let (net, s, sims) = (self.net, self.settings, &mut self.sims);
        scaled(n, s.max_dim, &mut |dim| {
            if let Some(r) = sims.get(&(call, dim)) {
                return Ok(*r);
            }
            let r = simulate(net, call, dim, &s)?;
            sims.insert((call, dim), r);
            Ok(r)
        })
    }
}

/// `call` at dimension `dim` on `s.ranks` simulated ranks: its time over
/// `net` and over `net` with every latency 0 (its bandwidth part),
/// seconds, the slowest rank's.
fn simulate(net: &dyn Network, call: Call, dim: usize, s: &SimSettings) -> Result<(f64, f64)> {
    let cluster = SimCluster::new(s.ranks)?;
    let run = match call {
        Call::Agree => cluster.run(|t| {
            t.mark();
            sparse_coll::agree_or_fail(t, &[("step", 1)], Ok(()))?;
            t.mark();
            Ok(())
        })?,
        Call::Joint => cluster.run(|t| {
            t.mark();
            let words = [("calls", 1), ("calls admitted", 1), ("calls' fields", 1)];
            sparse_coll::agree_or_fail(t, &words, Ok(()))?;
            t.mark();
            Ok(())
        })?,
        Call::Dense => {
            let x = vec![1.0f32; dim];
            cluster.run(|t| {
                t.mark();
                match s.dense {
                    DenseAlgo::Ring => dense::ring_allreduce(t, &x)?,
                    DenseAlgo::Mpich => dense::rabenseifner_allreduce(t, &x)?,
                };
                t.mark();
                Ok(())
            })?
        }
        Call::Sparse(spec) | Call::SparseBody(spec) => {
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
                if let Call::SparseBody(_) = call {
                    // The entry round unmarked: each rank's body from when
                    // it leaves the round.
                    let entered = a.enter(t, mine)?;
                    t.mark();
                    a.body(t, mine, entered, &mut Reduced::default())?;
                } else {
                    t.mark();
                    a.allreduce(t, mine)?;
                }
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

/// The simulated communication of `plan`'s step (`Trainer::step`), ms:
/// its compressed layers' calls entered jointly (their bodies and one
/// [`Call::Joint`] round, in the sparse part) and its dense layers' fused
/// allreduce (the trainer's agreement rounds are apart: [`Call::Agree`]),
/// with the calls scaled and the largest scale factor. `time` gives a
/// call's time at a dimension.
pub(super) fn comm_of(
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
    let mut calls = 0;
    for l in plan.layers.iter().filter(|l| l.kept_dense.is_none()) {
        sparse += count(&time(Call::SparseBody(l.collective), l.spec.len)?);
        calls += 1;
    }
    if calls > 0 {
        sparse += count(&time(Call::Joint, 1)?);
    }
    let dense_len = plan.dense_len();
    let dense = if dense_len > 0 {
        count(&time(Call::Dense, dense_len)?)
    } else {
        0.0
    };
    Ok((sparse, dense, scaled, max_scale))
}
