//! Per-parameter gradient hooks for burn 0.22 models (feature `burn`):
//! each parameter's gradient handed over the moment burn's backward pass
//! has completed it, while the pass goes on, as PyTorch's
//! `register_hook` gives DDP the gradients it starts buckets with.
//! Feeding them to [`Trainer::step_with`](crate::Trainer::step_with)
//! overlaps a step's selection and collectives with the rest of the
//! backward pass ([`backward_into`]).
//!
//! burn 0.22 has no hook for a user, but its autodiff takes custom
//! operations: [`GradHooks::hook`] puts an identity operation between a
//! parameter and its use in the forward pass, whose backward step sends
//! the gradient it passes on. burn runs backward steps by depth (an
//! operation's depth is one more than its deepest input's), so an
//! identity on the parameter alone would have depth 1 and run after every
//! other step: the hook takes a second input, `after`, the tensor the
//! parameter is combined with (the layer's input), which only orders it
//! (it gets no gradient from the hook, so the loss must reach it by
//! another path, as it reaches a layer's input). Its depth is then one
//! less than that of the operation using the parameter, so it runs once
//! every deeper step has run (in a chain of layers, right after that
//! operation's step), when the gradient is complete: every operation
//! that uses the hooked tensor is deeper than the hook and has run before
//! it.
//!
//! The gradients are bit for bit those of `loss.backward()` read with
//! [`crate::burn::gradients`] for parameters used once (the hook passes
//! each on unchanged; tested; with several uses the sum's order may
//! differ in the last bits), and still registered on the parameter. A
//! parameter hooked but not reached by the loss, or frozen, has no hook
//! call; [`backward_into`] pushes zeros for it, as
//! [`crate::burn::gradients`] reads zeros.
//!
//! Models on burn's `Flex` CPU backend with autodiff (without gradient
//! checkpointing), and with feature `burn-wgpu` or `burn-cuda` on burn's
//! cubecl (GPU) backends too, whose gradients
//! [`OnDevice::backward_into`](crate::burn_device::OnDevice::backward_into)
//! hands to a trainer on the device as buffers over their own memory; a
//! tensor of another backend is an error naming the backends taken.
//!
//! ```ignore
//! let (hooks, grads) = residual_sgd::burn_hook::hooks();
//! // in the forward pass, each parameter where it is used:
//! let w = hooks.hook(0, fc1.weight.val(), &x)?;
//! let b = hooks.hook(1, fc1.bias.val(), &x)?;
//! let h = burn::tensor::activation::relu(x.matmul(w) + b.unsqueeze());
//! // ...
//! drop(hooks); // the forward pass is done
//! trainer.step_with(t, |feed| backward_into(loss, grads, feed).map(drop))?;
//! ```

use crate::trainer::Feed;
use burn::backend::Flex;
use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::{DispatchKindConversion, DispatchTensor};
use burn::tensor::Tensor;
use sparse_core::{Backend, Error, Result};
use sparse_select::Selector;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// One hooked parameter's gradient: its layer (the index
/// [`GradHooks::hook`] was given) and the gradient, flattened.
pub struct HookedGrad {
    /// The layer, as given to [`GradHooks::hook`].
    pub layer: usize,
    /// The gradient, flat in the parameter's row-major order.
    pub grad: Tensor<1>,
}

/// The hooks' sending end: [`GradHooks::hook`] in the forward pass.
#[derive(Clone, Debug)]
pub struct GradHooks {
    tx: Sink,
    /// The layers hooked so far, shared with the [`HookedGrads`].
    hooked: Hooked,
}

/// The layers a pair's [`GradHooks::hook`] calls named.
type Hooked = std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<usize>>>;

/// The receiving end: the gradients in the order the backward pass
/// completes them ([`backward_into`] reads them).
pub struct HookedGrads {
    rx: mpsc::Receiver<Msg>,
    /// For the end of the pass ([`backward_into`]).
    end: Sink,
    hooked: Hooked,
}

/// What goes through the channel: a gradient, or the end of a backward
/// pass.
enum Msg {
    Grad(Box<HookedGrad>),
    End,
}

impl HookedGrads {
    /// The gradients already completed, without waiting (for a caller
    /// that runs `loss.backward()` itself and reads them after it).
    pub fn try_iter(&self) -> impl Iterator<Item = HookedGrad> + '_ {
        self.rx.try_iter().filter_map(|m| match m {
            Msg::Grad(g) => Some(*g),
            Msg::End => None,
        })
    }
}

/// A pair of ends: hook parameters with the first, read their gradients
/// from the second.
pub fn hooks() -> (GradHooks, HookedGrads) {
    let (tx, rx) = mpsc::channel();
    let tx = Sink(tx);
    let hooked = Hooked::default();
    (
        GradHooks {
            tx: tx.clone(),
            hooked: hooked.clone(),
        },
        HookedGrads {
            rx,
            end: tx,
            hooked,
        },
    )
}

