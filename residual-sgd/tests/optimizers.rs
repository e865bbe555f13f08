//! The optimizers against independent oracles: plain and momentum SGD
//! computed on the host, hand-computed Nesterov, exact conservation on
//! dyadic inputs, identical weights on every rank, errors on every rank.

use backend_cpu::Cpu;
use rand::{Rng as _, SeedableRng as _};
use residual_sgd::{Config, LayerSpec, Rule, Trainer, dgc_density};
use sparse_coll::{Defaults, Registry, SparseAllreduce, ThreadCluster, Transport};
use sparse_core::testing::Rng;
use sparse_core::{Error, Result};
use sparse_select::RadixTopK;

fn layers(sizes: &[usize]) -> Vec<LayerSpec> {
    LayerSpec::matrices(sizes)
}

/// Dyadic values (multiples of 1/8 up to 8): every sum below is exact.
fn dyadic(n: usize, rng: &mut Rng) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.random_range(0..129) as f32 - 64.0) / 8.0)
        .collect()
}

fn comm(spec: &str) -> impl FnMut(&LayerSpec) -> Result<Box<dyn SparseAllreduce<f32>>> + '_ {
    // Lossy collectives keep every entry the selector sent (density 1):
    // the sums below are checked exactly.
    move |_| Registry::builtin().build(spec, Defaults::density(1.0)?)
}

fn trainer(cfg: Config, sizes: &[usize], w: &[Vec<f32>], spec: &str) -> Trainer<Cpu, RadixTopK> {
    Trainer::new(
        Cpu,
        cfg.compress_threshold(0),
        layers(sizes),
        w,
        RadixTopK::magnitude(),
        comm(spec),
    )
    .unwrap()
}

/// The exact top-k over TopkA (at density 1) at `cfg`, on `layers` from
/// the weights `w`.
fn topk_a_trainer(
    cfg: Config,
    layers: Vec<LayerSpec>,
    w: &[Vec<f32>],
) -> Result<Trainer<Cpu, RadixTopK>> {
    Trainer::new(Cpu, cfg, layers, w, RadixTopK::magnitude(), comm("topk_a"))
}

/// Every layer dense ([`Config::dense`]) or every layer compressed at
/// density 1.
fn dense_or_compressed(dense: bool, lr: f32, rule: Rule) -> Config {
    if dense {
        Config::dense(lr, rule).unwrap()
    } else {
        Config::new(lr, 1.0, rule).unwrap().compress_threshold(0)
    }
}

fn rgc(momentum: f32, nesterov: bool, weight_decay: f32, factor_masking: bool) -> Rule {
    Rule::Rgc {
        momentum,
        nesterov,
        weight_decay,
        factor_masking,
    }
}

/// Density 1, masking off, P = 1: RGC is momentum SGD with weight decay
/// (`G = g + wd w; b = m b + G; w -= lr b`), bit for bit; with masking on it
/// is plain SGD (`w -= lr G`).
#[test]
fn rgc_at_density_one_is_momentum_sgd_bit_for_bit() {
    let (lr, m, wd) = (0.05f32, 0.9f32, 0.01f32);
    let mut rng = Rng::seed_from_u64(1);
    let w0: Vec<f32> = (0..300).map(|_| rng.random::<f64>() as f32 - 0.5).collect();
    let grads: Vec<Vec<f32>> = (0..20)
        .map(|_| (0..300).map(|_| rng.random::<f64>() as f32 - 0.5).collect())
        .collect();
    for masking in [false, true] {
        let cfg = Config::new(lr, 1.0, rgc(m, false, wd, masking)).unwrap();
        let out = ThreadCluster::new(1).run(|t| {
            let mut tr = trainer(cfg, &[300], std::slice::from_ref(&w0), "topk_a");
            for g in &grads {
                tr.step(t, std::slice::from_ref(g))?;
            }
            tr.weights()
        });
        let got = out.into_iter().next().unwrap().unwrap().remove(0);
        let (mut w, mut b) = (w0.clone(), vec![0.0f32; 300]);
        for g in &grads {
            for i in 0..300 {
                let big_g = wd * w[i] + g[i];
                if masking {
                    w[i] -= lr * big_g;
                } else {
                    b[i] = m * b[i] + big_g;
                    w[i] -= lr * b[i];
                }
            }
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&w), "masking {masking}");
    }
}

