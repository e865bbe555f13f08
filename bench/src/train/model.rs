//! The models of `sparse-bench train` as `burn` modules with autodiff, on
//! the `Flex` CPU backend or (`--device wgpu|cuda`) burn's GPU backends:
//! an MLP (`input -> hidden -> 10`, ReLU) and a CNN (two 5x5 convolutions
//! with ReLU and 2x2 max pooling, then a hidden fully connected layer and
//! the 10-way output), both with softmax cross-entropy. The weights live outside the model, as flat `f32`
//! buffers owned by the optimizer: each step loads them into the module
//! and takes the gradients out, through `residual_sgd::burn` on the CPU
//! (host vectors) and `residual_sgd::burn_device` on a GPU (device
//! buffers, [`Model::device_grads`]).

use super::data::{CLASSES, Set};
use burn::module::{Module, Param};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig2d};
use burn::tensor::activation::{log_softmax, relu};
use burn::tensor::module::{conv2d, linear};
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, Tensor, TensorData};
use rand::{Rng as _, SeedableRng};
use residual_sgd::LayerSpec;
use residual_sgd::burn_hook::{GradHooks, HookedGrads};
use sparse_core::{Error, Result};

/// The CNN's convolution channels (first, second).
pub const CNN_CHANNELS: [usize; 2] = [16, 32];
/// The CNN's convolution kernel (square).
pub const CNN_KERNEL: usize = 5;

/// Which network `sparse-bench train` trains (`--model`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Kind {
    /// `input -> hidden -> 10`, ReLU.
    #[default]
    Mlp,
    /// conv 5x5 (16) -> ReLU -> pool 2 -> conv 5x5 (32) -> ReLU -> pool 2
    /// -> hidden -> ReLU -> 10.
    Cnn,
}

/// The MLP: two linear layers (`weight` is `[d_input, d_output]`, so
/// `h = relu(x W1 + b1)`).
#[derive(Module, Debug)]
pub struct MlpNet {
    fc1: Linear,
    fc2: Linear,
}

/// The CNN: convolutions padded to keep the image size, each followed by
/// ReLU and a 2x2 max pooling, then two linear layers.
#[derive(Module, Debug)]
pub struct CnnNet {
    conv1: Conv2d,
    conv2: Conv2d,
    pool: MaxPool2d,
    fc1: Linear,
    fc2: Linear,
}

/// Either network (dispatching `residual_sgd::burn`'s functions, which
/// take one module type).
#[derive(Debug, Clone)]
pub enum Net {
    /// The MLP.
    Mlp(Box<MlpNet>),
    /// The CNN.
    Cnn(Box<CnnNet>),
}

impl Net {
    fn layers(&self) -> Vec<LayerSpec> {
        match self {
            Net::Mlp(m) => residual_sgd::burn::layers(&**m),
            Net::Cnn(c) => residual_sgd::burn::layers(&**c),
        }
    }
    fn load(&self, w: &[Vec<f32>]) -> Result<Net> {
        Ok(match self {
            Net::Mlp(m) => Net::Mlp(Box::new(residual_sgd::burn::load((**m).clone(), w)?)),
            Net::Cnn(c) => Net::Cnn(Box::new(residual_sgd::burn::load((**c).clone(), w)?)),
        })
    }
    fn no_grad(self) -> Net {
        match self {
            Net::Mlp(m) => Net::Mlp(Box::new(m.no_grad())),
            Net::Cnn(c) => Net::Cnn(Box::new(c.no_grad())),
        }
    }
    fn gradients(&self, g: &burn::tensor::Gradients) -> Result<Vec<Vec<f32>>> {
        match self {
            Net::Mlp(m) => residual_sgd::burn::gradients(&**m, g),
            Net::Cnn(c) => residual_sgd::burn::gradients(&**c, g),
        }
    }
    fn forward(&self, x: Tensor<2>, shape: [usize; 2]) -> Tensor<2> {
        match self {
            Net::Mlp(m) => m.fc2.forward(relu(m.fc1.forward(x))),
            Net::Cnn(c) => {
                let n = x.dims()[0];
                let x = x.reshape([n, 1, shape[0], shape[1]]);
                let x = c.pool.forward(relu(c.conv1.forward(x)));
                let x = c.pool.forward(relu(c.conv2.forward(x)));
                let x: Tensor<2> = x.flatten(1, 3);
                c.fc2.forward(relu(c.fc1.forward(x)))
            }
        }
    }
}

