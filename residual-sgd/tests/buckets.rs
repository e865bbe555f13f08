//! Fused compressed layers (issue 44): with per-layer budgets and a
//! lossless collective a fused step equals the unfused one bit for bit;
//! with a global budget each bucket sends the largest `K` of its layers'
//! accumulators (checked against a host top-k) and conserves gradient
//! mass exactly; fused trainers save and load, and a state saved with
//! another bucket layout is refused.

mod common;

use backend_cpu::Cpu;
use residual_sgd::{BucketBudget, Buckets, Config, FillOrder, LayerSpec, Rule, Trainer};
use sparse_coll::{Registry, ThreadCluster, Transport};
use sparse_core::backend::BufferOps as _;
use sparse_core::{Error, Result, SparseVec};
use sparse_select::RadixTopK;

type Tr = Trainer<Cpu, RadixTopK>;

const SIZES: [usize; 5] = [300, 40, 500, 7, 120];

/// Dyadic values (multiples of 1/8): every sum below is exact.
fn grads(rank: usize, step: u64) -> Vec<Vec<f32>> {
    common::dyadic(step * 1000 + rank as u64, &SIZES)
}

fn rgc() -> Rule {
    Rule::Rgc {
        momentum: 0.0,
        nesterov: false,
        weight_decay: 0.0,
        factor_masking: false,
    }
}

fn trainer(cfg: Config, spec: &str) -> Result<Tr> {
    let w0: Vec<Vec<f32>> = SIZES.iter().map(|&n| vec![0.25; n]).collect();
    Trainer::from_registry(
        Cpu,
        cfg.compress_threshold(0),
        LayerSpec::matrices(&SIZES),
        &w0,
        RadixTopK::magnitude(),
        &Registry::builtin(),
        spec,
    )
}

/// Per rank: weights, residuals and each step's sent entries and traffic
/// rounds, after `steps` steps.
type Run = (Vec<Vec<f32>>, Vec<Vec<f32>>, Vec<Vec<SparseVec<f32>>>, u64);

fn run(p: usize, steps: u64, make: impl Fn() -> Result<Tr> + Sync) -> Vec<Run> {
    ThreadCluster::new(p)
        .run(|t| {
            let mut tr = make()?;
            let (mut sent, before) = (Vec::new(), t.traffic().rounds);
            for s in 0..steps {
                let g = grads(t.rank(), s);
                sent.push(tr.step(t, &g)?.sent);
            }
            let rounds = t.traffic().rounds - before;
            Ok((tr.weights()?, tr.residuals()?, sent, rounds))
        })
        .into_iter()
        .collect::<Result<_>>()
        .unwrap()
}

#[test]
fn buckets_fill_in_backward_order_up_to_the_cap() {
    // 4 bytes a parameter; a cap of 2,000 bytes is 500 parameters.
    let cfg = Config::new(0.1, 0.1, Rule::TopK).unwrap();
    let b = Buckets::new(2000).unwrap();
    let tr = trainer(cfg.buckets(b).unwrap(), "topk_a").unwrap();
    // Backward: 120 + 7 + 500 >= 500 closes [2, 3, 4]; 40 + 300 is left.
    assert_eq!(tr.buckets(), vec![vec![2, 3, 4], vec![0, 1]]);
    let list = cfg.buckets(b.order(FillOrder::List)).unwrap();
    // List: 300 + 40 + 500 closes [0, 1, 2]; 7 + 120 is left.
    assert_eq!(
        trainer(list, "topk_a").unwrap().buckets(),
        vec![vec![0, 1, 2], vec![3, 4]]
    );
    // Unfused: a call per layer.
    let one = trainer(cfg, "topk_a").unwrap().buckets();
    assert_eq!(one, (0..5).map(|l| vec![l]).collect::<Vec<_>>());
}

/// With per-layer budgets, what each layer sends is what it would send
/// alone, and a lossless collective's sum of the layers laid end to end is
/// each layer's sum: the fused step is the unfused one, bit for bit, with
/// one collective call per bucket instead of one per layer.
#[test]
fn fused_per_layer_budgets_equal_the_unfused_step_bit_for_bit() {
    for spec in ["topk_a", "ssar_recursive_double", "ssar_split_allgather"] {
        for rule in [Rule::TopK, rgc()] {
            for p in [2, 3] {
                let cfg = Config::new(0.5, 0.05, rule).unwrap();
                let fused = cfg.buckets(Buckets::new(2000).unwrap()).unwrap();
                let a = run(p, 4, || trainer(cfg, spec));
                let b = run(p, 4, || trainer(fused, spec));
                for (r, (x, y)) in a.iter().zip(&b).enumerate() {
                    let ctx = format!("{spec} {rule:?} P = {p} rank {r}");
                    assert_eq!(x.0, y.0, "{ctx}: weights");
                    assert_eq!(x.1, y.1, "{ctx}: residuals");
                    assert_eq!(x.2, y.2, "{ctx}: sent");
                    // Two calls a step instead of five: fewer rounds.
                    assert!(y.3 < x.3, "{ctx}: rounds {} vs {}", y.3, x.3);
                }
            }
        }
    }
}