/// Nesterov in the form `U = m (U + G); V = V + U + G` is PyTorch's
/// `b = m b + G; w -= lr (G + m b)`: by hand for two steps, and against the
/// host form for twenty, bit for bit; small layers (dense path) too.
#[test]
fn nesterov_equals_pytorch_by_hand_and_on_the_dense_path() {
    // By hand: lr = 1/2, m = 1/2, one weight 1, gradients 1 then 2.
    // Step 1: b = 1, update G + m b = 1.5, w = 1 - 0.75 = 0.25.
    // Step 2: b = 0.5 + 2 = 2.5, update 2 + 1.25 = 3.25, w = 0.25 - 1.625.
    for dense in [false, true] {
        let cfg = dense_or_compressed(dense, 0.5, rgc(0.5, true, 0.0, false));
        let out = ThreadCluster::new(1).run(|t| {
            let mut tr = topk_a_trainer(cfg, layers(&[1]), &[vec![1.0]])?;
            assert_eq!(tr.compressed(), vec![!dense]);
            let mut ws = Vec::new();
            for g in [1.0f32, 2.0] {
                tr.step(t, &[vec![g]])?;
                ws.push(tr.weights()?[0][0]);
            }
            Ok(ws)
        });
        assert_eq!(
            out[0].as_ref().unwrap(),
            &vec![0.25, 0.25 - 1.625],
            "dense {dense}"
        );
    }
    let (lr, m) = (0.1f32, 0.9f32);
    let mut rng = Rng::seed_from_u64(2);
    let grads: Vec<Vec<f32>> = (0..20)
        .map(|_| (0..64).map(|_| rng.random::<f64>() as f32 - 0.5).collect())
        .collect();
    for dense in [false, true] {
        let cfg = dense_or_compressed(dense, lr, rgc(m, true, 0.0, false));
        let out = ThreadCluster::new(1).run(|t| {
            let mut tr = topk_a_trainer(cfg, layers(&[64]), &[vec![0.0; 64]])?;
            for g in &grads {
                tr.step(t, std::slice::from_ref(g))?;
            }
            tr.weights()
        });
        let got = out.into_iter().next().unwrap().unwrap().remove(0);
        let (mut w, mut b) = (vec![0.0f32; 64], vec![0.0f32; 64]);
        for g in &grads {
            for i in 0..64 {
                b[i] = m * b[i] + g[i];
                w[i] -= lr * (g[i] + m * b[i]);
            }
        }
        for i in 0..64 {
            assert_eq!(
                got[i].to_bits(),
                w[i].to_bits(),
                "dense {dense} at {i}: {} vs {}",
                got[i],
                w[i]
            );
        }
    }
}

/// Top-k SGD on dyadic gradients over 1,000 random steps: on every rank
/// `residual + sum of sent = sum of lr g` exactly; the sent set has exactly
/// k entries, all cleared from the residual; with a lossless collective the
/// result plus every residual is the sum of all accumulated inputs, and
/// with SparDL (lossy) the same holds through global residual collection.
/// Every rank holds the same weights after every step.
#[test]
fn topk_sgd_conserves_every_update_exactly() {
    let lr = 0.5f32;
    let n = 97;
    for (p, spec) in [
        (1usize, "topk_a"),
        (3, "topk_a"),
        (4, "spardl"),
        (5, "spardl"),
    ] {
        let density = 0.1;
        let k = sparse_select::k_for_density(n, density).unwrap();
        let steps = if p == 1 { 1000 } else { 250 };
        let grads: Vec<Vec<Vec<f32>>> = (0..p)
            .map(|r| {
                let mut rng = Rng::seed_from_u64(7 + r as u64);
                (0..steps).map(|_| dyadic(n, &mut rng)).collect()
            })
            .collect();
        let out = ThreadCluster::new(p).run(|t| {
            let r = t.rank();
            let cfg = Config::new(lr, density, Rule::TopK)?;
            let mut tr = trainer(cfg, &[n], &[vec![0.0; n]], spec);
            let mut sent_sum = vec![0.0f64; n];
            let mut weights = Vec::new();
            for g in &grads[r] {
                let rep = tr.step(t, std::slice::from_ref(g))?;
                let sent = &rep.sent[0];
                assert_eq!(sent.nnz(), k, "exactly k sent");
                let resid = tr.residuals()?.remove(0);
                for (i, x) in sent.iter() {
                    sent_sum[i as usize] += f64::from(x);
                    if !rep.dropped[0].indices().contains(&i) {
                        assert_eq!(resid[i as usize], 0.0, "sent entry {i} left the residual");
                    }
                }
                for (i, x) in rep.dropped[0].iter() {
                    sent_sum[i as usize] -= f64::from(x);
                }
                weights.push(tr.weights()?.remove(0));
            }
            Ok((tr.residuals()?.remove(0), sent_sum, weights))
        });
        let out: Vec<_> = out.into_iter().map(|o| o.unwrap()).collect();
        let mut total_resid = vec![0.0f64; n];
        for (r, (resid, sent, _)) in out.iter().enumerate() {
            for i in 0..n {
                let acc: f64 = grads[r].iter().map(|g| f64::from(lr * g[i])).sum();
                assert_eq!(f64::from(resid[i]) + sent[i], acc, "P={p} rank {r} at {i}");
                total_resid[i] += f64::from(resid[i]);
            }
        }
        // The weights moved by exactly the reduced results: w = -(sum of
        // results) / P, and results + residuals = all accumulated inputs.
        let w = &out[0].2.last().unwrap();
        for i in 0..n {
            let all: f64 = (0..p)
                .map(|r| grads[r].iter().map(|g| f64::from(lr * g[i])).sum::<f64>())
                .sum();
            let applied = -f64::from(w[i]) * p as f64;
            assert!(
                approx::relative_eq!(
                    applied + total_resid[i],
                    all,
                    epsilon = 1e-3,
                    max_relative = 1e-3
                ),
                "P={p} {spec} at {i}: {applied} + {} vs {all}",
                total_resid[i]
            );
        }
        for (r, o) in out.iter().enumerate() {
            assert_eq!(
                o.2, out[0].2,
                "P={p} rank {r}: identical weights after every step"
            );
        }
    }
}

