//! `selector_suite_for` on selectors that return a stale answer, the bug a
//! training loop meets first (every step calls with the same `n` and `k`):
//! a correct selector wrapped so that it answers a repeated shape from a
//! cache, or keeps a threshold from the last call of the shape and applies
//! it to new data without counting. Each fails the suite, whatever it
//! wraps and whatever its promise; the correct selectors it wraps pass.

use backend_cpu::Cpu;
use sparse_core::{Backend, Element, Result};
use sparse_select::testing::{HostSelection, Promise, selector_suite_with_oracle};
use sparse_select::{
    BlockTopK, KeyOrder, Policy, RadixTopK, Selection, Selector, ThresholdBinarySearch,
    ThresholdReuse,
};
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// How a wrapper goes stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stale {
    /// Returns the whole answer of the first call of a shape `(n, k)`:
    /// indices, values and threshold.
    Answer,
    /// Returns the indices of the first call of a shape, with the values of
    /// the new input at them (consistent, so only an oracle catches it).
    Indices,
    /// Keeps the threshold of the first call of a shape and selects every
    /// `|x|` above it from new data, without counting what passes (RedSync's
    /// reuse without its check).
    Threshold,
    /// Keeps the threshold and the indices of the first call of a shape;
    /// when as many elements of new data pass the threshold as RedSync's
    /// reuse allows (`k` to `2k`), returns the old indices, with the new
    /// values at them (the count checked, the positions assumed).
    CountedIndices,
}

/// A selection kept on the host: indices, values, threshold.
type Answer<E> = (Vec<u32>, Vec<E>, Option<f64>);

/// A correct selector `S`, made stale by `bug` for every shape with at
/// least `from` elements (a cache for large layers only: the shapes a
/// suite calls once each are where it hides). Finiteness and `k` are
/// checked first, so that only the staleness is wrong.
struct Wrapped<S, E> {
    inner: S,
    bug: Stale,
    from: usize,
    answers: HashMap<(usize, usize), Answer<E>>,
}

impl<S, E> Wrapped<S, E> {
    fn new(inner: S, (bug, from): (Stale, usize)) -> Self {
        Self {
            inner,
            bug,
            from,
            answers: HashMap::new(),
        }
    }
}

impl<B: Backend<E>, E: Element, S: Selector<B, E>> Selector<B, E> for Wrapped<S, E> {
    fn name(&self) -> String {
        format!(
            "{} (stale {:?} from n = {})",
            self.inner.name(),
            self.bug,
            self.from
        )
    }
    fn select(&mut self, b: &B, x: &B::Buffer<E>, k: usize) -> Result<Selection<B, E>> {
        let n = b.len(x);
        sparse_core::backend::check_k(k, n)?;
        sparse_core::backend::check_finite_buffer(b, x)?;
        if n < self.from {
            return self.inner.select(b, x, k);
        }
        let Some((indices, values, threshold)) = self.answers.get(&(n, k)).cloned() else {
            let s = self.inner.select(b, x, k)?;
            let kept = (b.download(&s.indices)?, b.download(&s.values)?, s.threshold);
            self.answers.insert((n, k), kept);
            return Ok(s);
        };
        let idx = b.upload(&indices)?;
        match (self.bug, threshold) {
            (Stale::Answer, _) => Ok(Selection {
                count: indices.len(),
                indices: idx,
                values: b.upload(&values)?,
                threshold,
            }),
            (Stale::Indices, _) => Ok(Selection {
                count: indices.len(),
                values: b.gather(x, &idx)?,
                indices: idx,
                threshold,
            }),
            (Stale::Threshold, Some(t)) => {
                let passed = b.compact_above(x, E::from_f64_nearest(t))?;
                Ok(Selection {
                    count: b.len(&passed.indices),
                    indices: passed.indices,
                    values: passed.values,
                    threshold,
                })
            }
            (Stale::CountedIndices, Some(t))
                if (k..=2 * k).contains(&b.count_above(x, E::from_f64_nearest(t))?) =>
            {
                Ok(Selection {
                    count: indices.len(),
                    values: b.gather(x, &idx)?,
                    indices: idx,
                    threshold,
                })
            }
            // No threshold kept (an exact fallback), or too many or too few
            // pass it: select afresh.
            (Stale::Threshold | Stale::CountedIndices, _) => self.inner.select(b, x, k),
        }
    }
}

