//! A burn model on burn's wgpu backend (lavapipe without a GPU) trained
//! through `residual_sgd::burn_device` (issue 43, item 1):
//!
//! - the same steps as on burn's CPU backend (`Flex`, the host glue
//!   `residual_sgd::burn` and `backend-cpu`), bit for bit on dyadic data:
//!   every input, weight and gradient is a multiple of `2^-7` below `2^16`
//!   in magnitude, so every product and every partial sum of burn's
//!   matmuls and of the step is exact in `f32` whatever the order of
//!   summation, and both backends must give the same bits;
//! - no gradient and no weight crosses to the host: the gradient buffers
//!   are burn's gradient tensors' own memory, taking them and loading the
//!   weights back move nothing and wait on nothing (`backend-cuda`'s
//!   [`Transfers`] and [`Work`]), and a step on them moves exactly what
//!   the same step on uploaded copies moves: the selected pairs and the
//!   dense layers' gradients out, the reduced pairs and the dense means in;
//! - gradient hooks (`residual_sgd::burn_hook`, issue 44, item 3) on the
//!   device: a pipelined step fed each gradient as the backward pass
//!   completes it equals, and moves as much as, the one fed after it.
#![cfg(feature = "burn-wgpu")]

use backend_cpu::Cpu;
use backend_cuda::{Transfers, WgpuBackend, Work};
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Device, Tensor, TensorData};
use residual_sgd::burn_device::OnDevice;
use residual_sgd::burn_hook::{GradHooks, hooks};
use residual_sgd::{Config, Rule, Trainer};
use sparse_coll::{Defaults, Registry, ThreadCluster, Transport};
use sparse_core::{Backend, BufferOps as _, Result};
use sparse_select::RadixTopK;

type Wgpu = burn_cubecl::cubecl::wgpu::WgpuRuntime;

const IN: usize = 8;
const HIDDEN: usize = 16;
const OUT: usize = 4;
const BATCH: usize = 4;
const STEPS: usize = 4;
const RANKS: usize = 2;

/// Two linear layers, no activation: every gradient is a sum of products
/// of the inputs, the loss weights and the weights (exact on dyadic data).
#[derive(Module, Debug)]
struct Net {
    fc1: Linear,
    fc2: Linear,
}

impl Net {
    fn new(device: &Device) -> Self {
        Self {
            fc1: LinearConfig::new(IN, HIDDEN).init(device),
            fc2: LinearConfig::new(HIDDEN, OUT).init(device),
        }
    }
}

/// A deterministic value in `{-1, 0, 1}` (inputs, loss weights).
fn trit(seed: u64, i: usize) -> f32 {
    let h =
        (seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    ((h >> 40) % 3) as f32 - 1.0
}

/// The initial weights: multiples of `1/16` in `[-1, 1)`, the same on
/// every rank.
fn w0(layers: &[usize]) -> Vec<Vec<f32>> {
    layers
        .iter()
        .enumerate()
        .map(|(l, &n)| {
            (0..n)
                .map(|i| ((trit(l as u64 + 7, i) * 5.0 + (i % 11) as f32) - 8.0) / 16.0)
                .collect()
        })
        .collect()
}

/// The loss of a batch: `sum(forward(x) * c)`, `x` and `c` in `{-1,0,1}`,
/// different on each rank and step.
fn loss(net: &Net, device: &Device, rank: usize, step: usize) -> Tensor<1> {
    let (x, c) = batch(device, rank, step);
    (net.fc2.forward(net.fc1.forward(x)) * c).sum()
}

/// A batch's inputs and loss weights.
fn batch(device: &Device, rank: usize, step: usize) -> (Tensor<2>, Tensor<2>) {
    let seed = (rank * 100 + step) as u64;
    let x: Vec<f32> = (0..BATCH * IN).map(|i| trit(seed, i)).collect();
    let c: Vec<f32> = (0..BATCH * OUT).map(|i| trit(seed + 50, i)).collect();
    (
        Tensor::<2>::from_data(TensorData::new(x, [BATCH, IN]), device),
        Tensor::<2>::from_data(TensorData::new(c, [BATCH, OUT]), device),
    )
}

/// [`loss`] with every parameter hooked as its layer
/// (`residual_sgd::burn_hook`), in `residual_sgd::burn::layers`' order.
fn hooked_loss(
    net: &Net,
    device: &Device,
    rank: usize,
    step: usize,
    h: &GradHooks,
) -> Result<Tensor<1>> {
    let (x, c) = batch(device, rank, step);
    let mut y = x;
    for (i, fc) in [&net.fc1, &net.fc2].into_iter().enumerate() {
        let w = h.hook(2 * i, fc.weight.val(), &y)?;
        let b = h.hook(2 * i + 1, fc.bias.as_ref().expect("a bias").val(), &y)?;
        y = y.matmul(w) + b.unsqueeze();
    }
    Ok((y * c).sum())
}

/// Top-k SGD at density 1/4 over TopkA (lossless), biases dense.
fn trainer<B: Backend<f32> + 'static>(b: B, net: &Net) -> Result<Trainer<B, RadixTopK>> {
    let layers = residual_sgd::burn::layers(net);
    let lens: Vec<usize> = layers.iter().map(|l| l.len).collect();
    let cfg = Config::new(0.25, 0.25, Rule::TopK)?
        .compress_threshold(0)
        .compress_min_dims(2);
    Trainer::new(b, cfg, layers, &w0(&lens), RadixTopK::magnitude(), |_| {
        Registry::builtin().build("topk_a", Defaults::lossless())
    })
}

