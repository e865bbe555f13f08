#![doc = include_str!("../README.md")]
//!
//! ## Where things are
//!
//! [`RadixTopK`], [`TrimmedTopK`], [`ThresholdBinarySearch`],
//! [`ThresholdReuse`], [`SampledThreshold`], [`BlockTopK`], [`BucketTopK`],
//! [`Policy`] and [`ZenPartitioner`], each a [`Selector`]. Input contract:
//! NaN or infinity in `x` is
//! [`Error::NonFinite`](sparse_core::Error::NonFinite); `k > n` is
//! [`Error::KOutOfRange`](sparse_core::Error::KOutOfRange).

mod block;
mod policy;
mod radix;
#[cfg(feature = "testing")]
pub mod testing;
mod threshold;
mod trimmed;
mod zen;

pub use block::{BlockTopK, BucketTopK};

/// Instantiates the selector test suite ([`testing`], feature `testing`)
/// as `#[test]` functions for the backend built by `$make`, once per
/// element type listed after the `;`, each in a module named after its
/// type (`f32::trimmed_topk_is_exact`), as
/// [`sparse_core::backend_test_suite!`] does:
///
/// ```ignore
/// sparse_select::selector_test_suite!(crate::MyBackend::new(); f32, f16);
/// ```
///
/// List exactly the element types the backend implements (another does not
/// compile); `$make` names items by absolute paths. The macro only wraps.
#[cfg(feature = "testing")]
#[macro_export]
macro_rules! selector_test_suite {
    ($make:expr; $($elem:ident),+ $(,)?) => {
        $(
            $crate::selector_test_suite!(@element $make, $elem;
                radix_topk_is_exact_in_every_order, trimmed_topk_is_exact,
                threshold_binary_search_contract, sampled_threshold_is_exact_or_keeps_the_contract,
                reuse_searches_once_per_interval_and_keeps_the_contract,
                block_and_bucket_equal_their_per_block_oracles, bad_parameters_are_an_error,
                every_exact_selector_keeps_its_promise, every_threshold_selector_keeps_its_promise,
                block_bucket_and_quantized_selectors_keep_their_rule,
                policy_picks_by_size_and_alternates_when_quantized, large_inputs_up_to_2_pow_22,
                zen_partitioner_loses_nothing_and_agrees_across_ranks, selection_becomes_a_sparse_vec,
                state_restores_the_next_selections);
        )+
    };
    (@element $make:expr, $elem:ident; $($name:ident),* $(,)?) => {
        mod $elem {
            $(
                #[test]
                fn $name() {
                    $crate::testing::$name::<_, $crate::testing::elements::$elem>(&$make);
                }
            )*
        }
    };
}
pub use policy::{Policy, PolicyChoice};
pub use radix::{RadixTopK, kth_key};
pub use sparse_core::KeyOrder;
pub use threshold::{SampledThreshold, ThresholdBinarySearch, ThresholdReuse};
pub use trimmed::TrimmedTopK;
pub use zen::{ZenPartition, ZenPartitioner};

use sparse_core::backend::first_non_finite;
use sparse_core::state::State;
use sparse_core::{Backend, BufferOps, Element, Result, Scalar, SparseVec};

/// A selected communication set, on the device.
pub struct Selection<B: BufferOps + ?Sized, E: Scalar> {
    /// Selected indices, increasing.
    pub indices: B::Buffer<u32>,
    /// `x[indices[j]]`.
    pub values: B::Buffer<E>,
    /// Number of selected elements.
    pub count: usize,
    /// The magnitude threshold the selection used, if it is threshold-based
    /// (every selected `|x|` is above it, every other one at or below it).
    pub threshold: Option<f64>,
}

impl<B: Backend<E>, E: Element> Selection<B, E> {
    /// The selected pairs as a host sparse vector of dimension `dim`, ready
    /// for a collective: one download of the indices and values, checked
    /// (sorted, unique, in range) on the way.
    ///
    /// # Errors
    /// Backend errors; [`sparse_core::Error::IndexOutOfRange`] and the other
    /// [`SparseVec::new`] errors if the selection does not fit `dim`.
    pub fn to_sparse(&self, b: &B, dim: usize) -> Result<SparseVec<E>> {
        SparseVec::new(dim, b.download(&self.indices)?, b.download(&self.values)?)
    }
}