/// RGC with a lossy collective on P = 1..=9 thread ranks: every rank holds
/// bitwise identical weights after every step.
#[test]
fn every_rank_holds_the_same_weights() {
    for p in 1..=9usize {
        let out = ThreadCluster::new(p).run(|t| {
            let cfg = Config::new(0.1, 0.05, rgc(0.9, p % 2 == 0, 1e-4, true))?;
            let w0 = vec![vec![0.25f32; 400], vec![0.5f32; 30]];
            let mut tr = Trainer::new(
                Cpu,
                cfg.compress_threshold(512),
                layers(&[400, 30]),
                &w0,
                RadixTopK::magnitude(),
                comm("spardl"),
            )?;
            assert_eq!(tr.compressed(), vec![true, false]);
            let mut rng = Rng::seed_from_u64(100 + t.rank() as u64);
            let mut all = Vec::new();
            for _ in 0..30 {
                let g = vec![dyadic(400, &mut rng), dyadic(30, &mut rng)];
                let rep = tr.step(t, &g)?;
                let compressed: Vec<bool> = rep.layers.iter().map(|l| l.compressed).collect();
                assert_eq!(compressed, vec![true, false]);
                assert_eq!(rep.layers[1].sent, 30);
                assert_eq!(rep.layers[0].sent, rep.sent[0].nnz());
                all.push(tr.weights()?);
            }
            Ok(all)
        });
        let out: Vec<_> = out.into_iter().map(|o| o.unwrap()).collect();
        for (r, o) in out.iter().enumerate() {
            assert_eq!(o, &out[0], "P={p} rank {r}");
        }
    }
}

/// NaN or infinity in one rank's gradient, or layers that differ across
/// ranks: an error on every rank, no weight moved, the refused gradient in
/// no residual and the others' absorbed (`r + lr g`, a failed step's rule).
#[test]
fn bad_inputs_are_errors_on_every_rank() {
    for p in [1usize, 2, 3, 5] {
        let out = ThreadCluster::new(p).run(|t| {
            let cfg = Config::new(0.1, 0.1, Rule::TopK)?;
            let mut tr = trainer(cfg, &[50], &[vec![1.0; 50]], "topk_a");
            let mut g = vec![vec![0.5f32; 50]];
            tr.step(t, &g)?;
            let before = (tr.weights()?, tr.residuals()?);
            if t.rank() == p - 1 {
                g[0][7] = f32::NAN;
            }
            let res = tr.step(t, &g);
            assert!(res.is_err(), "rank {}: {res:?}", t.rank());
            let absorbed: Vec<Vec<f32>> = if t.rank() == p - 1 {
                before.1.clone()
            } else {
                vec![
                    before.1[0]
                        .iter()
                        .zip(&g[0])
                        .map(|(r, g)| r + 0.1 * g)
                        .collect(),
                ]
            };
            assert_eq!(tr.weights()?, before.0, "no weight moved");
            assert_eq!(tr.residuals()?, absorbed, "rank {}'s residual", t.rank());
            if t.rank() == p - 1 {
                assert!(matches!(res, Err(Error::NonFinite { index: 7 })));
                g[0][7] = f32::INFINITY;
            } else {
                assert!(matches!(res, Err(Error::PeerError { .. })), "{res:?}");
            }
            assert!(tr.step(t, &g).is_err());
            // Layers that differ across ranks.
            let size = if t.rank() == 0 { 50 } else { 51 };
            let mut other = trainer(cfg, &[size], &[vec![0.0; size]], "topk_a");
            let res = other.step(t, &[vec![0.0; size]]);
            if p > 1 {
                assert!(matches!(res, Err(Error::Disagreement { .. })), "{res:?}");
            }
            Ok(())
        });
        for r in out {
            r.unwrap();
        }
    }
    assert!(Config::new(f32::NAN, 0.1, Rule::TopK).is_err());
    assert!(Config::new(0.1, 0.0, Rule::TopK).is_err());
    assert!(Config::new(0.1, 1.5, Rule::TopK).is_err());
    assert!(Config::new(0.1, 0.1, rgc(1.0, false, 0.0, false)).is_err());
    assert!(
        Config::new(0.1, 0.1, Rule::TopK)
            .unwrap()
            .clip(0.0)
            .is_err()
    );
}

