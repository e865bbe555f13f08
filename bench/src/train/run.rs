//! Runs of `sparse-bench train` on a transport, summarised over ranks.

use super::data::Set;
use super::{Family, LayerUse, RankRun, Run, Scheme, Sparsity, TrainArgs, train_rank};
use sparse_coll::Transport;
use sparse_coll::dense::bruck_allgather;
use sparse_core::{Error, Result};

/// One run (a scheme at a density, or a dense baseline) with one seed,
/// summarised over the ranks.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// What ran.
    pub run: Run,
    /// The seed.
    pub seed: u64,
    /// Ranks.
    pub ranks: usize,
    /// Test accuracy after each epoch.
    pub test_acc: Vec<f64>,
    /// Loss on the whole training set after each epoch.
    pub train_loss: Vec<f64>,
    /// Mean bytes sent per step by the busiest rank.
    pub bytes_per_step: f64,
    /// Median milliseconds per step of forward and backward, select,
    /// communicate and apply, and of the whole step (from the forward pass
    /// to the trainer's return: these four, the agreement rounds and the
    /// checks of the results), each the largest of the ranks' medians (so
    /// they need not add up: the rank that waits longest in communication
    /// is seldom the slowest in forward and backward); then
    /// the straggler's local phases: the median over steps of the most any
    /// rank spent between two steps' communication (the previous step's
    /// apply, this step's forward and backward, select and other local
    /// work), which a synchronous step waits for at least; then the ranks' CPU time per step: the
    /// median over steps of the sum over ranks of each rank's process CPU
    /// time in that step (NaN where the platform has no such clock), which
    /// ranks sharing C cores cannot run in less than its C-th part of; then
    /// the agreement rounds ([`residual_sgd::StepReport::agree`]), the
    /// largest of the ranks' medians: the rank that waits longest in them.
    pub phase_ms: [f64; 8],
    /// Which layers went dense.
    pub dense_layers: Vec<bool>,
    /// How each layer went (rank 0's densities).
    pub layers: Vec<LayerUse>,
    /// Zen's statistics per epoch and layer (on rank 0; empty elsewhere).
    pub sparsity: Vec<Vec<Sparsity>>,
    /// Whether every rank held bitwise-identical weights after every epoch.
    pub identical: bool,
    /// Steps taken.
    pub steps: usize,
    /// A digest of the final weights (FNV-1a of their bits).
    pub weights_digest: u64,
    /// The step it resumed from and the ranks that saved it (`--resume`).
    pub resumed: Option<(u64, usize)>,
    /// Steps lost between that checkpoint and the failure.
    pub lost_steps: u64,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Per step, a rank's local time between the previous step's
/// communication and this step's: the previous step's apply plus this
/// step's forward and backward, select and other local work (its time
/// outside every phase and agreement round: the host gradients' checks
/// and upload, the checks and digest of the results; none where the
/// phases overlap, as a pipelined step's selection and collectives do)
/// (`phases` as [`RankRun::phases`]). The run's figure is the median
/// over steps of the largest over ranks: a synchronous step waits for
/// the slowest rank at each of its rounds, so where different ranks are
/// slow between different rounds the step waits longer than this.
fn local_before_comm(phases: &[[f64; 6]]) -> Vec<f64> {
    let mut before = 0.0;
    phases
        .iter()
        .map(|p| {
            let other = p[5] - p[..5].iter().sum::<f64>();
            let local = before + p[0] + p[1] + other.max(0.0);
            before = p[3];
            local
        })
        .collect()
}

