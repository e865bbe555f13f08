//! What the checkpoint probes share: a small trainer, its steps, a run
//! saved at steps 3 and 6, and checks that every rank failed.

#![allow(dead_code)]

use backend_cpu::Cpu;
use rand::{Rng as _, SeedableRng as _};
use residual_sgd::checkpoint;
use residual_sgd::{Config, LayerSpec, Rule, Trainer};
use sparse_coll::{Defaults, Registry, ThreadCluster, Transport};
use sparse_core::testing::Rng;
use sparse_core::{Error, Result};
use sparse_select::RadixTopK;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const SIZES: [usize; 2] = [500, 60];
pub const P: usize = 3;

pub type Tr = Trainer<Cpu, RadixTopK>;

/// RGC with factor masking at learning rate `lr`, momentum 0.9 and
/// density `density`, Ok-Topk as the collective.
pub fn trainer_with(lr: f32, density: f64) -> Result<Tr> {
    rgc_trainer(lr, 0.9, density, "ok_topk:period=2")
}

/// RGC with factor masking at learning rate `lr`, `momentum` and
/// `density`, over the collective `spec` at density 5%.
pub fn rgc_trainer(lr: f32, momentum: f32, density: f64, spec: &str) -> Result<Tr> {
    let rule = Rule::Rgc {
        momentum,
        nesterov: false,
        weight_decay: 0.0,
        factor_masking: true,
    };
    let w0: Vec<Vec<f32>> = SIZES.iter().map(|&n| vec![0.25; n]).collect();
    Trainer::new(
        Cpu,
        Config::new(lr, density, rule)?.compress_threshold(0),
        LayerSpec::matrices(&SIZES),
        &w0,
        RadixTopK::magnitude(),
        |_| Registry::builtin().build(spec, Defaults::density(0.05)?),
    )
}

pub fn trainer() -> Result<Tr> {
    trainer_with(0.1, 0.05)
}

pub fn step(tr: &mut Tr, t: &mut dyn Transport, s: u64) -> Result<()> {
    let mut rng = Rng::seed_from_u64(s * 31 + t.rank() as u64);
    let g: Vec<Vec<f32>> = SIZES
        .iter()
        .map(|&n| (0..n).map(|_| rng.random::<f32>() - 0.5).collect())
        .collect();
    tr.step(t, &g).map(drop)
}

/// A fresh directory of the system's temporary one.
pub fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("residual-sgd-probe-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

pub fn meta(step: u64) -> BTreeMap<String, String> {
    BTreeMap::from([("step".to_string(), step.to_string())])
}

/// Saves checkpoints after 3 steps (`step-3`) and 6 steps (`step-6`) in
/// `dir`, on P ranks (`LATEST` names `step-6`); returns each rank's
/// weights' bits after the 6 steps.
pub fn saved_run(dir: &Path) -> Vec<Vec<Vec<u32>>> {
    let out = ThreadCluster::new(P).run(|t| {
        let mut tr = trainer()?;
        for s in 0..6 {
            step(&mut tr, t, s)?;
            if s == 2 || s == 5 {
                let name = format!("step-{}", s + 1);
                checkpoint::save(t, dir, &name, &tr.save_state()?, &meta(s + 1))?;
            }
        }
        weight_bits(&tr)
    });
    out.into_iter().map(Result::unwrap).collect()
}

/// The bits of `tr`'s weights.
pub fn weight_bits(tr: &Tr) -> Result<Vec<Vec<u32>>> {
    Ok(tr
        .weights()?
        .iter()
        .map(|l| l.iter().map(|x| x.to_bits()).collect())
        .collect())
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// Every rank's result is an error; returns them, by rank, as text.
pub fn all_failed<T: std::fmt::Debug>(what: &str, out: Vec<Result<T>>) -> Vec<Error> {
    out.into_iter()
        .enumerate()
        .map(|(r, res)| match res {
            Err(e) => e,
            Ok(v) => panic!("{what}: rank {r} returned Ok({v:?})"),
        })
        .collect()
}

/// The file `LATEST` names in `dir`, if any.
pub fn latest(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join(checkpoint::LATEST)).ok()
}

/// Creates a FIFO at `path` (a named pipe: opening it for reading blocks
/// until a writer comes).
pub fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "mkfifo {}", path.display());
}

/// `f` run on a thread, or a panic naming `what` when it has not
/// returned within a minute (a call that blocks forever).
pub fn within_a_minute<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what}: still blocked after a minute"))
}

/// Seeded gradients of `sizes`, in multiples of 1/8 in [-8, 8]: every sum
/// of a few of them is exact.
pub fn dyadic(seed: u64, sizes: &[usize]) -> Vec<Vec<f32>> {
    let mut rng = Rng::seed_from_u64(seed);
    sizes
        .iter()
        .map(|&n| {
            (0..n)
                .map(|_| (rng.random_range(0..129) as f32 - 64.0) / 8.0)
                .collect()
        })
        .collect()
}
