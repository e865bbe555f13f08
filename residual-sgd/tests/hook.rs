//! The bucket feedback a DDP hook runs ([`residual_sgd::hook`]) against
//! [`Trainer`]: for the same gradients, density, rule and collective, the
//! mean it returns, applied as plain SGD with learning rate 1 (`w -= out`),
//! gives a trainer's weights (learning rate 1, the parameters as layers in
//! one bucket in list order) bit for bit, step after step, and the same
//! residuals; the residuals follow their parameters when the framework
//! regroups them into other buckets; a NaN fails every rank with the
//! accepted gradients absorbed; the state saved and loaded continues bit
//! for bit.

use backend_cpu::Cpu;
use rand::{Rng as _, SeedableRng as _};
use residual_sgd::hook::BucketFeedback;
use residual_sgd::{BucketBudget, Buckets, Config, FillOrder, LayerSpec, Rule, Trainer};
use sparse_coll::{Registry, ThreadCluster, Transport};
use sparse_core::testing::Rng;
use sparse_core::{Error, Result};
use sparse_select::{RadixTopK, Selector};

const SIZES: [usize; 3] = [40, 24, 16];
const DENSITY: f64 = 0.25;

fn rules() -> [Rule; 2] {
    [
        Rule::TopK,
        Rule::Rgc {
            momentum: 0.9,
            nesterov: false,
            weight_decay: 0.0,
            factor_masking: true,
        },
    ]
}

fn feedback(rule: Rule, collective: &str) -> Result<BucketFeedback<Cpu>> {
    let names: Vec<String> = (0..SIZES.len()).map(|i| format!("p{i}")).collect();
    BucketFeedback::new(
        Cpu,
        Config::new(1.0, DENSITY, rule)?.compress_threshold(0),
        &names,
        &SIZES,
        Box::new(|| Box::new(RadixTopK::magnitude()) as Box<dyn Selector<Cpu, f32> + Send>),
        Registry::builtin(),
        collective,
    )
}

/// Values in multiples of 1/8 and of every size, so that sums are exact
/// and ties are rare but present.
fn grads(rank: usize, step: u64) -> Vec<Vec<f32>> {
    let mut rng = Rng::seed_from_u64(step * 31 + rank as u64);
    SIZES
        .iter()
        .map(|&n| {
            (0..n)
                .map(|_| (rng.random_range(0..257) as f32 - 128.0) / 8.0)
                .collect()
        })
        .collect()
}

/// The hook's mean equals a trainer's step, for every rule and for a
/// lossless and three lossy collectives, over eight steps on 3 ranks.
#[test]
fn the_hooks_mean_is_the_trainers_step_bit_for_bit() {
    for rule in rules() {
        for collective in ["topk_a", "spardl", "gtopk", "ok_topk"] {
            let out = ThreadCluster::new(3).run(|t| {
                let mut hook = feedback(rule, collective)?;
                let cfg = Config::new(1.0, DENSITY, rule)?
                    .compress_threshold(0)
                    .buckets(
                        Buckets::new(1 << 30)?
                            .order(FillOrder::List)
                            .budget(BucketBudget::PerLayer),
                    )?;
                let zeros: Vec<Vec<f32>> = SIZES.iter().map(|&n| vec![0.0; n]).collect();
                let mut tr = Trainer::from_registry(
                    Cpu,
                    cfg,
                    LayerSpec::matrices(&SIZES),
                    &zeros,
                    RadixTopK::magnitude(),
                    &Registry::builtin(),
                    collective,
                )?;
                assert_eq!(tr.buckets(), vec![vec![0, 1, 2]]);
                let mut w = zeros.concat();
                let rank = t.rank();
                for step in 0..8 {
                    let g = grads(rank, step);
                    let flat = g.concat();
                    let mut mean = vec![0.0; flat.len()];
                    hook.reduce(t, &[0, 1, 2], &flat, &mut mean)?;
                    for (w, m) in w.iter_mut().zip(&mean) {
                        *w -= m;
                    }
                    tr.step(t, &g)?;
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    let ctx = format!("{rule:?} {collective} step {step} rank {rank}");
                    assert_eq!(bits(&w), bits(&tr.weights()?.concat()), "{ctx}: weights");
                    assert_eq!(hook.residuals()?, tr.residuals()?, "{ctx}: residuals");
                }
                Ok(w)
            });
            let out: Vec<Vec<f32>> = out.into_iter().map(|r| r.unwrap()).collect();
            assert!(
                out.iter().all(|w| w == &out[0]),
                "{rule:?} {collective}: ranks apart"
            );
        }
    }
}

