//! Hostile review of issue 43's fused error feedback (commit 9470353),
//! through the public API only. The oracle everywhere: the same trainer
//! whose memories never fuse (their `compensate_topk` left at the
//! default), driven with the same inputs and failures; the weights,
//! residuals, training state and errors must agree bit for bit.

use backend_cpu::Cpu;
use rand::{Rng as _, SeedableRng as _};
use residual_sgd::memory::for_rule;
use residual_sgd::{
    BucketBudget, Buckets, Collection, Config, LayerSpec, Memory, Rule, StepReport, Trainer,
};
use sparse_coll::{Defaults, Registry, ThreadCluster, ThreadTransport, Transport};
use sparse_core::state::State;
use sparse_core::testing::Rng;
use sparse_core::{Backend, Error, Result, Selected, SparseVec};
use sparse_select::{RadixTopK, Selector};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How a wrapped memory answers `compensate_topk`.
#[derive(Clone, Copy, PartialEq)]
enum Fuse {
    /// Never: the default, the trainer makes the separate calls.
    Never,
    /// As the inner memory does.
    Inner,
    /// Fuses, then hands back a selection with an index past the layer.
    Corrupt,
    /// As `Inner`, but `remove` fails (a backend error at the update).
    InnerBadRemove,
    /// As `Never`, but `remove` fails.
    NeverBadRemove,
}

struct Wrapped<B: Backend<f32>>(Box<dyn Memory<B>>, Fuse, Arc<AtomicUsize>);

impl<B: Backend<f32>> Memory<B> for Wrapped<B> {
    fn compensate(&mut self, b: &B, g: &B::Buffer<f32>) -> Result<()> {
        self.0.compensate(b, g)
    }
    fn compensate_topk(
        &mut self,
        b: &B,
        g: &B::Buffer<f32>,
        k: usize,
    ) -> Result<Option<Selected<B, f32>>> {
        match self.1 {
            Fuse::Never | Fuse::NeverBadRemove => Ok(None),
            Fuse::Inner | Fuse::InnerBadRemove => {
                let out = self.0.compensate_topk(b, g, k)?;
                if out.is_some() {
                    self.2.fetch_add(1, Ordering::Relaxed);
                }
                Ok(out)
            }
            Fuse::Corrupt => {
                let Some(s) = self.0.compensate_topk(b, g, k)? else {
                    return Ok(None);
                };
                let n = b.len(self.0.accumulator()) as u32;
                let mut idx = b.download(&s.indices)?;
                let last = idx.len() - 1;
                idx[last] = n + 7;
                Ok(Some(Selected {
                    indices: b.upload(&idx)?,
                    values: s.values,
                }))
            }
        }
    }
    fn accumulator(&self) -> &B::Buffer<f32> {
        self.0.accumulator()
    }
    fn accumulator_mut(&mut self) -> &mut B::Buffer<f32> {
        self.0.accumulator_mut()
    }
    fn remove(&mut self, b: &B, indices: &B::Buffer<u32>) -> Result<()> {
        if matches!(self.1, Fuse::InnerBadRemove | Fuse::NeverBadRemove) {
            return Err(Error::invalid("probe", "remove fails"));
        }
        self.0.remove(b, indices)
    }
    fn restore(&mut self, b: &B, back: &SparseVec<f32>) -> Result<()> {
        self.0.restore(b, back)
    }
    fn save_state(&self, b: &B) -> Result<State> {
        self.0.save_state(b)
    }
    fn load_state(&mut self, b: &B, s: &State) -> Result<()> {
        self.0.load_state(b, s)
    }
}

/// RGC at learning rate 0.07, density 5% and momentum 0.9, with or
/// without factor masking, every layer compressed.
fn rgc_cfg(factor_masking: bool) -> Config {
    Config::new(0.07, 0.05, rgc(0.9, false, factor_masking))
        .unwrap()
        .compress_threshold(0)
}

/// `cfg` with buckets of `bytes` under a global budget.
fn global_buckets(cfg: Config, bytes: usize) -> Config {
    cfg.buckets(Buckets::new(bytes).unwrap().budget(BucketBudget::Global))
        .unwrap()
}

fn rgc(momentum: f32, nesterov: bool, factor_masking: bool) -> Rule {
    Rule::Rgc {
        momentum,
        nesterov,
        weight_decay: 0.0,
        factor_masking,
    }
}

/// A trainer over `sizes` whose layer memories answer as `fuse(l)` says
/// (fusions counted in `count`).
fn build<B, S>(
    b: B,
    cfg: Config,
    sizes: &[usize],
    spec: &str,
    sel: S,
    fuse: impl Fn(usize) -> Fuse,
    count: &Arc<AtomicUsize>,
) -> Result<Trainer<B, S>>
where
    B: Backend<f32> + Clone + 'static,
    S: Selector<B, f32> + Clone,
{
    let mut l = 0;
    Trainer::with_memory(
        b,
        cfg,
        LayerSpec::matrices(sizes),
        &initial(sizes),
        sel,
        |_| Registry::builtin().build(spec, Defaults::density(0.05)?),
        |b, layer| {
            let f = fuse(l);
            l += 1;
            wrapped(b, cfg, layer.len, f, count)
        },
    )
}

/// The initial weights of layers of `sizes`: 0.5 everywhere.
fn initial(sizes: &[usize]) -> Vec<Vec<f32>> {
    sizes.iter().map(|&n| vec![0.5; n]).collect()
}

/// The memory of `cfg`'s rule for a layer of `len`, answering as `fuse`
/// says (fusions counted in `count`).
fn wrapped<B: Backend<f32> + 'static>(
    b: &B,
    cfg: Config,
    len: usize,
    fuse: Fuse,
    count: &Arc<AtomicUsize>,
) -> Result<Box<dyn Memory<B>>> {
    let m = for_rule(b, cfg.rule(), cfg.lr(), len)?;
    Ok(Box::new(Wrapped(m, fuse, count.clone())))
}

