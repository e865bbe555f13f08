//! The suites' macros list every suite function, and nothing else, so
//! that a backend that instantiates them runs every check.

/// Every function of the backend suite is listed in
/// `backend_test_suite!`, and nothing else is; the same for the
/// differential tests and `differential_test_suite!`.
#[test]
fn the_backend_suite_macro_lists_every_suite_function() {
    for (suite, macros) in [
        (
            include_str!("../src/testing/suite.rs"),
            include_str!("../src/testing/mod.rs"),
        ),
        (
            include_str!("../src/testing/differential.rs"),
            include_str!("../src/testing/differential.rs"),
        ),
    ] {
        let (missing, extra) = sparse_core::testing::unlisted_suite_fns(suite, macros);
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{missing:?} {extra:?}"
        );
    }
}