/// A global budget: each bucket sends `round(d N)` entries, the largest
/// of its layers' accumulators wherever they are (a host top-k of the
/// layers laid end to end is the oracle), and every rank's inputs equal
/// what it sent plus its residual, exactly (momentum 0, dyadic values,
/// a lossless collective).
#[test]
fn a_global_budget_sends_the_buckets_top_k_and_conserves_mass() {
    let density = 0.05;
    let cfg = Config::new(1.0, density, rgc())
        .unwrap()
        .buckets(Buckets::new(2000).unwrap().budget(BucketBudget::Global))
        .unwrap();
    let out = ThreadCluster::new(3).run(|t| {
        let mut tr = trainer(cfg, "topk_a")?;
        let buckets = tr.buckets();
        let mut inputs: Vec<Vec<f64>> = SIZES.iter().map(|&n| vec![0.0; n]).collect();
        let mut sent_sum = inputs.clone();
        for s in 0..5 {
            let g = grads(t.rank(), s);
            // The accumulator the step selects from: the residual plus the
            // gradient (momentum 0).
            let acc: Vec<Vec<f32>> = tr
                .residuals()?
                .iter()
                .zip(&g)
                .map(|(r, g)| r.iter().zip(g).map(|(a, b)| a + b).collect())
                .collect();
            let rep = tr.step(t, &g)?;
            for bucket in &buckets {
                let n: usize = bucket.iter().map(|&l| SIZES[l]).sum();
                let k = ((density * n as f64).round() as usize).max(1);
                let joined: Vec<f32> = bucket.iter().flat_map(|&l| acc[l].clone()).collect();
                let want = SparseVec::from_dense(&joined)?.split_topk(k).0;
                let mut got = Vec::new();
                let mut at = 0u32;
                for &l in bucket {
                    got.extend(rep.sent[l].iter().map(|(i, x)| (i + at, x)));
                    at += SIZES[l] as u32;
                }
                let want: Vec<(u32, f32)> = want.iter().collect();
                assert_eq!(got, want, "step {s}, bucket {bucket:?}");
            }
            for (l, g) in g.iter().enumerate() {
                for (i, &x) in g.iter().enumerate() {
                    inputs[l][i] += f64::from(x);
                }
                for (i, x) in rep.sent[l].iter() {
                    sent_sum[l][i as usize] += f64::from(x);
                }
            }
        }
        let res = tr.residuals()?;
        for l in 0..SIZES.len() {
            for i in 0..SIZES[l] {
                let kept = f64::from(res[l][i]) + sent_sum[l][i];
                assert_eq!(kept, inputs[l][i], "layer {l} at {i}");
            }
        }
        Ok(())
    });
    for r in out {
        r.unwrap();
    }
}

/// A fused trainer saved part way and loaded into a fresh one continues
/// bit for bit; a state saved with another bucket layout is refused,
/// naming it.
#[test]
fn fused_trainers_save_and_load_and_refuse_another_layout() {
    let cfg = Config::new(0.5, 0.05, Rule::TopK)
        .unwrap()
        .buckets(Buckets::new(2000).unwrap().budget(BucketBudget::Global))
        .unwrap();
    // ok_topk keeps state across calls (its thresholds): it travels with
    // the bucket's first layer.
    let spec = "ok_topk:period=2";
    let straight = run(3, 4, || trainer(cfg, spec));
    let resumed = ThreadCluster::new(3).run(|t| {
        let mut tr = trainer(cfg, spec)?;
        for s in 0..2 {
            let g = grads(t.rank(), s);
            tr.step(t, &g)?;
        }
        let state = tr.save_state()?;
        let mut fresh = trainer(cfg, spec)?;
        fresh.load_state(t, &state)?;
        for s in 2..4 {
            let g = grads(t.rank(), s);
            fresh.step(t, &g)?;
        }
        // Another cap: another layout.
        let other = cfg
            .buckets(Buckets::new(4000).unwrap().budget(BucketBudget::Global))
            .unwrap();
        let e = trainer(other, spec)?.load_state(t, &state).unwrap_err();
        assert!(
            matches!(&e, Error::Mismatch { what, .. } if what.contains("bucket cap")),
            "{e}"
        );
        // Unfused: refused too.
        let e = trainer(cfg.buckets(Buckets::default()).unwrap(), spec)?
            .load_state(t, &state)
            .unwrap_err();
        assert!(e.to_string().contains("bucket"), "{e}");
        Ok((fresh.weights()?, fresh.residuals()?))
    });
    for (r, res) in resumed.into_iter().enumerate() {
        let (w, res) = res.unwrap();
        assert_eq!(w, straight[r].0, "rank {r}: weights");
        assert_eq!(res, straight[r].1, "rank {r}: residuals");
    }
}

