//! Gradient hooks on burn 0.22's autodiff (`residual_sgd::burn_hook`):
//! the gradients they hand over equal those `loss.backward()` leaves
//! (read with `residual_sgd::burn::gradients`) bit for bit, they come in
//! backward order (each parameter's once the operation using it has run
//! its backward step, not all at the end), a step fed by them during the
//! backward pass (`backward_into`) equals the plain step bit for bit on
//! every rank, a parameter the loss does not reach or a frozen one goes in
//! as zeros (as `burn::gradients` reads them), a layer never hooked fails
//! the step on every rank instead, and a tensor without autodiff is an
//! error.
#![cfg(feature = "burn")]

use backend_cpu::Cpu;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor, TensorData};
use residual_sgd::burn_hook::{GradHooks, hooks};
use residual_sgd::{Config, Rule, Trainer};
use sparse_coll::{Defaults, Registry, ThreadCluster, Transport};
use sparse_core::Result;
use sparse_select::RadixTopK;

type Tr = Trainer<Cpu, RadixTopK>;

fn trainer(layers: &[residual_sgd::LayerSpec], w0: &[Vec<f32>]) -> Result<Tr> {
    Trainer::new(
        Cpu,
        Config::new(0.05, 0.25, Rule::TopK)?,
        layers.to_vec(),
        w0,
        RadixTopK::magnitude(),
        |_| Registry::builtin().build("topk_a", Defaults::lossless()),
    )
}

const IN: usize = 12;
const HIDDEN: usize = 20;
const OUT: usize = 5;
const BATCH: usize = 6;

/// Three linear layers; `spare` is never used (declared so:
/// `GradHooks::unused`), so the loss does not reach it.
#[derive(Module, Debug)]
struct Net {
    fc1: Linear,
    fc2: Linear,
    fc3: Linear,
    spare: Linear,
}

fn net(device: &Device) -> Net {
    Net {
        fc1: LinearConfig::new(IN, HIDDEN).init(device),
        fc2: LinearConfig::new(HIDDEN, HIDDEN).init(device),
        fc3: LinearConfig::new(HIDDEN, OUT).init(device),
        spare: LinearConfig::new(OUT, OUT).init(device),
    }
}

/// One linear layer, its parameters (layers `2 i` and `2 i + 1`) hooked
/// where `hooks` is given.
fn linear(fc: &Linear, i: usize, x: Tensor<2>, hooks: Option<&GradHooks>) -> Result<Tensor<2>> {
    let (w, b) = (fc.weight.val(), fc.bias.as_ref().expect("a bias").val());
    let (w, b) = match hooks {
        Some(h) => (h.hook(2 * i, w, &x)?, h.hook(2 * i + 1, b, &x)?),
        None => (w, b),
    };
    Ok(x.matmul(w) + b.unsqueeze())
}

/// The marker's layer: a hook on fc2's output, not a parameter.
const MARK: usize = 99;

/// The loss; with `mark`, fc2's output (before its ReLU) hooked as
/// [`MARK`] too: its hook runs once ReLU's backward step has run, after
/// fc3's parameters' hooks and before fc2's.
fn loss(n: &Net, x: Tensor<2>, hooks: Option<&GradHooks>, mark: bool) -> Result<Tensor<1>> {
    if let Some(h) = hooks {
        h.unused(6);
        h.unused(7);
    }
    let h = relu(linear(&n.fc1, 0, x, hooks)?);
    let z = linear(&n.fc2, 1, h, hooks)?;
    let z = match hooks {
        Some(hk) if mark => hk.hook(MARK, z.clone(), &z)?,
        _ => z,
    };
    let h = relu(z);
    let y = linear(&n.fc3, 2, h, hooks)?;
    Ok((y.clone() * y).sum())
}

fn input(device: &Device, rank: usize) -> Tensor<2> {
    let x: Vec<f32> = (0..BATCH * IN)
        .map(|i| ((i * 7 + rank * 3) % 11) as f32 / 8.0 - 0.5)
        .collect();
    Tensor::from_data(TensorData::new(x, [BATCH, IN]), device)
}

#[test]
fn hooked_gradients_equal_the_backward_pass_s_and_come_in_backward_order() -> Result<()> {
    let device = Device::flex().autodiff();
    let n = net(&device);
    let plain = loss(&n, input(&device, 0), None, false)?.backward();
    let want = residual_sgd::burn::gradients(&n, &plain)?;

    let (h, got) = hooks();
    let l = loss(&n, input(&device, 0), Some(&h), true)?;
    drop(h);
    let grads = l.backward();
    let seen: Vec<(usize, Vec<f32>)> = got
        .try_iter()
        .map(|g| {
            let v = g.grad.into_data().try_to_vec::<f32>().expect("f32");
            (g.layer, v)
        })
        .collect();
    // Backward order, during the pass: fc3's parameters, the marker (after
    // fc2's ReLU, before fc2's own backward steps), then fc2's, then
    // fc1's (within a layer in either order). Hooks that all ran at the
    // end of the pass would come after the marker. The spare layer is
    // never reached.
    let layers: Vec<usize> = seen.iter().map(|(l, _)| *l).collect();
    let stage = |l: usize| if l == MARK { 3 } else { [0, 0, 2, 2, 4, 4][l] };
    assert_eq!(layers.len(), 7, "{layers:?}");
    assert!(
        layers
            .windows(2)
            .all(|w| stage(w[0]) > stage(w[1]) || w[0] / 2 == w[1] / 2),
        "not in backward order: {layers:?}"
    );
    for (l, v) in seen.iter().filter(|(l, _)| *l != MARK) {
        assert_eq!(v, &want[*l], "layer {l}'s hooked gradient");
    }
    // Still registered on the parameters.
    assert_eq!(residual_sgd::burn::gradients(&n, &grads)?, want);
    Ok(())
}

