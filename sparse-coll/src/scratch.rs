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
pub(crate) struct Scratch(Option<Box<dyn Any + Send + Sync>>);

impl Scratch {
    /// The kept value of type `T`, made with `T::default()` at the first
    /// call or when the last call kept another type.
    pub(crate) fn get<T: Default + Send + Sync + 'static>(&mut self) -> &mut T {
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

/// The vectors the lossy collectives (gTopk, the SparDL variants) work
/// in, kept across calls: blocks of a reduce-scatter, the two sides of a
/// cut, a merge's output, the selection's keys and the message sent.
#[derive(Debug)]
pub(crate) struct Work<E> {
    pub(crate) blocks: Vec<SparseVec<E>>,
    pub(crate) kept: Pairs<E>,
    pub(crate) cut: Pairs<E>,
    pub(crate) tmp: Pairs<E>,
    pub(crate) keys: Vec<u64>,
    pub(crate) msg: Vec<u8>,
}

impl<E> Default for Work<E> {
    fn default() -> Self {
        Self {
            blocks: Vec::new(),
            kept: Pairs::default(),
            cut: Pairs::default(),
            tmp: Pairs::default(),
            keys: Vec::new(),
            msg: Vec::new(),
        }
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

/// `acc += (idx, val)` by a sorted merge into `tmp`, copied back into
/// `acc`'s vectors. Each keeps its own allocation (trading them would pass
/// a small one to a vector that needs a large one at the next call, and a
/// warm call would allocate until every one had grown to the largest), so
/// that once each has grown to its own largest size nothing is allocated.
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
    copy_into(acc, dim, &tmp.idx, &tmp.val);
}