/// Per step: each layer's selected indices and weights (as bits).
type Steps = Vec<(Vec<Vec<u32>>, Vec<Vec<u32>>)>;

fn bits(w: Vec<Vec<f32>>) -> Vec<Vec<u32>> {
    w.into_iter()
        .map(|l| l.into_iter().map(f32::to_bits).collect())
        .collect()
}

/// The CPU path: burn's Flex backend, gradients through the host.
fn on_cpu(t: &mut dyn Transport) -> Result<Steps> {
    let device = Device::flex().autodiff();
    let mut net = Net::new(&device);
    let mut tr = trainer(Cpu, &net)?;
    let mut out = Vec::new();
    for s in 0..STEPS {
        net = residual_sgd::burn::load(net, &tr.weights()?)?;
        let g = residual_sgd::burn::gradients(&net, &loss(&net, &device, t.rank(), s).backward())?;
        let rep = tr.step(t, &g)?;
        let sel = rep.sent.iter().map(|v| v.indices().to_vec()).collect();
        out.push((sel, bits(tr.weights()?)));
    }
    Ok(out)
}

/// The device path: burn's wgpu backend, gradients and weights on the
/// device; per step also what moved between host and device in each part.
/// Per step, what moved in taking the gradients, in the step and in
/// loading the weights.
type Moved = Vec<[(Transfers, Work); 3]>;

fn on_wgpu(t: &mut dyn Transport) -> Result<(Steps, Moved)> {
    let device = Device::wgpu(Default::default()).autodiff();
    let gpu = OnDevice::<Wgpu>::new(&device)?;
    let b = gpu.backend().clone();
    let mut net = Net::new(&device);
    let mut tr = trainer(b.clone(), &net)?;
    net = gpu.load(net, &tr.weight_buffers())?;
    let (mut out, mut moved) = (Vec::new(), Vec::new());
    let mark = |b: &WgpuBackend| (b.transfers(), b.work());
    let since =
        |b: &WgpuBackend, m: (Transfers, Work)| (b.transfers().since(&m.0), b.work().since(&m.1));
    for s in 0..STEPS {
        let grads = loss(&net, &device, t.rank(), s).backward();
        let m0 = mark(&b);
        let g = gpu.gradients(&net, &grads)?;
        let take = since(&b, m0);
        same_memory(&net, &grads, &g);
        let m1 = mark(&b);
        let rep = tr.step_buffers(t, &g)?;
        let step = since(&b, m1);
        let m2 = mark(&b);
        net = gpu.load(net, &tr.weight_buffers())?;
        let load = since(&b, m2);
        moved.push([take, step, load]);
        let sel = rep.sent.iter().map(|v| v.indices().to_vec()).collect();
        out.push((sel, bits(tr.weights()?)));
        // The module holds the trainer's weights now.
        assert_eq!(
            bits(residual_sgd::burn::weights(&net)?),
            bits(tr.weights()?)
        );
    }
    Ok((out, moved))
}

