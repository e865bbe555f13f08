//! Glue for `burn` models on burn's GPU backends (features `burn-wgpu`,
//! `burn-cuda`): the gradients a backward pass left on the device handed
//! to [`Trainer::step_buffers`](crate::Trainer::step_buffers) as
//! `backend-cuda` buffers over the same memory, and the trainer's weights
//! handed back to the module on the device. No gradient and no weight
//! crosses to the host.
//!
//! burn 0.22's wgpu and cuda backends are `burn-cubecl` on cubecl 0.11,
//! the cubecl of `backend-cuda`, and cubecl keeps one client per device: a
//! [`CubeBackend`] made by [`OnDevice::new`] from a burn device launches on
//! burn's own client, so a burn tensor's handle is a valid buffer of the
//! backend as it lies ([`CubeBackend::buffer_from_handle`] checks the
//! client).
//!
//! ```ignore
//! let device = burn::tensor::Device::wgpu(Default::default()).autodiff();
//! let gpu = OnDevice::<WgpuRuntime>::new(&device)?;
//! let w0 = residual_sgd::burn::weights(&model)?;          // once, on the host
//! let mut tr = Trainer::new(gpu.backend().clone(), cfg, residual_sgd::burn::layers(&model),
//!                           &w0, RadixTopK::magnitude(), comm)?;
//! // each step:
//! let grads = loss.backward();
//! let g = gpu.gradients(&model, &grads)?;                 // no copy
//! tr.step_buffers(&mut transport, &g)?;
//! model = gpu.load(model, &tr.weight_buffers())?;         // a device copy
//! ```
//!
//! With gradient hooks ([`crate::burn_hook`]) each gradient goes in while
//! burn's backward pass goes on, still over the gradient's own memory:
//!
//! ```ignore
//! let (hooks, grads) = residual_sgd::burn_hook::hooks();
//! let loss = model.forward_hooked(x, &hooks)?;             // hooks.hook(layer, param, &input)
//! drop(hooks);
//! tr.step_with(&mut transport, |feed| gpu.backward_into(loss, grads, feed).map(drop))?;
//! model = gpu.load(model, &tr.weight_buffers())?;
//! ```
//!
//! What a gradient costs on the way in:
//! - an `f32` tensor laid out row-major (burn's usual output): nothing, the
//!   buffer is the tensor's memory (the trainer only reads gradients);
//! - another float type (`f16`, `bf16`, ...): one cast kernel on the
//!   device; a strided or broadcast view: one copy kernel into a
//!   contiguous tensor on the device. Never the host;
//! - a parameter the loss does not reach: a buffer of zeros cleared on the
//!   device.
//!
//! On the way out each parameter becomes a copy of the trainer's weight
//! buffer made on the device (one copy kernel per parameter), so the
//! module owns its memory: the trainer's next step updates its own
//! buffers in place and never a tensor the module, or a clone of it that
//! a caller kept, still holds.
//!
//! Parameters are taken in the module's visiting order, as
//! [`crate::burn`] takes them (so [`crate::burn::layers`] and
//! [`crate::burn::weights`] describe the same layers), and a module built
//! on another device (burn's CPU backend, another GPU) is an error naming
//! it, never a silent host trip.

use backend_cuda::{CubeBackend, CubeBuffer};
use burn::backend::{Cube, DispatchDevice};
use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::{DType, Device, Gradients, Tensor};
use burn_cubecl::CubeDevice;
use burn_cubecl::tensor::CubeTensor;
use sparse_core::{BufferOps as _, Error, Result};

/// A cubecl runtime burn runs on (`WgpuRuntime` with `burn-wgpu`,
/// `CudaRuntime` with `burn-cuda`): which of [`CubeDevice`]'s variants
/// names its devices.
pub trait BurnRuntime: cubecl_runtime::runtime::Runtime {
    /// The runtime's own device where `d` names one of its devices.
    fn device(d: &CubeDevice) -> Option<Self::Device>;
}

/// cubecl's wgpu runtime: `OnDevice<WgpuRuntime>` and
/// `backend_cuda::CubeBackend<WgpuRuntime>` (`backend_cuda::WgpuBackend`).
#[cfg(feature = "burn-wgpu")]
pub type WgpuRuntime = burn_cubecl::cubecl::wgpu::WgpuRuntime;

/// cubecl's CUDA runtime.
#[cfg(feature = "burn-cuda")]
pub type CudaRuntime = burn_cubecl::cubecl::cuda::CudaRuntime;

#[cfg(feature = "burn-wgpu")]
impl BurnRuntime for WgpuRuntime {
    fn device(d: &CubeDevice) -> Option<Self::Device> {
        match d {
            CubeDevice::Wgpu(w) => Some(w.clone()),
            _ => None,
        }
    }
}

