//! A trainer's state (`Trainer::save_state`, issue 32) restored into a
//! fresh trainer continues bit for bit: N steps, save, a new trainer built
//! alike loads the state, M more steps give the reports, weights and
//! residuals of N + M steps without a break, for every residual optimizer
//! over its paper's collective and the stateful collectives and selectors,
//! at P = 1..4. A state that does not fit (another setting, another
//! layer, one rank's refusal) is an error on every rank that changes no
//! rank's trainer. The same cases on the kernels (wgpu; lavapipe without a
//! GPU) at P = 1 and 2.

use backend_cpu::Cpu;
use rand::{Rng as _, SeedableRng as _};
use residual_sgd::{Collection, Config, LayerSpec, Rule, Trainer};
use sparse_coll::{Defaults, Registry, ThreadCluster, Transport};
use sparse_core::state::State;
use sparse_core::testing::Rng;
use sparse_core::{Backend, Error, Result};
use sparse_select::{Policy, RadixTopK, Selector, ThresholdReuse};

type Sel<B> = Box<dyn Selector<B, f32>>;
type Tr<B = Cpu> = Trainer<B, Sel<B>>;

const SIZES: [usize; 3] = [600, 90, 12];

fn layers() -> Vec<LayerSpec> {
    let mut l = LayerSpec::matrices(&SIZES[..2]);
    l.push(LayerSpec {
        name: "bias".into(),
        len: SIZES[2],
        dims: 1,
    });
    l
}

fn rgc(nesterov: bool, masking: bool) -> Rule {
    Rule::Rgc {
        momentum: 0.9,
        nesterov,
        weight_decay: 1e-4,
        factor_masking: masking,
    }
}

/// A case: a name, its settings and its collective.
struct Case {
    name: &'static str,
    cfg: fn() -> Result<Config>,
    spec: &'static str,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "sparcml top-k SGD",
            cfg: || Config::new(0.25, 0.05, Rule::TopK),
            spec: "ssar_recursive_double",
        },
        Case {
            name: "top-k SGD with QSGD",
            cfg: || Config::new(0.25, 0.05, Rule::TopK)?.qsgd(4, 64, true),
            spec: "topk_a",
        },
        Case {
            name: "redsync RGC",
            cfg: || Config::new(0.1, 0.05, rgc(false, true)),
            spec: "topk_a",
        },
        Case {
            name: "RGC nesterov",
            cfg: || Config::new(0.1, 0.05, rgc(true, false)),
            spec: "ok_topk:period=3",
        },
        Case {
            name: "redsync quantized",
            cfg: || Config::new(0.1, 0.05, rgc(false, true))?.quantized(),
            spec: "topk_a:values=ssmean",
        },
        Case {
            name: "dgc",
            cfg: || Config::new(0.1, 0.2, rgc(false, true))?.clip(5.0),
            spec: "topk_a",
        },
        Case {
            name: "spardl global residual",
            cfg: || Ok(Config::new(0.1, 0.05, rgc(false, true))?.collection(Collection::Paper)),
            spec: "spardl",
        },
        Case {
            name: "b-sag",
            cfg: || Config::new(0.1, 0.05, rgc(false, true)),
            spec: "spardl_bsag",
        },
        Case {
            name: "dsar with qsgd",
            cfg: || Config::new(0.25, 0.05, Rule::TopK),
            spec: "dsar_qsgd:bits=4",
        },
        Case {
            name: "planner",
            cfg: || Config::new(0.25, 0.05, Rule::TopK),
            spec: "auto",
        },
    ]
}

/// The trainer of `case` (threshold reuse on the first layer, RedSync's
/// policy on the second, so that stateful selectors take part).
fn trainer(case: &Case, cfg: Config) -> Result<Tr> {
    trainer_on(Cpu, case, cfg)
}

/// [`trainer`] on backend `b`.
fn trainer_on<B: Backend<f32> + Clone + Send + Sync + 'static>(
    b: B,
    case: &Case,
    cfg: Config,
) -> Result<Tr<B>> {
    let w0: Vec<Vec<f32>> = SIZES.iter().map(|&n| vec![0.125; n]).collect();
    let quantized = case.name.contains("quantized");
    let mut layer = 0;
    Trainer::with_parts(
        b,
        cfg.compress_threshold(0).compress_min_dims(2),
        layers(),
        &w0,
        move |_| {
            layer += 1;
            Ok(match layer {
                1 if !quantized => Box::new(ThresholdReuse::<f32>::new(3)) as Sel<B>,
                1 => Box::new(Policy::<f32>::new(true)),
                _ => Box::new(RadixTopK::magnitude()),
            })
        },
        |_| Registry::builtin().build(case.spec, Defaults::density(0.05)?),
        |b, spec| residual_sgd::memory::for_rule(b, cfg.rule(), cfg.lr(), spec.len),
    )
}

fn grads(rank: usize, step: u64) -> Vec<Vec<f32>> {
    let mut rng = Rng::seed_from_u64(1000 * step + rank as u64);
    SIZES
        .iter()
        .map(|&n| (0..n).map(|_| rng.random::<f32>() - 0.5).collect())
        .collect()
}

/// Bits of what a step sent and dropped.
type StepBits = Vec<(Vec<u32>, Vec<u32>, Vec<u32>, Vec<u32>)>;

fn step<B: Backend<f32>>(
    tr: &mut Tr<B>,
    t: &mut dyn Transport,
    s: u64,
    dgc: bool,
) -> Result<StepBits> {
    if dgc {
        // DGC's warm-up moves the density between steps.
        tr.set_density(if s < 3 { 0.2 } else { 0.05 })?;
    }
    let g = grads(t.rank(), s);
    let rep = tr.step(t, &g)?;
    let bits = |v: &sparse_core::SparseVec<f32>| {
        (
            v.indices().to_vec(),
            v.values().iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        )
    };
    Ok(rep
        .sent
        .iter()
        .zip(&rep.dropped)
        .map(|(s, d)| {
            let (a, b) = bits(s);
            let (c, e) = bits(d);
            (a, b, c, e)
        })
        .collect())
}

