//! Error feedback fused into the selection (issue 43, item 2): where a
//! layer's selector is the exact top-k by magnitude, the trainer lets its
//! memory compensate and select in one call ([`Memory::compensate_topk`],
//! `SelectOps::accumulate_topk`), which takes the selection out of the
//! accumulator at once; the separate calls (compensate, select, remove
//! after the commit) are the oracle. Over several steps, for plain error
//! feedback and RGC's momentum (with and without factor masking), both
//! residual collections, QSGD with feedback, buckets with per-layer and
//! global budgets, a lossless and a lossy collective, plain and
//! pipelined: the weights and the whole training state (residuals,
//! momenta) are bit for bit those of a trainer whose memories do not fuse.

use backend_cpu::Cpu;
use rand::{Rng as _, SeedableRng as _};
use residual_sgd::memory::for_rule;
use residual_sgd::{BucketBudget, Buckets, Collection, Config, LayerSpec, Memory, Rule, Trainer};
use sparse_coll::{Defaults, Registry, ThreadCluster, Transport};
use sparse_core::backend::BufferOps as _;
use sparse_core::state::State;
use sparse_core::testing::Rng;
use sparse_core::{Result, Selected, SparseVec};
use sparse_select::RadixTopK;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

type Tr = Trainer<Cpu, RadixTopK>;

/// The memory inside, which fuses (each fused selection counted in the
/// counter) or, without a counter, never does: its `compensate_topk`
/// answers `None`, as a memory that keeps [`Memory`]'s default, and the
/// trainer makes the separate calls.
struct Wrapped(Box<dyn Memory<Cpu>>, Option<Arc<AtomicUsize>>);

impl Memory<Cpu> for Wrapped {
    fn compensate(&mut self, b: &Cpu, g: &Vec<f32>) -> Result<()> {
        self.0.compensate(b, g)
    }
    fn compensate_topk(
        &mut self,
        b: &Cpu,
        g: &Vec<f32>,
        k: usize,
    ) -> Result<Option<Selected<Cpu, f32>>> {
        let Some(count) = &self.1 else {
            return Ok(None);
        };
        let out = self.0.compensate_topk(b, g, k)?;
        if out.is_some() {
            count.fetch_add(1, Ordering::Relaxed);
        }
        Ok(out)
    }
    fn accumulator(&self) -> &Vec<f32> {
        self.0.accumulator()
    }
    fn accumulator_mut(&mut self) -> &mut Vec<f32> {
        self.0.accumulator_mut()
    }
    fn remove(&mut self, b: &Cpu, indices: &Vec<u32>) -> Result<()> {
        self.0.remove(b, indices)
    }
    fn restore(&mut self, b: &Cpu, back: &SparseVec<f32>) -> Result<()> {
        self.0.restore(b, back)
    }
    fn save_state(&self, b: &Cpu) -> Result<State> {
        self.0.save_state(b)
    }
    fn load_state(&mut self, b: &Cpu, s: &State) -> Result<()> {
        self.0.load_state(b, s)
    }
}

/// Dyadic values (multiples of 1/8), with ties among magnitudes: every
/// sum is exact.
fn dyadic(n: usize, rng: &mut Rng) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.random_range(0..65) as f32 - 32.0) / 8.0)
        .collect()
}

const SIZES: [usize; 3] = [300, 120, 64];

/// A trainer whose memories fuse (counted in `fused`) or, without
/// `fused`, do not.
fn trainer(cfg: Config, spec: &str, fused: Option<&Arc<AtomicUsize>>) -> Result<Tr> {
    let w0: Vec<Vec<f32>> = SIZES.iter().map(|&n| vec![0.5; n]).collect();
    let (rule, lr) = (cfg.rule(), cfg.lr());
    let fused = fused.cloned();
    Trainer::with_memory(
        Cpu,
        cfg,
        LayerSpec::matrices(&SIZES),
        &w0,
        RadixTopK::magnitude(),
        |_| Registry::builtin().build(spec, Defaults::density(0.05)?),
        move |b, l| {
            let m = for_rule(b, rule, lr, l.len)?;
            Ok(Box::new(Wrapped(m, fused.clone())))
        },
    )
}

fn step(tr: &mut Tr, t: &mut dyn Transport, g: &[Vec<f32>], pipelined: bool) -> Result<()> {
    if pipelined {
        let bufs = g
            .iter()
            .map(|g| Cpu.upload(g))
            .collect::<Result<Vec<_>>>()?;
        tr.step_overlapped(t, &bufs).map(drop)
    } else {
        tr.step(t, g).map(drop)
    }
}