/// Each gradient buffer is burn's gradient tensor's memory (the same
/// cubecl memory id and offset), not a copy.
fn same_memory(net: &Net, grads: &burn::tensor::Gradients, g: &[backend_cuda::CubeBuffer<f32>]) {
    let ts = [
        net.fc1.weight.val().grad(grads),
        net.fc1
            .bias
            .as_ref()
            .and_then(|b| b.val().grad(grads).map(|t| t.reshape([1, HIDDEN]))),
        net.fc2.weight.val().grad(grads),
        net.fc2
            .bias
            .as_ref()
            .and_then(|b| b.val().grad(grads).map(|t| t.reshape([1, OUT]))),
    ];
    assert_eq!(ts.len(), g.len());
    for (l, (t, buf)) in ts.into_iter().zip(g).enumerate() {
        let p = t
            .expect("every parameter has a gradient")
            .try_into_primitive::<burn::backend::Cube>()
            .expect("a cubecl tensor");
        let id = |h: &burn_cubecl::cubecl::server::Handle| {
            (format!("{:?}", h.memory), h.offset_start, h.offset_end)
        };
        assert_eq!(
            id(&p.handle),
            id(buf.handle()),
            "layer {l}: not burn's memory"
        );
    }
}

#[test]
fn wgpu_steps_equal_the_cpu_steps_bit_for_bit_and_move_only_the_selected_pairs() {
    let cpu = ThreadCluster::new(RANKS).run(|t| on_cpu(t));
    let gpu = ThreadCluster::new(RANKS).run(|t| on_wgpu(t));
    let probe = ThreadCluster::new(RANKS).run(|t| uploaded_copies(t));
    for (r, ((c, g), p)) in cpu.into_iter().zip(gpu).zip(probe).enumerate() {
        let c = c.expect("cpu run");
        let (g, moved) = g.expect("wgpu run: install mesa-vulkan-drivers without a GPU");
        let p = p.expect("probe run");
        assert_eq!(c.len(), STEPS);
        for (s, (cs, gs)) in c.iter().zip(&g).enumerate() {
            assert_eq!(cs.0, gs.0, "rank {r} step {s}: selections");
            assert_eq!(cs.1, gs.1, "rank {r} step {s}: weights");
        }
        for (s, [take, step, load]) in moved.into_iter().enumerate() {
            let none = (Transfers::default(), Work::default());
            assert_eq!(
                take.0, none.0,
                "rank {r} step {s}: taking the gradients moved data"
            );
            assert_eq!(
                take.1.round_trips, 0,
                "rank {r} step {s}: taking the gradients"
            );
            assert_eq!(
                load.0, none.0,
                "rank {r} step {s}: loading the weights moved data"
            );
            assert_eq!(
                load.1.round_trips, 0,
                "rank {r} step {s}: loading the weights"
            );
            // The step on burn's memory moves what the step on uploaded
            // copies of the same gradients moves (apart from the uploads):
            // the selected pairs and the dense layers, nothing more.
            let want = p[s];
            assert_eq!(step.0, want.0, "rank {r} step {s}: the step's transfers");
            assert_eq!(step.1.round_trips, want.1.round_trips, "rank {r} step {s}");
        }
    }
}

/// The same steps with the wgpu path's gradients downloaded and uploaded
/// again into a second trainer on another backend value: what a step on
/// uploaded buffers moves (the upload itself not counted), and the data it
/// moves checked against the selected pairs and the dense layers.
fn uploaded_copies(t: &mut dyn Transport) -> Result<Vec<(Transfers, Work)>> {
    let device = Device::wgpu(Default::default()).autodiff();
    let gpu = OnDevice::<Wgpu>::new(&device)?;
    let mut net = Net::new(&device);
    let other = WgpuBackend::new_default()?;
    let mut tr = trainer(other.clone(), &net)?;
    let lens: Vec<usize> = residual_sgd::burn::layers(&net)
        .iter()
        .map(|l| l.len)
        .collect();
    let compressed = tr.compressed();
    let mut out = Vec::new();
    for s in 0..STEPS {
        net = residual_sgd::burn::load(net, &tr.weights()?)?;
        let host =
            residual_sgd::burn::gradients(&net, &loss(&net, &device, t.rank(), s).backward())?;
        let bufs: Vec<_> = host
            .iter()
            .map(|g| other.upload(g))
            .collect::<Result<_>>()?;
        let (t0, w0) = (other.transfers(), other.work());
        let rep = tr.step_buffers(t, &bufs)?;
        let moved = (other.transfers().since(&t0), other.work().since(&w0));
        let mut data = 0;
        for (l, &n) in lens.iter().enumerate() {
            data += if compressed[l] {
                8 * rep.sent[l].nnz()
            } else {
                4 * n
            };
        }
        assert_eq!(
            moved.0.downloaded, data as u64,
            "step {s}: pairs and dense layers"
        );
        out.push(moved);
    }
    drop(gpu);
    Ok(out)
}