/// Trains `run` on this rank and summarises over all ranks of `t` (every
/// rank gets the same summary).
///
/// # Errors
/// As [`train_rank`]; transport errors.
pub fn run_on(
    t: &mut dyn Transport,
    run: &Run,
    a: &TrainArgs,
    train: &Set,
    test: &Set,
    on_step: &(dyn Fn() + Sync),
) -> Result<(Summary, RankRun)> {
    let mine = train_rank(t, run, a, train, test, on_step)?;
    let steps = mine.bytes_sent.len();
    let mean_bytes = mine.bytes_sent.iter().sum::<u64>() as f64 / steps.max(1) as f64;
    let col = |i: usize| median(mine.phases.iter().map(|p| p[i]).collect());
    let total = col(5);
    // What every rank needs of the others: its figures, its weight hashes,
    // its local time before each step's communication, and rank 0's
    // accuracy and loss.
    let mut local: Vec<f64> = vec![mean_bytes, col(0), col(1), col(2), col(3), total, col(4)];
    let figures = local.len();
    let mut bytes: Vec<u8> = local.iter().flat_map(|x| x.to_le_bytes()).collect();
    bytes.extend(mine.weight_hash.iter().flat_map(|h| h.to_le_bytes()));
    let before_comm = local_before_comm(&mine.phases);
    bytes.extend((steps as u64).to_le_bytes());
    bytes.extend(before_comm.iter().flat_map(|x| x.to_le_bytes()));
    bytes.extend(mine.cpu_ms.iter().flat_map(|x| x.to_le_bytes()));
    for x in mine.test_acc.iter().chain(&mine.train_loss) {
        bytes.extend(x.to_le_bytes());
    }
    let all = bruck_allgather(t, &bytes)?;
    let word = |b: &[u8], i: usize| -> [u8; 8] { b[8 * i..8 * i + 8].try_into().expect("8 bytes") };
    let epochs = mine.weight_hash.len();
    let mut identical = true;
    let mut straggler = before_comm.clone();
    let mut cpu = vec![0.0; steps];
    for b in &all {
        if b.len() < 8 * (figures + epochs + 1 + 2 * steps) {
            return Err(Error::invalid("train", "a rank sent a short summary"));
        }
        if u64::from_le_bytes(word(b, figures + epochs)) != steps as u64 {
            return Err(Error::invalid(
                "train",
                "the ranks took different numbers of steps",
            ));
        }
        for (i, m) in local.iter_mut().enumerate() {
            *m = m.max(f64::from_le_bytes(word(b, i)));
        }
        let hashes: Vec<u64> = (0..epochs)
            .map(|e| u64::from_le_bytes(word(b, figures + e)))
            .collect();
        identical &= hashes == mine.weight_hash;
        for (s, m) in straggler.iter_mut().enumerate() {
            *m = m.max(f64::from_le_bytes(word(b, figures + epochs + 1 + s)));
        }
        for (s, c) in cpu.iter_mut().enumerate() {
            *c += f64::from_le_bytes(word(b, figures + epochs + 1 + steps + s));
        }
    }
    let root = &all[0];
    let tail: Vec<f64> = (figures + epochs + 1 + 2 * steps..root.len() / 8)
        .map(|i| f64::from_le_bytes(word(root, i)))
        .collect();
    let (test_acc, train_loss) = tail.split_at(tail.len() / 2);
    let summary = Summary {
        run: run.clone(),
        seed: a.seed,
        ranks: t.size(),
        test_acc: test_acc.to_vec(),
        train_loss: train_loss.to_vec(),
        bytes_per_step: local[0],
        phase_ms: [
            local[1],
            local[2],
            local[3],
            local[4],
            local[5],
            median(straggler),
            median(cpu),
            local[6],
        ],
        dense_layers: mine.dense_layers.clone(),
        layers: mine.layers.clone(),
        sparsity: mine.sparsity.clone(),
        weights_digest: super::weight_hash(&mine.weights),
        resumed: mine.resumed,
        lost_steps: mine.lost_steps,
        identical,
        steps,
    };
    Ok((summary, mine))
}

