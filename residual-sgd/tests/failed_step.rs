//! One rule for a failed step, in every form of the step
//! ([`Trainer::step`], [`Trainer::step_buffers`], [`Trainer::step_with`],
//! [`Trainer::step_overlapped`]), with and without buckets, with and
//! without fused feedback (an exact top-k selector compensates and selects
//! in one), and a rank failing at each point: its gradient refused at the
//! entry, its producer stopping or panicking part way, its transport
//! failing at any call of the step (the entry round, each collective, the
//! commit round). On every rank whose step fails, the weights are as they
//! were and each compressed layer's memory holds what it held plus every
//! gradient the trainer accepted (`r + lr g`, top-k SGD's compensation,
//! exact on dyadic values), a refused or unreceived one in none, and
//! [`Trainer::last_failure`] says which.

mod common;

use backend_cpu::Cpu;
use residual_sgd::{Buckets, Config, LayerSpec, Rule, StepFailure, Trainer};
use sparse_coll::{Defaults, Registry, ThreadCluster, Transport};
use sparse_core::backend::BufferOps as _;
use sparse_core::{Error, Result};
use sparse_select::{RadixTopK, Selector, ThresholdBinarySearch};
use std::time::Duration;

const P: usize = 3;
const LR: f32 = 0.5;
/// Three matrices and a bias, which DGC's rule keeps dense.
const SIZES: [usize; 4] = [40, 24, 16, 8];
const COMPRESSED: [bool; 4] = [true, true, true, false];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Form {
    Step,
    Buffers,
    Overlapped,
    /// `step_with`, pushing the host gradients in backward order.
    With,
}

/// Where rank `FAILING` fails the step.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Point {
    /// Its gradient of layer 1 holds a NaN.
    Nan,
    /// Its producer pushes layer 3 and 2, then returns an error.
    ProducerError,
    /// Its producer pushes layer 3 and 2, then panics.
    ProducerPanic,
    /// Its transport fails at its `n`-th call of the step.
    Transport(u64),
}

const FAILING: usize = 2;
/// The rounds of a step's entry round on `P` ranks.
const ENTRY_ROUNDS: u64 = P.next_power_of_two().trailing_zeros() as u64;

fn layers() -> Vec<LayerSpec> {
    let mut specs = LayerSpec::matrices(&SIZES);
    specs[3].dims = 1;
    specs
}

fn config(buckets: bool) -> Config {
    let cfg = Config::new(LR, 0.25, Rule::TopK)
        .unwrap()
        .compress_threshold(0)
        .compress_min_dims(2);
    if buckets {
        cfg.buckets(Buckets::default()).unwrap()
    } else {
        cfg
    }
}

fn trainer<S: Selector<Cpu, f32> + Clone + 'static>(buckets: bool, sel: S) -> Trainer<Cpu, S> {
    let w0: Vec<Vec<f32>> = SIZES.iter().map(|&n| vec![0.25; n]).collect();
    Trainer::new(Cpu, config(buckets), layers(), &w0, sel, |_| {
        Registry::builtin().build("spardl", Defaults::density(0.25)?)
    })
    .unwrap()
}

/// Dyadic values (multiples of 1/8): every sum and every `r + lr g` exact.
fn grads(rank: usize, step: u64) -> Vec<Vec<f32>> {
    common::dyadic(step * 100 + rank as u64, &SIZES)
}

/// The step of `form`; at `point`, on rank `FAILING`, the failure.
fn step<S: Selector<Cpu, f32> + Send>(
    tr: &mut Trainer<Cpu, S>,
    t: &mut dyn Transport,
    g: &[Vec<f32>],
    form: Form,
    failing: Option<Point>,
) -> Result<residual_sgd::StepReport> {
    let bufs = || g.iter().map(|g| Cpu.upload(g)).collect::<Result<Vec<_>>>();
    match form {
        Form::Step => tr.step(t, g),
        Form::Buffers => tr.step_buffers(t, &bufs()?),
        Form::Overlapped => tr.step_overlapped(t, &bufs()?),
        Form::With => tr.step_with(t, |feed| {
            for l in (0..SIZES.len()).rev() {
                match failing {
                    Some(Point::ProducerError) if l == 1 => {
                        return Err(Error::invalid("backward", "the model failed"));
                    }
                    Some(Point::ProducerPanic) if l == 1 => panic!("the model panicked"),
                    _ => feed.push_host(l, &g[l])?,
                }
            }
            Ok(())
        }),
    }
}

/// What the rule says became of this rank's gradients, where its step
/// failed at `point` (`mine`: this rank is the failing one).
fn expected(form: Form, point: Point, mine: bool) -> StepFailure {
    // What became of each layer: 'a' accepted, 'r' refused, 'n' never received.
    let fates: [char; 4] = match (point, mine, form) {
        (Point::Nan, true, Form::Step | Form::Buffers) => ['r'; 4],
        // Backward order: 3 and 2 pushed, 1 refused, 0 never pushed.
        (Point::Nan, true, _) => ['n', 'r', 'a', 'a'],
        (Point::ProducerError | Point::ProducerPanic, true, _) => ['n', 'n', 'a', 'a'],
        // The entry round (an allgather: ceil(lg P) rounds) failed before
        // the producer ran.
        (Point::Transport(c), _, Form::With) if c <= ENTRY_ROUNDS => ['n'; 4],
        _ => ['a'; 4],
    };
    let pick = |want: char, compressed: Option<bool>| -> Vec<usize> {
        (0..4)
            .filter(|&l| fates[l] == want && compressed.is_none_or(|c| COMPRESSED[l] == c))
            .collect()
    };
    StepFailure {
        absorbed: pick('a', Some(true)),
        dropped_dense: pick('a', Some(false)),
        refused: pick('r', None),
        not_received: pick('n', None),
        failed: Vec::new(),
    }
}