/// DGC's warm-up: D = 0.001, W = 4 gives 25%, 6.3%, 1.6%, 0.4%, then 0.1%;
/// clipping bounds each rank's gradient norm to C / sqrt(P).
#[test]
fn dgc_warm_up_and_clipping() {
    let want = [0.25, 0.0630, 0.0158, 0.00398, 0.001, 0.001];
    for (e, &w) in want.iter().enumerate() {
        let d = dgc_density(e, 0.001, 4);
        assert!(
            approx::relative_eq!(d, w, max_relative = 0.01),
            "epoch {e}: {d}"
        );
    }
    // One step of plain SGD at density 1 moves w by lr times the clipped
    // gradient: a norm of 10 clipped to 1 / sqrt(4) = 0.5.
    let out = ThreadCluster::new(4).run(|t| {
        let cfg = Config::new(1.0, 1.0, Rule::TopK)?.clip(1.0)?;
        let mut tr = trainer(cfg, &[4], &[vec![0.0; 4]], "topk_a");
        tr.step(t, &[vec![10.0, 0.0, 0.0, 0.0]])?;
        tr.weights()
    });
    for r in out {
        let w = r.unwrap().remove(0);
        approx::assert_abs_diff_eq!(w[0], -0.5, epsilon = 1e-6);
    }
}

/// RedSync's quantized mode: each compressed layer but the output layer
/// sends one value per step, alternating the largest values (top-k) and
/// the smallest (low-k); the residual keeps exactly what the mean missed,
/// so `residual + sum of sent = sum of G` on dyadic inputs; the output
/// layer sends its exact top-k.
#[test]
fn quantized_mode_sends_alternating_same_sign_means() {
    let n = 200;
    for p in [1usize, 3] {
        let out = ThreadCluster::new(p).run(|t| {
            let cfg = Config::new(0.5, 0.05, rgc(0.0, false, 0.0, false))?.quantized()?;
            let mut tr = trainer(cfg, &[n, n], &[vec![0.0; n], vec![0.0; n]], "topk_a");
            let mut rng = Rng::seed_from_u64(50 + t.rank() as u64);
            let mut acc = vec![0.0f64; n];
            let mut sent_sum = vec![0.0f64; n];
            for step in 0..40 {
                let g = vec![dyadic(n, &mut rng), dyadic(n, &mut rng)];
                for i in 0..n {
                    acc[i] += f64::from(g[0][i]);
                }
                let rep = tr.step(t, &g)?;
                let s = &rep.sent[0];
                assert!(s.nnz() > 0, "step {step}");
                let want_positive = step % 2 == 0;
                for &x in s.values() {
                    assert_eq!(x, s.values()[0], "step {step}: one mean");
                    assert_eq!(x > 0.0, want_positive, "step {step}: top-k then low-k");
                }
                for (i, x) in s.iter() {
                    sent_sum[i as usize] += f64::from(x);
                }
                // The output layer is not quantized: its exact top-k.
                assert_eq!(rep.sent[1].nnz(), sparse_select::k_for_density(n, 0.05)?);
            }
            let resid = tr.residuals()?.remove(0);
            for i in 0..n {
                assert_eq!(f64::from(resid[i]) + sent_sum[i], acc[i], "at {i}");
            }
            Ok(())
        });
        for r in out {
            r.unwrap();
        }
    }
    assert!(
        Config::new(0.1, 0.1, Rule::TopK)
            .unwrap()
            .quantized()
            .is_err()
    );
}