/// A trainer whose memories fuse as their own do, and the oracle beside
/// it, alike but for memories that never fuse (fusions counted in
/// `count`).
fn pair<B>(
    be: &B,
    cfg: Config,
    sizes: &[usize],
    spec: &str,
    count: &Arc<AtomicUsize>,
) -> Result<(Trainer<B, RadixTopK>, Trainer<B, RadixTopK>)>
where
    B: Backend<f32> + Clone + 'static,
{
    let mk = |f| {
        build(
            be.clone(),
            cfg,
            sizes,
            spec,
            RadixTopK::magnitude(),
            move |_| f,
            count,
        )
    };
    Ok((mk(Fuse::Inner)?, mk(Fuse::Never)?))
}

/// [`pair`] on the CPU.
fn cpu_pair(
    cfg: Config,
    sizes: &[usize],
    spec: &str,
) -> Result<(Trainer<Cpu, RadixTopK>, Trainer<Cpu, RadixTopK>)> {
    pair(&Cpu, cfg, sizes, spec, &Arc::new(AtomicUsize::new(0)))
}

/// A pipelined step whose producer pushes every layer of `g`, the last
/// first, then fails where `fail` says.
fn push_all_then_fail<B, S>(
    tr: &mut Trainer<B, S>,
    t: &mut dyn Transport,
    g: &[Vec<f32>],
    fail: bool,
) -> Result<StepReport>
where
    B: Backend<f32> + Sync,
    S: Selector<B, f32> + Send,
{
    tr.step_with(t, |feed| {
        for l in (0..g.len()).rev() {
            feed.push_host(l, &g[l])?;
        }
        if fail {
            return Err(Error::invalid("probe", "producer fails"));
        }
        Ok(())
    })
}

/// A step of `tr` on the CPU, pipelined (`step_overlapped`) or not.
fn cpu_step<S: Selector<Cpu, f32> + Send>(
    tr: &mut Trainer<Cpu, S>,
    t: &mut dyn Transport,
    g: &[Vec<f32>],
    pipelined: bool,
) -> Result<StepReport> {
    if pipelined {
        tr.step_overlapped(t, g)
    } else {
        tr.step(t, g)
    }
}

/// The densities the density probes step through, k from 0.05 n to n
/// and back.
const DENSITIES: [f64; 7] = [0.05, 1.0, 1.0, 0.3, 0.001, 1.0, 0.5];

/// Step `s` of a density probe: `a` and `b` set to density `d`, and the
/// step's gradients (scaled by 2), with zeros of both signs at every
/// third entry on odd steps.
fn at_density<B, S>(
    (a, b): (&mut Trainer<B, S>, &mut Trainer<B, S>),
    (s, d): (usize, f64),
    sizes: &[usize],
    rng: &mut Rng,
) -> Result<Vec<Vec<f32>>>
where
    B: Backend<f32>,
    S: Selector<B, f32>,
{
    a.set_density(d)?;
    b.set_density(d)?;
    let mut g = random(sizes, rng, 2.0);
    if s % 2 == 1 {
        for l in &mut g {
            for (i, x) in l.iter_mut().enumerate() {
                if i % 3 == 0 {
                    *x = if i % 2 == 0 { -0.0 } else { 0.0 };
                }
            }
        }
    }
    Ok(g)
}

fn cpu(cfg: Config, sizes: &[usize], spec: &str, fuse: Fuse) -> Result<Trainer<Cpu, RadixTopK>> {
    let count = Arc::new(AtomicUsize::new(0));
    build(
        Cpu,
        cfg,
        sizes,
        spec,
        RadixTopK::magnitude(),
        |_| fuse,
        &count,
    )
}

fn bits(w: &[Vec<f32>]) -> Vec<Vec<u32>> {
    w.iter()
        .map(|l| l.iter().map(|x| x.to_bits()).collect())
        .collect()
}

/// Everything a trainer holds, as comparable data.
type Snap = (Vec<Vec<u32>>, Vec<Vec<u32>>, State);

fn snap<B: Backend<f32>, S: Selector<B, f32>>(tr: &Trainer<B, S>) -> Result<Snap> {
    Ok((
        bits(&tr.weights()?),
        bits(&tr.residuals()?),
        tr.save_state()?,
    ))
}

/// Non-dyadic gradients (uniform, scaled).
fn random(sizes: &[usize], rng: &mut Rng, scale: f32) -> Vec<Vec<f32>> {
    sizes
        .iter()
        .map(|&n| {
            (0..n)
                .map(|_| (rng.random::<f32>() - 0.5) * scale)
                .collect()
        })
        .collect()
}

/// `f` on `p` thread ranks, every rank's result unwrapped.
fn on_every_rank(p: usize, f: impl Fn(&mut ThreadTransport) -> Result<()> + Sync) {
    for r in ThreadCluster::new(p).run(f) {
        r.unwrap();
    }
}

/// `f` on the ranks of a fresh `cluster()` twice, with memories that
/// fuse (as their own memories do) and with memories that never fuse:
/// each rank's two results, unwrapped.
fn fused_and_separate<T: Send>(
    cluster: impl Fn() -> ThreadCluster,
    f: impl Fn(&mut ThreadTransport, Fuse) -> Result<T> + Sync,
) -> Vec<(T, T)> {
    let fused = cluster().run(|t| f(t, Fuse::Inner));
    let separate = cluster().run(|t| f(t, Fuse::Never));
    fused
        .into_iter()
        .zip(separate)
        .map(|(x, y)| (x.unwrap(), y.unwrap()))
        .collect()
}