/// The sender a hook's backward step holds (its state must be `Debug`).
#[derive(Clone)]
struct Sink(mpsc::Sender<Msg>);

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sink")
    }
}

/// The hook's backward step on inner backend `I` (burn's `Flex`, or
/// `Cube` for its wgpu and cuda backends): the gradient sent, then passed
/// on to the parameter unchanged; `after` gets none.
#[derive(Debug)]
struct Hook<const D: usize>;

impl<I: burn::backend::Backend, const D: usize> Backward<I, 2> for Hook<D>
where
    DispatchTensor: DispatchKindConversion<I>,
{
    type State = (usize, Sink);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<I>(&ops.node);
        let (layer, sink) = ops.state;
        // No parent: a frozen parameter (tracked only through `after`),
        // which has no gradient to hand over.
        let [Some(param), _after] = ops.parents else {
            return;
        };
        let flat = Tensor::<D>::from_primitive::<I>(grad.clone());
        let n = flat.shape().num_elements();
        // The receiver may be gone (a caller that stopped reading): the
        // gradient is still registered below.
        let _ = sink.0.send(Msg::Grad(Box::new(HookedGrad {
            layer,
            grad: flat.reshape([n]),
        })));
        grads.register::<I>(param.id, grad);
    }
}

/// The backends hooks take, in the error naming them.
#[cfg(not(any(feature = "burn-wgpu", feature = "burn-cuda")))]
const TAKEN: &str = "burn's Flex backend (Device::flex().autodiff())";
#[cfg(any(feature = "burn-wgpu", feature = "burn-cuda"))]
const TAKEN: &str = "burn's Flex backend (Device::flex().autodiff()) or its cubecl backends \
                     (Device::wgpu(..).autodiff(), Device::cuda(..).autodiff())";

fn not_taken(what: &str, e: impl std::fmt::Debug) -> Error {
    Error::invalid(
        "burn tensor",
        format!(
            "{what} is not a tensor with autodiff (without checkpointing) of {TAKEN}, which \
             gradient hooks take (make the input on the model's device): {e:?}"
        ),
    )
}