#[test]
fn a_step_fed_during_the_backward_pass_equals_the_plain_step_on_every_rank() -> Result<()> {
    const RANKS: usize = 2;
    let device = Device::flex().autodiff();
    let n0 = net(&device);
    let layers = residual_sgd::burn::layers(&n0);
    let w0 = residual_sgd::burn::weights(&n0)?;
    let outs = ThreadCluster::new(RANKS).run(|t| {
        let (mut plain, mut hooked) = (trainer(&layers, &w0)?, trainer(&layers, &w0)?);
        for _ in 0..3 {
            let m = residual_sgd::burn::load(net(&device), &plain.weights()?)?;
            let g = residual_sgd::burn::gradients(
                &m,
                &loss(&m, input(&device, t.rank()), None, false)?.backward(),
            )?;
            plain.step(t, &g)?;

            let m = residual_sgd::burn::load(net(&device), &hooked.weights()?)?;
            let (h, grads) = hooks();
            let l = loss(&m, input(&device, t.rank()), Some(&h), false)?;
            drop(h);
            let rep = hooked.step_with(t, |feed| {
                residual_sgd::burn_hook::backward_into(l, grads, feed).map(drop)
            })?;
            // The spare layer went in as zeros.
            assert_eq!(rep.layers.len(), 8);
            assert_eq!(hooked.weights()?, plain.weights()?);
        }
        hooked.weights()
    });
    let ws: Vec<_> = outs.into_iter().collect::<Result<_>>()?;
    assert!(ws.windows(2).all(|w| w[0] == w[1]));
    assert_ne!(ws[0], w0, "the steps moved the weights");
    Ok(())
}

#[test]
fn a_tensor_without_autodiff_is_an_error() {
    let (h, _) = hooks();
    let device = Device::flex();
    let w = Tensor::<2>::zeros([2, 2], &device);
    let x = Tensor::<2>::zeros([2, 2], &device);
    let e = h.hook(0, w, &x).expect_err("no autodiff");
    assert!(e.to_string().contains("autodiff"), "{e}");
}

/// A layer the forward pass did not hook (here fc3's, on one rank) is
/// not pushed: the step fails on every rank, naming it where it happened,
/// rather than training it on zeros.
#[test]
fn a_layer_never_hooked_fails_the_step_on_every_rank() -> Result<()> {
    let device = Device::flex().autodiff();
    let n0 = net(&device);
    let (layers, w0) = (
        residual_sgd::burn::layers(&n0),
        residual_sgd::burn::weights(&n0)?,
    );
    let outs = ThreadCluster::new(2).run(|t| {
        let mut tr = trainer(&layers, &w0)?;
        let m = residual_sgd::burn::load(net(&device), &tr.weights()?)?;
        let (h, grads) = hooks();
        h.unused(6);
        h.unused(7);
        let x = relu(linear(&m.fc1, 0, input(&device, t.rank()), Some(&h))?);
        let x = relu(linear(&m.fc2, 1, x, Some(&h))?);
        let forgot = if t.rank() == 1 { None } else { Some(&h) };
        let y = linear(&m.fc3, 2, x, forgot)?;
        let l = (y.clone() * y).sum();
        drop(h);
        let e = tr
            .step_with(t, |feed| {
                residual_sgd::burn_hook::backward_into(l, grads, feed).map(drop)
            })
            .expect_err("a layer not pushed");
        assert_eq!(tr.weights()?, w0, "nothing applied");
        Ok(e.to_string())
    });
    let errs: Vec<String> = outs.into_iter().collect::<Result<_>>()?;
    assert!(
        errs[1].contains("fc3.weight") && errs[1].contains("not pushed"),
        "{errs:?}"
    );
    assert!(errs[0].contains("rank 1"), "{errs:?}");
    Ok(())
}

/// A frozen parameter (`no_grad`) is not hooked and goes in as zeros,
/// as `burn::gradients` reads it: the hooked step equals the plain one.
#[test]
fn a_frozen_parameter_goes_in_as_zeros() -> Result<()> {
    let device = Device::flex().autodiff();
    let frozen = || {
        let mut n = net(&device);
        n.fc2 = n.fc2.clone().no_grad();
        n
    };
    let n0 = frozen();
    let (layers, w0) = (
        residual_sgd::burn::layers(&n0),
        residual_sgd::burn::weights(&n0)?,
    );
    let outs = ThreadCluster::new(2).run(|t| {
        let (mut plain, mut hooked) = (trainer(&layers, &w0)?, trainer(&layers, &w0)?);
        for _ in 0..2 {
            let m = residual_sgd::burn::load(frozen(), &plain.weights()?)?;
            let g = residual_sgd::burn::gradients(
                &m,
                &loss(&m, input(&device, t.rank()), None, false)?.backward(),
            )?;
            assert!(g[2].iter().chain(&g[3]).all(|&x| x == 0.0));
            plain.step(t, &g)?;
            let m = residual_sgd::burn::load(frozen(), &hooked.weights()?)?;
            let (h, grads) = hooks();
            let l = loss(&m, input(&device, t.rank()), Some(&h), false)?;
            drop(h);
            hooked.step_with(t, |feed| {
                residual_sgd::burn_hook::backward_into(l, grads, feed).map(drop)
            })?;
            assert_eq!(hooked.weights()?, plain.weights()?);
        }
        Ok(())
    });
    outs.into_iter().collect()
}