/// Every case's settings: the rules, collections, QSGD and buckets.
fn configs() -> Result<Vec<(String, Config)>> {
    let rgc = |momentum, factor_masking| Rule::Rgc {
        momentum,
        nesterov: false,
        weight_decay: 0.0,
        factor_masking,
    };
    let mut out = Vec::new();
    for (rname, rule, lr) in [
        ("topk", Rule::TopK, 0.5),
        ("rgc masking", rgc(0.5, true), 0.25),
        ("rgc", rgc(0.75, false), 0.25),
    ] {
        let base = Config::new(lr, 0.05, rule)?.compress_threshold(0);
        let mut cases = vec![
            ("global".to_string(), base),
            ("paper".into(), base.collection(Collection::Paper)),
            (
                "buckets per layer".into(),
                base.buckets(Buckets::new(4 * 500)?)?,
            ),
            (
                "buckets global".into(),
                base.buckets(Buckets::new(4 * 500)?.budget(BucketBudget::Global))?,
            ),
        ];
        if rule == Rule::TopK {
            cases.push(("qsgd".into(), base.qsgd(4, 64, true)?));
        }
        out.extend(
            cases
                .drain(..)
                .map(|(c, cfg)| (format!("{rname}, {c}"), cfg)),
        );
    }
    Ok(out)
}

#[test]
fn fused_feedback_leaves_the_state_the_separate_calls_leave() {
    let cases = configs().unwrap();
    for spec in ["topk_a", "spardl", "ok_topk"] {
        for pipelined in [false, true] {
            let out = ThreadCluster::new(3).run(|t| {
                for (name, cfg) in &cases {
                    let ctx = format!("{spec}, {name}, pipelined {pipelined}");
                    let count = Arc::new(AtomicUsize::new(0));
                    let mut fused = trainer(*cfg, spec, Some(&count))?;
                    let mut separate = trainer(*cfg, spec, None)?;
                    let mut rng = Rng::seed_from_u64(7 + t.rank() as u64);
                    for s in 0..5 {
                        let g: Vec<Vec<f32>> = SIZES.iter().map(|&n| dyadic(n, &mut rng)).collect();
                        step(&mut fused, t, &g, pipelined)?;
                        step(&mut separate, t, &g, pipelined)?;
                        let bits = |w: Vec<Vec<f32>>| -> Vec<Vec<u32>> {
                            w.iter()
                                .map(|l| l.iter().map(|x| x.to_bits()).collect())
                                .collect()
                        };
                        assert_eq!(
                            bits(fused.weights()?),
                            bits(separate.weights()?),
                            "{ctx}: weights after step {s}"
                        );
                        assert_eq!(
                            bits(fused.residuals()?),
                            bits(separate.residuals()?),
                            "{ctx}: residuals after step {s}"
                        );
                        assert_eq!(
                            fused.save_state()?,
                            separate.save_state()?,
                            "{ctx}: training state after step {s}"
                        );
                    }
                    // Every compressed layer fused at every step.
                    assert_eq!(count.load(Ordering::Relaxed), 5 * SIZES.len(), "{ctx}");
                }
                Ok(())
            });
            for r in out {
                r.unwrap();
            }
        }
    }
}

/// An accumulator that overflows to infinity (`lr g` with `lr = 4`,
/// `g = 1e38`): the fused selection holds it, the step fails on every
/// rank with the error the separate calls give (rank 1 names index 17),
/// no weight moves and the memory keeps everything (the selection put
/// back); the residual keeps failing the steps that follow.
#[test]
fn an_infinite_accumulator_fails_as_the_separate_calls_do() {
    let out = ThreadCluster::new(2).run(|t| {
        let cfg = Config::new(4.0, 0.05, Rule::TopK)?.compress_threshold(0);
        let count = Arc::new(AtomicUsize::new(0));
        let mut fused = trainer(cfg, "topk_a", Some(&count))?;
        let mut separate = trainer(cfg, "topk_a", None)?;
        let mut rng = Rng::seed_from_u64(3 + t.rank() as u64);
        let mut g: Vec<Vec<f32>> = SIZES.iter().map(|&n| dyadic(n, &mut rng)).collect();
        if t.rank() == 1 {
            g[0][17] = 1e38;
            g[0][40] = -1e38;
        }
        let w0 = fused.weights()?;
        for s in 0..2 {
            let a = fused.step(t, &g).map(drop);
            let b = separate.step(t, &g).map(drop);
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "step {s}");
            assert!(a.is_err(), "step {s}: {a:?}");
            if t.rank() == 1 {
                assert!(
                    matches!(a, Err(sparse_core::Error::NonFinite { index: 17 })),
                    "step {s}: {a:?}"
                );
            }
            assert_eq!(fused.weights()?, w0);
            let bits = |w: Vec<Vec<f32>>| -> Vec<Vec<u32>> {
                w.iter()
                    .map(|l| l.iter().map(|x| x.to_bits()).collect())
                    .collect()
            };
            assert_eq!(
                bits(fused.residuals()?),
                bits(separate.residuals()?),
                "step {s}"
            );
        }
        // Rank 1's layer 0 fused and failed at both steps, its local work
        // stopping there; rank 0's layers all fused.
        let per_step = if t.rank() == 1 { 1 } else { SIZES.len() };
        assert_eq!(count.load(Ordering::Relaxed), 2 * per_step);
        Ok(())
    });
    for r in out {
        r.unwrap();
    }
}
