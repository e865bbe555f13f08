//! A step is all or nothing on every rank (issue 27): a failure part way,
//! a sum that overflows, a collective or a selector that lies, ranks whose
//! layers differ: an error on every rank with no weight moved and no
//! residual lost, or, where ranks did end apart, an error at every later
//! step instead of training on. With fused buckets of layers too
//! ([`Config::buckets`]: one collective call for several layers), and
//! pipelined ([`Trainer::step_overlapped`]).

use backend_cpu::Cpu;
use rand::{Rng as _, SeedableRng as _};
use residual_sgd::{Buckets, Config, LayerSpec, Rule, Trainer};
use sparse_coll::{
    Defaults, Entered, Profile, Reduced, Registry, SparseAllreduce, ThreadCluster, Transport,
};
use sparse_core::backend::BufferOps as _;
use sparse_core::cost::Cost;
use sparse_core::testing::Rng;
use sparse_core::{Backend, Error, Result, SparseVec};
use sparse_select::{RadixTopK, Selection, Selector};
use std::sync::Mutex;

type Tr = Trainer<Cpu, RadixTopK>;

/// The collectives of `sparse-bench train`'s schemes, and the ones that
/// keep state across calls (a call count, thresholds, a planner's choice,
/// B-SAG's h), which a failure part way may advance on some ranks only.
const SPECS: [&str; 8] = [
    "topk_a",
    "topk_a:values=ssmean",
    "spardl",
    "ssar_recursive_double",
    "ok_topk",
    "auto",
    "spardl_bsag",
    "dsar_split_allgather:qsgd=4",
];

/// Dyadic values (multiples of 1/8): every sum is exact.
fn dyadic(n: usize, rng: &mut Rng) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.random_range(0..129) as f32 - 64.0) / 8.0)
        .collect()
}

/// The settings of these tests, with every layer in one fused bucket
/// where `fused`.
fn config(lr: f32, density: f64, fused: bool) -> Result<Config> {
    let cfg = Config::new(lr, density, Rule::TopK)?.compress_threshold(0);
    if fused {
        cfg.buckets(Buckets::default())
    } else {
        Ok(cfg)
    }
}

fn trainer(spec: &str, sizes: &[usize], fused: bool) -> Result<Tr> {
    let cfg = config(0.5, 0.1, fused)?;
    let w0: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![0.25; n]).collect();
    Trainer::new(
        Cpu,
        cfg,
        LayerSpec::matrices(sizes),
        &w0,
        RadixTopK::magnitude(),
        |_: &LayerSpec| Registry::builtin().build(spec, Defaults::density(0.1)?),
    )
}

fn grads(rank: usize, step: u64, sizes: &[usize]) -> Vec<Vec<f32>> {
    let mut rng = Rng::seed_from_u64(step * 100 + rank as u64);
    sizes.iter().map(|&n| dyadic(n, &mut rng)).collect()
}

/// Fault injection at every call position of a step, on the first and the
/// last rank, P = 2..5, for the collectives `sparse-bench train` runs: a rank that
/// returns `Ok` applied the whole step, a rank that returns an error
/// applied nothing (weights as before, every residual holding its
/// selection), and on a new transport the next step either succeeds on
/// every rank with identical weights or, where ranks ended apart, fails on
/// every rank, naming the weights.
#[test]
fn a_failure_part_way_splits_no_ranks() {
    let sizes = [100usize, 50];
    for spec in SPECS {
        let variants =
            (2..=5usize).flat_map(|p| [(p, false, false), (p, true, false), (p, true, true)]);
        for (p, fused, pipelined) in variants {
            // The clean step: its weights and each rank's number of calls.
            let clean = ThreadCluster::new(p).run(|t| {
                let mut tr = trainer(spec, &sizes, fused)?;
                let before = t.traffic().rounds;
                let g = grads(t.rank(), 0, &sizes);
                step(&mut tr, t, &g, pipelined)?;
                Ok((tr.weights()?, t.traffic().rounds - before))
            });
            let clean: Vec<(Vec<Vec<f32>>, u64)> = clean.into_iter().map(Result::unwrap).collect();
            let initial = trainer(spec, &sizes, fused).unwrap().weights().unwrap();
            for faulty in [0, p - 1] {
                for call in 1..=clean[faulty].1 {
                    let ctx = format!(
                        "{spec} P = {p}, fused {fused}, pipelined {pipelined}, rank {faulty} \
                         fails at call {call}"
                    );
                    let case = Case {
                        spec,
                        sizes: &sizes,
                        fused,
                        pipelined,
                    };
                    check_fault(&case, p, faulty, call, &clean[0].0, &initial, &ctx);
                }
            }
        }
    }
}