/// `param` hooked as `layer` on inner backend `I`, `after` ordering it.
fn hook_on<I, const D: usize, const E: usize>(
    tx: &Sink,
    layer: usize,
    param: Tensor<D>,
    after: &Tensor<E>,
) -> Result<Tensor<D>>
where
    I: burn::backend::Backend,
    DispatchTensor: DispatchKindConversion<I> + DispatchKindConversion<Autodiff<I>>,
{
    let p = param
        .try_into_primitive::<Autodiff<I>>()
        .map_err(|e| not_taken("the parameter", e))?;
    let a = after
        .clone()
        .try_into_primitive::<Autodiff<I>>()
        .map_err(|e| not_taken("the tensor it is combined with", e))?;
    let out = match Hook::<D>
        .prepare::<NoCheckpointing>([p.node(), a.node()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish((layer, tx.clone()), p.primitive().clone()),
        OpsKind::UnTracked(prep) => prep.finish(p.primitive().clone()),
    };
    Ok(Tensor::from_primitive::<Autodiff<I>>(out))
}

/// Whether `t` lives on one of burn's cubecl devices (wgpu, cuda).
#[cfg(any(feature = "burn-wgpu", feature = "burn-cuda"))]
fn on_cube<const D: usize>(t: &Tensor<D>) -> bool {
    matches!(
        t.device().inner().as_dispatch(),
        burn::backend::DispatchDevice::Cube(_)
    )
}

impl GradHooks {
    /// Declares layer `layer` a parameter this forward pass does not use
    /// (PyTorch DDP's unused parameters): [`backward_into`] pushes zeros
    /// for it, as [`crate::burn::gradients`] reads zeros. A layer neither
    /// hooked nor declared unused is not pushed, and the step fails.
    pub fn unused(&self, layer: usize) {
        if let Ok(mut hooked) = self.hooked.lock() {
            hooked.insert(layer);
        }
    }

    /// `param` (a parameter's value, `Param::val`) hooked as layer
    /// `layer`: the same tensor in the forward pass; in the backward pass
    /// its gradient goes to the [`HookedGrads`] once complete.
    ///
    /// `after` is the tensor the parameter is combined with (the layer's
    /// input), which the loss must depend on otherwise than through the
    /// hook (a layer's input does): the hook runs once every backward step
    /// deeper than `after` has run (in a chain of layers, right after the
    /// step of the operation using the parameter). A tensor the loss
    /// reaches only through hooks gets no gradient, and burn's backward
    /// pass panics on it ("Can't consume the gradients before they are
    /// registered").
    ///
    /// Use the returned tensor in place of `param` everywhere: every use
    /// of it is deeper than the hook, so its gradient is complete when the
    /// hook runs, while a use of `param` itself would be missed. With more
    /// than one use the contributions may be summed in another order than
    /// `loss.backward()` sums them (the last bits of the gradient); with
    /// one, bit for bit.
    ///
    /// A parameter that does not require a gradient (frozen) sends
    /// nothing, and [`backward_into`] pushes zeros for it, as
    /// [`crate::burn::gradients`] reads zeros.
    ///
    /// On a GPU backend hook a parameter's value itself (`Param::val`),
    /// not a tensor computed from it: burn may reuse a computed tensor's
    /// gradient memory in place later in the pass, while the trainer
    /// still reads the buffer it was handed.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] where `param` or `after` is not a
    /// tensor with autodiff (without checkpointing) of the backends hooks
    /// take (burn's Flex; with feature `burn-wgpu` or `burn-cuda` its
    /// cubecl backends too), or the two are of different backends.
    pub fn hook<const D: usize, const E: usize>(
        &self,
        layer: usize,
        param: Tensor<D>,
        after: &Tensor<E>,
    ) -> Result<Tensor<D>> {
        self.unused(layer);
        #[cfg(any(feature = "burn-wgpu", feature = "burn-cuda"))]
        if on_cube(&param) {
            return hook_on::<burn::backend::Cube, D, E>(&self.tx, layer, param, after);
        }
        hook_on::<Flex, D, E>(&self.tx, layer, param, after)
    }
}

/// The backward pass of `loss` on a thread of its own, each gradient
/// pushed to `feed` as the pass completes it
/// ([`Feed::push_host`](crate::trainer::Feed::push_host), read from
/// `grads`, the ends of the hooks in `loss`'s graph), then zeros for
/// every layer hooked (by `grads`' pair) that the pass did not reach,
/// every frozen one and every one declared [`GradHooks::unused`] (as
/// [`crate::burn::gradients`] reads zeros for them). A layer neither
/// hooked nor declared unused is not pushed: the step fails on every
/// rank ("was not pushed"), never trains it on zeros. Selection and
/// collectives run while the pass goes on.
///
/// Returns how long burn's backward pass took (its own thread's wall
/// time, the pushes' work overlapping it).
///
/// # Errors
/// A push's error (a layer hooked twice, a gradient of another length, a
/// layer out of range), after the pass has ended.
///
/// # Panics
/// Where burn's backward pass panicked (resumed here, so that
/// [`Trainer::step_with`](crate::Trainer::step_with) fails the step on
/// every rank with [`Error::Panicked`]).
pub fn backward_into<B, S>(
    loss: Tensor<1>,
    grads: HookedGrads,
    feed: &mut Feed<'_, B, S>,
) -> Result<Duration>
where
    B: Backend<f32>,
    S: Selector<B, f32>,
{
    backward_with(loss, grads, feed, |feed, layer, g| {
        crate::burn::flat(g).and_then(|v| feed.push_host(layer, &v))
    })
}

/// [`backward_into`] with each gradient handed to `feed` by `push`
/// (uploaded from the host, or as a device buffer over its memory:
/// [`OnDevice::backward_into`](crate::burn_device::OnDevice::backward_into)).
pub(crate) fn backward_with<B, S, P>(
    loss: Tensor<1>,
    grads: HookedGrads,
    feed: &mut Feed<'_, B, S>,
    mut push: P,
) -> Result<Duration>
where
    B: Backend<f32>,
    S: Selector<B, f32>,
    P: FnMut(&mut Feed<'_, B, S>, usize, Tensor<1>) -> Result<()>,
{
    let HookedGrads { rx, end, hooked } = grads;
    let (out, pass) = std::thread::scope(|s| {
        // The pass submits its device work on the caller's stream (cubecl
        // gives each thread a stream of its own otherwise): a gradient's
        // kernels are then submitted before it is sent, and the pushes'
        // reads of it after, in one stream's order. cubecl 0.11's CUDA
        // streams wait for another stream's work only as far as its last
        // allocation, not for a kernel launched after it on a buffer
        // allocated before. On burn's CPU backend the id is unused.
        let stream = burn::tensor::StreamId::current();
        let pass = s.spawn(move || {
            // The end is sent however the pass ends, so that the loop
            // below stops.
            struct Ender(Sink);
            impl Drop for Ender {
                fn drop(&mut self) {
                    let _ = self.0.0.send(Msg::End);
                }
            }
            let _end = Ender(end);
            stream.executes(|| {
                let clock = Instant::now();
                drop(loss.backward());
                clock.elapsed()
            })
        });
        let mut out = Ok(());
        // Every gradient is read, even after an error, so that the pass
        // never waits on a full channel (it is unbounded) and ends.
        while let Ok(Msg::Grad(g)) = rx.recv() {
            if out.is_ok() {
                out = push(feed, g.layer, g.grad);
            }
        }
        (out, pass.join())
    });
    let took = pass.unwrap_or_else(|p| std::panic::resume_unwind(p));
    out?;
    let hooked = hooked.lock().map(|h| h.clone()).unwrap_or_default();
    for l in feed.missing() {
        if hooked.contains(&l) {
            feed.push_zeros(l)?;
        }
    }
    Ok(took)
}