/// A linear layer whose parameters, layers `at` and `at + 1`, are hooked.
fn hooked_linear(fc: &Linear, at: usize, x: Tensor<2>, hooks: &GradHooks) -> Result<Tensor<2>> {
    let w = hooks.hook(at, fc.weight.val(), &x)?;
    let b = hooked_bias(fc.bias.as_ref(), at + 1, &x, hooks)?;
    Ok(linear(x, w, b))
}

/// A layer's bias, where it has one, hooked as layer `at` after `x`.
fn hooked_bias<const E: usize>(
    bias: Option<&Param<Tensor<1>>>,
    at: usize,
    x: &Tensor<E>,
    hooks: &GradHooks,
) -> Result<Option<Tensor<1>>> {
    bias.map(|b| hooks.hook(at, b.val(), x)).transpose()
}

/// A convolution whose parameters, layers `at` and `at + 1`, are hooked,
/// with `Conv2d::forward`'s options (the CNN's explicit padding; burn
/// keeps its computation of the others to itself).
fn hooked_conv(cv: &Conv2d, at: usize, x: Tensor<4>, hooks: &GradHooks) -> Result<Tensor<4>> {
    let PaddingConfig2d::Explicit(top, left, bottom, right) = cv.padding else {
        return Err(Error::invalid(
            "model",
            format!("hooks take explicit padding, not {:?}", cv.padding),
        ));
    };
    let options = ConvOptions::new_with_padding(
        cv.stride,
        [(top, bottom), (left, right)],
        cv.dilation,
        cv.groups,
    );
    let weight = hooks.hook(at, cv.weight.val(), &x)?;
    let bias = hooked_bias(cv.bias.as_ref(), at + 1, &x, hooks)?;
    Ok(conv2d(x, weight, bias, options))
}

impl Net {
    /// [`Net::forward`] with every parameter hooked
    /// (`residual_sgd::burn_hook`) as its layer, in [`Net::layers`]'
    /// order: the same values, each gradient handed over as the backward
    /// pass completes it.
    fn forward_hooked(
        &self,
        x: Tensor<2>,
        shape: [usize; 2],
        hooks: &GradHooks,
    ) -> Result<Tensor<2>> {
        match self {
            Net::Mlp(m) => {
                let h = relu(hooked_linear(&m.fc1, 0, x, hooks)?);
                hooked_linear(&m.fc2, 2, h, hooks)
            }
            Net::Cnn(c) => {
                let n = x.dims()[0];
                let x = x.reshape([n, 1, shape[0], shape[1]]);
                let x = c.pool.forward(relu(hooked_conv(&c.conv1, 0, x, hooks)?));
                let x = c.pool.forward(relu(hooked_conv(&c.conv2, 2, x, hooks)?));
                let x: Tensor<2> = x.flatten(1, 3);
                let h = relu(hooked_linear(&c.fc1, 4, x, hooks)?);
                hooked_linear(&c.fc2, 6, h, hooks)
            }
        }
    }
}

/// A network, its input shape and its device.
#[derive(Debug, Clone)]
pub struct Model {
    kind: Kind,
    shape: [usize; 2],
    hidden: usize,
    device: Device,
    net: Net,
    /// Per layer, the fan-in of its initialisation.
    fan_in: Vec<usize>,
}

impl Model {
    /// The MLP `features -> hidden -> 10`.
    pub fn mlp(features: usize, hidden: usize) -> Self {
        Self::new(Kind::Mlp, [1, features], hidden).expect("an MLP takes any shape")
    }

