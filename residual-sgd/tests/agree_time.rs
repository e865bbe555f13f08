//! `StepReport::agree`: the time a step spends in its agreement rounds,
//! apart from its collectives. A rank that arrives late holds the others
//! in the entry round: that wait is theirs in `agree`, not in
//! `communicate`, in `Trainer::step` and in the pipelined `step_with`
//! alike. (Lower bounds from a sleep only: the late rank cannot enter
//! before it wakes; nothing here is a speed target.)

use backend_cpu::Cpu;
use residual_sgd::{Config, LayerSpec, Rule, StepReport, Trainer};
use sparse_coll::{Registry, ThreadCluster, Transport};
use sparse_core::Result;
use sparse_select::RadixTopK;
use std::time::Duration;

const SIZES: [usize; 3] = [400, 30, 200];
const LATE: Duration = Duration::from_millis(80);

fn trainer() -> Result<Trainer<Cpu, RadixTopK>> {
    let w0: Vec<Vec<f32>> = SIZES.iter().map(|&n| vec![0.5; n]).collect();
    Trainer::from_registry(
        Cpu,
        Config::new(0.05, 0.1, Rule::TopK)?.compress_threshold(0),
        LayerSpec::matrices(&SIZES),
        &w0,
        RadixTopK::magnitude(),
        &Registry::builtin(),
        "topk_a",
    )
}

fn grads(rank: usize) -> Vec<Vec<f32>> {
    SIZES
        .iter()
        .map(|&n| (0..n).map(|i| ((i * 7 + rank) % 13) as f32 - 6.0).collect())
        .collect()
}

/// Each rank's report of one step where rank 1 sleeps `LATE` first.
fn late_step(pipelined: bool) -> Vec<StepReport> {
    ThreadCluster::new(2)
        .run(|t| {
            let mut tr = trainer()?;
            let g = grads(t.rank());
            // Both ranks leave this round together: rank 0 then goes
            // straight into its step while rank 1 sleeps.
            sparse_coll::agree_or_fail(t, &[], Ok(()))?;
            if t.rank() == 1 {
                std::thread::sleep(LATE);
            }
            if pipelined {
                tr.step_with(t, |feed| {
                    (0..g.len())
                        .rev()
                        .try_for_each(|l| feed.push_host(l, &g[l]))
                })
            } else {
                tr.step(t, &g)
            }
        })
        .into_iter()
        .collect::<Result<_>>()
        .unwrap()
}

#[test]
fn a_late_rank_is_waited_for_in_the_agreement_rounds() {
    for pipelined in [false, true] {
        let reps = late_step(pipelined);
        let early = &reps[0];
        assert!(
            early.agree >= LATE.mul_f64(0.9),
            "pipelined {pipelined}: rank 0 waited {:?} in agreement, the late rank slept {LATE:?}",
            early.agree
        );
        // Rank 0 left the entry round when rank 1 entered it: the wait is
        // not the collectives'.
        assert!(
            early.communicate < early.agree,
            "pipelined {pipelined}: {early:?}"
        );
        for r in &reps {
            assert!(r.agree > Duration::ZERO, "pipelined {pipelined}: {r:?}");
        }
    }
}

/// A step makes `AGREEMENT_ROUNDS` agreement rounds beyond its
/// collectives, plain and pipelined, at P = 2 to 5. The pipelined step's
/// transport rounds are that many `agree_or_fail` rounds plus each
/// layer's collective called on its own with an input of the step's size
/// (TopkA's rounds follow from `P` alone), each with its entry round;
/// `Trainer::step` enters its collectives jointly
/// (`sparse_coll::allreduce_jointly`): one more round for all of them,
/// and each call one less.
#[test]
fn a_step_makes_the_agreement_rounds_it_says() {
    use residual_sgd::AGREEMENT_ROUNDS;
    use sparse_core::SparseVec;
    for p in 2..=5 {
        for pipelined in [false, true] {
            let out = ThreadCluster::new(p).run(|t| {
                let before = t.traffic().rounds;
                sparse_coll::agree_or_fail(t, &[("x", 1)], Ok(()))?;
                let round = t.traffic().rounds - before;
                let mut calls = 0;
                for &n in &SIZES {
                    let mut comm = Registry::<f32>::builtin()
                        .build("topk_a", sparse_coll::Defaults::lossless())?;
                    let v = SparseVec::new(n, vec![1, 2], vec![1.0, 2.0])?;
                    let before = t.traffic().rounds;
                    comm.allreduce(t, &v)?;
                    calls += t.traffic().rounds - before;
                }
                let mut tr = trainer()?;
                let g = grads(t.rank());
                let before = t.traffic().rounds;
                if pipelined {
                    tr.step_with(t, |feed| {
                        (0..g.len())
                            .rev()
                            .try_for_each(|l| feed.push_host(l, &g[l]))
                    })?;
                } else {
                    tr.step(t, &g)?;
                }
                Ok((t.traffic().rounds - before, round, calls))
            });
            for r in out {
                let (step, round, calls) = r.unwrap();
                let entries = if pipelined {
                    calls
                } else {
                    round + calls - SIZES.len() as u64 * round
                };
                assert_eq!(
                    step,
                    AGREEMENT_ROUNDS as u64 * round + entries,
                    "P = {p}, pipelined {pipelined}: one round {round}, the calls {calls}"
                );
            }
        }
    }
}