fn err_text<T>(r: &Result<T>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => format!("{e:?}"),
    }
}

const SIZES: [usize; 3] = [300, 120, 64];

/// Gradients of a layer of two that drive RGC's momentum (0.9, learning
/// rate 1) to an infinity at index 0 and then a NaN at index 1.
const TOWARDS_NAN: [[f32; 2]; 4] = [
    [3.4e38, 3.0e38],
    [3.4e38, 0.0],
    [0.0, -3.4e38],
    [0.0, -3.4e38],
];

/// Steps a fusing and a non-fusing trainer over layers of `sizes` and the
/// collective `spec` on backend `be` side by side, `steps` steps of
/// inexact gradients (times `scale`): the reports' pairs, the errors, the
/// weights, residuals and training state agree bit for bit at every step.
fn side_by_side<B>(
    t: &mut dyn Transport,
    be: &B,
    cfg: Config,
    (sizes, spec): (&[usize], &str),
    pipelined: bool,
    (steps, scale): (usize, f32),
) -> Result<()>
where
    B: Backend<f32> + Clone + Sync + 'static,
{
    let count = Arc::new(AtomicUsize::new(0));
    let (mut a, mut b) = pair(be, cfg, sizes, spec, &count)?;
    let mut rng = Rng::seed_from_u64(11 + t.rank() as u64);
    for s in 0..steps {
        let g = random(sizes, &mut rng, scale);
        let (ra, rb) = if pipelined {
            let bufs = g.iter().map(|g| be.upload(g)).collect::<Result<Vec<_>>>()?;
            (a.step_overlapped(t, &bufs), b.step_overlapped(t, &bufs))
        } else {
            (a.step(t, &g), b.step(t, &g))
        };
        let ctx = format!("{:?} {spec} pipelined {pipelined} step {s}", cfg.rule());
        assert_eq!(err_text(&ra), err_text(&rb), "{ctx}");
        if let (Ok(ra), Ok(rb)) = (ra, rb) {
            assert_eq!(ra.sent, rb.sent, "{ctx}: sent");
            assert_eq!(ra.dropped, rb.dropped, "{ctx}: dropped");
        }
        assert_eq!(bits(&a.weights()?), bits(&b.weights()?), "{ctx}: weights");
        assert_eq!(
            bits(&a.residuals()?),
            bits(&b.residuals()?),
            "{ctx}: residuals"
        );
        assert_eq!(a.save_state()?, b.save_state()?, "{ctx}: state");
    }
    assert!(count.load(Ordering::Relaxed) > 0, "never fused");
    Ok(())
}

/// Every setting worth crossing with inexact values: the rules, both
/// collections, QSGD, buckets with both budgets.
fn settings() -> Result<Vec<Config>> {
    let mut out = Vec::new();
    for (rule, lr) in [
        (Rule::TopK, 0.1f32),
        (rgc(0.9, false, true), 0.03),
        (rgc(0.9, false, false), 0.07),
    ] {
        let base = Config::new(lr, 0.05, rule)?.compress_threshold(0);
        out.push(base);
        out.push(base.collection(Collection::Paper));
        out.push(base.buckets(Buckets::new(4 * 500)?)?);
        out.push(global_buckets(base, 4 * 500));
        if rule == Rule::TopK {
            out.push(base.qsgd(4, 64, true)?);
        }
        out.push(base.clip(0.7)?);
    }
    // Weight decay and plain RGC (momentum 0: a residual of gain 1).
    out.push(
        Config::new(
            0.05,
            0.05,
            Rule::Rgc {
                momentum: 0.9,
                nesterov: false,
                weight_decay: 0.01,
                factor_masking: true,
            },
        )?
        .compress_threshold(0),
    );
    out.push(Config::new(0.05, 0.05, rgc(0.0, false, false))?.compress_threshold(0));
    Ok(out)
}

/// Rounding: learning rates and momenta that make every product inexact
/// (the suite's own test uses dyadic values, where a fused multiply-add or
/// a different operation order changes nothing).
#[test]
fn inexact_values_bit_for_bit() {
    let cfgs = settings().unwrap();
    on_every_rank(3, |t| {
        for cfg in &cfgs {
            for spec in ["topk_a", "spardl", "ok_topk"] {
                for pipelined in [false, true] {
                    side_by_side(t, &Cpu, *cfg, (&SIZES, spec), pipelined, (5, 1.3))?;
                }
            }
        }
        Ok(())
    });
}

/// The same on the kernel backend (wgpu; lavapipe without a GPU), where
/// `accumulate_topk` is a kernel of its own: layers past the short
/// kernel's 2,048 and below it.
#[test]
fn wgpu_inexact_values_bit_for_bit() {
    let cfgs = settings().unwrap();
    let sizes = [5000usize, 300, 64];
    on_every_rank(2, |t| {
        let gpu = backend_cuda::WgpuBackend::new_default()?;
        for cfg in &cfgs {
            for pipelined in [false, true] {
                side_by_side(t, &gpu, *cfg, (&sizes, "topk_a"), pipelined, (4, 1.3))?;
            }
        }
        Ok(())
    });
}