    /// A network of `kind` for images of `shape` (rows, columns) with
    /// `hidden` units in its hidden fully connected layer (its weights
    /// come from [`Model::init`] or the optimizer).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a zero size, or a CNN whose image
    /// sides are not multiples of 4 (two 2x2 poolings).
    pub fn new(kind: Kind, shape: [usize; 2], hidden: usize) -> Result<Self> {
        Self::on(kind, shape, hidden, Device::flex().autodiff())
    }

    /// [`Model::new`] on burn's `device` (with autodiff): `Flex` on the
    /// CPU, or a wgpu or cuda device for [`Model::device_grads`].
    ///
    /// # Errors
    /// As [`Model::new`].
    pub fn on(kind: Kind, shape: [usize; 2], hidden: usize, device: Device) -> Result<Self> {
        let features = shape[0] * shape[1];
        if features == 0 || hidden == 0 {
            return Err(Error::invalid(
                "model",
                "image and hidden sizes must be at least 1",
            ));
        }
        let [c1, c2] = CNN_CHANNELS;
        let k = CNN_KERNEL;
        let (net, fan_in) = match kind {
            Kind::Mlp => (
                Net::Mlp(Box::new(MlpNet {
                    fc1: LinearConfig::new(features, hidden).init(&device),
                    fc2: LinearConfig::new(hidden, CLASSES).init(&device),
                })),
                vec![features, features, hidden, hidden],
            ),
            Kind::Cnn => {
                if !shape[0].is_multiple_of(4) || !shape[1].is_multiple_of(4) {
                    return Err(Error::invalid(
                        "model",
                        format!("the CNN needs image sides that are multiples of 4, not {shape:?}"),
                    ));
                }
                let flat = c2 * (shape[0] / 4) * (shape[1] / 4);
                let pad = PaddingConfig2d::Explicit(k / 2, k / 2, k / 2, k / 2);
                let conv = |i: usize, o: usize| {
                    Conv2dConfig::new([i, o], [k, k])
                        .with_padding(pad.clone())
                        .init(&device)
                };
                (
                    Net::Cnn(Box::new(CnnNet {
                        conv1: conv(1, c1),
                        conv2: conv(c1, c2),
                        pool: MaxPool2dConfig::new([2, 2]).init(),
                        fc1: LinearConfig::new(flat, hidden).init(&device),
                        fc2: LinearConfig::new(hidden, CLASSES).init(&device),
                    })),
                    vec![
                        k * k,
                        k * k,
                        c1 * k * k,
                        c1 * k * k,
                        flat,
                        flat,
                        hidden,
                        hidden,
                    ],
                )
            }
        };
        let m = Self {
            kind,
            shape,
            hidden,
            device,
            net,
            fan_in,
        };
        debug_assert_eq!(m.layers().len(), m.fan_in.len());
        Ok(m)
    }

    /// The network's kind.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// A one-line description (`MLP 784-256-10`, `CNN 28x28 conv5x5(16)
    /// pool conv5x5(32) pool 1568-64-10`).
    pub fn describe(&self) -> String {
        let f = self.shape[0] * self.shape[1];
        match self.kind {
            Kind::Mlp => format!("MLP {f}-{}-{CLASSES}", self.hidden),
            Kind::Cnn => {
                let [c1, c2] = CNN_CHANNELS;
                let k = CNN_KERNEL;
                let flat = c2 * f / 16;
                format!(
                    "CNN {}x{} conv{k}x{k}({c1}) pool2 conv{k}x{k}({c2}) pool2 {flat}-{}-{CLASSES}",
                    self.shape[0], self.shape[1], self.hidden
                )
            }
        }
    }

    /// The layers, in the order of the weights and gradients (the
    /// modules' fields in order, weight before bias).
    pub fn layers(&self) -> Vec<LayerSpec> {
        self.net.layers()
    }

    /// Parameters in all.
    pub fn parameters(&self) -> usize {
        self.layers().iter().map(|l| l.len).sum()
    }