/// The panic message of the suite (`oracle` in place of a promise) on
/// `make`'s selector, or `None` if it passed.
fn failure<S: Selector<Cpu, f32>>(make: impl Fn() -> S, oracle: &Oracle) -> Option<String> {
    let run = catch_unwind(AssertUnwindSafe(|| {
        selector_suite_with_oracle::<f32, _, _>(&Cpu, make, oracle)
    }));
    run.err().map(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

/// An oracle for `selector_suite_with_oracle`.
type Oracle = dyn Fn(&[f32], usize, &HostSelection<f32>) -> std::result::Result<(), String>;

/// A promise as an oracle.
fn promise(p: Promise) -> Box<Oracle> {
    Box::new(move |x, k, s| p.check(x, k, s))
}

/// Every shape is cached, or only those past the suite's inputs of
/// `2^17 + 3`, which it selected from once each before it called with a
/// repeated shape.
const ALL: usize = 0;
const LARGE: usize = (1 << 17) + 4;

/// The correct selector of `make` passes the suite under `oracle`, and each
/// stale wrapper of it fails, naming the wrapper.
fn every_stale_wrapper_fails<S: Selector<Cpu, f32>>(
    make: impl Fn() -> S + Copy,
    oracle: &Oracle,
    bugs: &[(Stale, usize)],
) {
    assert_eq!(failure(make, oracle), None, "the correct selector fails");
    for &bug in bugs {
        let msg = failure(|| Wrapped::new(make(), bug), oracle);
        let msg = msg.unwrap_or_else(|| panic!("{bug:?}: the suite passed"));
        let name = format!("stale {:?} from n = {}", bug.0, bug.1);
        assert!(msg.contains(&name), "{bug:?}: {msg}");
    }
}

#[test]
fn a_stale_exact_top_k_fails() {
    every_stale_wrapper_fails(
        RadixTopK::magnitude,
        &promise(Promise::ExactTopK(KeyOrder::Abs)),
        &[
            (Stale::Answer, ALL),
            (Stale::Indices, ALL),
            (Stale::Answer, LARGE),
            (Stale::Indices, LARGE),
        ],
    );
}

#[test]
fn a_stale_signed_top_k_fails() {
    every_stale_wrapper_fails(
        || RadixTopK {
            order: KeyOrder::Signed,
        },
        &promise(Promise::ExactTopK(KeyOrder::Signed)),
        &[(Stale::Indices, ALL), (Stale::Indices, LARGE)],
    );
}

#[test]
fn a_stale_threshold_selector_fails() {
    every_stale_wrapper_fails(
        ThresholdBinarySearch::default,
        &promise(Promise::Threshold),
        &[
            (Stale::Answer, ALL),
            (Stale::Indices, ALL),
            (Stale::Threshold, ALL),
            (Stale::CountedIndices, ALL),
            (Stale::Indices, LARGE),
            (Stale::CountedIndices, LARGE),
        ],
    );
}

#[test]
fn a_stale_threshold_reuse_fails() {
    every_stale_wrapper_fails(
        ThresholdReuse::<f32>::default,
        &promise(Promise::Threshold),
        &[
            (Stale::Indices, ALL),
            (Stale::Threshold, ALL),
            (Stale::CountedIndices, ALL),
            (Stale::CountedIndices, LARGE),
        ],
    );
}

/// The policy promised only `AtLeastK` before, under which any stale
/// answer of at least `k` passed; it keeps the threshold contract.
#[test]
fn a_stale_policy_fails() {
    every_stale_wrapper_fails(
        || Policy::<f32>::new(false),
        &promise(Promise::Threshold),
        &[
            (Stale::Answer, ALL),
            (Stale::Indices, ALL),
            (Stale::CountedIndices, ALL),
            (Stale::Indices, LARGE),
        ],
    );
}

/// Block top-k keeps no promise about the whole input; its per-block
/// oracle catches a stale answer, which `AtLeastK` (its promise before)
/// let through.
#[test]
fn a_stale_block_top_k_fails_its_per_block_oracle() {
    let blocks = BlockTopK { blocks: 3 };
    let per_block = move |x: &[f32], k: usize, s: &HostSelection<f32>| {
        let (offsets, ks) = blocks.plan(x.len(), k).map_err(|e| e.to_string())?;
        Promise::ExactTopK(KeyOrder::Abs).check_per_segment(x, &offsets, &ks, s)
    };
    every_stale_wrapper_fails(
        || blocks,
        &per_block,
        &[(Stale::Indices, ALL), (Stale::Indices, LARGE)],
    );
}