/// SparCML's `Q`: with feedback, one step's residual plus what was sent is
/// the accumulator bit for bit, and the sent values are QSGD levels (at
/// most 4 bits: 15 distinct magnitudes per bucket); without feedback the
/// quantization error is gone from the residual.
#[test]
fn topk_sgd_with_qsgd() {
    let n = 500;
    for feedback in [true, false] {
        let out = ThreadCluster::new(2).run(|t| {
            let cfg = Config::new(1.0, 0.2, Rule::TopK)?.qsgd(4, 64, feedback)?;
            let mut tr = trainer(cfg, &[n], &[vec![0.0; n]], "topk_a");
            let mut rng = Rng::seed_from_u64(9 + t.rank() as u64);
            let g: Vec<f32> = (0..n).map(|_| rng.random::<f64>() as f32 - 0.5).collect();
            let rep = tr.step(t, std::slice::from_ref(&g))?;
            let resid = tr.residuals()?.remove(0);
            let sent = &rep.sent[0];
            let mut total = resid.clone();
            for (i, x) in sent.iter() {
                total[i as usize] += x;
            }
            let quantized = sent.iter().any(|(i, x)| x != g[i as usize]);
            assert!(quantized, "4 bits change some value");
            if feedback {
                assert_eq!(total, g, "residual + sent = accumulator");
            } else {
                for (i, _) in sent.iter() {
                    assert_eq!(resid[i as usize], 0.0, "no feedback: nothing kept at {i}");
                }
            }
            let mags: std::collections::BTreeSet<u32> =
                sent.values().iter().map(|x| x.abs().to_bits()).collect();
            assert!(
                mags.len() <= 15 * n.div_ceil(64),
                "{} magnitudes",
                mags.len()
            );
            Ok(())
        });
        for r in out {
            r.unwrap();
        }
    }
    let rgc_cfg = Config::new(0.1, 0.1, rgc(0.9, false, 0.0, false)).unwrap();
    assert!(rgc_cfg.qsgd(4, 64, true).is_err());
}

/// Tensor fusion: small dense layers reduced in one call give the same
/// weights as one call per layer (dyadic inputs: every sum exact), in fewer
/// messages.
#[test]
fn fused_dense_layers_equal_unfused_in_fewer_messages() {
    let sizes = [30usize, 7, 64, 1];
    for p in [2usize, 3, 4] {
        let run = |fusion: usize| {
            ThreadCluster::new(p).run(|t| {
                let cfg = Config::dense(0.25, rgc(0.5, false, 0.0, false))?.fuse(fusion);
                let w0: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![1.0; n]).collect();
                let mut tr = topk_a_trainer(cfg, layers(&sizes), &w0)?;
                let mut rng = Rng::seed_from_u64(t.rank() as u64);
                let mut msgs = 0;
                for _ in 0..10 {
                    let g: Vec<Vec<f32>> = sizes.iter().map(|&n| dyadic(n, &mut rng)).collect();
                    msgs += tr.step(t, &g)?.traffic.msgs_sent;
                }
                Ok((tr.weights()?, msgs))
            })
        };
        let (fused, single) = (run(1 << 20), run(0));
        for (f, s) in fused.into_iter().zip(single) {
            let (f, s) = (f.unwrap(), s.unwrap());
            assert_eq!(f.0, s.0, "P={p}: same weights");
            assert!(f.1 < s.1, "P={p}: {} messages fused, {} not", f.1, s.1);
        }
    }
}

/// SparDL's paper variant of residual collection, against its definition:
/// after a step the residual is the accumulator outside the result's
/// indices and `dropped` inside.
#[test]
fn paper_collection_keeps_the_accumulator_outside_the_result() {
    use residual_sgd::Collection;
    for p in [2usize, 3, 4] {
        let n = 60;
        let out = ThreadCluster::new(p).run(|t| {
            let cfg = Config::new(1.0, 0.2, Rule::TopK)?.collection(Collection::Paper);
            let mut tr = trainer(cfg, &[n], &[vec![0.0; n]], "spardl:k=6");
            let mut rng = Rng::seed_from_u64(77 + t.rank() as u64);
            let g = dyadic(n, &mut rng);
            let rep = tr.step(t, std::slice::from_ref(&g))?;
            let resid = tr.residuals()?.remove(0);
            // The result: every rank's weights moved by -result / P.
            let w = tr.weights()?.remove(0);
            for i in 0..n {
                let in_result = w[i] != 0.0;
                let dropped = rep.dropped[0]
                    .iter()
                    .find(|d| d.0 as usize == i)
                    .map_or(0.0, |d| d.1);
                let want = if in_result { dropped } else { g[i] };
                assert_eq!(resid[i], want, "P={p} rank {} at {i}", t.rank());
            }
            Ok(())
        });
        for r in out {
            r.unwrap();
        }
    }
}