    /// Initial weights from `seed`, drawn as PyTorch's `nn.Linear` and
    /// `nn.Conv2d` draw them: uniform in `±1/sqrt(fan_in)` for weights and
    /// biases (`fan_in` is a linear layer's inputs, a convolution's input
    /// channels times its kernel's area).
    pub fn init(&self, seed: u64) -> Vec<Vec<f32>> {
        let mut rng = super::Rng::seed_from_u64(seed);
        self.layers()
            .iter()
            .zip(&self.fan_in)
            .map(|(l, &fan_in)| {
                let bound = 1.0 / (fan_in as f32).sqrt();
                (0..l.len)
                    .map(|_| rng.random_range(-bound..bound))
                    .collect()
            })
            .collect()
    }

    fn logits(&self, net: &Net, set: &Set) -> Result<Tensor<2>> {
        Ok(net.forward(self.input(set)?, self.shape))
    }

    /// `set`'s images as the networks' input.
    fn input(&self, set: &Set) -> Result<Tensor<2>> {
        let f = self.shape[0] * self.shape[1];
        if set.x.len() != set.len() * f || set.features() != f || set.is_empty() {
            return Err(Error::invalid(
                "batch",
                format!("empty or not {f} pixels per image"),
            ));
        }
        Ok(Tensor::<2>::from_data(
            TensorData::new(set.x.clone(), [set.len(), f]),
            &self.device,
        ))
    }

    /// Mean softmax cross-entropy of `set` under `w` and its gradient for
    /// every layer (flat, in the weights' layout).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] or [`Error::LengthMismatch`] for weights
    /// or a batch that do not fit.
    pub fn loss_and_grads(&self, w: &[Vec<f32>], set: &Set) -> Result<(f64, Vec<Vec<f32>>)> {
        let net = self.net.load(w)?;
        let logits = self.logits(&net, set)?;
        let loss = cross_entropy(logits, set, &self.device);
        let grads = loss.backward();
        let g = net.gradients(&grads)?;
        Ok((scalar(loss)?, g))
    }

    /// The mean softmax cross-entropy of `set` under `w`, its forward
    /// pass only, with every parameter hooked (`residual_sgd::burn_hook`):
    /// its backward pass (`burn_hook::backward_into`) hands each layer's
    /// gradient over as it completes it, bit for bit those of
    /// [`Model::loss_and_grads`] (on a GPU device:
    /// [`Model::device_hooked_loss`]).
    ///
    /// # Errors
    /// As [`Model::loss_and_grads`].
    pub fn hooked_loss(&self, w: &[Vec<f32>], set: &Set) -> Result<(Tensor<1>, HookedGrads)> {
        self.hooked(&self.net.load(w)?, set)
    }

    /// `net`'s loss on `set`, its parameters hooked.
    fn hooked(&self, net: &Net, set: &Set) -> Result<(Tensor<1>, HookedGrads)> {
        let x = self.input(set)?;
        let (hooks, grads) = residual_sgd::burn_hook::hooks();
        let logits = net.forward_hooked(x, self.shape, &hooks)?;
        Ok((cross_entropy(logits, set, &self.device), grads))
    }

    /// [`Model::hooked_loss`] on a GPU device at the weights `w` (a
    /// trainer's weight buffers on the model's device), loaded into the
    /// module on the device: its backward pass
    /// (`OnDevice::backward_into`) hands each gradient over as a buffer
    /// over its device memory.
    ///
    /// # Errors
    /// As [`Model::device_grads`].
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    pub fn device_hooked_loss<R: residual_sgd::burn_device::BurnRuntime>(
        &self,
        on: &residual_sgd::burn_device::OnDevice<R>,
        w: &[&backend_cuda::CubeBuffer<f32>],
        set: &Set,
    ) -> Result<(Tensor<1>, HookedGrads)> {
        self.hooked(&self.net_on(on, w)?, set)
    }

