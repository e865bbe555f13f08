//! Test support, behind the `testing` feature: seeded synthetic gradients
//! ([`generate`]) and the backend test suite written once ([`suite`]), run by
//! every backend through [`crate::backend_test_suite!`].

pub mod generate;
pub mod suite;

/// The named, seedable generator of synthetic gradients and test inputs:
/// ChaCha8, whose stream is fixed by its specification (not by a `rand`
/// version). Hashing seeds ([`crate::SplitMix64`]) and QSGD's counter-based
/// draws, which kernels reproduce bit for bit, keep their own generators.
pub type Rng = rand_chacha::ChaCha8Rng;

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

/// The suite functions of `suite_source` (every `pub fn NAME<B: Backend>`)
/// that the first arm of the suite macro in `macro_source` (the names after
/// `@each $make;`) does not list, and the listed names that are not suite
/// functions: a function left out of the macro would never run, so each
/// suite's tests check that both lists are empty.
pub fn unlisted_suite_fns(suite_source: &str, macro_source: &str) -> (Vec<String>, Vec<String>) {
    let defined: Vec<String> = suite_source
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub fn "))
        .filter_map(|rest| rest.split_once("<B: Backend>"))
        .map(|(name, _)| name.trim().to_string())
        .collect();
    let listed: Vec<String> = macro_source
        .split_once("(@each $make;")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(names, _)| {
            names
                .split(',')
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let missing = defined
        .iter()
        .filter(|d| !listed.contains(d))
        .cloned()
        .collect();
    let extra = listed
        .iter()
        .filter(|l| !defined.contains(l))
        .cloned()
        .collect();
    (missing, extra)
}