/// A user's own memory through [`Trainer::with_memory`]: one that keeps
/// nothing across steps (no error feedback). Oracle on the host: each step
/// applies the top-k of `lr g` and the accumulator holds the rest of this
/// step's `lr g` only.
#[test]
fn a_users_memory_replaces_the_rules() {
    use residual_sgd::Memory;
    struct Forgetful(Vec<f32>, f32);
    impl Memory<Cpu> for Forgetful {
        fn compensate(&mut self, _: &Cpu, g: &Vec<f32>) -> Result<()> {
            self.0 = g.iter().map(|x| self.1 * x).collect();
            Ok(())
        }
        fn accumulator(&self) -> &Vec<f32> {
            &self.0
        }
        fn accumulator_mut(&mut self) -> &mut Vec<f32> {
            &mut self.0
        }
        fn restore(&mut self, _: &Cpu, _: &sparse_core::SparseVec<f32>) -> Result<()> {
            Ok(())
        }
    }
    let (n, lr) = (64usize, 0.5f32);
    let mut rng = Rng::seed_from_u64(77);
    let w0 = dyadic(n, &mut rng);
    let grads: Vec<Vec<f32>> = (0..5).map(|_| dyadic(n, &mut rng)).collect();
    let cfg = Config::new(lr, 0.125, Rule::TopK)
        .unwrap()
        .compress_threshold(0);
    let out = ThreadCluster::new(1).run(|t| {
        let mut tr = Trainer::with_memory(
            Cpu,
            cfg,
            layers(&[n]),
            std::slice::from_ref(&w0),
            RadixTopK::magnitude(),
            comm("topk_a"),
            |_, spec| Ok(Box::new(Forgetful(vec![0.0; spec.len], lr)) as Box<dyn Memory<Cpu>>),
        )?;
        let mut seen = Vec::new();
        for g in &grads {
            tr.step(t, std::slice::from_ref(g))?;
            seen.push((tr.weights()?.remove(0), tr.residuals()?.remove(0)));
        }
        Ok(seen)
    });
    let seen = out.into_iter().next().unwrap().unwrap();
    let mut w = w0.clone();
    for (g, (got_w, got_r)) in grads.iter().zip(seen) {
        let acc: Vec<f32> = g.iter().map(|x| lr * x).collect();
        // Brute force: by magnitude, ties to the lower index.
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| acc[b].abs().total_cmp(&acc[a].abs()).then(a.cmp(&b)));
        let top = &order[..8];
        let mut rest = acc.clone();
        for &i in top {
            w[i] -= acc[i];
            rest[i] = 0.0;
        }
        assert_eq!(got_w, w);
        assert_eq!(got_r, rest);
    }
}

/// What quantization removes goes back into the residual under the
/// paper's collection too: at P = 1 over a lossless collective nothing is
/// cut, so after every step the residual plus what was sent is the
/// accumulator (the residual before plus this step's `lr g`), bit for bit,
/// for SparCML's QSGD with feedback and for RedSync's quantized mode.
#[test]
fn paper_collection_keeps_what_quantization_removed() {
    use residual_sgd::Collection;
    let n = 50;
    let configs = [
        Config::new(1.0, 0.2, Rule::TopK)
            .unwrap()
            .qsgd(2, 8, true)
            .unwrap(),
        Config::new(1.0, 0.2, rgc(0.0, false, 0.0, false))
            .unwrap()
            .quantized()
            .unwrap(),
    ];
    for (c, cfg) in configs.into_iter().enumerate() {
        for collection in [Collection::Global, Collection::Paper] {
            let out = ThreadCluster::new(1).run(|t| {
                let cfg = cfg.collection(collection);
                // Two layers, so the first is not the (unquantized) output.
                let mut tr = trainer(cfg, &[n, n], &[vec![0.0; n], vec![0.0; n]], "topk_a");
                let mut rng = Rng::seed_from_u64(5);
                for step in 0..20 {
                    let before = tr.residuals()?.remove(0);
                    let g = vec![dyadic(n, &mut rng), dyadic(n, &mut rng)];
                    let rep = tr.step(t, &g)?;
                    let after = tr.residuals()?.remove(0);
                    let mut total = after.clone();
                    for (i, x) in rep.sent[0].iter() {
                        total[i as usize] += x;
                    }
                    for i in 0..n {
                        let acc = before[i] + g[0][i];
                        assert_eq!(
                            total[i], acc,
                            "config {c} {collection:?} step {step} at {i}"
                        );
                    }
                }
                Ok(())
            });
            for r in out {
                r.unwrap();
            }
        }
    }
}

