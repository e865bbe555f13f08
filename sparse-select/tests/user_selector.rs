//! `selector_suite_for` on a user's own selector: a correct one passes, and
//! each planted bug (infinity let through, the wrong tie rule, something
//! selected at `k = 0`, an unstable choice) fails it with a message that
//! names the bug.

use backend_cpu::Cpu;
use sparse_core::{Backend, Error, KeyOrder, Result};
use sparse_select::testing::{Promise, selector_suite_for};
use sparse_select::{Selection, Selector};
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The bugs a user's top-k may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    None,
    /// Rejects NaN only (as a segmented primitive does), so infinity
    /// passes.
    LetsInfinityThrough,
    /// Breaks ties towards the higher index.
    TiesToHigherIndex,
    /// Selects the first element when asked for none.
    SelectsAtKZero,
    /// A second call on the same instance rotates its choice among ties.
    Unstable,
}

/// A user's exact top-k by magnitude, on the host: download, sort,
/// upload.
struct HostTopK {
    bug: Bug,
    calls: Cell<usize>,
}

impl HostTopK {
    fn new(bug: Bug) -> Self {
        Self {
            bug,
            calls: Cell::new(0),
        }
    }
}

impl<B: Backend<f32>> Selector<B, f32> for HostTopK {
    fn name(&self) -> String {
        format!("host top-k ({:?})", self.bug)
    }
    fn select(&mut self, b: &B, x: &B::Buffer<f32>, k: usize) -> Result<Selection<B, f32>> {
        let x = b.download(x)?;
        if k > x.len() {
            return Err(Error::KOutOfRange { k, len: x.len() });
        }
        if self.bug == Bug::LetsInfinityThrough {
            if let Some(index) = x.iter().position(|v| v.is_nan()) {
                return Err(Error::NonFinite { index });
            }
        } else {
            sparse_core::backend::check_finite(&x)?;
        }
        let mut order: Vec<u32> = (0..x.len() as u32).collect();
        let keys: Vec<u64> = x.iter().map(|&v| KeyOrder::Abs.key(v)).collect();
        // Calls on non-empty inputs, which the unstable bug alternates on.
        let calls = self.calls.get();
        self.calls.set(calls + usize::from(!x.is_empty()));
        let take = if self.bug == Bug::SelectsAtKZero && k == 0 {
            x.len().min(1)
        } else {
            k
        };
        // The `take` first in the order (a selection, not a sort: the suite
        // selects from 2^22 elements).
        if take > 0 && take < order.len() {
            order.select_nth_unstable_by(take - 1, |&a, &c| {
                let tie = match self.bug {
                    Bug::TiesToHigherIndex => c.cmp(&a),
                    Bug::Unstable if calls % 2 == 1 => c.cmp(&a),
                    _ => a.cmp(&c),
                };
                keys[c as usize].cmp(&keys[a as usize]).then(tie)
            });
        }
        let mut idx = order[..take].to_vec();
        idx.sort_unstable();
        let values: Vec<f32> = idx.iter().map(|&i| x[i as usize]).collect();
        Ok(Selection {
            indices: b.upload(&idx)?,
            values: b.upload(&values)?,
            count: idx.len(),
            threshold: None,
        })
    }
}

/// The panic message of the suite on a selector with `bug`.
fn failure(bug: Bug) -> String {
    let run = catch_unwind(AssertUnwindSafe(|| {
        selector_suite_for(
            &Cpu,
            || HostTopK::new(bug),
            Promise::ExactTopK(KeyOrder::Abs),
        )
    }));
    match run {
        Ok(n) => panic!("{bug:?}: the suite passed ({n} checks)"),
        Err(p) => p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default(),
    }
}

#[test]
fn a_correct_user_selector_passes() {
    let n = selector_suite_for(
        &Cpu,
        || HostTopK::new(Bug::None),
        Promise::ExactTopK(KeyOrder::Abs),
    );
    assert!(n > 100, "{n} checks");
}

#[test]
fn a_selector_that_lets_infinity_through_fails() {
    let msg = failure(Bug::LetsInfinityThrough);
    // Caught at the first input whose first non-finite value is an
    // infinity: selected from, or reported at a later NaN.
    assert!(
        msg.contains(": inf at")
            && (msg.contains("selected from a non-finite input") || msg.contains("not NonFinite")),
        "{msg}"
    );
}

#[test]
fn a_selector_with_the_wrong_tie_rule_fails() {
    let msg = failure(Bug::TiesToHigherIndex);
    assert!(msg.contains("not the exact top-k"), "{msg}");
}

#[test]
fn a_selector_that_selects_at_k_zero_fails() {
    let msg = failure(Bug::SelectsAtKZero);
    assert!(msg.contains("k = 0 selects nothing"), "{msg}");
}

#[test]
fn an_unstable_selector_fails() {
    let msg = failure(Bug::Unstable);
    assert!(msg.contains("a second call: not the exact top-k"), "{msg}");
}