/// A gradient burn hands as a strided view or in another float type
/// becomes a row-major `f32` buffer on the device: the values equal the
/// transposition done on the host, and `f16` (where the device has it)
/// comes back exactly on values `f16` holds.
#[test]
fn strided_and_half_tensors_become_row_major_f32_buffers() {
    let device = Device::wgpu(Default::default());
    let gpu = OnDevice::<Wgpu>::new(&device).expect("wgpu device");
    let b = gpu.backend();
    let (r, c) = (3usize, 5usize);
    let x: Vec<f32> = (0..r * c).map(|i| i as f32 / 4.0 - 2.0).collect();
    let t = Tensor::<2>::from_data(TensorData::new(x.clone(), [r, c]), &device);
    let plain = gpu.tensor_buffer(t.clone()).unwrap();
    assert_eq!(b.download(&plain).unwrap(), x);
    let tt = gpu.tensor_buffer(t.clone().transpose()).unwrap();
    let want: Vec<f32> = (0..c)
        .flat_map(|j| (0..r).map(move |i| (i, j)))
        .map(|(i, j)| x[i * c + j])
        .collect();
    assert_eq!(
        b.download(&tt).unwrap(),
        want,
        "the transposed view, row-major"
    );
    if device.supports_dtype(burn::tensor::DType::F16) {
        let h = gpu.tensor_buffer(t.cast(burn::tensor::DType::F16)).unwrap();
        assert_eq!(
            b.download(&h).unwrap(),
            x,
            "f16 cast back to f32 on the device"
        );
    } else {
        println!("this wgpu device has no f16: the cast path is not exercised");
    }
    // A tensor of burn's CPU backend is an error naming the device, not a
    // host trip.
    let flex = Tensor::<2>::from_data(TensorData::new(x, [r, c]), &Device::flex());
    let Err(e) = gpu.tensor_buffer(flex) else {
        panic!("a Flex tensor was taken as a cubecl buffer");
    };
    assert!(e.to_string().contains("cubecl"), "{e}");
    assert!(OnDevice::<Wgpu>::new(&Device::flex()).is_err());
}