#[cfg(feature = "burn-cuda")]
impl BurnRuntime for CudaRuntime {
    fn device(d: &CubeDevice) -> Option<Self::Device> {
        match d {
            CubeDevice::Cuda(c) => Some(c.clone()),
            _ => None,
        }
    }
}

/// A burn device's cubecl device and the `backend-cuda` backend on the
/// same client: the bridge between a burn module and a
/// [`Trainer`](crate::Trainer) on that device.
#[derive(Debug, Clone)]
pub struct OnDevice<R: BurnRuntime> {
    backend: CubeBackend<R>,
    device: CubeDevice,
}

/// The error for a burn device that is not one of runtime `R`'s.
fn not_cube(device: &Device, runtime: &str) -> Error {
    Error::Device {
        backend: "burn",
        detail: format!(
            "{device:?} is not a device of cubecl's {runtime} runtime: build the model on \
             burn's {runtime} device (Device::{runtime}), or use residual_sgd::burn on the CPU"
        ),
    }
}

impl<R: BurnRuntime> OnDevice<R> {
    /// The bridge for `device` (burn's wgpu or cuda device, with or
    /// without autodiff).
    ///
    /// # Errors
    /// [`Error::Device`] where `device` is not a device of runtime `R`
    /// (burn's CPU backend, another runtime) or the runtime does not find
    /// it.
    pub fn new(device: &Device) -> Result<Self> {
        let runtime = backend_name::<R>();
        let inner = device.clone().inner();
        let DispatchDevice::Cube(cube) = inner.as_dispatch() else {
            return Err(not_cube(device, runtime));
        };
        let own = R::device(cube).ok_or_else(|| not_cube(device, runtime))?;
        Ok(Self {
            backend: CubeBackend::new(&own)?,
            device: cube.clone(),
        })
    }

    /// The backend on the device's client (clone it into a
    /// [`Trainer`](crate::Trainer); clones share the transfer counters).
    pub fn backend(&self) -> &CubeBackend<R> {
        &self.backend
    }

    /// The gradient of every float parameter of `m` in `grads`, in the
    /// order of [`crate::burn::layers`], as buffers of the backend over the
    /// gradients' own device memory (see the module docs for the cast, copy
    /// and zeros that some need; none crosses to the host).
    ///
    /// # Errors
    /// [`Error::Device`] for a gradient on another device or backend.
    pub fn gradients<M: Module>(&self, m: &M, grads: &Gradients) -> Result<Vec<CubeBuffer<f32>>> {
        let mut c = Grads {
            on: self,
            grads,
            out: Vec::new(),
            error: None,
        };
        m.visit(&mut c);
        match c.error {
            Some(e) => Err(e),
            None => Ok(c.out),
        }
    }

    /// [`crate::burn_hook::backward_into`] for a model on this device
    /// and a trainer on [`OnDevice::backend`]: burn's backward pass of
    /// `loss` on a thread of its own, each hooked gradient pushed to
    /// `feed` ([`Feed::push`](crate::Feed::push)) as the pass
    /// completes it, as a buffer over the gradient's own device memory
    /// ([`OnDevice::tensor_buffer`]: none crosses to the host), then zeros
    /// (cleared on the device) for the layers hooked but not reached,
    /// frozen or declared unused. The pass's thread submits its kernels on
    /// the caller's cubecl stream, so that each gradient's kernels come
    /// before the trainer's reads of it in one stream's order.
    ///
    /// Returns how long burn's backward pass took (its thread's wall time,
    /// the kernels it submitted not waited for).
    ///
    /// # Errors
    /// As [`crate::burn_hook::backward_into`]; [`Error::Device`] for a
    /// gradient on another device.
    ///
    /// # Panics
    /// Where burn's backward pass panicked, as
    /// [`crate::burn_hook::backward_into`].
    pub fn backward_into<S>(
        &self,
        loss: Tensor<1>,
        grads: crate::burn_hook::HookedGrads,
        feed: &mut crate::Feed<'_, CubeBackend<R>, S>,
    ) -> Result<std::time::Duration>
    where
        S: sparse_select::Selector<CubeBackend<R>, f32>,
    {
        crate::burn_hook::backward_with(loss, grads, feed, |feed, layer, g| {
            let b = self.tensor_buffer(g)?;
            feed.push(layer, &b)
        })
    }