#[test]
fn n_steps_save_restore_m_steps_equals_n_plus_m() {
    n_plus_m(&Cpu, 1..=4);
}

/// The same on the kernels: a trainer on the kernel backend resumes on the
/// kernels bit for bit (every case; P = 1 and 2, lavapipe being slow).
#[test]
fn n_steps_save_restore_m_steps_equals_n_plus_m_on_the_kernels() {
    let gpu = backend_cuda::WgpuBackend::new_default()
        .expect("no wgpu device: install mesa-vulkan-drivers");
    n_plus_m(&gpu, 1..=2);
}

fn n_plus_m<B: Backend<f32> + Clone + Send + Sync + 'static>(
    b: &B,
    ranks: std::ops::RangeInclusive<usize>,
) {
    let (n, m) = (4u64, 4u64);
    for case in cases() {
        for p in ranks.clone() {
            let dgc = case.name == "dgc";
            let out = ThreadCluster::new(p).run(|t| {
                let cfg = (case.cfg)()?;
                let mut whole = trainer_on(b.clone(), &case, cfg)?;
                let mut want = Vec::new();
                for s in 0..n + m {
                    let b = step(&mut whole, t, s, dgc)?;
                    if s >= n {
                        want.push(b);
                    }
                }
                let mut first = trainer_on(b.clone(), &case, cfg)?;
                for s in 0..n {
                    step(&mut first, t, s, dgc)?;
                }
                let saved = first.save_state()?;
                drop(first);
                let mut second = trainer_on(b.clone(), &case, cfg)?;
                second.load_state(t, &saved)?;
                assert!(
                    second.save_state()?.same_bits(&saved),
                    "{}: a restored trainer saves another state",
                    case.name
                );
                let mut got = Vec::new();
                for s in n..n + m {
                    got.push(step(&mut second, t, s, dgc)?);
                }
                assert_eq!(got, want, "{} P={p}: the reports differ", case.name);
                assert!(
                    second.save_state()?.same_bits(&whole.save_state()?),
                    "{} P={p}: the states after N + M steps differ",
                    case.name
                );
                let bits = |w: Vec<Vec<f32>>| -> Vec<Vec<u32>> {
                    w.iter()
                        .map(|l| l.iter().map(|x| x.to_bits()).collect())
                        .collect()
                };
                assert_eq!(bits(second.weights()?), bits(whole.weights()?));
                assert_eq!(bits(second.residuals()?), bits(whole.residuals()?));
                Ok(())
            });
            for (r, res) in out.into_iter().enumerate() {
                res.unwrap_or_else(|e| panic!("{} P={p} rank {r}: {e}", case.name));
            }
        }
    }
}

/// A state that does not fit is an error on every rank, naming what
/// disagrees where it was found, and no rank's trainer changes: another
/// learning rate on every rank; another collective's state on one rank
/// only (the others get `PeerError` and put their state back).
#[test]
fn a_state_that_does_not_fit_changes_no_rank() {
    let cases = cases();
    let rgc_case = &cases[2];
    let bsag = &cases[7];
    let p = 3;
    let out = ThreadCluster::new(p).run(|t| {
        let cfg = (rgc_case.cfg)()?;
        let mut a = trainer(rgc_case, cfg)?;
        for s in 0..3 {
            step(&mut a, t, s, false)?;
        }
        let saved = a.save_state()?;
        // Another learning rate: refused everywhere, nothing changed.
        let mut other = trainer(rgc_case, Config::new(0.2, 0.05, rgc(false, true))?)?;
        step(&mut other, t, 0, false)?;
        let before = other.save_state()?;
        let e = other.load_state(t, &saved).unwrap_err();
        assert!(e.to_string().contains("\"lr\""), "{e}");
        assert!(other.save_state()?.same_bits(&before));
        // Another collective, both stateless (their states are empty):
        // refused by name.
        let ssar = Case {
            name: rgc_case.name,
            cfg: rgc_case.cfg,
            spec: "ssar_recursive_double",
        };
        let mut other = trainer(&ssar, cfg)?;
        let e = other.load_state(t, &saved).unwrap_err();
        assert!(
            e.to_string().contains("collective topk_a")
                && e.to_string().contains("collective ssar_recursive_double"),
            "{e}"
        );
        // One rank given B-SAG's trainer state for its TopkA trainer: that
        // rank refuses it, the others learn of it, no rank changes.
        let mut bs = trainer(bsag, (bsag.cfg)()?)?;
        for s in 0..3 {
            step(&mut bs, t, s, false)?;
        }
        let foreign: State = bs.save_state()?;
        let mut c = trainer(rgc_case, cfg)?;
        step(&mut c, t, 7, false)?;
        let before = c.save_state()?;
        let give = if t.rank() == 1 { &foreign } else { &saved };
        let e = c.load_state(t, give).unwrap_err();
        // Rank 1 names what disagrees; so do the others, in its words.
        assert!(e.to_string().contains("spardl_bsag"), "{e}");
        if t.rank() != 1 {
            assert!(matches!(e, Error::PeerError { rank: 1, .. }), "{e}");
        }
        assert!(c.save_state()?.same_bits(&before));
        // And the trainers still step together.
        step(&mut c, t, 8, false)?;
        Ok(())
    });
    for (r, res) in out.into_iter().enumerate() {
        res.unwrap_or_else(|e| panic!("rank {r}: {e}"));
    }
}
