//! The density is given once: a trainer built from a registry hands its
//! settings' budget to the lossy collectives it builds, unless the
//! collective's spec gives its own.

use backend_cpu::Cpu;
use rand::{Rng as _, SeedableRng as _};
use residual_sgd::{Config, LayerSpec, Rule, Trainer};
use sparse_coll::{Defaults, Registry, ThreadCluster, Transport};
use sparse_core::Result;
use sparse_core::testing::Rng;
use sparse_select::RadixTopK;

const N: usize = 400;
const DENSITY: f64 = 0.05;

fn gradients(rank: usize, step: u64) -> Vec<Vec<f32>> {
    let mut rng = Rng::seed_from_u64(1000 * step + rank as u64);
    vec![
        (0..N)
            .map(|_| rng.random_range(-64i32..65) as f32 / 8.0)
            .collect(),
    ]
}

/// Weights, and per step what the collective dropped, of three steps of
/// `build` on 3 ranks.
fn run(
    build: impl Fn(Config) -> Result<Trainer<Cpu, RadixTopK>> + Sync,
) -> Vec<(Vec<Vec<f32>>, Vec<usize>)> {
    ThreadCluster::new(3)
        .run(|t| {
            let cfg = Config::new(0.5, DENSITY, Rule::TopK)?.compress_threshold(0);
            let mut tr = build(cfg)?;
            let mut dropped = Vec::new();
            for step in 0..3 {
                let g = gradients(t.rank(), step);
                let rep = tr.step(t, &g)?;
                dropped.push(rep.dropped[0].nnz());
            }
            Ok((tr.weights()?, dropped))
        })
        .into_iter()
        .collect::<Result<_>>()
        .unwrap()
}

fn layers() -> Vec<LayerSpec> {
    LayerSpec::matrices(&[N])
}

/// A trainer over [`layers`] from weights `w` whose collective is `spec`
/// of `registry`, built at `cfg`'s budget.
fn built(
    cfg: Config,
    w: &[Vec<f32>],
    registry: &Registry<f32>,
    spec: &str,
) -> Result<Trainer<Cpu, RadixTopK>> {
    Trainer::from_registry(
        Cpu,
        cfg,
        layers(),
        w,
        RadixTopK::magnitude(),
        registry,
        spec,
    )
}

#[test]
fn the_trainer_hands_its_budget_to_the_collectives_it_builds() {
    let w = vec![vec![0.25f32; N]];
    let registry = Registry::builtin();
    // gTopk is lossy: with no budget from anywhere it does not build, so
    // building at all shows the settings' budget reached it.
    assert!(registry.build("gtopk", Defaults::lossless()).is_err());
    let from_registry = run(|cfg| built(cfg, &w, &registry, "gtopk"));
    // The oracle: the same density passed by hand, as before.
    let by_hand = run(|cfg| {
        Trainer::new(Cpu, cfg, layers(), &w, RadixTopK::magnitude(), |_| {
            Registry::builtin().build("gtopk", Defaults::density(DENSITY)?)
        })
    });
    assert_eq!(from_registry, by_hand);
    // gTopk keeps k of the sum of three ranks' k each: it drops some (its
    // tree's root reports what it cut).
    assert!(from_registry.iter().any(|(_, d)| d.iter().all(|&n| n > 0)));
    // The spec's own budget overrides the settings': density 1 keeps all.
    let overridden = run(|cfg| built(cfg, &w, &registry, "gtopk:density=1"));
    assert!(overridden.iter().all(|(_, d)| d.iter().all(|&n| n == 0)));
    assert_ne!(overridden[0].0, from_registry[0].0);
}

#[test]
fn a_density_is_checked_where_it_is_made() {
    for bad in [0.0, 1.5, f64::NAN] {
        let e = Config::new(0.1, bad, Rule::TopK).unwrap_err();
        assert!(e.to_string().contains("density"), "{e}");
    }
    let cfg = Config::new(0.1, 0.01, Rule::TopK).unwrap();
    assert_eq!(cfg.budget(), sparse_core::Budget::density(0.01).unwrap());
    assert_eq!(cfg.budget().k_for(1000), 10);
    assert!(cfg.with_density(0.0).is_err());
}

#[test]
fn an_unknown_collective_is_an_error_naming_it() {
    let w = vec![vec![0.0f32; N]];
    let cfg = Config::new(0.1, DENSITY, Rule::TopK)
        .unwrap()
        .compress_threshold(0);
    let e = built(cfg, &w, &Registry::builtin(), "no_such_scheme")
        .err()
        .expect("an unknown name is an error");
    assert!(e.to_string().contains("no_such_scheme"), "{e}");
}
