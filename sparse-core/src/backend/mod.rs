//! The backend traits: the device primitives every backend implements.
//!
//! One trait per concern, gathered by [`Backend<E>`](Backend), which every
//! type implementing all of them for the element type `E` gets by a blanket
//! impl:
//! - element-free: [`BufferOps`] (buffers of any [`Scalar`]) and
//!   [`IndexOps`] (operations on `u32` indices only);
//! - per element type: [`ReduceOps<E>`](ReduceOps), [`SelectOps<E>`](SelectOps),
//!   [`DenseOps<E>`](DenseOps), [`HashOps<E>`](HashOps) and
//!   [`CodecOps<E>`](CodecOps).
//!
//! A backend implements the element traits for exactly the element types
//! its primitives support (`backend-cpu`: `f32`, `f64`, `f16`, `bf16`;
//! `backend-cuda`: `f32`), so using an unsupported type is a compile error.
//! Selection algorithms (`sparse-select`) and optimizers (`residual-sgd`) are
//! written over these primitives only (`B: Backend<E>`), so they run
//! unchanged on every backend and element type it implements.
//! `docs/adding-a-backend.md` lists what a new backend implements and how
//! it runs the shared suites.
//!
//! Contract shared by all backends:
//! - primitives that compare magnitudes (`max_abs`, `mean_abs`,
//!   `count_above`, `compact_above`, `topk_*`) return
//!   [`Error::NonFinite`](crate::Error::NonFinite) with the lowest offending index if the input holds
//!   NaN; infinities are ordinary (largest) magnitudes;
//! - selections return indices in increasing order, values alongside;
//! - exact top-k breaks ties by index: among equal keys the lower index wins;
//! - integer outputs are identical on every backend; float reductions agree
//!   within the tolerance each test states.

//!
//! Layout, as burn's: one ops trait per file (`buffer.rs`, `index.rs`,
//! `reduce.rs`, `select.rs`, `dense.rs`, `hash.rs`, `codec.rs`), the checks
//! over device buffers in `finite.rs`; the host-side argument checks live in
//! [`crate::checks`] and are re-exported here.

mod buffer;
mod codec;
mod dense;
mod finite;
mod hash;
mod index;
mod reduce;
mod select;

pub use crate::checks::{check_finite, check_k, check_len, check_segments};
pub use crate::hash::HashPartitions;
pub use buffer::{BufferOps, Scalar};
pub use codec::CodecOps;
pub use dense::DenseOps;
pub use finite::{
    check_finite_buffer, check_finite_buffers, first_non_finite, resolve_non_finite,
    resolve_non_finite_in,
};
pub use hash::HashOps;
pub use index::IndexOps;
pub use reduce::ReduceOps;
pub use select::{
    Above, Digit, Extreme, Feedback, KeyOrder, SelectOps, Selected, accumulate_topk_composed,
    bucket_plan, check_digit, check_rank, check_sample, sample_position,
};

use crate::Element;

/// Every device primitive for elements of type `E`: implemented
/// automatically for any type that implements [`IndexOps`] and all the
/// element ops traits for `E`. Code generic over backends takes
/// `B: Backend<E>`; a backend is a `Backend<E>` exactly for the element
/// types it implements.
pub trait Backend<E: Element>:
    IndexOps + ReduceOps<E> + SelectOps<E> + DenseOps<E> + HashOps<E> + CodecOps<E>
{
}
impl<E: Element, T> Backend<E> for T where
    T: IndexOps + ReduceOps<E> + SelectOps<E> + DenseOps<E> + HashOps<E> + CodecOps<E>
{
}
