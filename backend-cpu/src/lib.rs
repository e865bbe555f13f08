#![doc = include_str!("../README.md")]
//!
//! ## Choices
//!
//! "plain" means plain loops, not slow ones: the selection
//! primitives compare elements as integers of their width in loops that
//! vectorize, and only visit element by element the chunks that hold a hit
//! (see `keys`), so a pass runs near the speed of reading memory. Exact
//! top-k (`topk_abs`, the segments of `topk_abs_segmented`) narrows the
//! input to candidates at or above a bound estimated from a sample or a
//! histogram, checks that at least k reach it, and runs introselect on
//! `(key desc, index asc)` over those candidates only; every path is
//! checked against a full sort in the shared suite. NaN in a magnitude
//! top-k is found among the selected (its key is above every other).
//! Sums of `mean_abs` and `sum_squares` are accumulated in `f64` (eight
//! interleaved accumulators); `abs_stats` and `count_above_each` are one
//! pass each; hash
//! partitioning runs Zen's Alg. 1 sequentially in input order, which is one
//! valid serialization of the parallel algorithm (read-after-write then never
//! sees a lost race).
//!
//! Layout, as burn's backends: one ops trait per file (`buffer.rs`,
//! `reduce.rs`, `select.rs`, `dense.rs`, `hash.rs`, `index.rs`,
//! `codec.rs`), the vectorized key loops in `keys.rs`, and the NaN and index
//! checks they share here.

use sparse_core::{Element, Error, Result, abs_key};

mod buffer;
mod codec;
mod dense;
mod hash;
mod index;
mod keys;
mod reduce;
mod select;

use keys::{Word, by_width};

/// The CPU reference backend. Buffers are `Vec`s.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu;

/// The error naming the first NaN of `x` (which holds one).
fn first_nan<E: Element>(x: &[E]) -> Error {
    check_nan(x).err().unwrap_or(Error::NonFinite { index: 0 })
}

/// [`check_nan`] as a vectorized integer pass (the position is only looked
/// up when there is a NaN).
fn check_nan_fast<E: Element>(x: &[E]) -> Result<()> {
    let (_, nan) = by_width!(x, max_key(abs_key(E::infinity())));
    nan_error(nan, x)
}

fn check_nan<E: Element>(x: &[E]) -> Result<()> {
    match x.iter().position(|v| v.is_nan()) {
        Some(index) => Err(Error::NonFinite { index }),
        None => Ok(()),
    }
}

/// `(max magnitude key, NaN seen)`.
fn max_key<W: Word>(bits: &[W], inf: u64) -> (u64, bool) {
    let m = bits
        .iter()
        .fold(W::from_u64(0), |m, &b| m.max(keys::abs(b)));
    (m.to_u64(), m.to_u64() > inf)
}

/// The NaN test fused into a primitive's own pass: `nan` is or-ed inside
/// the loop, and only when it is set is the first NaN's index looked up.
fn nan_error<E: Element>(nan: bool, x: &[E]) -> Result<()> {
    if nan { check_nan(x) } else { Ok(()) }
}

fn check_indices(indices: &[u32], len: usize) -> Result<()> {
    match indices.iter().position(|&i| i as usize >= len) {
        Some(position) => Err(Error::IndexOutOfRange {
            index: indices[position] as u64,
            position,
            dim: len as u64,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod suite {
    sparse_core::backend_test_suite!(crate::Cpu; f32, f64, f16, bf16);
}

#[cfg(test)]
mod hash_table {
    use crate::Cpu;
    use sparse_core::{BufferOps, Error, HashOps, HierarchicalHash};

    /// Issue 27.3: a table of `P (r1 + r2)` slots too large for any
    /// machine is `OutOfMemory`, not an abort of the process.
    #[test]
    fn a_table_beyond_the_machine_is_out_of_memory() {
        let h = HierarchicalHash::new(1, 2, 1 << 16, 3, u32::MAX, u32::MAX).unwrap();
        let idx = Cpu.upload(&[5u32]).unwrap();
        let val = Cpu.upload(&[1.0f32]).unwrap();
        let res = HashOps::<f32>::hash_partition(&Cpu, &idx, &val, &h);
        assert!(matches!(res, Err(Error::OutOfMemory { .. })), "{res:?}");
    }
}