/// Overflow on the kernel backend: the same errors and states as its
/// separate calls (huge gradients, RGC's momentum, a huge learning rate).
#[test]
fn wgpu_overflow_fails_as_the_separate_path() {
    on_every_rank(1, |t| {
        let gpu = backend_cuda::WgpuBackend::new_default()?;
        for (rule, lr) in [(rgc(0.9, false, false), 1.0f32), (Rule::TopK, 1e30)] {
            let cfg = Config::new(lr, 0.5, rule)?.compress_threshold(0);
            side_by_side(t, &gpu, cfg, (&[2], "topk_a"), false, (1, 1.0))?;
            let count = Arc::new(AtomicUsize::new(0));
            let (mut a, mut b) = pair(&gpu, cfg, &[3000, 2], "topk_a", &count)?;
            for (s, g2) in TOWARDS_NAN.iter().enumerate() {
                let mut big = vec![0.25f32; 3000];
                big[2998] = g2[0];
                big[2999] = g2[1];
                let g = vec![big, vec![0.5, -0.5]];
                let (ra, rb) = (a.step(t, &g), b.step(t, &g));
                assert_eq!(err_text(&ra), err_text(&rb), "{rule:?} step {s}");
                assert_eq!(
                    bits(&a.residuals()?),
                    bits(&b.residuals()?),
                    "{rule:?} step {s}"
                );
            }
        }
        Ok(())
    });
}

/// Accumulators that overflow (huge gradients, top-k SGD with a huge
/// learning rate, RGC's momentum): the same error (the first non-finite
/// index) and the same state at every step, on one rank and on two.
#[test]
fn overflowing_accumulators_fail_as_the_separate_path() {
    for p in [1usize, 2] {
        for (rule, lr) in [
            (rgc(0.9, false, false), 1.0f32),
            (rgc(0.9, false, true), 1.0),
            (Rule::TopK, 1e30),
        ] {
            on_every_rank(p, |t| {
                let sizes = [8usize, 5];
                let cfg = Config::new(lr, 0.25, rule)?.compress_threshold(0);
                let (mut a, mut b) = cpu_pair(cfg, &sizes, "topk_a")?;
                let mut rng = Rng::seed_from_u64(3);
                let mut wrong = Vec::new();
                let pick = [3.4e38f32, -3.4e38, 1e38, -1e38, 2e10, -2e10, 0.0, 1.0];
                for s in 0..40 {
                    let g: Vec<Vec<f32>> = sizes
                        .iter()
                        .map(|&n| (0..n).map(|_| pick[rng.random_range(0..8)]).collect())
                        .collect();
                    let (ra, rb) = (a.step(t, &g), b.step(t, &g));
                    if err_text(&ra) != err_text(&rb) {
                        wrong.push(format!("step {s}: {} / {}", err_text(&ra), err_text(&rb)));
                    }
                    assert_eq!(
                        bits(&a.residuals()?),
                        bits(&b.residuals()?),
                        "{rule:?} p {p} step {s}: residuals"
                    );
                    assert_eq!(bits(&a.weights()?), bits(&b.weights()?), "step {s}");
                    assert_eq!(
                        state_bits(&a.save_state()?, ""),
                        state_bits(&b.save_state()?, ""),
                        "{rule:?} p {p} step {s}: state"
                    );
                }
                // The state held at every step; the errors named must too.
                assert!(
                    wrong.is_empty(),
                    "{rule:?} p {p}: errors (fused / separate): {wrong:?}"
                );
                Ok(())
            });
        }
    }
}

/// An accumulator holding an infinity at a lower index and a NaN at a
/// higher one (RGC's momentum, built step by step on one layer of two):
/// the separate path names the first non-finite index (0); the fused one
/// must too.
#[test]
fn infinity_before_nan_names_the_first_non_finite() {
    on_every_rank(1, |t| {
        let cfg = Config::new(1.0, 0.5, rgc(0.9, false, false))?.compress_threshold(0);
        let sizes = [2usize];
        let (mut a, mut b) = cpu_pair(cfg, &sizes, "topk_a")?;
        for (s, g) in TOWARDS_NAN.iter().enumerate() {
            let g = vec![g.to_vec()];
            let (ra, rb) = (a.step(t, &g), b.step(t, &g));
            assert_eq!(err_text(&ra), err_text(&rb), "step {s}");
        }
        let v = a.residuals()?;
        assert!(v[0][0].is_infinite() && v[0][1].is_nan(), "setup: {v:?}");
        Ok(())
    });
}

/// A fault injected at every transport call of the second step, on each
/// rank in turn: the fused and the separate trainers fail alike and hold
/// the same state after it (and after a reload into fresh trainers and
/// two more steps).
#[test]
fn injected_faults_lose_nothing() {
    let cfgs = || -> Result<Vec<Config>> {
        let base = rgc_cfg(true);
        let topk = Config::new(0.1, 0.05, Rule::TopK)?.compress_threshold(0);
        Ok(vec![
            base,
            global_buckets(base, 4 * 500),
            base.collection(Collection::Paper),
            topk.qsgd(4, 64, true)?,
        ])
    };
    let mut failed = 0;
    for (ci, cfg) in cfgs().unwrap().into_iter().enumerate() {
        for pipelined in [false, true] {
            for rank in 0..3 {
                for nth in (1..60u64).step_by(2) {
                    let both = fused_and_separate(
                        || {
                            ThreadCluster::new(3)
                                .timeout(std::time::Duration::from_secs(2))
                                .fault(rank, nth)
                        },
                        |t, fuse| -> Result<(String, Snap)> {
                            let mut tr = cpu(cfg, &SIZES, "ok_topk", fuse)?;
                            let mut rng = Rng::seed_from_u64(5 + t.rank() as u64);
                            let mut last = String::new();
                            for _ in 0..4 {
                                let g = random(&SIZES, &mut rng, 0.9);
                                let r = cpu_step(&mut tr, t, &g, pipelined);
                                if r.is_err() {
                                    last = err_text(&r);
                                    break;
                                }
                                last = "ok".into();
                            }
                            Ok((last, snap(&tr)?))
                        },
                    );
                    for (r, (x, y)) in both.into_iter().enumerate() {
                        let ctx =
                            format!("cfg {ci} pipelined {pipelined} fault {rank}@{nth} rank {r}");
                        // Which peer a rank finds gone first is timing's.
                        assert_eq!(x.0 == "ok", y.0 == "ok", "{ctx}: {} / {}", x.0, y.0);
                        assert_eq!(x.1, y.1, "{ctx}: state ({} / {})", x.0, y.0);
                        failed += usize::from(x.0 != "ok");
                    }
                }
            }
        }
    }
    // The faults did hit steps (every fault past the run's last call
    // leaves it whole).
    assert!(failed > 100, "only {failed} rank runs failed");
}