/// A communication-set selection algorithm; stateful where the algorithm
/// keeps state across iterations (threshold reuse, B-SAG's h, the policy's
/// top-k/low-k flag).
pub trait Selector<B: Backend<E>, E: Element> {
    /// A short name for tables.
    fn name(&self) -> String;
    /// Selects from `x` with target size `k`.
    ///
    /// # Errors
    /// [`Error::KOutOfRange`](sparse_core::Error::KOutOfRange) if `k > len`; [`Error::NonFinite`](sparse_core::Error::NonFinite) on NaN or
    /// infinity; backend errors.
    fn select(&mut self, b: &B, x: &B::Buffer<E>, k: usize) -> Result<Selection<B, E>>;
    /// Whether [`Selector::select`] is the exact top-k by magnitude of
    /// sparse-core's contract ([`sparse_core::SelectOps::topk_abs`]: ties
    /// to the lower index, in index order) with nothing else kept or
    /// changed, so that a caller which accumulates into the input just
    /// before selecting may fuse the two
    /// ([`sparse_core::SelectOps::accumulate_topk`]; `residual-sgd`'s
    /// trainer does). The default, `false`, never fuses.
    fn exact_topk_abs(&self) -> bool {
        false
    }
    /// What this selector keeps across calls, as data
    /// ([`sparse_core::state`]), so that a fresh selector given it by
    /// [`Selector::load_state`] makes the same next selections as this one.
    /// The default, for selectors that keep nothing: the stateless state.
    ///
    /// # Errors
    /// None by default; a selector's own if reading its state fails.
    fn save_state(&self) -> Result<State> {
        Ok(State::stateless())
    }
    /// Restores what [`Selector::save_state`] saved. Everything is checked
    /// before anything is assigned: on an error the selector is unchanged.
    /// The default accepts only the stateless state.
    ///
    /// # Errors
    /// [`sparse_core::Error::Corrupt`] naming the kind and the entry that
    /// disagrees (another selector's state, a setting that differs, a
    /// missing or mistyped entry).
    fn load_state(&mut self, state: &State) -> Result<()> {
        state.expect_stateless(&self.name())
    }
}

/// A boxed selector selects as the one inside, so that a selector chosen at
/// run time (`Box<dyn Selector<B, E>>`) goes wherever a selector does.
impl<B: Backend<E>, E: Element, S: Selector<B, E> + ?Sized> Selector<B, E> for Box<S> {
    fn name(&self) -> String {
        (**self).name()
    }
    fn select(&mut self, b: &B, x: &B::Buffer<E>, k: usize) -> Result<Selection<B, E>> {
        (**self).select(b, x, k)
    }
    fn exact_topk_abs(&self) -> bool {
        (**self).exact_topk_abs()
    }
    fn save_state(&self) -> Result<State> {
        (**self).save_state()
    }
    fn load_state(&mut self, state: &State) -> Result<()> {
        (**self).load_state(state)
    }
}

/// A density, a budget and the count a density keeps of `n`: sparse-core's
/// ([`sparse_core::budget`]), checked once when made and shared with the
/// lossy collectives of `sparse-coll` and `residual-sgd`'s settings.
pub use sparse_core::budget::{Budget, Density, k_for_density};

/// `max |x|` and `mean |x|`, rejecting NaN (the backend does) and infinity.
pub(crate) fn stats<B: Backend<E>, E: Element>(b: &B, x: &B::Buffer<E>) -> Result<(f64, f64)> {
    let (max, mean) = b.abs_stats(x)?;
    if max.is_infinite() {
        return Err(first_non_finite(b, x));
    }
    Ok((max.to_f64_exact(), mean))
}

/// Checks `k <= len`.
pub(crate) fn check_k<B: Backend<E>, E: Element>(
    b: &B,
    x: &B::Buffer<E>,
    k: usize,
) -> Result<usize> {
    let n = b.len(x);
    sparse_core::backend::check_k(k, n)?;
    Ok(n)
}

/// Wraps a device selection.
pub(crate) fn selection<B: Backend<E>, E: Element>(
    b: &B,
    s: sparse_core::Selected<B, E>,
    threshold: Option<f64>,
) -> Selection<B, E> {
    let count = b.len(&s.indices);
    Selection {
        indices: s.indices,
        values: s.values,
        count,
        threshold,
    }
}

/// An empty selection.
pub(crate) fn empty<B: Backend<E>, E: Element>(b: &B) -> Result<Selection<B, E>> {
    Ok(Selection {
        indices: b.zeros(0)?,
        values: b.zeros(0)?,
        count: 0,
        threshold: None,
    })
}

/// A threshold in the element type: the largest `E` not above `t`, so that
/// `|x| > result` holds exactly for the `x` with `|x| > t` (up to the
/// rounding of `t` itself, which only moves the boundary between two
/// adjacent representable values).
pub(crate) fn to_threshold<E: Element>(t: f64) -> E {
    let e = E::from_f64_nearest(t);
    if e.to_f64_exact() > t {
        E::from_bits_u64(e.to_bits_u64() - 1)
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sparse_core::Error;

    #[test]
    fn density_is_validated() {
        assert_eq!(k_for_density(1000, 0.001), Ok(1));
        assert_eq!(k_for_density(1000, 0.0001), Ok(1));
        assert_eq!(k_for_density(1000, 1.0), Ok(1000));
        assert_eq!(k_for_density(0, 0.5), Ok(0));
        for bad in [0.0, -0.1, 1.5, f64::NAN, f64::INFINITY] {
            assert!(
                matches!(
                    k_for_density(10, bad),
                    Err(Error::InvalidParameter {
                        name: "density",
                        ..
                    })
                ),
                "{bad}"
            );
        }
    }
}
