//! What a layer's work in a step hands on, in both forms of the step
//! (the whole step and the pipelined one): its gradient, what it is ready
//! to send, what its collective returned, and the context it runs in.

use crate::Config;
use sparse_coll::Reduced;
use sparse_core::{Backend, Result, SparseVec};

/// A layer's gradient for a step: uploaded by [`Trainer::step`] (the
/// trainer's own) or the caller's buffer ([`Trainer::step_buffers`]),
/// which is only read.
pub(super) enum Grad<'a, B: Backend<f32>> {
    Owned(B::Buffer<f32>),
    Borrowed(&'a B::Buffer<f32>),
}

impl<B: Backend<f32>> Grad<'_, B> {
    pub(super) fn get(&self) -> &B::Buffer<f32> {
        match self {
            Grad::Owned(x) => x,
            Grad::Borrowed(x) => x,
        }
    }
    /// The trainer's own buffer: a caller's is copied on the device
    /// (`0 + 1 g`, exact).
    pub(super) fn into_owned(self, b: &B) -> Result<B::Buffer<f32>> {
        match self {
            Grad::Owned(x) => Ok(x),
            Grad::Borrowed(x) => {
                let mut y = b.zeros(b.len(x))?;
                b.axpy(1.0, x, &mut y)?;
                Ok(y)
            }
        }
    }
}

/// A layer's reduced result, checked before anything is applied.
pub(super) enum Received<B: Backend<f32>> {
    /// A compressed layer's selection and its collective's result.
    Compressed(Box<(Outgoing<B>, Reduced<f32>)>),
    /// A dense layer's share of its (fused) allreduce.
    Dense(Vec<f32>),
}

/// A layer's part of a step, ready to send.
pub(super) enum Ready<B: Backend<f32>> {
    /// A compressed layer's selection.
    Compressed(Outgoing<B>),
    /// A dense layer's gradient.
    Dense(Vec<f32>),
}

/// What a compressed layer sends in a step: the positions to take from its
/// memory, what it sends, and what quantization removed from that (not
/// [`sparse_core::Selected`], the selector's output it is made from).
pub(super) struct Outgoing<B: Backend<f32>> {
    /// The positions to take out at the update; `None` where the memory's
    /// fused selection took them out already ([`Compressed::taken`]).
    pub(super) indices: Option<B::Buffer<u32>>,
    /// What it sends.
    pub(super) sent: SparseVec<f32>,
    /// What quantization removed from `sent`, to go back into the memory.
    pub(super) remainder: Option<SparseVec<f32>>,
    /// Whether RedSync's quantized mode made `sent`.
    pub(super) quantized: bool,
}

/// What a layer's work in a step (its local work and its update) needs of
/// the trainer: the backend, the settings and the number of ranks.
pub(super) struct Ctx<'a, B> {
    pub(super) b: &'a B,
    pub(super) cfg: &'a Config,
    pub(super) p: f32,
}