/// One failing step of `form` at `point` on P ranks, after a clean one (so
/// that the memories hold something): every rank whose step failed keeps
/// the rule. Returns how many ranks failed.
fn check<S: Selector<Cpu, f32> + Clone + Send + Sync + 'static>(
    form: Form,
    buckets: bool,
    sel: S,
    point: Point,
) -> usize {
    let ctx = format!(
        "{form:?}, buckets {buckets}, {}, {point:?}",
        std::any::type_name::<S>()
    );
    let mut cluster = ThreadCluster::new(P).timeout(Duration::from_secs(5));
    if let Point::Transport(call) = point {
        // The clean step's calls, then the failing step's `call`-th.
        cluster = cluster.fault(FAILING, clean_calls(form, buckets, sel.clone()) + call);
    }
    let out = cluster.run(|t| {
        let r = t.rank();
        let mut tr = trainer(buckets, sel.clone());
        step(&mut tr, t, &grads(r, 0), form, None)?;
        let (w0, r0) = (tr.weights()?, tr.residuals()?);
        let mut g = grads(r, 1);
        let here = (r == FAILING).then_some(point);
        if here == Some(Point::Nan) {
            g[1][5] = f32::NAN;
        }
        let Err(e) = step(&mut tr, t, &g, form, here) else {
            return Ok(false);
        };
        assert_eq!(tr.weights()?, w0, "{ctx}: rank {r} ({e}) moved a weight");
        let failure = tr
            .last_failure()
            .expect("a failed step records what it did");
        let want = match point {
            // A peer of the failing rank may have completed the entry
            // round before the failure reached it, and run its producer.
            Point::Transport(c) if form == Form::With && c <= ENTRY_ROUNDS && r != FAILING => {
                let ran = expected(form, Point::Transport(ENTRY_ROUNDS + 1), false);
                if *failure == ran {
                    ran
                } else {
                    expected(form, point, false)
                }
            }
            Point::Transport(_) => expected(form, point, false),
            _ => expected(form, point, r == FAILING),
        };
        assert_eq!(failure, &want, "{ctx}: rank {r} ({e})");
        let text = failure.to_string();
        assert!(text.starts_with("the step failed on this rank"), "{text}");
        assert_eq!(
            text.contains("drop the batch"),
            !want.absorbed.is_empty(),
            "{text}"
        );
        for (l, (now, before)) in tr.residuals()?.iter().zip(&r0).enumerate() {
            let absorbed: Vec<f32> = before.iter().zip(&g[l]).map(|(r, g)| r + LR * g).collect();
            let want = if want.absorbed.contains(&l) {
                &absorbed
            } else {
                before
            };
            assert_eq!(now, want, "{ctx}: rank {r} ({e}) layer {l}'s residual");
        }
        Ok(true)
    });
    out.into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("{ctx}: {e}")))
        .filter(|&failed| failed)
        .count()
}

/// The transport calls of one clean step of `form` on rank `FAILING`.
fn clean_calls<S: Selector<Cpu, f32> + Clone + Send + Sync + 'static>(
    form: Form,
    buckets: bool,
    sel: S,
) -> u64 {
    let calls = ThreadCluster::new(P).run(|t| {
        let mut tr = trainer(buckets, sel.clone());
        let before = t.traffic().rounds;
        let g = grads(t.rank(), 0);
        step(&mut tr, t, &g, form, None)?;
        Ok(t.traffic().rounds - before)
    });
    calls.into_iter().map(Result::unwrap).nth(FAILING).unwrap()
}

fn every_case<S: Selector<Cpu, f32> + Clone + Send + Sync + 'static>(sel: S) {
    for form in [Form::Step, Form::Buffers, Form::Overlapped, Form::With] {
        for buckets in [false, true] {
            assert_eq!(
                check(form, buckets, sel.clone(), Point::Nan),
                P,
                "{form:?}: a NaN fails every rank"
            );
            if form == Form::With {
                for point in [Point::ProducerError, Point::ProducerPanic] {
                    assert_eq!(
                        check(form, buckets, sel.clone(), point),
                        P,
                        "{form:?} {point:?}"
                    );
                }
            }
            let calls = clean_calls(form, buckets, sel.clone());
            assert!(calls >= 3, "{form:?}: {calls} calls in a step");
            for call in 1..=calls {
                let failed = check(form, buckets, sel.clone(), Point::Transport(call));
                assert!(
                    failed >= 1,
                    "{form:?}, buckets {buckets}: call {call} failed no rank"
                );
            }
        }
    }
}

/// Fused feedback: the exact top-k compensates and selects in one, its
/// selection taken out of the memory until the step commits.
#[test]
fn a_failed_step_absorbs_every_accepted_gradient_with_fused_feedback() {
    every_case(RadixTopK::magnitude());
}

/// Separate compensation and selection (RedSync's threshold search).
#[test]
fn a_failed_step_absorbs_every_accepted_gradient_without_fused_feedback() {
    every_case(ThresholdBinarySearch::default());
}