/// RedSync's output layer is the last layer of more than one dimension: a
/// trailing bias (as burn lists a `Linear`'s parameters) does not take its
/// place, so the output weights go exact while the hidden ones go as a
/// same-sign mean.
#[test]
fn quantized_mode_exempts_the_output_weights_before_a_bias() {
    let spec = |name: &str, len: usize, dims: usize| LayerSpec {
        name: name.into(),
        len,
        dims,
    };
    let specs = vec![
        spec("fc1.weight", 40, 2),
        spec("fc1.bias", 4, 1),
        spec("out.weight", 40, 2),
        spec("out.bias", 4, 1),
    ];
    let out = ThreadCluster::new(1).run(|t| {
        let cfg = Config::new(0.1, 0.25, rgc(0.0, false, 0.0, false))?
            .quantized()?
            .compress_threshold(0)
            .compress_min_dims(2);
        let w: Vec<Vec<f32>> = specs.iter().map(|s| vec![0.0; s.len]).collect();
        let mut tr = topk_a_trainer(cfg, specs.clone(), &w)?;
        assert_eq!(tr.compressed(), vec![true, false, true, false]);
        let mut rng = Rng::seed_from_u64(3);
        let g: Vec<Vec<f32>> = specs.iter().map(|s| dyadic(s.len, &mut rng)).collect();
        let rep = tr.step(t, &g)?;
        let hidden = &rep.sent[0];
        assert!(hidden.values().iter().all(|&x| x == hidden.values()[0]));
        let output = &rep.sent[2];
        assert_eq!(output.nnz(), 10);
        for (i, x) in output.iter() {
            assert_eq!(x, g[2][i as usize], "the output layer's exact values");
        }
        Ok(())
    });
    for r in out {
        r.unwrap();
    }
}

/// Ranks that disagree on which layers are compressed (another `dims`, or
/// another compress threshold) or on a setting (fusion, learning rate,
/// density, rule) get `Error::Disagreement` on every rank before anything
/// is sent, and the transport stays usable.
#[test]
fn ranks_that_compress_different_layers_all_get_an_error() {
    for p in [2usize, 3] {
        let cases = [
            ("dims", "layer compressed"),
            ("threshold", "layer compressed"),
            ("fusion", "fusion"),
            ("lr", "lr"),
            ("density", "density"),
            ("rule", "rule"),
        ];
        for (case, what) in cases {
            let out = ThreadCluster::new(p).run(|t| {
                let odd = t.rank() == p - 1;
                let (lr, density) = match (odd, case) {
                    (true, "lr") => (0.2, 0.25),
                    (true, "density") => (0.1, 0.5),
                    _ => (0.1, 0.25),
                };
                let rule = if odd && case == "rule" {
                    rgc(0.0, false, 0.0, false)
                } else {
                    Rule::TopK
                };
                // DGC's rule on, so that a layer's dimensions decide.
                let mut cfg = Config::new(lr, density, rule)?
                    .compress_threshold(0)
                    .compress_min_dims(2);
                if odd && case == "threshold" {
                    // Layer a (256 bytes) dense, layer b compressed.
                    cfg = cfg.compress_threshold(256);
                }
                if odd && case == "fusion" {
                    cfg = cfg.fuse(1 << 20);
                }
                let dims = if odd && case == "dims" { 1 } else { 2 };
                let specs = vec![
                    LayerSpec {
                        name: "a".into(),
                        len: 64,
                        dims,
                    },
                    LayerSpec {
                        name: "b".into(),
                        len: 128,
                        dims: 2,
                    },
                ];
                let w = vec![vec![0.0; 64], vec![0.0; 128]];
                let mut tr = topk_a_trainer(cfg, specs.clone(), &w)?;
                let res = tr.step(t, &[vec![1.0; 64], vec![2.0; 128]]);
                // The transport still works.
                let mut same = trainer(
                    Config::new(0.1, 0.25, Rule::TopK)?,
                    &[8],
                    &[vec![0.0; 8]],
                    "topk_a",
                );
                same.step(t, &[vec![1.0; 8]])?;
                res.map(drop)
            });
            for (r, res) in out.iter().enumerate() {
                assert!(
                    matches!(res, Err(Error::Disagreement { what: w, .. }) if *w == what),
                    "{case} P={p} rank {r}: {res:?}"
                );
                // Float settings print as floats.
                let shown = match case {
                    "lr" => Some(format!("rank {}: 0.2", p - 1)),
                    "density" => Some(format!("rank {}: 0.5", p - 1)),
                    _ => None,
                };
                if let (Some(shown), Err(Error::Disagreement { detail, .. })) = (shown, res) {
                    assert!(detail.contains(&shown), "{detail}");
                }
            }
        }
    }
}