#[test]
fn a_global_budget_does_not_go_with_per_layer_quantization() {
    let global = Buckets::default().budget(BucketBudget::Global);
    let rgc = Config::new(0.1, 0.01, rgc()).unwrap();
    assert!(rgc.quantized().unwrap().buckets(global).is_err());
    assert!(rgc.buckets(global).unwrap().quantized().is_err());
    let topk = Config::new(0.1, 0.01, Rule::TopK).unwrap();
    assert!(topk.qsgd(4, 128, true).unwrap().buckets(global).is_err());
    assert!(topk.buckets(global).unwrap().qsgd(4, 128, true).is_err());
    // Per-layer budgets quantize each layer as before.
    assert!(rgc.quantized().unwrap().buckets(Buckets::default()).is_ok());
    assert!(Buckets::new(0).is_err());
}

/// Settings of the pipelined tests: `fused` buckets (per-layer or
/// global budgets), the 7-parameter layer dense (RGC's compress
/// threshold at 100 bytes).
fn pipelined_config(bucketing: Option<BucketBudget>) -> Config {
    let cfg = Config::new(0.5, 0.05, rgc()).unwrap();
    match bucketing {
        None => cfg,
        Some(b) => cfg.buckets(Buckets::new(2000).unwrap().budget(b)).unwrap(),
    }
}

fn trainer_dense_small(cfg: Config, spec: &str) -> Result<Tr> {
    let w0: Vec<Vec<f32>> = SIZES.iter().map(|&n| vec![0.25; n]).collect();
    Trainer::from_registry(
        Cpu,
        cfg.compress_threshold(100),
        LayerSpec::matrices(&SIZES),
        &w0,
        RadixTopK::magnitude(),
        &Registry::builtin(),
        spec,
    )
}

/// A pipelined step (each bucket's collective in flight while the next
/// layers are selected on the producer's thread) is the plain step, bit
/// for bit: the same selections, the same collectives, the same update.
#[test]
fn pipelined_steps_equal_plain_steps_bit_for_bit() {
    for bucketing in [
        None,
        Some(BucketBudget::PerLayer),
        Some(BucketBudget::Global),
    ] {
        for spec in ["topk_a", "ok_topk:period=2"] {
            let cfg = pipelined_config(bucketing);
            let out = ThreadCluster::new(3).run(|t| {
                let (mut plain, mut piped) = (
                    trainer_dense_small(cfg, spec)?,
                    trainer_dense_small(cfg, spec)?,
                );
                assert!(!plain.compressed()[3], "the small layer is dense");
                for s in 0..4 {
                    let g = grads(t.rank(), s);
                    let a = plain.step(t, &g)?;
                    let bufs = g
                        .iter()
                        .map(|g| Cpu.upload(g))
                        .collect::<Result<Vec<_>>>()?;
                    let b = if s % 2 == 0 {
                        piped.step_overlapped(t, &bufs)?
                    } else {
                        // Pushed in list order, from the host: the same.
                        piped.step_with(t, |feed| {
                            g.iter()
                                .enumerate()
                                .try_for_each(|(l, g)| feed.push_host(l, g))
                        })?
                    };
                    assert_eq!(a.sent, b.sent, "step {s}: sent");
                    assert_eq!(a.dropped, b.dropped, "step {s}: dropped");
                    assert_eq!(a.layers, b.layers, "step {s}: layers");
                    assert_eq!(plain.weights()?, piped.weights()?, "step {s}: weights");
                    assert_eq!(
                        plain.residuals()?,
                        piped.residuals()?,
                        "step {s}: residuals"
                    );
                }
                Ok(())
            });
            for r in out {
                r.unwrap_or_else(|e| panic!("{bucketing:?} {spec}: {e}"));
            }
        }
    }
}