/// Buckets regrouped (one bucket, then two in backward order, then the
/// parameters one by one): every residual stays its parameter's. The
/// lossless collective keeps each parameter's selection whole, so the
/// residuals equal those of reducing each parameter on its own.
#[test]
fn residuals_follow_their_parameters_across_buckets() {
    let out = ThreadCluster::new(2).run(|t| {
        let rank = t.rank();
        let mut regrouped = feedback(Rule::TopK, "topk_a")?;
        let mut apart = feedback(Rule::TopK, "topk_a")?;
        let layouts: [&[&[usize]]; 3] = [&[&[0, 1, 2]], &[&[2, 1], &[0]], &[&[2], &[1], &[0]]];
        for (step, layout) in layouts.iter().enumerate() {
            let g = grads(rank, step as u64);
            for bucket in layout.iter() {
                let flat: Vec<f32> = bucket.iter().flat_map(|&m| g[m].clone()).collect();
                let mut out = vec![0.0; flat.len()];
                regrouped.reduce(t, bucket, &flat, &mut out)?;
            }
            for m in 0..SIZES.len() {
                let mut out = vec![0.0; SIZES[m]];
                apart.reduce(t, &[m], &g[m], &mut out)?;
            }
            assert_eq!(regrouped.residuals()?, apart.residuals()?, "step {step}");
        }
        Ok(())
    });
    for r in out {
        r.unwrap();
    }
}

/// A NaN on one rank fails the bucket on every rank; the rank that holds it
/// keeps its residuals, the others absorb their gradients; the next bucket
/// goes through.
#[test]
fn a_nan_fails_every_rank_and_the_others_absorb() {
    let out = ThreadCluster::new(3).run(|t| {
        let mut hook = feedback(Rule::TopK, "spardl")?;
        let r = t.rank();
        let flat = grads(r, 0).concat();
        let mut out = vec![0.0; flat.len()];
        hook.reduce(t, &[0, 1, 2], &flat, &mut out)?;
        let before = hook.residuals()?.concat();
        let mut g = grads(r, 1).concat();
        if r == 1 {
            g[30] = f32::NAN;
        }
        let res = hook.reduce(t, &[0, 1, 2], &g, &mut out);
        match (r, &res) {
            (1, Err(Error::NonFinite { index: 30 })) => {
                assert_eq!(hook.residuals()?.concat(), before, "the refusing rank");
            }
            (_, Err(Error::PeerError { rank: 1, .. })) => {
                let absorbed: Vec<f32> = before.iter().zip(&g).map(|(r, g)| r + g).collect();
                assert_eq!(hook.residuals()?.concat(), absorbed, "rank {r}");
            }
            other => panic!("rank {r}: {other:?}"),
        }
        let g = grads(r, 2).concat();
        hook.reduce(t, &[0, 1, 2], &g, &mut out)?;
        Ok(out)
    });
    let out: Vec<Vec<f32>> = out.into_iter().map(|r| r.unwrap()).collect();
    assert!(out.iter().all(|o| o == &out[0]));
}

/// Saved after three steps and loaded into fresh feedback, the next steps
/// are bit for bit those of the feedback that went on (Ok-Topk keeps its
/// thresholds across calls).
#[test]
fn the_state_resumes_bit_for_bit() {
    let out = ThreadCluster::new(3).run(|t| {
        let mut a = feedback(Rule::TopK, "ok_topk")?;
        let mut out = vec![0.0; SIZES.iter().sum()];
        let r = t.rank();
        for step in 0..3 {
            let g = grads(r, step);
            a.reduce(
                t,
                &[2, 1],
                &[g[2].clone(), g[1].clone()].concat(),
                &mut out[..40],
            )?;
            a.reduce(t, &[0], &g[0], &mut out[..40])?;
        }
        let mut b = feedback(Rule::TopK, "ok_topk")?;
        b.load_state(&a.save_state()?)?;
        for step in 3..6 {
            let g = grads(r, step);
            let (mut x, mut y) = (vec![0.0; 40], vec![0.0; 40]);
            a.reduce(t, &[2, 1], &[g[2].clone(), g[1].clone()].concat(), &mut x)?;
            b.reduce(t, &[2, 1], &[g[2].clone(), g[1].clone()].concat(), &mut y)?;
            assert_eq!(x, y, "step {step}");
            a.reduce(t, &[0], &g[0], &mut x)?;
            b.reduce(t, &[0], &g[0], &mut y)?;
            assert_eq!(x, y, "step {step}");
        }
        assert_eq!(a.residuals()?, b.residuals()?);
        Ok(())
    });
    for r in out {
        r.unwrap();
    }
}
