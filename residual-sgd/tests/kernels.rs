//! The same steps on `backend-cpu` and on the kernel backend (wgpu; Mesa's
//! software Vulkan without a GPU): on dyadic inputs, where every operation
//! is exact (so a fused multiply-add changes nothing), the selections,
//! residuals and weights are bit-identical at every step; on random normal
//! inputs the weights stay within 1e-5 relative, and the first step at
//! which the selections differ, if any, is reported. And a step over
//! gradients in device buffers moves to the host exactly the selected
//! pairs and the dense layers' gradients, counted in bytes.

use backend_cpu::Cpu;
use rand::{Rng as _, SeedableRng as _};
use residual_sgd::{Config, LayerSpec, Rule, Trainer};
use sparse_coll::{Defaults, Registry, ThreadCluster};
use sparse_core::Backend;
use sparse_core::testing::Rng;
use sparse_select::RadixTopK;

const SIZES: [usize; 2] = [3000, 40];

/// One step: each layer's selected indices, residuals and weights.
type Step = (Vec<Vec<u32>>, Vec<Vec<f32>>, Vec<Vec<f32>>);

/// Per step: each layer's selected indices, residuals and weights.
type Steps = Vec<Step>;

/// The trainer every check here uses, on backend `b`: RGC with momentum
/// over TopkA, the 3,000-entry layer compressed, the 40-entry one dense.
fn trainer<B: Backend<f32> + Send + Sync + Clone + 'static>(
    b: B,
) -> sparse_core::Result<Trainer<B, RadixTopK>> {
    trainer_fusing(b, true)
}

/// [`trainer`], its memories fusing the feedback into the selection
/// where `fuse` (the default memories), else making the separate calls
/// ([`Separate`]).
fn trainer_fusing<B: Backend<f32> + Send + Sync + Clone + 'static>(
    b: B,
    fuse: bool,
) -> sparse_core::Result<Trainer<B, RadixTopK>> {
    let w0: Vec<Vec<f32>> = SIZES.iter().map(|&n| vec![0.5; n]).collect();
    let rule = Rule::Rgc {
        momentum: 0.5,
        nesterov: false,
        weight_decay: 0.0,
        factor_masking: true,
    };
    let cfg = Config::new(0.5, 0.01, rule)?.compress_threshold(1024);
    Trainer::with_memory(
        b,
        cfg,
        LayerSpec::matrices(&SIZES),
        &w0,
        RadixTopK::magnitude(),
        |_| Registry::builtin().build("topk_a", Defaults::lossless()),
        |b, l| {
            let m = residual_sgd::memory::for_rule(b, rule, 0.5, l.len)?;
            Ok(if fuse { m } else { Box::new(Separate(m)) })
        },
    )
}