/// `step_with` producers that fail after pushing some layers, push a
/// layer twice, push a layer that does not exist, leave one out, or
/// panic: every rank fails and the state is the separate path's; the next
/// steps agree too.
#[test]
fn failing_producers_lose_nothing() {
    let base = rgc_cfg(false);
    let cfgs = [
        base,
        base.buckets(Buckets::new(4 * 500).unwrap()).unwrap(),
        global_buckets(base, 4 * 500),
    ];
    for (ci, cfg) in cfgs.into_iter().enumerate() {
        for how in 0..7 {
            let both = fused_and_separate(
                || ThreadCluster::new(3),
                |t, fuse| -> Result<(Vec<String>, Snap)> {
                    let mut tr = cpu(cfg, &SIZES, "topk_a", fuse)?;
                    let mut rng = Rng::seed_from_u64(9 + t.rank() as u64);
                    let mut errs = Vec::new();
                    for s in 0..4 {
                        let g = random(&SIZES, &mut rng, 0.9);
                        let bad = s == 1 && t.rank() == 1;
                        let r = tr.step_with(t, |feed| {
                            for l in (0..SIZES.len()).rev() {
                                if bad && l == 0 {
                                    match how {
                                        0 => return Err(Error::invalid("probe", "producer fails")),
                                        1 => feed.push_host(1, &g[1])?,
                                        2 => feed.push_host(9, &g[0])?,
                                        3 => return Ok(()),
                                        4 => panic!("producer panics"),
                                        5 => {
                                            let mut bad = g[0].clone();
                                            bad[3] = f32::NAN;
                                            feed.push_host(0, &bad)?;
                                        }
                                        _ => {
                                            feed.push_host(0, &g[0])?;
                                            panic!("producer panics after every push");
                                        }
                                    }
                                }
                                feed.push_host(l, &g[l])?;
                            }
                            Ok(())
                        });
                        errs.push(err_text(&r));
                    }
                    Ok((errs, snap(&tr)?))
                },
            );
            for (r, (x, y)) in both.into_iter().enumerate() {
                assert_ne!(
                    x.0[1], "ok",
                    "cfg {ci} how {how} rank {r}: step 1 must fail"
                );
                assert_eq!(x.0, y.0, "cfg {ci} how {how} rank {r}: errors");
                assert_eq!(x.1, y.1, "cfg {ci} how {how} rank {r}: state");
            }
        }
    }
}

/// A checkpoint saved after a failed step (an overflowing result on one
/// rank), loaded into fresh trainers that then train on: the fused and
/// the separate runs agree at every step.
#[test]
fn checkpoint_after_failed_step_reloads_alike() {
    let cfg = rgc_cfg(true);
    let both = fused_and_separate(
        || ThreadCluster::new(3),
        |t, fuse| -> Result<Vec<Snap>> {
            let mut tr = cpu(cfg, &SIZES, "spardl", fuse)?;
            let mut rng = Rng::seed_from_u64(21 + t.rank() as u64);
            let mut out = Vec::new();
            for s in 0..3 {
                let g = random(&SIZES, &mut rng, 0.9);
                let fail = s == 1 && t.rank() == 2;
                // Step 1 fails on every rank: rank 2's producer errs once
                // every layer is in (and its buckets were reduced).
                let r = push_all_then_fail(&mut tr, t, &g, fail);
                assert_eq!(r.is_err(), s == 1, "step {s}: {}", err_text(&r));
            }
            out.push(snap(&tr)?);
            let st = tr.save_state()?;
            let mut fresh = cpu(cfg, &SIZES, "spardl", fuse)?;
            fresh.load_state(t, &st)?;
            for _ in 0..3 {
                let g = random(&SIZES, &mut rng, 0.9);
                fresh.step(t, &g)?;
                out.push(snap(&fresh)?);
            }
            Ok(out)
        },
    );
    for (r, (x, y)) in both.into_iter().enumerate() {
        assert_eq!(x, y, "rank {r}");
    }
}

/// Density changed between steps (k from 0.05 n to n and back), tiny
/// layers (n = 1, 2), zero and negative-zero gradients.
#[test]
fn density_changes_and_tiny_layers() {
    let sizes = [1usize, 2, 300, 1];
    for rule in [Rule::TopK, rgc(0.9, false, true), rgc(0.5, false, false)] {
        for (variant, pipelined) in [(0, false), (0, true), (1, false), (1, true)] {
            on_every_rank(2, |t| {
                let mut cfg = Config::new(0.1, 0.05, rule)?.compress_threshold(0);
                if variant == 1 {
                    cfg = cfg.buckets(Buckets::new(4 * 200)?.budget(BucketBudget::Global))?;
                }
                let (mut a, mut b) = cpu_pair(cfg, &sizes, "topk_a")?;
                let mut rng = Rng::seed_from_u64(1 + t.rank() as u64);
                for (s, d) in DENSITIES.into_iter().enumerate() {
                    let g = at_density((&mut a, &mut b), (s, d), &sizes, &mut rng)?;
                    let (ra, rb) = (
                        cpu_step(&mut a, t, &g, pipelined),
                        cpu_step(&mut b, t, &g, pipelined),
                    );
                    let ctx = format!("{rule:?} variant {variant} pipelined {pipelined} step {s}");
                    assert_eq!(err_text(&ra), err_text(&rb), "{ctx}");
                    assert_eq!(snap(&a)?, snap(&b)?, "{ctx} density {d}");
                }
                Ok(())
            });
        }
    }
}

