//! The MLP of `sparse-bench train` (64 -> hidden -> 10, ReLU, softmax
//! cross-entropy) as a `burn` module on the `Flex` CPU backend with
//! autodiff. The weights live outside the model, as flat `f32` buffers
//! owned by the optimizer: each step loads them into the module and takes
//! the gradients out, both through `residual_sgd::burn`.

use super::data::{CLASSES, FEATURES, Set};
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::{log_softmax, relu};
use burn::tensor::{Device, Tensor, TensorData};
use rand::{Rng as _, SeedableRng};
use residual_sgd::LayerSpec;
use sparse_core::{Error, Result};

/// The network: two linear layers (`weight` is `[d_input, d_output]`, so
/// `h = relu(x W1 + b1)`).
#[derive(Module, Debug)]
pub struct Net {
    fc1: Linear,
    fc2: Linear,
}

impl Net {
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.fc2.forward(relu(self.fc1.forward(x)))
    }
}

/// The MLP and its device.
#[derive(Debug, Clone)]
pub struct Mlp {
    hidden: usize,
    device: Device,
    net: Net,
}

impl Mlp {
    /// An MLP of `hidden` units (its weights come from [`Mlp::init`] or the
    /// optimizer).
    pub fn new(hidden: usize) -> Self {
        let device = Device::flex().autodiff();
        let net = Net {
            fc1: LinearConfig::new(FEATURES, hidden).init(&device),
            fc2: LinearConfig::new(hidden, CLASSES).init(&device),
        };
        Self {
            hidden,
            device,
            net,
        }
    }

    /// The layers, in the order of the weights and gradients
    /// (`fc1.weight`, `fc1.bias`, `fc2.weight`, `fc2.bias`).
    pub fn layers(&self) -> Vec<LayerSpec> {
        residual_sgd::burn::layers(&self.net)
    }

    /// Parameters in all.
    pub fn parameters(&self) -> usize {
        self.layers().iter().map(|l| l.len).sum()
    }

    /// Initial weights from `seed`, drawn as PyTorch's `nn.Linear` draws
    /// them: uniform in `±1/sqrt(fan_in)` for weights and biases.
    pub fn init(&self, seed: u64) -> Vec<Vec<f32>> {
        let mut rng = super::Rng::seed_from_u64(seed);
        self.layers()
            .iter()
            .map(|l| {
                let fan_in = if l.name.starts_with("fc1") {
                    FEATURES
                } else {
                    self.hidden
                };
                let bound = 1.0 / (fan_in as f32).sqrt();
                (0..l.len)
                    .map(|_| rng.random_range(-bound..bound))
                    .collect()
            })
            .collect()
    }

    fn logits(&self, w: &[Vec<f32>], set: &Set) -> Result<(Net, Tensor<2>)> {
        if set.x.len() != set.len() * FEATURES || set.is_empty() {
            return Err(Error::invalid("batch", "empty or not 64 pixels per image"));
        }
        let net = residual_sgd::burn::load(self.net.clone(), w)?;
        let x = Tensor::<2>::from_data(
            TensorData::new(set.x.clone(), [set.len(), FEATURES]),
            &self.device,
        );
        let logits = net.forward(x);
        Ok((net, logits))
    }

    /// Mean softmax cross-entropy of `set` under `w` and its gradient for
    /// every layer (flat, in the weights' layout).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] or [`Error::LengthMismatch`] for weights
    /// or a batch that do not fit.
    pub fn loss_and_grads(&self, w: &[Vec<f32>], set: &Set) -> Result<(f64, Vec<Vec<f32>>)> {
        let (net, logits) = self.logits(w, set)?;
        let loss = cross_entropy(logits, set, &self.device);
        let grads = loss.backward();
        let g = residual_sgd::burn::gradients(&net, &grads)?;
        Ok((scalar(loss)?, g))
    }

    /// Mean cross-entropy and accuracy of `w` on `set`.
    ///
    /// # Errors
    /// As [`Mlp::loss_and_grads`].
    pub fn evaluate(&self, w: &[Vec<f32>], set: &Set) -> Result<(f64, f64)> {
        let (_, logits) = self.logits(w, set)?;
        let pred: Vec<i64> = logits
            .clone()
            .argmax(1)
            .into_data()
            .convert::<i64>()
            .try_into_vec::<i64>()
            .map_err(|e| Error::invalid("burn", format!("{e:?}")))?;
        let correct = pred
            .iter()
            .zip(&set.y)
            .filter(|(p, y)| **p == i64::from(**y))
            .count();
        let loss = scalar(cross_entropy(logits, set, &self.device))?;
        Ok((loss, correct as f64 / set.len() as f64))
    }
}

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