/// A trainer's collective, layers and buckets, and whether its steps
/// are pipelined.
struct Case<'a> {
    spec: &'a str,
    sizes: &'a [usize],
    fused: bool,
    pipelined: bool,
}

/// One step, plain or pipelined ([`Trainer::step_overlapped`], the
/// gradients in backend buffers), with any selector.
fn step<S: Selector<Cpu, f32> + Send>(
    tr: &mut Trainer<Cpu, S>,
    t: &mut dyn Transport,
    g: &[Vec<f32>],
    pipelined: bool,
) -> Result<residual_sgd::StepReport> {
    if pipelined {
        let bufs = g
            .iter()
            .map(|g| Cpu.upload(g))
            .collect::<Result<Vec<_>>>()?;
        tr.step_overlapped(t, &bufs)
    } else {
        tr.step(t, g)
    }
}

fn check_fault(
    case: &Case<'_>,
    p: usize,
    faulty: usize,
    call: u64,
    stepped: &[Vec<f32>],
    initial: &[Vec<f32>],
    ctx: &str,
) {
    let kept: Mutex<Vec<Option<Tr>>> = Mutex::new((0..p).map(|_| None).collect());
    let first = ThreadCluster::new(p)
        .timeout(std::time::Duration::from_secs(5))
        .fault(faulty, call)
        .run(|t| {
            let mut tr = trainer(case.spec, case.sizes, case.fused)?;
            let g = grads(t.rank(), 0, case.sizes);
            let out = step(&mut tr, t, &g, case.pipelined);
            let w = tr.weights()?;
            match &out {
                Ok(_) => assert_eq!(w, stepped, "{ctx}: rank {} returned Ok", t.rank()),
                Err(_) => {
                    assert_eq!(w, initial, "{ctx}: rank {} failed", t.rank());
                    // Nothing taken from any memory: every residual holds
                    // lr g (top-k SGD's memory), or, where the step failed
                    // in its entry round before any local work, nothing.
                    let res = tr.residuals()?;
                    let whole: Vec<Vec<f32>> = g
                        .iter()
                        .map(|g| g.iter().map(|x| 0.5 * x).collect())
                        .collect();
                    let untouched = res.iter().flatten().all(|&x| x == 0.0);
                    assert!(
                        res == whole || untouched,
                        "{ctx}: rank {} lost a residual",
                        t.rank()
                    );
                }
            }
            kept.lock().unwrap()[t.rank()] = Some(tr);
            Ok(out.is_ok())
        });
    let ok: Vec<bool> = first.into_iter().map(|r| r.unwrap()).collect();
    let apart = ok.iter().any(|&o| o) && ok.iter().any(|&o| !o);
    let second = ThreadCluster::new(p).run(|t| {
        let mut tr = kept.lock().unwrap()[t.rank()].take().expect("kept");
        let g = grads(t.rank(), 1, case.sizes);
        let out = step(&mut tr, t, &g, case.pipelined);
        Ok((out.map(drop), tr.weights()?))
    });
    let second: Vec<(Result<()>, Vec<Vec<f32>>)> = second.into_iter().map(Result::unwrap).collect();
    for (r, (out, w)) in second.iter().enumerate() {
        if apart {
            assert!(
                matches!(out, Err(Error::Disagreement { .. })),
                "{ctx}: ranks ended apart, rank {r} stepped on: {out:?}"
            );
        } else {
            assert!(out.is_ok(), "{ctx}: rank {r}: {out:?}");
            assert_eq!(w, &second[0].1, "{ctx}: rank {r} weights differ");
        }
    }
}