/// Nesterov's momentum must not fuse; a boxed RadixTopK must.
#[test]
fn nesterov_never_fuses_and_boxed_radix_does() {
    on_every_rank(2, |t| {
        let cfg = Config::new(0.1, 0.05, rgc(0.9, true, false))?.compress_threshold(0);
        let count = Arc::new(AtomicUsize::new(0));
        let mut a = build(
            Cpu,
            cfg,
            &SIZES,
            "topk_a",
            RadixTopK::magnitude(),
            |_| Fuse::Inner,
            &count,
        )?;
        let mut b = cpu(cfg, &SIZES, "topk_a", Fuse::Never)?;
        let mut rng = Rng::seed_from_u64(4 + t.rank() as u64);
        for _ in 0..3 {
            let g = random(&SIZES, &mut rng, 1.0);
            a.step(t, &g)?;
            b.step(t, &g)?;
            assert_eq!(snap(&a)?, snap(&b)?);
        }
        assert_eq!(count.load(Ordering::Relaxed), 0, "nesterov fused");

        let cfg = Config::new(0.1, 0.05, rgc(0.9, false, true))?.compress_threshold(0);
        let count = Arc::new(AtomicUsize::new(0));
        let w0 = initial(&SIZES);
        let mk = |fuse: Fuse| {
            let c = count.clone();
            Trainer::<Cpu, Box<dyn Selector<Cpu, f32> + Send>>::with_parts(
                Cpu,
                cfg,
                LayerSpec::matrices(&SIZES),
                &w0,
                |_| Ok(Box::new(RadixTopK::magnitude()) as Box<dyn Selector<Cpu, f32> + Send>),
                |_| Registry::builtin().build("topk_a", Defaults::density(0.05)?),
                move |b, l| wrapped(b, cfg, l.len, fuse, &c),
            )
        };
        let mut a = mk(Fuse::Inner)?;
        let mut b = mk(Fuse::Never)?;
        for _ in 0..3 {
            let g = random(&SIZES, &mut rng, 1.0);
            a.step(t, &g)?;
            b.step(t, &g)?;
            assert_eq!(snap(&a)?, snap(&b)?);
        }
        assert_eq!(
            count.load(Ordering::Relaxed),
            3 * SIZES.len(),
            "boxed radix"
        );
        Ok(())
    });
}

/// A user memory that fuses badly (an index past its layer) on the first
/// layer, with the pipelined step (layers in backward order, so the
/// later layers fused before it): the step fails on every rank, without
/// a panic, and the other layers' residuals are those of the separate
/// path (their selections put back).
#[test]
fn a_bad_fusing_memory_loses_no_other_layer() {
    let cfg = rgc_cfg(false);
    for pipelined in [false, true] {
        on_every_rank(2, |t| {
            let count = Arc::new(AtomicUsize::new(0));
            let bad_layer = if pipelined { 0 } else { SIZES.len() - 1 };
            let fuse = |l| {
                if l == bad_layer {
                    Fuse::Corrupt
                } else {
                    Fuse::Inner
                }
            };
            let mut a = build(
                Cpu,
                cfg,
                &SIZES,
                "topk_a",
                RadixTopK::magnitude(),
                fuse,
                &count,
            )?;
            let mut b = cpu(cfg, &SIZES, "topk_a", Fuse::Never)?;
            let mut rng = Rng::seed_from_u64(2 + t.rank() as u64);
            let g = random(&SIZES, &mut rng, 1.0);
            let ra = cpu_step(&mut a, t, &g, pipelined);
            assert!(ra.is_err(), "a corrupt fused selection must fail the step");
            // The oracle: the separate trainer after a step that fails
            // once every layer is compensated (its producer's error).
            let rb = push_all_then_fail(&mut b, t, &g, true);
            assert!(rb.is_err());
            let (va, vb) = (bits(&a.residuals()?), bits(&b.residuals()?));
            for l in 0..SIZES.len() {
                if l != bad_layer {
                    assert_eq!(va[l], vb[l], "pipelined {pipelined}: layer {l}'s residual");
                }
            }
            Ok(())
        });
    }
}

/// Reached through `Transport` only to keep the import used in every
/// configuration.
#[allow(dead_code)]
fn rank(t: &dyn Transport) -> usize {
    t.rank()
}

/// A memory whose `remove` fails at the update (a backend error on one
/// rank): the step fails, and the selection must stay in the memory as
/// with the separate calls (whose `remove` never ran). The fused path
/// takes `Compressed::taken` before calling `remove`, so its selection is
/// neither in the memory nor put back.
#[test]
fn a_failing_remove_loses_no_fused_selection() {
    let cfg = rgc_cfg(false);
    on_every_rank(1, |t| {
        let sizes = [300usize];
        let mut a = cpu(cfg, &sizes, "topk_a", Fuse::InnerBadRemove)?;
        let mut b = cpu(cfg, &sizes, "topk_a", Fuse::NeverBadRemove)?;
        let mut rng = Rng::seed_from_u64(8);
        let g = random(&sizes, &mut rng, 1.0);
        let (ra, rb) = (a.step(t, &g), b.step(t, &g));
        assert!(
            ra.is_err() && rb.is_err(),
            "{} / {}",
            err_text(&ra),
            err_text(&rb)
        );
        assert_eq!(
            bits(&a.residuals()?),
            bits(&b.residuals()?),
            "residual after the failed update"
        );
        Ok(())
    });
}

