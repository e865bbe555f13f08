//! The selector suite on the CPU reference backend.

sparse_select::selector_test_suite!(backend_cpu::Cpu; f32, f64, f16, bf16);

/// Every function of the selector suite is listed in
/// `selector_test_suite!`, and nothing else is.
#[test]
fn the_selector_suite_macro_lists_every_suite_function() {
    let (missing, extra) = sparse_core::testing::unlisted_suite_fns(
        // The contract module holds no suite function (its public ones
        // take a selector): only the checks of `testing/mod.rs` are listed.
        concat!(
            include_str!("../src/testing/mod.rs"),
            include_str!("../src/testing/contract.rs")
        ),
        include_str!("../src/lib.rs"),
    );
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{missing:?} {extra:?}"
    );
}