    /// A float tensor on this device as a buffer of the backend, in
    /// row-major order: a row-major `f32` tensor's own memory as it lies,
    /// another's after a cast (another float type) or a copy (a strided
    /// or broadcast view) on the device; nothing crosses to the host.
    ///
    /// # Errors
    /// [`Error::Device`] for a tensor on another device or backend.
    pub fn tensor_buffer<const D: usize>(&self, t: Tensor<D>) -> Result<CubeBuffer<f32>> {
        let len = t.shape().num_elements();
        let t = if t.dtype() == DType::F32 {
            t
        } else {
            t.cast(DType::F32)
        };
        let p = self.primitive(t)?;
        // A tensor whose physical layout is not its logical row-major one
        // (a transposed or broadcast view, a tiled storage): one copy.
        let plain = p.meta.shape().num_dims() == D && p.is_contiguous();
        let p = if plain {
            p
        } else {
            burn_cubecl::kernel::into_contiguous(p)
        };
        self.backend.buffer_from_handle(p.handle, len)
    }

    /// The cubecl tensor of `t`, checked to be on this device.
    fn primitive<const D: usize>(&self, t: Tensor<D>) -> Result<CubeTensor> {
        let p = t.try_into_primitive::<Cube>().map_err(|e| Error::Device {
            backend: "burn",
            detail: format!(
                "a gradient is not a cubecl tensor ({e:?}): build the model on {:?}",
                self.device
            ),
        })?;
        if p.device != self.device {
            return Err(Error::Device {
                backend: "burn",
                detail: format!(
                    "a gradient lives on {:?}, the trainer on {:?}: keep the model on one device",
                    p.device, self.device
                ),
            });
        }
        Ok(p)
    }

    /// `m` with its float parameters set to `weights` (in the order of
    /// [`crate::burn::layers`]; a trainer's
    /// [`weight_buffers`](crate::Trainer::weight_buffers)), each a copy
    /// made on the device; parameter ids and whether they require
    /// gradients stay.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] if the weights do not fit the parameters.
    pub fn load<M: Module>(&self, m: M, weights: &[&CubeBuffer<f32>]) -> Result<M> {
        let mut l = Load {
            on: self,
            weights,
            next: 0,
            error: None,
        };
        let m = m.map(&mut l);
        crate::burn::loaded(m, l.next, l.error, weights.len())
    }

    /// A tensor of `shape` holding a device copy of `w`, tracked by
    /// autodiff where `like` is.
    fn tensor<const D: usize>(&self, w: &CubeBuffer<f32>, like: &Tensor<D>) -> Tensor<D> {
        let p = CubeTensor::new_contiguous(
            self.backend.client().clone(),
            self.device.clone(),
            like.shape(),
            w.handle().clone(),
            DType::F32,
        );
        let t = Tensor::<D>::from_primitive::<Cube>(p.copy());
        if like.is_autodiff() { t.autodiff() } else { t }
    }
}

/// The runtime's name in errors.
fn backend_name<R>() -> &'static str {
    let t = std::any::type_name::<R>().to_ascii_lowercase();
    if t.contains("cuda") { "cuda" } else { "wgpu" }
}

struct Grads<'a, R: BurnRuntime> {
    on: &'a OnDevice<R>,
    grads: &'a Gradients,
    out: Vec<CubeBuffer<f32>>,
    error: Option<Error>,
}

impl<R: BurnRuntime> ModuleVisitor for Grads<'_, R> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if self.error.is_some() {
            return;
        }
        let t = param.val();
        let len = t.shape().num_elements();
        let b = match t.grad(self.grads) {
            Some(g) => self.on.tensor_buffer(g),
            // A parameter the loss does not reach has a zero gradient.
            None => self.on.backend.zeros::<f32>(len),
        };
        match b {
            Ok(b) => self.out.push(b),
            Err(e) => self.error = Some(e),
        }
    }
}

struct Load<'a, R: BurnRuntime> {
    on: &'a OnDevice<R>,
    weights: &'a [&'a CubeBuffer<f32>],
    next: usize,
    error: Option<Error>,
}

impl<R: BurnRuntime> ModuleMapper for Load<'_, R> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let at = self.next;
        self.next += 1;
        let Some(&w) = self.weights.get(at) else {
            self.error.get_or_insert(Error::LengthMismatch {
                what: "burn parameters",
                expected: at + 1,
                got: self.weights.len(),
            });
            return param;
        };
        param.map(|t| {
            let n = t.shape().num_elements();
            if n != self.on.backend.len(w) {
                self.error.get_or_insert(Error::LengthMismatch {
                    what: "burn parameter",
                    expected: n,
                    got: self.on.backend.len(w),
                });
                return t;
            }
            let grad = t.is_require_grad();
            let new = self.on.tensor(w, &t);
            if grad { new.require_grad() } else { new }
        })
    }
}