/// Every rank's gradient holds 3e38: the sum overflows to infinity. With
/// every collective the step is an error on every rank, with no weight
/// moved and every residual kept.
#[test]
fn an_overflowing_sum_is_an_error_on_every_rank_with_the_state_kept() {
    for spec in [
        "topk_a",
        "spardl",
        "ssar_recursive_double",
        "dsar_split_allgather:qsgd=4",
    ] {
        for p in [2usize, 3, 4] {
            let out = ThreadCluster::new(p).run(|t| {
                let cfg = Config::new(1.0, 0.5, Rule::TopK)?.compress_threshold(0);
                let mut tr: Tr = Trainer::new(
                    Cpu,
                    cfg,
                    LayerSpec::matrices(&[4]),
                    &[vec![1.0; 4]],
                    RadixTopK::magnitude(),
                    |_: &LayerSpec| Registry::builtin().build(spec, Defaults::k(2)?),
                )?;
                let g = vec![vec![3e38f32, -1.0, 3e38, 2.0]];
                let res = tr.step(t, &g);
                assert!(res.is_err(), "{spec} P = {p} rank {}: {res:?}", t.rank());
                assert_eq!(tr.weights()?, vec![vec![1.0; 4]], "{spec}: no weight moved");
                assert_eq!(tr.residuals()?, g, "{spec}: the residual kept");
                Ok(())
            });
            for r in out {
                r.unwrap();
            }
        }
    }
}

/// How a rogue collective lies.
#[derive(Clone, Copy, Debug)]
enum Lie {
    Unsorted,
    WrongDimension,
    NaN,
    RankDependent,
}

/// TopkA whose result lies.
struct Rogue {
    inner: Box<dyn SparseAllreduce<f32>>,
    lie: Lie,
}

impl SparseAllreduce<f32> for Rogue {
    fn name(&self) -> String {
        "rogue".into()
    }
    fn lossless(&self) -> bool {
        true
    }
    fn cost(&self, prof: &Profile) -> Cost {
        self.inner.cost(prof)
    }
    fn enter(&mut self, t: &mut dyn Transport, v: &SparseVec<f32>) -> Result<Entered> {
        self.inner.enter(t, v)
    }
    fn agreed_body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<f32>,
        entered: Entered,
        red: &mut Reduced<f32>,
    ) -> Result<Result<()>> {
        self.inner.body(t, v, entered, red)?;
        let (dim, mut idx, mut val) = (
            red.result.dim(),
            red.result.indices().to_vec(),
            red.result.values().to_vec(),
        );
        match self.lie {
            Lie::Unsorted => idx.reverse(),
            Lie::WrongDimension => {}
            Lie::NaN => val[0] = f32::NAN,
            Lie::RankDependent => val[0] += t.rank() as f32,
        }
        let dim = if matches!(self.lie, Lie::WrongDimension) {
            dim + 1
        } else {
            dim
        };
        red.result = SparseVec::new_unchecked(dim, idx, val);
        Ok(Ok(()))
    }
}

/// A collective whose result is unsorted, of the wrong dimension, holds a
/// NaN, or differs between ranks: an error on every rank, nothing applied.
#[test]
fn a_lying_collective_is_an_error_on_every_rank() {
    let lies = [
        Lie::Unsorted,
        Lie::WrongDimension,
        Lie::NaN,
        Lie::RankDependent,
    ];
    // One layer, and two fused into one bucket (whose result the trainer
    // cuts back into the layers' before the check).
    for (lie, sizes) in lies
        .into_iter()
        .flat_map(|l| [(l, &[20usize][..]), (l, &[20, 12][..])])
    {
        let zeros: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![0.0; n]).collect();
        let out = ThreadCluster::new(3).run(|t| {
            let cfg = config(1.0, 0.5, sizes.len() > 1)?;
            let mut tr: Tr = Trainer::new(
                Cpu,
                cfg,
                LayerSpec::matrices(sizes),
                &zeros,
                RadixTopK::magnitude(),
                |_: &LayerSpec| -> Result<Box<dyn SparseAllreduce<f32>>> {
                    Ok(Box::new(Rogue {
                        inner: Registry::builtin().build("topk_a", Defaults::lossless())?,
                        lie,
                    }))
                },
            )?;
            let mut rng = Rng::seed_from_u64(t.rank() as u64 + 1);
            let g: Vec<Vec<f32>> = sizes.iter().map(|&n| dyadic(n, &mut rng)).collect();
            assert_eq!(tr.buckets().len(), 1);
            let res = tr.step(t, &g);
            assert!(res.is_err(), "{lie:?} rank {}: {res:?}", t.rank());
            if matches!(lie, Lie::RankDependent) {
                assert!(
                    matches!(
                        res,
                        Err(Error::Disagreement {
                            what: "results",
                            ..
                        })
                    ),
                    "{res:?}"
                );
            }
            assert_eq!(tr.weights()?, zeros, "{lie:?}: nothing applied");
            Ok(())
        });
        for r in out {
            r.unwrap();
        }
    }
}

