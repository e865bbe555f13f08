//! The same steps on `backend-cpu` and on the kernel backend (wgpu; Mesa's
//! software Vulkan without a GPU): on dyadic inputs, where every operation
//! is exact (so a fused multiply-add changes nothing), the selections,
//! residuals and weights are bit-identical at every step; on random normal
//! inputs the weights stay within 1e-5 relative, and the first step at
//! which the selections differ, if any, is reported.

use backend_cpu::Cpu;
use rand::{Rng as _, SeedableRng as _};
use residual_sgd::{Config, LayerSpec, Rule, Trainer};
use sparse_coll::{Defaults, Registry, ThreadCluster};
use sparse_core::Backend;
use sparse_core::testing::Rng;
use sparse_select::RadixTopK;

const SIZES: [usize; 2] = [3000, 40];

/// Per step: each layer's selected indices, residuals and weights.
type Steps = Vec<(Vec<Vec<u32>>, Vec<Vec<f32>>, Vec<Vec<f32>>)>;

fn run<B: Backend<f32> + Send + Sync + Clone + 'static>(b: B, grads: &[Vec<Vec<f32>>]) -> Steps {
    let layers = LayerSpec::matrices(&SIZES);
    let w0: Vec<Vec<f32>> = SIZES.iter().map(|&n| vec![0.5; n]).collect();
    let rule = Rule::Rgc {
        momentum: 0.5,
        nesterov: false,
        weight_decay: 0.0,
        factor_masking: true,
    };
    let cfg = Config::new(0.5, 0.01, rule)
        .unwrap()
        .compress_threshold(1024);
    let mut out = ThreadCluster::new(1)
        .run(move |t| {
            let mut tr = Trainer::new(
                b.clone(),
                cfg,
                layers.clone(),
                &w0,
                RadixTopK::magnitude(),
                |_| Registry::builtin().build("topk_a", Defaults::lossless()),
            )?;
            let mut steps = Vec::new();
            for g in grads {
                let rep = tr.step(t, g)?;
                let sel = rep.sent.iter().map(|s| s.indices().to_vec()).collect();
                steps.push((sel, tr.residuals()?, tr.weights()?));
            }
            Ok(steps)
        })
        .into_iter();
    out.next().unwrap().unwrap()
}

fn grads(seed: u64, dyadic: bool) -> Vec<Vec<Vec<f32>>> {
    let mut rng = Rng::seed_from_u64(seed);
    (0..50)
        .map(|_| {
            SIZES
                .iter()
                .map(|&n| {
                    (0..n)
                        .map(|_| {
                            if dyadic {
                                (rng.random_range(0..257) as f32 - 128.0) / 64.0
                            } else {
                                let (u, v) = (rng.random::<f64>().max(1e-300), rng.random::<f64>());
                                ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
                            }
                        })
                        .collect()
                })
                .collect()
        })
        .collect()
}

#[test]
fn cpu_and_kernels_agree_step_by_step() {
    let gpu = backend_cuda::WgpuBackend::new_default()
        .expect("no wgpu device: install mesa-vulkan-drivers");
    let g = grads(3, true);
    let (cpu, kern) = (run(Cpu, &g), run(gpu, &g));
    for (step, (c, k)) in cpu.iter().zip(&kern).enumerate() {
        assert_eq!(c.0, k.0, "step {step}: selections");
        let bits = |v: &Vec<Vec<f32>>| -> Vec<Vec<u32>> {
            v.iter()
                .map(|l| l.iter().map(|x| x.to_bits()).collect())
                .collect()
        };
        assert_eq!(bits(&c.1), bits(&k.1), "step {step}: residuals");
        assert_eq!(bits(&c.2), bits(&k.2), "step {step}: weights");
    }
    let gpu = backend_cuda::WgpuBackend::new_default().expect("wgpu device");
    let g = grads(4, false);
    let (cpu, kern) = (run(Cpu, &g), run(gpu, &g));
    let first_diff = cpu.iter().zip(&kern).position(|(c, k)| c.0 != k.0);
    println!("random normal inputs: selections first differ at step {first_diff:?}");
    for (step, (c, k)) in cpu.iter().zip(&kern).enumerate() {
        for (lc, lk) in c.2.iter().zip(&k.2) {
            for (a, b) in lc.iter().zip(lk) {
                assert!(
                    approx::relative_eq!(*a, *b, epsilon = 1e-5, max_relative = 1e-5),
                    "step {step}: {a} vs {b}"
                );
            }
        }
    }
}