/// The runs for `schemes` at `densities`: the dense counterparts first
/// (plain SGD if a top-k SGD scheme is there, momentum SGD if any other),
/// then every scheme at every density.
pub fn plan(schemes: &[Scheme], densities: &[f64]) -> Vec<Run> {
    let mut runs = Vec::new();
    if schemes.iter().any(|s| s.family == Family::TopK) {
        runs.push(Run::Dense { momentum: false });
    }
    if schemes.iter().any(|s| s.family != Family::TopK) {
        runs.push(Run::Dense { momentum: true });
    }
    for s in schemes {
        for &density in densities {
            runs.push(Run::Sparse {
                scheme: s.clone(),
                density,
            });
        }
    }
    runs
}

/// Calls `one(run, args)` for every seed and every run, the seed set in
/// the arguments.
fn each<T>(
    runs: &[Run],
    a: &TrainArgs,
    seeds: &[u64],
    mut one: impl FnMut(&Run, &TrainArgs) -> Result<T>,
) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for &seed in seeds {
        for run in runs {
            out.push(one(run, &TrainArgs { seed, ..a.clone() })?);
        }
    }
    Ok(out)
}

/// Runs every run of `runs` for every seed on `ranks` threads.
///
/// # Errors
/// The first failing run's error.
pub fn run_threads(
    ranks: usize,
    runs: &[Run],
    a: &TrainArgs,
    seeds: &[u64],
    train: &Set,
    test: &Set,
    on_step: &(dyn Fn() + Sync),
) -> Result<Vec<Summary>> {
    super::durable::check_resume(runs, a, seeds)?;
    each(runs, a, seeds, |run, a| {
        let res = sparse_coll::ThreadCluster::new(ranks)
            .timeout(std::time::Duration::from_secs(3600))
            .run(|t| run_on(t, run, a, train, test, on_step).map(|(s, _)| s));
        // A rank's injected failure (`--fail-rank`) rather than its
        // peers' reports of it.
        if let Some(e) = res.iter().find_map(|r| {
            r.as_ref()
                .err()
                .filter(|e| matches!(e, Error::Injected { .. }))
        }) {
            return Err(e.clone());
        }
        let mut res = res.into_iter().collect::<Result<Vec<_>>>()?;
        Ok(res.swap_remove(0))
    })
}

/// As [`run_threads`] with this process as one rank of `t` (MPI): every
/// rank returns the same summaries.
///
/// # Errors
/// As [`run_threads`].
pub fn run_transport(
    t: &mut dyn Transport,
    runs: &[Run],
    a: &TrainArgs,
    seeds: &[u64],
    train: &Set,
    test: &Set,
    on_step: &(dyn Fn() + Sync),
) -> Result<Vec<Summary>> {
    let checked = super::durable::check_resume(runs, a, seeds);
    sparse_coll::agree_or_fail(t, &[("resume", 1)], checked)?;
    each(runs, a, seeds, |run, a| {
        Ok(run_on(t, run, a, train, test, on_step)?.0)
    })
}

#[cfg(test)]
mod tests {
    use super::local_before_comm;

    #[test]
    fn the_local_time_before_a_steps_communication() {
        // grad, select, comm, apply, agree, whole step.
        let phases = [
            [1.0, 0.5, 4.0, 0.25, 2.0, 8.0],
            [2.0, 0.5, 4.0, 0.5, 1.0, 8.5],
            [1.0, 1.0, 3.0, 0.25, 1.0, 6.0],
        ];
        // Step 0: grad, select and other work (8 - 7.75 = 0.25). Step 1:
        // step 0's apply (0.25), grad, select and other work (8.5 - 8 =
        // 0.5). Step 2: step 1's apply (0.5), grad and select (2), no
        // other work (its phases add to more than its whole: 6.25 > 6).
        assert_eq!(local_before_comm(&phases), [1.75, 3.25, 2.5]);
        // As a pipelined step's selection overlapping its collectives.
        let skewed = [
            [1.0, 0.0, 1.0, 0.5, 0.0, 2.0],
            [1.0, 0.0, 1.0, 0.0, 0.0, 2.0],
        ];
        assert_eq!(local_before_comm(&skewed), [1.0, 1.5]);
    }
}