/// Top-k by magnitude whose values are doubled: it would create gradient
/// mass if its values were sent.
#[derive(Clone)]
struct Doubling;

impl<B: Backend<f32>> Selector<B, f32> for Doubling {
    fn name(&self) -> String {
        "doubling".into()
    }
    fn select(&mut self, b: &B, x: &B::Buffer<f32>, k: usize) -> Result<Selection<B, f32>> {
        let sel = RadixTopK::magnitude().select(b, x, k)?;
        let doubled: Vec<f32> = b.download(&sel.values)?.iter().map(|v| 2.0 * v).collect();
        Ok(Selection {
            values: b.upload(&doubled)?,
            ..sel
        })
    }
}

/// The values sent are the accumulator's, not the selector's: a selector
/// that doubles its values trains exactly as the honest one.
#[test]
fn the_sent_values_come_from_the_accumulator() {
    let sizes = [64usize, 32];
    let out = ThreadCluster::new(2).run(|t| {
        let cfg = Config::new(0.5, 0.1, Rule::TopK)?.compress_threshold(0);
        let w0: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![0.0; n]).collect();
        let comm = |_: &LayerSpec| Registry::builtin().build("topk_a", Defaults::lossless());
        let layers = LayerSpec::matrices(&sizes);
        let mut honest = Trainer::new(Cpu, cfg, layers.clone(), &w0, RadixTopK::magnitude(), comm)?;
        let mut doubling = Trainer::new(Cpu, cfg, layers, &w0, Doubling, comm)?;
        for step in 0..5 {
            let g = grads(t.rank(), step, &sizes);
            let a = honest.step(t, &g)?;
            let b = doubling.step(t, &g)?;
            assert_eq!(a.sent, b.sent, "step {step}");
        }
        assert_eq!(honest.weights()?, doubling.weights()?);
        assert_eq!(honest.residuals()?, doubling.residuals()?);
        Ok(())
    });
    for r in out {
        r.unwrap();
    }
}

/// Ranks whose layers differ only in their number of dimensions get an
/// error: the last layer is small enough to go dense on both, but its
/// dimensions pick the output layer that quantized mode exempts (layer 1
/// on rank 0, none of the compressed ones on rank 1).
#[test]
fn ranks_with_different_layer_dims_disagree() {
    let out = ThreadCluster::new(2).run(|t| {
        let last_dims = if t.rank() == 0 { 1 } else { 2 };
        let specs: Vec<LayerSpec> = [(100usize, 2usize), (100, 2), (2, last_dims)]
            .iter()
            .enumerate()
            .map(|(i, &(len, dims))| LayerSpec {
                name: format!("layer{i}"),
                len,
                dims,
            })
            .collect();
        let rgc = Rule::Rgc {
            momentum: 0.9,
            nesterov: false,
            weight_decay: 0.0,
            factor_masking: false,
        };
        let cfg = Config::new(0.5, 0.1, rgc)?
            .compress_threshold(16)
            .quantized()?;
        let w0 = vec![vec![0.0; 100], vec![0.0; 100], vec![0.0; 2]];
        let mut tr: Tr = Trainer::new(
            Cpu,
            cfg,
            specs,
            &w0,
            RadixTopK::magnitude(),
            |_: &LayerSpec| Registry::builtin().build("topk_a", Defaults::lossless()),
        )?;
        assert_eq!(tr.compressed(), [true, true, false]);
        let mut rng = Rng::seed_from_u64(9);
        let g = vec![dyadic(100, &mut rng), dyadic(100, &mut rng), vec![1.0, 2.0]];
        Ok(tr.step(t, &g))
    });
    for (r, res) in out.into_iter().enumerate() {
        let res = res.unwrap();
        assert!(
            matches!(res, Err(Error::Disagreement { .. })),
            "rank {r}: {res:?}"
        );
    }
}