/// A producer that fails on one rank (a layer it never pushes, one it
/// pushes twice, a NaN, a panic) fails the step on every rank with no
/// weight moved; the transport stays usable and the next step trains on
/// identically everywhere.
#[test]
fn a_failing_producer_fails_the_step_on_every_rank() {
    #[derive(Debug, Clone, Copy)]
    enum Fault {
        Missing,
        Twice,
        NaN,
        Panic,
    }
    for fault in [Fault::Missing, Fault::Twice, Fault::NaN, Fault::Panic] {
        let cfg = pipelined_config(Some(BucketBudget::PerLayer));
        let out = ThreadCluster::new(3).run(|t| {
            let mut tr = trainer_dense_small(cfg, "topk_a")?;
            let before = tr.weights()?;
            let g = grads(t.rank(), 0);
            let bad = t.rank() == 1;
            let res = tr.step_with(t, |feed| {
                for l in (0..SIZES.len()).rev() {
                    match fault {
                        Fault::Missing if bad && l == 2 => continue,
                        Fault::Twice if bad && l == 2 => feed.push_host(l, &g[l])?,
                        Fault::NaN if bad && l == 0 => {
                            let mut x = g[l].clone();
                            x[3] = f32::NAN;
                            feed.push_host(l, &x)?;
                            continue;
                        }
                        Fault::Panic if bad && l == 1 => panic!("a planted panic"),
                        _ => {}
                    }
                    feed.push_host(l, &g[l])?;
                }
                Ok(())
            });
            assert!(res.is_err(), "{fault:?} rank {}: {res:?}", t.rank());
            assert_eq!(tr.weights()?, before, "{fault:?}: nothing applied");
            // The next step trains on, the same on every rank.
            let g = grads(t.rank(), 1);
            tr.step(t, &g)?;
            tr.weights()
        });
        let w: Vec<_> = out.into_iter().map(|r| r.unwrap()).collect();
        assert!(w.iter().all(|x| *x == w[0]), "{fault:?}: weights differ");
    }
}

/// Counts the transport calls (sends, receives, exchanges) a rank makes,
/// the dense allreduce's among them (a ring over this view).
#[derive(Debug)]
struct Count(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl sparse_coll::Intercept for Count {
    fn call(&mut self) -> Result<()> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
    fn inner_allreduce(&self) -> bool {
        false
    }
}

/// A dense group's allreduce starts as soon as its layers are in, as
/// DDP's buckets do, while the producer is still on the next layers: here
/// the producer pushes the last two layers (dense, one group) and waits
/// for this rank's transport to move before it pushes the rest, which it
/// would wait for in vain if the dense allreduces followed the last
/// bucket. The step still equals the plain one bit for bit.
#[test]
fn a_dense_group_s_allreduce_starts_while_the_producer_goes_on() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};
    let cfg = Config::new(0.5, 0.05, rgc()).unwrap();
    let make = || {
        let w0: Vec<Vec<f32>> = SIZES.iter().map(|&n| vec![0.25; n]).collect();
        Trainer::from_registry(
            Cpu,
            cfg.compress_threshold(500),
            LayerSpec::matrices(&SIZES),
            &w0,
            RadixTopK::magnitude(),
            &Registry::builtin(),
            "topk_a",
        )
    };
    let out = ThreadCluster::new(2).run(|t| {
        let (mut plain, mut piped) = (make()?, make()?);
        assert_eq!(piped.compressed(), [true, false, true, false, false]);
        let g = grads(t.rank(), 0);
        plain.step(t, &g)?;
        let calls = Arc::new(AtomicUsize::new(0));
        let mut seen = sparse_coll::Intercepting::wrap(t, Count(Arc::clone(&calls)));
        piped.step_with(&mut seen, |feed| {
            // The step's entry round is over; the collectives wait for
            // their layers.
            let before = calls.load(Ordering::SeqCst);
            feed.push_host(4, &g[4])?;
            feed.push_host(3, &g[3])?;
            let clock = Instant::now();
            while calls.load(Ordering::SeqCst) == before {
                if clock.elapsed() > Duration::from_secs(30) {
                    return Err(Error::invalid(
                        "test",
                        "the dense group's allreduce did not start before the other layers",
                    ));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            (0..3).rev().try_for_each(|l| feed.push_host(l, &g[l]))
        })?;
        assert_eq!(plain.weights()?, piped.weights()?);
        assert_eq!(plain.residuals()?, piped.residuals()?);
        Ok(())
    });
    for r in out {
        r.unwrap();
    }
}