/// A collective that lies on rank `rank` at its `at`-th call: a result
/// value changed, an index past the layer, a NaN, an extra dropped entry
/// (valid: taken back as residual), or an error on that rank alone.
struct Liar {
    inner: Box<dyn sparse_coll::SparseAllreduce<f32>>,
    rank: usize,
    at: usize,
    calls: usize,
    how: u8,
}

impl sparse_coll::SparseAllreduce<f32> for Liar {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn lossless(&self) -> bool {
        self.inner.lossless()
    }
    fn cost(&self, prof: &sparse_coll::Profile) -> sparse_core::cost::Cost {
        self.inner.cost(prof)
    }
    fn reset(&mut self) {
        self.inner.reset();
    }
    fn save_state(&self) -> Result<State> {
        self.inner.save_state()
    }
    fn load_state(&mut self, s: &State) -> Result<()> {
        self.inner.load_state(s)
    }
    fn enter(&mut self, t: &mut dyn Transport, v: &SparseVec<f32>) -> Result<sparse_coll::Entered> {
        self.inner.enter(t, v)
    }
    fn agreed_body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<f32>,
        entered: sparse_coll::Entered,
        out: &mut sparse_coll::Reduced<f32>,
    ) -> Result<Result<()>> {
        self.calls += 1;
        self.inner.body(t, v, entered, out)?;
        if t.rank() != self.rank || self.calls != self.at {
            return Ok(Ok(()));
        }
        let dim = out.result.dim();
        let (mut idx, mut val) = (out.result.indices().to_vec(), out.result.values().to_vec());
        match self.how {
            0 if !val.is_empty() => val[0] += 1.0,
            1 => {
                idx.push(dim as u32 + 3);
                val.push(1.0);
            }
            2 if !val.is_empty() => val[0] = f32::NAN,
            3 => {
                let free = (0..dim as u32)
                    .find(|i| !out.dropped.indices().contains(i) && !v.indices().contains(i));
                if let Some(i) = free {
                    let mut d: Vec<(u32, f32)> = out
                        .dropped
                        .indices()
                        .iter()
                        .copied()
                        .zip(out.dropped.values().iter().copied())
                        .chain([(i, 0.375)])
                        .collect();
                    d.sort_by_key(|p| p.0);
                    out.dropped = SparseVec::new(
                        dim,
                        d.iter().map(|p| p.0).collect(),
                        d.iter().map(|p| p.1).collect(),
                    )?;
                }
                return Ok(Ok(()));
            }
            _ => return Err(Error::invalid("probe", "the collective fails on this rank")),
        }
        // Built unchecked where it is out of range: the trainer must catch it.
        out.result = SparseVec::new(dim, idx.clone(), val.clone())
            .unwrap_or_else(|_| SparseVec::new(dim + 4, idx, val).expect("probe: widened result"));
        Ok(Ok(()))
    }
}

/// Collectives that lie on one rank at the second step's call of one
/// layer: the fused and the separate trainers end every step alike (ok or
/// failed) with the same state on every rank.
#[test]
fn lying_collectives_lose_nothing() {
    let base = rgc_cfg(true);
    let cfgs = [base, global_buckets(base, 4 * 500)];
    for (ci, cfg) in cfgs.into_iter().enumerate() {
        for pipelined in [false, true] {
            for how in 0..5u8 {
                let both = fused_and_separate(
                    || ThreadCluster::new(3),
                    |t, fuse| -> Result<(Vec<bool>, Snap)> {
                        let w0 = initial(&SIZES);
                        let mut tr = Trainer::with_memory(
                            Cpu,
                            cfg,
                            LayerSpec::matrices(&SIZES),
                            &w0,
                            RadixTopK::magnitude(),
                            |_| {
                                Ok(Box::new(Liar {
                                    inner: Registry::builtin()
                                        .build("topk_a", Defaults::density(0.05)?)?,
                                    rank: 1,
                                    at: 2,
                                    calls: 0,
                                    how,
                                })
                                    as Box<dyn sparse_coll::SparseAllreduce<f32>>)
                            },
                            |b, l| wrapped(b, cfg, l.len, fuse, &Arc::new(AtomicUsize::new(0))),
                        )?;
                        let mut rng = Rng::seed_from_u64(31 + t.rank() as u64);
                        let mut oks = Vec::new();
                        for _ in 0..4 {
                            let g = random(&SIZES, &mut rng, 0.9);
                            let r = cpu_step(&mut tr, t, &g, pipelined);
                            oks.push(r.is_ok());
                        }
                        Ok((oks, snap(&tr)?))
                    },
                );
                for (r, (x, y)) in both.into_iter().enumerate() {
                    let ctx = format!("cfg {ci} pipelined {pipelined} how {how} rank {r}");
                    assert_eq!(x.0, y.0, "{ctx}: outcomes");
                    assert_eq!(
                        x.0[1],
                        how == 3,
                        "{ctx}: the lie fails the step unless valid"
                    );
                    assert_eq!(x.1, y.1, "{ctx}: state");
                }
            }
        }
    }
}