/// Gradient hooks on burn's wgpu backend (`OnDevice::backward_into`): a
/// pipelined step fed during the backward pass, each gradient a buffer
/// over burn's memory as the pass completes it, equals bit for bit the
/// pipelined step fed burn's gradient buffers after the pass, and moves
/// between host and device exactly what that step moves (the hooks add no
/// host trip: no gradient is downloaded and uploaded).
#[test]
fn hooked_wgpu_steps_equal_the_steps_fed_after_the_pass_and_move_as_much() {
    let outs = ThreadCluster::new(RANKS).run(|t| -> Result<Vec<u32>> {
        let device = Device::wgpu(Default::default()).autodiff();
        let gpu = OnDevice::<Wgpu>::new(&device)?;
        let b = gpu.backend().clone();
        let net = Net::new(&device);
        let (mut fed, mut hooked) = (trainer(b.clone(), &net)?, trainer(b.clone(), &net)?);
        let mark = |b: &WgpuBackend| (b.transfers(), b.work());
        for s in 0..STEPS {
            let m = gpu.load(net.clone(), &fed.weight_buffers())?;
            let g = gpu.gradients(&m, &loss(&m, &device, t.rank(), s).backward())?;
            let m0 = mark(&b);
            let want = fed.step_with(t, |feed| {
                (0..g.len()).rev().try_for_each(|l| feed.push(l, &g[l]))
            })?;
            let (t0, w0) = (b.transfers().since(&m0.0), b.work().since(&m0.1));

            let m = gpu.load(net.clone(), &hooked.weight_buffers())?;
            let (h, grads) = hooks();
            let l = hooked_loss(&m, &device, t.rank(), s, &h)?;
            drop(h);
            let m1 = mark(&b);
            let got = hooked.step_with(t, |feed| gpu.backward_into(l, grads, feed).map(drop))?;
            let (t1, w1) = (b.transfers().since(&m1.0), b.work().since(&m1.1));

            let r = t.rank();
            for (a, z) in want.sent.iter().zip(&got.sent) {
                assert_eq!(a.indices(), z.indices(), "rank {r} step {s}: selections");
            }
            assert_eq!(
                bits(fed.weights()?),
                bits(hooked.weights()?),
                "rank {r} step {s}: weights"
            );
            assert_eq!(t0, t1, "rank {r} step {s}: the hooked step's transfers");
            assert_eq!(
                w0.round_trips, w1.round_trips,
                "rank {r} step {s}: round trips"
            );
        }
        assert_ne!(
            hooked.weights()?,
            w0_of(&net),
            "the steps moved the weights"
        );
        Ok(bits(hooked.weights()?).concat())
    });
    let ws: Vec<_> = outs
        .into_iter()
        .map(|o| o.expect("wgpu run: install mesa-vulkan-drivers without a GPU"))
        .collect();
    assert!(ws.windows(2).all(|w| w[0] == w[1]), "ranks differ");
}

/// The initial weights [`trainer`] starts from.
fn w0_of(net: &Net) -> Vec<Vec<f32>> {
    let lens: Vec<usize> = residual_sgd::burn::layers(net)
        .iter()
        .map(|l| l.len)
        .collect();
    w0(&lens)
}

/// A model on burn's wgpu device hooks its parameters; a parameter on the
/// device combined with a tensor of burn's CPU backend is an error naming
/// the backends hooks take, not a panic.
#[test]
fn hooks_take_wgpu_tensors_and_refuse_mixed_devices() {
    let device = Device::wgpu(Default::default()).autodiff();
    let (h, grads) = hooks();
    let w = Tensor::<2>::zeros([2, 2], &device).require_grad();
    let x = Tensor::<2>::ones([3, 2], &device).require_grad();
    let y = h
        .hook(0, w.clone(), &x)
        .expect("a wgpu tensor with autodiff");
    drop(h);
    let g = (x.clone().matmul(y) * x).sum().backward();
    let got: Vec<_> = grads.try_iter().collect();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].layer, 0);
    let want = w.grad(&g).expect("registered").reshape([4]).into_data();
    assert_eq!(got[0].grad.clone().into_data(), want, "the hooked gradient");

    let (h, _) = hooks();
    let flex = Tensor::<2>::ones([3, 2], &Device::flex().autodiff());
    let e = h.hook(0, w, &flex).expect_err("mixed devices");
    assert!(
        e.to_string().contains("the tensor it is combined with") && e.to_string().contains("wgpu"),
        "{e}"
    );
}

/// On the device too the hooks run during the pass, each right after the
/// backward step of the operation using its parameter: a marker hook on
/// the first layer's output comes between the second layer's weight
/// (before it) and the first's (after it). Hooks that all ran at the end
/// of the pass (depth 1) would come after the marker.
#[test]
fn wgpu_hooks_come_in_backward_order() -> Result<()> {
    const MARK: usize = 99;
    let device = Device::wgpu(Default::default()).autodiff();
    let (h, grads) = hooks();
    let x = Tensor::<2>::ones([3, 4], &device);
    let w1 = Tensor::<2>::ones([4, 5], &device).require_grad();
    let w2 = Tensor::<2>::ones([5, 2], &device).require_grad();
    let z = x.clone().matmul(h.hook(0, w1, &x)?);
    let m = h.hook(MARK, z.clone(), &z)?;
    let y = m.clone().matmul(h.hook(1, w2, &m)?);
    drop(h);
    drop((y.clone() * y).sum().backward());
    let order: Vec<usize> = grads.try_iter().map(|g| g.layer).collect();
    assert_eq!(order, [1, MARK, 0]);
    Ok(())
}