fn run<B: Backend<f32> + Send + Sync + Clone + 'static>(b: B, grads: &[Vec<Vec<f32>>]) -> Steps {
    let mut out = ThreadCluster::new(1)
        .run(move |t| {
            let mut tr = trainer(b.clone())?;
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

/// What a step moves between host and device on the kernels, counted by
/// the backend (`backend_cuda::Transfers`), for gradients already in
/// device buffers ([`Trainer::step_buffers`]): a compressed layer of 3,000
/// and a dense one of 40 under top-k SGD at density 0.01, two ranks, five
/// steps. Data read to the host is exactly the selected pairs (a `u32`
/// index and an `f32` value each) plus the dense layer's gradient, in three
/// downloads; data written is exactly the reduced result's pairs plus the
/// dense layer's mean. The primitives' own readbacks are those of the two
/// finite checks and of the selection, each measured alone on another
/// backend value over the same input, plus the 16 fault bytes each
/// download checks: nothing else crosses. The counts are read from the
/// caller's clone of the backend it handed to the trainer (clones share
/// their counters).
#[test]
fn a_step_moves_only_the_selected_pairs_and_the_dense_layers() {
    use backend_cuda::{Transfers, WgpuBackend};
    use sparse_core::backend::check_finite_buffers;
    use sparse_core::{BufferOps as _, DenseOps as _};
    use sparse_select::{Selector as _, k_for_density};

    const N: [usize; 2] = [3000, 40];
    let (lr, density) = (0.5f32, 0.01);
    let k = k_for_density(N[0], density).unwrap();
    let out = ThreadCluster::new(2).run(|t| {
        let r = sparse_coll::Transport::rank(t);
        let gpu = WgpuBackend::new_default()?;
        let kept = gpu.clone();
        let probe = WgpuBackend::new_default()?;
        let cfg = Config::new(lr, density, Rule::TopK)?.compress_threshold(1024);
        let w0: Vec<Vec<f32>> = N.iter().map(|&n| vec![0.5; n]).collect();
        let mut tr = Trainer::new(
            gpu,
            cfg,
            LayerSpec::matrices(&N),
            &w0,
            RadixTopK::magnitude(),
            |_| Registry::builtin().build("topk_a", Defaults::lossless()),
        )?;
        assert_eq!(tr.compressed(), vec![true, false]);
        let mut steps = Vec::new();
        for g in grads(10 + r as u64, false).iter().take(5) {
            let g: Vec<Vec<f32>> = g.iter().zip(N).map(|(x, n)| x[..n].to_vec()).collect();
            // The step's own inputs, alone on the probe: the finite checks
            // and the selection from the compensated residual.
            let v = tr.residuals()?.remove(0);
            let alone =
                |f: &dyn Fn() -> sparse_core::Result<()>| -> sparse_core::Result<Transfers> {
                    let before = probe.transfers();
                    f()?;
                    Ok(probe.transfers().since(&before))
                };
            // Every layer's finite check answered in one readback.
            let xs: Vec<_> = g
                .iter()
                .map(|x| probe.upload(x))
                .collect::<sparse_core::Result<_>>()?;
            let checks = alone(&|| check_finite_buffers(&probe, &xs.iter().collect::<Vec<_>>()))?;
            assert_eq!(
                checks.control_reads,
                1,
                "the finite checks of {} layers",
                xs.len()
            );
            let mut acc = probe.upload(&v)?;
            probe.axpy(lr, &probe.upload(&g[0])?, &mut acc)?;
            let select = alone(&|| RadixTopK::magnitude().select(&probe, &acc, k).map(drop))?;
            let bufs: Vec<_> = g
                .iter()
                .map(|x| tr.backend().upload(x))
                .collect::<sparse_core::Result<_>>()?;
            let before = kept.transfers();
            let rep = tr.step_buffers(t, &bufs)?;
            let moved = kept.transfers().since(&before);
            assert_eq!(kept.transfers(), tr.backend().transfers());
            assert_eq!(rep.sent[0].nnz(), k);
            assert_eq!(moved.downloads, 3, "indices, values, the dense gradient");
            assert_eq!(moved.downloaded, (8 * k + 4 * N[1]) as u64);
            assert_eq!(
                moved.control_reads,
                checks.control_reads + select.control_reads + 3
            );
            assert_eq!(
                moved.control_read,
                checks.control_read + select.control_read + 3 * 16
            );
            assert_eq!(
                moved.control_writes,
                checks.control_writes + select.control_writes
            );
            assert_eq!(
                moved.control_written,
                checks.control_written + select.control_written
            );
            steps.push((rep.sent[0].indices().to_vec(), moved));
        }
        Ok(steps)
    });
    let out: Vec<_> = out.into_iter().map(|o| o.unwrap()).collect();
    for s in 0..5 {
        // TopkA's result holds the union of the ranks' indices.
        let mut union: Vec<u32> = out.iter().flat_map(|o| o[s].0.clone()).collect();
        union.sort_unstable();
        union.dedup();
        for o in &out {
            let moved = o[s].1;
            assert_eq!(
                moved.uploads, 3,
                "step {s}: result indices, values, dense mean"
            );
            assert_eq!(
                moved.uploaded,
                (8 * union.len() + 4 * N[1]) as u64,
                "step {s}"
            );
        }
    }
}

/// Issue 32 on the kernels: a trainer on the kernel backend saved after N
/// steps and loaded into a fresh one (also on the kernels, and on the
/// CPU, the state being the same data on both) continues bit for bit on
/// dyadic inputs: the selections, residuals and weights of N + M steps.
#[test]
fn a_state_saved_on_the_kernels_resumes_bit_for_bit() {
    let gpu = backend_cuda::WgpuBackend::new_default()
        .expect("no wgpu device: install mesa-vulkan-drivers");
    let g = grads(11, true);
    let (n, m) = (5, 5);
    let want = run(gpu.clone(), &g[..n + m]);
    let out = ThreadCluster::new(1).run(|t| {
        let mut first = trainer(gpu.clone())?;
        for x in &g[..n] {
            first.step(t, x)?;
        }
        let state = first.save_state()?;
        let mut on_gpu = trainer(gpu.clone())?;
        on_gpu.load_state(t, &state)?;
        let mut on_cpu = trainer(Cpu)?;
        on_cpu.load_state(t, &state)?;
        let mut got = (Vec::new(), Vec::new());
        for x in &g[n..n + m] {
            for (tr_steps, tr) in [
                (&mut got.0, &mut on_gpu as &mut dyn Stepper),
                (&mut got.1, &mut on_cpu),
            ] {
                tr_steps.push(tr.one(t, x)?);
            }
        }
        Ok(got)
    });
    let (gpu_steps, cpu_steps) = out.into_iter().next().unwrap().unwrap();
    assert_eq!(gpu_steps, want[n..], "kernels resumed on the kernels");
    assert_eq!(cpu_steps, want[n..], "kernels resumed on the CPU");
}

/// One step of a trainer on any backend, as the steps of [`run`] record it.
trait Stepper {
    fn one(
        &mut self,
        t: &mut dyn sparse_coll::Transport,
        g: &[Vec<f32>],
    ) -> sparse_core::Result<Step>;
}

impl<B: Backend<f32>> Stepper for Trainer<B, RadixTopK> {
    fn one(
        &mut self,
        t: &mut dyn sparse_coll::Transport,
        g: &[Vec<f32>],
    ) -> sparse_core::Result<Step> {
        let rep = self.step(t, g)?;
        let sel = rep.sent.iter().map(|s| s.indices().to_vec()).collect();
        Ok((sel, self.residuals()?, self.weights()?))
    }
}

/// A memory that never fuses (its `compensate_topk` is the default,
/// `None`): the separate calls, the oracle of the fused ones.
struct Separate<B: Backend<f32>>(Box<dyn residual_sgd::Memory<B>>);

impl<B: Backend<f32>> residual_sgd::Memory<B> for Separate<B> {
    fn compensate(&mut self, b: &B, g: &B::Buffer<f32>) -> sparse_core::Result<()> {
        self.0.compensate(b, g)
    }
    fn accumulator(&self) -> &B::Buffer<f32> {
        self.0.accumulator()
    }
    fn accumulator_mut(&mut self) -> &mut B::Buffer<f32> {
        self.0.accumulator_mut()
    }
    fn remove(&mut self, b: &B, indices: &B::Buffer<u32>) -> sparse_core::Result<()> {
        self.0.remove(b, indices)
    }
    fn restore(&mut self, b: &B, back: &sparse_core::SparseVec<f32>) -> sparse_core::Result<()> {
        self.0.restore(b, back)
    }
    fn save_state(&self, b: &B) -> sparse_core::Result<sparse_core::state::State> {
        self.0.save_state(b)
    }
    fn load_state(&mut self, b: &B, s: &sparse_core::state::State) -> sparse_core::Result<()> {
        self.0.load_state(b, s)
    }
}

/// Error feedback fused into the selection on the kernels (issue 43,
/// item 2): [`trainer`]'s RGC momentum step (`u = m u + g; v += u`, factor masking)
/// over a 3,000-entry compressed layer reads the residual three times
/// where the separate calls read it six (the momentum's scale and two
/// axpys, then the top-k's three passes), with the same round trips
/// and the same weights, residuals and momenta bit for bit (dyadic
/// inputs). Counted by `CubeBackend::work` over whole steps: the rest of
/// a step (the finite checks, the dense layer) is the same in both.
#[test]
fn fused_feedback_reads_the_residual_three_times_not_six() {
    use backend_cuda::{WgpuBackend, Work};
    use sparse_core::BufferOps as _;

    let out = ThreadCluster::new(1).run(|t| {
        let mut runs: Vec<(Vec<Work>, Vec<sparse_core::state::State>)> = Vec::new();
        for fuse in [true, false] {
            let gpu = WgpuBackend::new_default()?;
            let kept = gpu.clone();
            let mut tr = trainer_fusing(gpu, fuse)?;
            let (mut works, mut states) = (Vec::new(), Vec::new());
            for g in grads(5, true).iter().take(4) {
                let bufs: Vec<_> = g
                    .iter()
                    .map(|x| tr.backend().upload(x))
                    .collect::<sparse_core::Result<_>>()?;
                let before = kept.work();
                tr.step_buffers(t, &bufs)?;
                works.push(kept.work().since(&before));
                states.push(tr.save_state()?);
            }
            runs.push((works, states));
        }
        Ok(runs)
    });
    let runs = out.into_iter().next().unwrap().unwrap();
    let ((fused, fused_states), (separate, separate_states)) = (&runs[0], &runs[1]);
    for (s, (f, p)) in fused_states.iter().zip(separate_states).enumerate() {
        assert!(f == p, "step {s}: the training state differs, bit for bit");
    }
    for (s, (f, p)) in fused.iter().zip(separate).enumerate() {
        assert_eq!(f.passes + 3, p.passes, "step {s}: {f:?} against {p:?}");
        assert_eq!(
            f.round_trips, p.round_trips,
            "step {s}: {f:?} against {p:?}"
        );
        assert!(f.launches < p.launches, "step {s}: {f:?} against {p:?}");
    }
}
