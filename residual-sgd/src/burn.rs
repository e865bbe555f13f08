//! Glue for `burn` models (feature `burn`): a module's float parameters as
//! the [`LayerSpec`]s, weights and gradients a [`crate::Trainer`] takes,
//! and the trainer's weights loaded back into the module.
//!
//! ```ignore
//! let layers = residual_sgd::burn::layers(&model);            // once
//! let w0 = residual_sgd::burn::weights(&model)?;              // the same on every rank
//! let mut tr = Trainer::new(Cpu, cfg, layers, &w0, RadixTopK::magnitude(), comm)?;
//! // each step:
//! let grads = loss.backward();
//! let g = residual_sgd::burn::gradients(&model, &grads)?;
//! tr.step(&mut transport, &g)?;
//! model = residual_sgd::burn::load(model, &tr.weights()?)?;
//! ```
//!
//! Parameters are taken in the module's visiting order (the order of its
//! fields, recursively), named by their path (`fc1.weight`), flattened
//! row-major; their number of dimensions goes into [`LayerSpec::dims`], so
//! DGC's rule ([`crate::Config::compress_min_dims`]`(2)`), where asked
//! for, leaves biases dense. Integer and boolean parameters are not
//! trained and are left out.

use crate::layer::LayerSpec;
use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::{Gradients, Tensor, TensorData};
use sparse_core::{Error, Result};

/// A float parameter's path, tracked through `enter_module`/`exit_module`.
#[derive(Default)]
struct Path(Vec<String>);

impl Path {
    fn enter(&mut self, name: &str) {
        self.0.push(name.to_string());
    }
    fn exit(&mut self) {
        self.0.pop();
    }
    fn name(&self) -> String {
        self.0.join(".")
    }
}

struct Collect<'a> {
    path: Path,
    grads: Option<&'a Gradients>,
    layers: Vec<LayerSpec>,
    values: Vec<Vec<f32>>,
    error: Option<Error>,
}

pub(crate) fn flat<const D: usize>(t: Tensor<D>) -> Result<Vec<f32>> {
    t.into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .map_err(|e| Error::invalid("burn tensor", format!("{e:?}")))
}

impl ModuleVisitor for Collect<'_> {
    fn enter_module(&mut self, name: &str, _: &str) {
        self.path.enter(name);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let t = param.val();
        let len = t.shape().num_elements();
        self.layers.push(LayerSpec {
            name: self.path.name(),
            len,
            dims: D,
        });
        let value = match self.grads {
            // A parameter the loss does not reach has a zero gradient.
            Some(g) => t.grad(g).map_or_else(|| Ok(vec![0.0; len]), flat),
            None => flat(t),
        };
        match value {
            Ok(v) => self.values.push(v),
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
    }
}

fn collect<M: Module>(m: &M, grads: Option<&Gradients>) -> Result<(Vec<LayerSpec>, Vec<Vec<f32>>)> {
    let mut c = Collect {
        path: Path::default(),
        grads,
        layers: Vec::new(),
        values: Vec::new(),
        error: None,
    };
    m.visit(&mut c);
    match c.error {
        Some(e) => Err(e),
        None => Ok((c.layers, c.values)),
    }
}

/// One [`LayerSpec`] per float parameter of `m`.
pub fn layers<M: Module>(m: &M) -> Vec<LayerSpec> {
    struct Shapes(Path, Vec<LayerSpec>);
    impl ModuleVisitor for Shapes {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.0.enter(name);
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.0.exit();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.1.push(LayerSpec {
                name: self.0.name(),
                len: param.val().shape().num_elements(),
                dims: D,
            });
        }
    }
    let mut s = Shapes(Path::default(), Vec::new());
    m.visit(&mut s);
    s.1
}

/// The values of every float parameter of `m`, flat.
///
/// # Errors
/// [`Error::InvalidParameter`] if a tensor cannot be read as `f32`.
pub fn weights<M: Module>(m: &M) -> Result<Vec<Vec<f32>>> {
    Ok(collect(m, None)?.1)
}

/// The gradient of every float parameter of `m` in `grads` (zeros for a
/// parameter the loss does not reach), flat, in the order of [`layers`].
///
/// # Errors
/// [`Error::InvalidParameter`] if a tensor cannot be read as `f32`.
pub fn gradients<M: Module>(m: &M, grads: &Gradients) -> Result<Vec<Vec<f32>>> {
    Ok(collect(m, Some(grads))?.1)
}

struct Load<'a> {
    weights: &'a [Vec<f32>],
    next: usize,
    error: Option<Error>,
}

impl ModuleMapper for Load<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let at = self.next;
        self.next += 1;
        let Some(w) = self.weights.get(at) else {
            self.error.get_or_insert(Error::LengthMismatch {
                what: "burn parameters",
                expected: at + 1,
                got: self.weights.len(),
            });
            return param;
        };
        param.map(|t| {
            let shape = t.shape();
            if shape.num_elements() != w.len() {
                self.error.get_or_insert(Error::LengthMismatch {
                    what: "burn parameter",
                    expected: shape.num_elements(),
                    got: w.len(),
                });
                return t;
            }
            let grad = t.is_require_grad();
            let new = Tensor::<D>::from_data(TensorData::new(w.clone(), shape), &t.device());
            if grad { new.require_grad() } else { new }
        })
    }
}

/// `m` with its float parameters set to `weights` (in the order of
/// [`layers`]); parameter ids and whether they require gradients stay.
///
/// # Errors
/// [`Error::LengthMismatch`] if the weights do not fit the parameters.
pub fn load<M: Module>(m: M, weights: &[Vec<f32>]) -> Result<M> {
    let mut l = Load {
        weights,
        next: 0,
        error: None,
    };
    let m = m.map(&mut l);
    loaded(m, l.next, l.error, weights.len())
}

/// A module a weight loader mapped (here and in `burn_device`): its
/// error where it failed, or one where the `given` weights were not the
/// `taken` that the parameters took.
///
/// # Errors
/// The loader's `error`; [`Error::LengthMismatch`] for weights left over.
pub(crate) fn loaded<M>(m: M, taken: usize, error: Option<Error>, given: usize) -> Result<M> {
    if let Some(e) = error {
        return Err(e);
    }
    if taken != given {
        return Err(Error::LengthMismatch {
            what: "burn parameters",
            expected: taken,
            got: given,
        });
    }
    Ok(m)
}