/// Every entry of `s` (and its parts), path-named, as bits: `State`'s
/// own `==` compares `f32`s by value, so a NaN never equals itself.
fn state_bits(s: &State, at: &str) -> Vec<(String, Vec<u64>)> {
    use sparse_core::state::Tensor;
    let mut out: Vec<(String, Vec<u64>)> = s
        .entries()
        .map(|(name, _, t)| {
            let v = match t {
                Tensor::F32(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
                Tensor::U32(v) => v.iter().map(|&x| u64::from(x)).collect(),
                Tensor::U64(v) => v.clone(),
            };
            (format!("{at}/{name}"), v)
        })
        .collect();
    for (name, c) in s.children() {
        out.extend(state_bits(c, &format!("{at}/{name}")));
    }
    out
}

/// On the kernel backend: a producer that fails once every layer is in
/// (its buckets reduced) on one rank, then steps that succeed: the fused
/// selections go back by the kernels' scatter-add exactly as the separate
/// calls leave them.
#[test]
fn wgpu_failed_steps_lose_nothing() {
    let base = rgc_cfg(true);
    let cfgs = [base, global_buckets(base, 4 * 3000)];
    let sizes = [5000usize, 300, 64];
    on_every_rank(2, |t| {
        let gpu = backend_cuda::WgpuBackend::new_default()?;
        for (ci, cfg) in cfgs.iter().enumerate() {
            let count = Arc::new(AtomicUsize::new(0));
            let (mut a, mut b) = pair(&gpu, *cfg, &sizes, "topk_a", &count)?;
            let mut rng = Rng::seed_from_u64(3 + t.rank() as u64);
            for s in 0..4 {
                let g = random(&sizes, &mut rng, 1.1);
                let fail = s % 2 == 0 && t.rank() == 1;
                for tr in [&mut a, &mut b] {
                    let r = push_all_then_fail(tr, t, &g, fail);
                    assert_eq!(r.is_err(), s % 2 == 0, "cfg {ci} step {s}");
                }
                assert_eq!(snap(&a)?, snap(&b)?, "cfg {ci} step {s}");
            }
            assert!(count.load(Ordering::Relaxed) > 0);
        }
        Ok(())
    });
}

/// On the kernel backend: density changed between steps (k up to n),
/// tiny layers (n = 1, 2) beside one past 2,048, signed-zero gradients.
#[test]
fn wgpu_density_changes_and_tiny_layers() {
    let sizes = [1usize, 2, 3000, 1];
    on_every_rank(2, |t| {
        let gpu = backend_cuda::WgpuBackend::new_default()?;
        for rule in [Rule::TopK, rgc(0.9, false, true), rgc(0.5, false, false)] {
            for pipelined in [false, true] {
                let cfg = Config::new(0.1, 0.05, rule)?.compress_threshold(0);
                let count = Arc::new(AtomicUsize::new(0));
                let (mut a, mut b) = pair(&gpu, cfg, &sizes, "topk_a", &count)?;
                let mut rng = Rng::seed_from_u64(1 + t.rank() as u64);
                for (s, d) in DENSITIES.into_iter().enumerate() {
                    let g = at_density((&mut a, &mut b), (s, d), &sizes, &mut rng)?;
                    let (ra, rb) = if pipelined {
                        let up = |g: &Vec<Vec<f32>>| {
                            g.iter()
                                .map(|g| sparse_core::BufferOps::upload(&gpu, g))
                                .collect::<Result<Vec<_>>>()
                        };
                        (
                            a.step_overlapped(t, &up(&g)?),
                            b.step_overlapped(t, &up(&g)?),
                        )
                    } else {
                        (a.step(t, &g), b.step(t, &g))
                    };
                    let ctx = format!("{rule:?} pipelined {pipelined} step {s} density {d}");
                    assert_eq!(err_text(&ra), err_text(&rb), "{ctx}");
                    assert_eq!(snap(&a)?, snap(&b)?, "{ctx}");
                }
                assert!(count.load(Ordering::Relaxed) > 0);
            }
        }
        Ok(())
    });
}

/// Layers whose selectors differ (the exact top-k by magnitude, which
/// fuses, beside SparDL's block top-k, which does not) in one bucket
/// under a global budget, plain and pipelined, with a failed step: the
/// fused layers' state is the separate calls'.
#[test]
fn mixed_selectors_in_one_globally_budgeted_bucket() {
    type Dyn = Box<dyn Selector<Cpu, f32> + Send>;
    let sizes = [300usize, 120, 64, 200];
    let cfg = global_buckets(rgc_cfg(true), 4 * 1000);
    for pipelined in [false, true] {
        on_every_rank(2, |t| {
            let count = Arc::new(AtomicUsize::new(0));
            let w0 = initial(&sizes);
            let mk = |fuse: Fuse| {
                let c = count.clone();
                let mut l = 0;
                Trainer::<Cpu, Dyn>::with_parts(
                    Cpu,
                    cfg,
                    LayerSpec::matrices(&sizes),
                    &w0,
                    move |_| {
                        l += 1;
                        Ok(if l % 2 == 1 {
                            Box::new(RadixTopK::magnitude()) as Dyn
                        } else {
                            Box::new(sparse_select::BlockTopK { blocks: 3 }) as Dyn
                        })
                    },
                    |_| Registry::builtin().build("topk_a", Defaults::density(0.05)?),
                    move |b, l| wrapped(b, cfg, l.len, fuse, &c),
                )
            };
            let (mut a, mut b) = (mk(Fuse::Inner)?, mk(Fuse::Never)?);
            let mut rng = Rng::seed_from_u64(6 + t.rank() as u64);
            for s in 0..5 {
                let g = random(&sizes, &mut rng, 1.2);
                let fail = s == 2 && t.rank() == 0;
                for tr in [&mut a, &mut b] {
                    let r = if pipelined {
                        push_all_then_fail(tr, t, &g, fail)
                    } else if s == 2 {
                        // A NaN on one rank: the entry round fails everywhere.
                        let mut g = g.clone();
                        if t.rank() == 0 {
                            g[1][0] = f32::NAN;
                        }
                        tr.step(t, &g)
                    } else {
                        tr.step(t, &g)
                    };
                    assert_eq!(r.is_err(), s == 2, "pipelined {pipelined} step {s}");
                }
                assert_eq!(snap(&a)?, snap(&b)?, "pipelined {pipelined} step {s}");
            }
            assert!(count.load(Ordering::Relaxed) > 0);
            Ok(())
        });
    }
}