/// Top-k by magnitude whose `fail`-th selection of the trainer (counted
/// over its layers, from 0, shared by the clones each layer holds) fails:
/// an error in one rank's local work, part way through a step.
#[derive(Clone)]
struct Failing {
    fail: Option<usize>,
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl<B: Backend<f32>> Selector<B, f32> for Failing {
    fn name(&self) -> String {
        "failing".into()
    }
    fn select(&mut self, b: &B, x: &B::Buffer<f32>, k: usize) -> Result<Selection<B, f32>> {
        let call = self
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.fail == Some(call) {
            return Err(Error::invalid(
                "selector",
                format!("injected failure at call {call}"),
            ));
        }
        RadixTopK::magnitude().select(b, x, k)
    }
}

/// A failure in the local work of one rank (the first, the last) or of
/// every rank, at each of its selections, for every collective of
/// `SPECS`, P = 2 to 4, unfused and fused,
/// plain and pipelined, with a layer kept dense: the failing rank sends
/// empty selections and zeros through every collective, so no peer waits;
/// the step is an error on every rank (the injected one where it was
/// injected, `PeerError` elsewhere), no weight moves, every compressed
/// layer's memory holds its compensated gradient (`lr g`) or, where the
/// failing rank's local work stopped before it, nothing, and the next step
/// on the same transport succeeds on every rank with identical weights.
#[test]
fn a_failure_in_local_work_fails_every_rank_and_the_next_step_goes_on() {
    // Layer 2 (3 parameters, 12 bytes) stays dense.
    let sizes = [100usize, 50, 3];
    let compressed = 2;
    for spec in SPECS {
        for (p, fused, pipelined) in (2..=4usize)
            .flat_map(|p| [false, true].map(move |f| (p, f)))
            .flat_map(|(p, f)| [false, true].map(move |pl| (p, f, pl)))
        {
            for who in ["first", "last", "every"] {
                for call in 0..compressed {
                    let ctx = format!(
                        "{spec} P = {p}, fused {fused}, pipelined {pipelined}, {who} rank fails \
                         at selection {call}"
                    );
                    local_failure(spec, &sizes, (p, fused, pipelined), (who, call), &ctx);
                }
            }
        }
    }
}

/// One run of the test above: `spec` over layers of `sizes` on `p`
/// ranks, fused or not, pipelined or not, the local work of `who` (the
/// first rank, the last, every one) failing at its selection `call`.
fn local_failure(
    spec: &str,
    sizes: &[usize],
    (p, fused, pipelined): (usize, bool, bool),
    (who, call): (&str, usize),
    ctx: &str,
) {
    let out = ThreadCluster::new(p)
        .timeout(std::time::Duration::from_secs(10))
        .run(|t| {
            let r = t.rank();
            let failing = match who {
                "first" => r == 0,
                "last" => r == p - 1,
                _ => true,
            };
            let cfg = config(0.5, 0.1, fused)?.compress_threshold(12);
            let w0: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![0.25; n]).collect();
            let sel = Failing {
                fail: failing.then_some(call),
                calls: Default::default(),
            };
            let mut tr = Trainer::new(Cpu, cfg, LayerSpec::matrices(sizes), &w0, sel, |_| {
                Registry::builtin().build(spec, Defaults::density(0.1)?)
            })?;
            let g = grads(r, 0, sizes);
            let first = step(&mut tr, t, &g, pipelined).map(drop);
            match (&first, failing) {
                (
                    Err(Error::InvalidParameter {
                        name: "selector", ..
                    }),
                    true,
                ) => {}
                (Err(Error::PeerError { .. }), false) => {}
                _ => panic!("{ctx}: rank {r}: {first:?}"),
            }
            assert_eq!(tr.weights()?, w0, "{ctx}: rank {r} moved a weight");
            let res = tr.residuals()?;
            for (l, (res, g)) in res.iter().zip(&g).enumerate().take(2) {
                let whole: Vec<f32> = g.iter().map(|x| 0.5 * x).collect();
                let untouched = failing && res.iter().all(|&x| x == 0.0);
                assert!(
                    *res == whole || untouched,
                    "{ctx}: rank {r} layer {l} lost a residual"
                );
            }
            let g = grads(r, 1, sizes);
            tr.step(t, &g)?;
            tr.weights()
        });
    let w: Vec<Vec<Vec<f32>>> = out
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("{ctx}: {e:?}")))
        .collect();
    assert!(w.iter().all(|x| *x == w[0]), "{ctx}: weights differ");
}