/// A failure after the entry check (a residual that overflows to infinity
/// on one rank) is an error on every rank, in step, with no weight moved,
/// and again on the next step; the transport stays usable.
#[test]
fn an_overflowing_residual_is_an_error_on_every_rank() {
    for p in [2usize, 3] {
        let out = ThreadCluster::new(p).run(|t| {
            let cfg = Config::new(1.0, 0.5, Rule::TopK)?;
            let mut tr = trainer(cfg, &[2], &[vec![0.0; 2]], "topk_a");
            let g = if t.rank() == 0 {
                vec![3.4e38f32, 3.0e38]
            } else {
                vec![1.0, 0.5]
            };
            tr.step(t, std::slice::from_ref(&g))?;
            let w = tr.weights()?;
            for _ in 0..2 {
                let res = tr.step(t, std::slice::from_ref(&g));
                if t.rank() == 0 {
                    assert!(matches!(res, Err(Error::NonFinite { .. })), "{res:?}");
                } else {
                    assert!(
                        matches!(res, Err(Error::PeerError { rank: 0, .. })),
                        "rank {}: {res:?}",
                        t.rank()
                    );
                }
                assert_eq!(tr.weights()?, w, "no weight moved");
            }
            let mut fresh = trainer(cfg, &[2], &[vec![0.0; 2]], "topk_a");
            fresh.step(t, &[vec![1.0, 2.0]])?;
            Ok(())
        });
        for r in out {
            r.unwrap();
        }
    }
}

/// One selector per layer, chosen at run time (`Box<dyn Selector>`), through
/// `Trainer::with_parts`: each layer steps as it does in a trainer that
/// uses that layer's selector everywhere, bit for bit.
#[test]
fn a_selector_per_layer_through_with_parts() {
    use sparse_select::{Selector, TrimmedTopK};
    let sizes = [50usize, 60];
    let w0: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![0.0; n]).collect();
    let cfg = Config::new(0.5, 0.1, rgc(0.9, false, 0.0, false))
        .unwrap()
        .compress_threshold(0);
    let out = ThreadCluster::new(2).run(|t| {
        let rank = t.rank() as u64;
        let grads = |step: usize| -> Vec<Vec<f32>> {
            let mut rng = Rng::seed_from_u64(step as u64 * 10 + rank);
            sizes.iter().map(|&n| dyadic(n, &mut rng)).collect()
        };
        let mut mixed = Trainer::with_parts(
            Cpu,
            cfg,
            layers(&sizes),
            &w0,
            |l: &LayerSpec| -> Result<Box<dyn Selector<Cpu, f32>>> {
                Ok(if l.name == "layer0" {
                    Box::new(RadixTopK::magnitude())
                } else {
                    Box::new(TrimmedTopK::default())
                })
            },
            comm("topk_a"),
            |b, l| residual_sgd::memory::for_rule(b, cfg.rule(), cfg.lr(), l.len),
        )?;
        let mut radix = trainer(cfg, &sizes, &w0, "topk_a");
        let mut trimmed = Trainer::new(
            Cpu,
            cfg,
            layers(&sizes),
            &w0,
            TrimmedTopK::default(),
            comm("topk_a"),
        )?;
        for step in 0..10 {
            let g = grads(step);
            mixed.step(t, &g)?;
            radix.step(t, &g)?;
            trimmed.step(t, &g)?;
        }
        let w = mixed.weights()?;
        assert_eq!(w[0], radix.weights()?[0], "layer 0 as with radix top-k");
        assert_eq!(w[1], trimmed.weights()?[1], "layer 1 as with trimmed top-k");
        Ok(())
    });
    for r in out {
        r.unwrap();
    }
}

/// A collective that fails on every rank alike (here its entry agreement:
/// the ranks run different algorithms on the second layer) leaves that
/// layer's selection in its memory: after the failed step the residual is
/// this step's whole `lr g`, nothing lost; the transport stays usable.
#[test]
fn a_failed_collective_leaves_the_selection_in_the_memory() {
    let n = 100;
    let out = ThreadCluster::new(2).run(|t| {
        let cfg = Config::new(1.0, 0.1, Rule::TopK)?.compress_threshold(0);
        let second = if t.rank() == 0 {
            "topk_a"
        } else {
            "ssar_recursive_double"
        };
        let mut tr = Trainer::new(
            Cpu,
            cfg,
            layers(&[n, n]),
            &[vec![0.0; n], vec![0.0; n]],
            RadixTopK::magnitude(),
            |l: &LayerSpec| {
                let spec = if l.name == "layer1" { second } else { "topk_a" };
                Registry::builtin().build(spec, Defaults::density(1.0)?)
            },
        )?;
        let mut rng = Rng::seed_from_u64(4 + t.rank() as u64);
        let g = vec![dyadic(n, &mut rng), dyadic(n, &mut rng)];
        let res = tr.step(t, &g);
        assert!(
            matches!(
                res,
                Err(Error::Disagreement {
                    what: "algorithm",
                    ..
                })
            ),
            "{res:?}"
        );
        assert_eq!(tr.residuals()?[1], g[1], "layer 1: nothing taken");
        // The transport is still usable.
        let mut fresh = trainer(cfg, &[4], &[vec![0.0; 4]], "topk_a");
        fresh.step(t, &[vec![1.0, 2.0, 3.0, 4.0]])?;
        Ok(())
    });
    for r in out {
        r.unwrap();
    }
}
