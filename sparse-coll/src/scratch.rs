//! Memory a collective keeps across calls, so that a warm call reuses its
//! vectors instead of mapping fresh pages: typed at first use, so that an
//! algorithm that is not generic over the element (one instance serves
//! `f32` and `f64` calls) still keeps typed buffers.

use sparse_core::{Element, SparseVec};
use std::any::Any;
use std::fmt;

/// One typed value kept across calls ([`Scratch::get`]); a clone starts
/// empty (memory is not state: the algorithm's results never depend on
/// it).
#[derive(Default)]
pub(crate) struct Scratch(Option<Box<dyn Any + Send>>);

impl Scratch {
    /// The kept value of type `T`, made with `T::default()` at the first
    /// call or when the last call kept another type.
    pub(crate) fn get<T: Default + Send + 'static>(&mut self) -> &mut T {
        if !self.0.as_ref().is_some_and(|b| b.is::<T>()) {
            self.0 = Some(Box::new(T::default()));
        }
        self.0
            .as_mut()
            .and_then(|b| b.downcast_mut::<T>())
            .expect("made above")
    }
}

impl Clone for Scratch {
    fn clone(&self) -> Self {
        Self(None)
    }
}

impl fmt::Debug for Scratch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Scratch")
    }
}

/// Index and value vectors to build a sparse vector in, kept across calls.
#[derive(Debug)]
pub(crate) struct Pairs<E> {
    pub(crate) idx: Vec<u32>,
    pub(crate) val: Vec<E>,
}

impl<E> Default for Pairs<E> {
    fn default() -> Self {
        Self {
            idx: Vec::new(),
            val: Vec::new(),
        }
    }
}

impl<E: Element> Pairs<E> {
    /// Swaps these vectors with `v`'s (`v` gets dimension `dim`).
    pub(crate) fn swap_with(&mut self, v: &mut SparseVec<E>, dim: usize) {
        let (i, x) = crate::frame::take_parts(v);
        let (i, x) = (
            std::mem::replace(&mut self.idx, i),
            std::mem::replace(&mut self.val, x),
        );
        *v = SparseVec::new_unchecked(dim, i, x);
    }
}

/// `v` becomes a copy of `(idx, val)` with dimension `dim`, its allocations
/// reused.
pub(crate) fn copy_into<E: Element>(v: &mut SparseVec<E>, dim: usize, idx: &[u32], val: &[E]) {
    let (mut i, mut x) = crate::frame::take_parts(v);
    i.extend_from_slice(idx);
    x.extend_from_slice(val);
    *v = SparseVec::new_unchecked(dim, i, x);
}

/// `acc += (idx, val)` by a sorted merge into `tmp`, whose vectors then
/// trade places with `acc`'s (no allocation once both are large enough).
/// A side without entries leaves `acc` as it is or copies the other.
pub(crate) fn add_into<E: Element>(
    acc: &mut SparseVec<E>,
    (idx, val): (&[u32], &[E]),
    tmp: &mut Pairs<E>,
) {
    if idx.is_empty() {
        return;
    }
    let dim = acc.dim();
    if acc.nnz() == 0 {
        copy_into(acc, dim, idx, val);
        return;
    }
    sparse_core::sparse::merge_sum_into(
        (acc.indices(), acc.values()),
        (idx, val),
        &mut tmp.idx,
        &mut tmp.val,
    );
    tmp.swap_with(acc, dim);
}