    /// The network with the weights `w` loaded on `on`'s device.
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    fn net_on<R: residual_sgd::burn_device::BurnRuntime>(
        &self,
        on: &residual_sgd::burn_device::OnDevice<R>,
        w: &[&backend_cuda::CubeBuffer<f32>],
    ) -> Result<Net> {
        Ok(match &self.net {
            Net::Mlp(m) => Net::Mlp(Box::new(on.load((**m).clone(), w)?)),
            Net::Cnn(c) => Net::Cnn(Box::new(on.load((**c).clone(), w)?)),
        })
    }

    /// The gradients of the mean softmax cross-entropy of `set` at the
    /// weights `w` (a trainer's weight buffers on the model's device), as
    /// buffers over the gradients' device memory: the weights go into the
    /// module and the gradients come out without a trip through the host
    /// (`residual_sgd::burn_device`). Waits for the device to finish the
    /// backward pass, so that a caller's clock times it.
    ///
    /// # Errors
    /// As [`Model::loss_and_grads`]; [`Error::Device`] for a model on
    /// another device than `on`'s.
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    pub fn device_grads<R: residual_sgd::burn_device::BurnRuntime>(
        &self,
        on: &residual_sgd::burn_device::OnDevice<R>,
        w: &[&backend_cuda::CubeBuffer<f32>],
        set: &Set,
    ) -> Result<Vec<backend_cuda::CubeBuffer<f32>>> {
        let net = self.net_on(on, w)?;
        let logits = self.logits(&net, set)?;
        let grads = cross_entropy(logits, set, &self.device).backward();
        let g = match &net {
            Net::Mlp(m) => on.gradients(&**m, &grads),
            Net::Cnn(c) => on.gradients(&**c, &grads),
        }?;
        self.device.sync().map_err(|e| Error::Device {
            backend: "burn",
            detail: format!("the backward pass failed on the device: {e:?}"),
        })?;
        Ok(g)
    }

    /// Mean cross-entropy and accuracy of `w` on `set`, in chunks of at
    /// most [`EVAL_CHUNK`] images (without autodiff's graph).
    ///
    /// # Errors
    /// As [`Model::loss_and_grads`].
    pub fn evaluate(&self, w: &[Vec<f32>], set: &Set) -> Result<(f64, f64)> {
        let net = self.net.load(w)?.no_grad();
        if set.is_empty() {
            return Err(Error::invalid("evaluate", "an empty set"));
        }
        let (mut loss, mut correct) = (0.0, 0usize);
        for start in (0..set.len()).step_by(EVAL_CHUNK) {
            let chunk = set.range(start..(start + EVAL_CHUNK).min(set.len()));
            let logits = self.logits(&net, &chunk)?;
            let pred: Vec<i64> = logits
                .clone()
                .argmax(1)
                .into_data()
                .convert::<i64>()
                .try_into_vec::<i64>()
                .map_err(|e| Error::invalid("burn", format!("{e:?}")))?;
            correct += pred
                .iter()
                .zip(&chunk.y)
                .filter(|(p, y)| **p == i64::from(**y))
                .count();
            loss += scalar(cross_entropy(logits, &chunk, &self.device))? * chunk.len() as f64;
        }
        Ok((loss / set.len() as f64, correct as f64 / set.len() as f64))
    }
}

/// Images per forward pass in [`Model::evaluate`].
pub const EVAL_CHUNK: usize = 1000;

/// `-mean_i log softmax(logits_i)[y_i]`, through a one-hot mask.
fn cross_entropy(logits: Tensor<2>, set: &Set, device: &Device) -> Tensor<1> {
    let n = set.len();
    let mut onehot = vec![0.0f32; n * CLASSES];
    for (i, &y) in set.y.iter().enumerate() {
        onehot[i * CLASSES + usize::from(y)] = 1.0;
    }
    let onehot = Tensor::<2>::from_data(TensorData::new(onehot, [n, CLASSES]), device);
    (log_softmax(logits, 1) * onehot)
        .sum()
        .mul_scalar(-1.0 / n as f64)
}

fn scalar(t: Tensor<1>) -> Result<f64> {
    let v = t
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .map_err(|e| Error::invalid("burn", format!("{e:?}")))?;
    Ok(f64::from(v[0]))
}
