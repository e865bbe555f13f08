//! Test support, behind the `testing` feature: seeded synthetic gradients
//! ([`generate`]) and the backend test suite written once ([`suite`]), run by
//! every backend through [`crate::backend_test_suite!`].

pub mod generate;
pub mod suite;

/// Instantiates the whole backend suite as `#[test]` functions for the
/// backend built by `$make` (an expression, evaluated in each test). The
/// macro only wraps; the test logic lives in [`suite`].
#[macro_export]
macro_rules! backend_test_suite {
    ($make:expr) => {
        $crate::backend_test_suite!(@each $make;
            reductions, count_above, compact_above, topk_abs, topk_signed, topk_pinned_ties,
            errors, scatter_add_and_mask, axpy_and_scale, hash_partition, hash_partition_forced_collisions,
            bitmap, qsgd, large_topk, digit_histogram, compact_key, topk_segmented, gather);
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::testing::suite::$name(&$make);
            }
        )*
    };
}
