//! A user's own oracle in `selector_suite_with_oracle` decides whether the
//! suite passes, and `Promise::AtLeastKLargest` checks which elements are
//! selected, not only how many.

use backend_cpu::Cpu;
use sparse_core::BufferOps;
use sparse_select::testing::{
    HostSelection, Promise, selector_suite_for, selector_suite_with_oracle,
};
use sparse_select::{BlockTopK, BucketTopK, KeyOrder, RadixTopK, Selector};
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The suite's panic message, or `None` if it passed.
fn failure(run: impl FnOnce() -> usize) -> Option<String> {
    catch_unwind(AssertUnwindSafe(run)).err().map(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

#[test]
fn a_user_oracle_that_accepts_passes_and_sees_every_selection() {
    let asked = Cell::new(0usize);
    let checked = selector_suite_with_oracle::<f32, _, _>(&Cpu, RadixTopK::magnitude, |x, k, s| {
        asked.set(asked.get() + 1);
        // The basic contract is checked before the oracle is asked.
        assert!(s.indices.iter().all(|&i| (i as usize) < x.len()));
        assert!(s.count >= k.min(x.len()));
        Ok(())
    });
    // Every selection the suite makes goes to the oracle: at least one per
    // selection it counts (the reproducibility calls are compared, not
    // asked).
    assert!(asked.get() >= checked, "{} < {checked}", asked.get());
}

#[test]
fn a_user_oracle_that_rejects_a_valid_selection_fails_the_suite() {
    // Rejects the exact top-k wherever 2 <= k < n: a valid selection that
    // the user's oracle does not accept.
    let msg = failure(|| {
        selector_suite_with_oracle::<f32, _, _>(&Cpu, RadixTopK::magnitude, |x, k, _| {
            if k >= 2 && k < x.len() {
                Err(format!("the user's oracle refuses k = {k}"))
            } else {
                Ok(())
            }
        })
    });
    let msg = msg.expect("the suite passed a selection its oracle refused");
    assert!(
        msg.contains("radix_topk") && msg.contains("the user's oracle refuses k = "),
        "{msg}"
    );
}

#[test]
fn a_user_oracle_of_the_selectors_own_rule_passes_block_top_k() {
    let blocks = BlockTopK { blocks: 5 };
    let per_block = |x: &[f64], k: usize, s: &HostSelection<f64>| {
        let (offsets, ks) = blocks.plan(x.len(), k).map_err(|e| e.to_string())?;
        Promise::ExactTopK(KeyOrder::Abs).check_per_segment(x, &offsets, &ks, s)
    };
    assert!(selector_suite_with_oracle::<f64, _, _>(&Cpu, || blocks, per_block) > 100);
}

#[test]
fn the_largest_k_pass_at_least_k_largest() {
    for order in [KeyOrder::Abs, KeyOrder::Signed] {
        selector_suite_for::<f32, _, _>(
            &Cpu,
            || RadixTopK { order },
            Promise::AtLeastKLargest(order),
        );
    }
}

/// Block and bucket top-k take their share from every block, also from a
/// block of small values, so they keep `AtLeastK` but not
/// `AtLeastKLargest`.
#[test]
fn block_and_bucket_top_k_fail_at_least_k_largest() {
    let blocks = BlockTopK { blocks: 3 };
    let msg = failure(|| {
        selector_suite_for::<f32, _, _>(&Cpu, || blocks, Promise::AtLeastKLargest(KeyOrder::Abs))
    });
    let msg = msg.expect("block top-k passed AtLeastKLargest");
    assert!(msg.contains("is not at least the unselected"), "{msg}");
    let msg = failure(|| {
        selector_suite_for::<f32, _, _>(
            &Cpu,
            BucketTopK::default,
            Promise::AtLeastKLargest(KeyOrder::Abs),
        )
    });
    let msg = msg.expect("bucket top-k passed AtLeastKLargest");
    assert!(msg.contains("is not at least the unselected"), "{msg}");
    // The count alone they keep.
    selector_suite_for::<f32, _, _>(&Cpu, || blocks, Promise::AtLeastK);
    selector_suite_for::<f32, _, _>(&Cpu, BucketTopK::default, Promise::AtLeastK);
}

/// The signed top-k is not the top-k by magnitude.
#[test]
fn the_signed_top_k_fails_at_least_k_largest_by_magnitude() {
    let msg = failure(|| {
        selector_suite_for::<f32, _, _>(
            &Cpu,
            || RadixTopK {
                order: KeyOrder::Signed,
            },
            Promise::AtLeastKLargest(KeyOrder::Abs),
        )
    });
    assert!(
        msg.is_some_and(|m| m.contains("in Abs order")),
        "the signed top-k passed as the top-k by magnitude"
    );
}

/// `HostSelection::within` cuts a selection to a segment, its indices
/// relative to the segment.
#[test]
fn a_selection_within_a_segment() {
    let x = [5.0f32, -1.0, 7.0, 0.5, -9.0, 2.0];
    let s = RadixTopK::magnitude()
        .select(&Cpu, &Cpu.upload(&x).expect("upload"), 3)
        .expect("a selection");
    let host = HostSelection::download(&Cpu, &s).expect("download");
    assert_eq!(host.indices, vec![0, 2, 4]);
    let part = host.within(2..5);
    assert_eq!(
        (part.indices, part.values, part.count),
        (vec![0, 2], vec![7.0, -9.0], 2)
    );
    assert_eq!(host.within(5..6).count, 0);
    // Per segment: [5, -1, 7] gives 2, [0.5, -9, 2] gives 1.
    let exact = Promise::ExactTopK(KeyOrder::Abs);
    assert_eq!(
        exact.check_per_segment(&x, &[0, 3, 6], &[2, 1], &host),
        Ok(())
    );
    let e = exact
        .check_per_segment(&x, &[0, 3, 6], &[1, 2], &host)
        .unwrap_err();
    assert!(
        e.starts_with("segment 0 (0..3): not the exact top-k"),
        "{e}"
    );
    // Segments that leave a selected index out.
    let e = exact
        .check_per_segment(&x, &[0, 3], &[2], &host)
        .unwrap_err();
    assert!(e.contains("1 of 3 selected outside the segments"), "{e}");
}
