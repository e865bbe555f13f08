//! Test support, behind the `testing` feature: the seeded generators
//! ([`generate`], [`Rng`]: re-exported from [`crate::generate`], which is
//! always built), the backend test suite written once ([`suite`]) and the
//! differential tests against a reference backend ([`differential`]), run
//! by every backend through [`crate::backend_test_suite!`] and
//! [`crate::differential_test_suite!`] for each element type it implements.

pub mod differential;
pub mod peak;
pub mod suite;

pub use crate::generate::{self, Rng};

/// The element types by the names the suite macros take, so that
/// `backend_test_suite!(..; f16)` names a type wherever it is expanded.
pub mod elements {
    pub use core::primitive::{f32, f64};
    pub use half::{bf16, f16};
}

/// Instantiates the backend suite ([`suite`]) as `#[test]` functions for
/// the backend built by `$make` (an expression, evaluated in each test),
/// in the style of cubecl's `testgen_all!`: the index-only checks once, in
/// a module `index`, and the element checks once per element type listed
/// after the `;`, each in a module named after its type, so every test
/// name says its element type (`f32::reductions`, `bf16::topk_abs`).
///
/// ```ignore
/// sparse_core::backend_test_suite!(crate::MyBackend::new(); f32, f64, f16, bf16);
/// ```
///
/// List exactly the element types the backend implements: one it does not
/// implement does not compile. `$make` is expanded inside those modules,
/// so it names items by absolute paths (`crate::...`). The macro only
/// wraps; the test logic lives in [`suite`].
#[macro_export]
macro_rules! backend_test_suite {
    ($make:expr; $($elem:ident),+ $(,)?) => {
        $crate::backend_test_suite!(@index $make; bitmap, gather_indices);
        $(
            $crate::backend_test_suite!(@element $make, $elem;
                reductions, count_above, compact_above, topk_abs, topk_signed, topk_pinned_ties,
                errors, scatter_add_and_mask, axpy_and_scale, hash_partition,
                hash_partition_forced_collisions, qsgd, large_topk, digit_histogram, compact_key,
                topk_segmented, topk_buckets, gather, gather_sampled, finite_each);
        )+
    };
    (@index $make:expr; $($name:ident),* $(,)?) => {
        mod index {
            $(
                #[test]
                fn $name() {
                    $crate::testing::suite::$name(&$make);
                }
            )*
        }
    };
    (@element $make:expr, $elem:ident; $($name:ident),* $(,)?) => {
        mod $elem {
            $(
                #[test]
                fn $name() {
                    $crate::testing::suite::$name::<_, $crate::testing::elements::$elem>(&$make);
                }
            )*
        }
    };
}

/// The suite functions of `suite_source` (every `pub fn NAME<...>` whose
/// generics name `Backend` or `IndexOps`) that no arm of the suite macro
/// in `macro_source` lists (the names after the `;` of each invocation of
/// an `@index` or `@element` arm), and the listed names that are not suite
/// functions: a function left out of the macro would never run, so each
/// suite's tests check that both lists are empty.
pub fn unlisted_suite_fns(suite_source: &str, macro_source: &str) -> (Vec<String>, Vec<String>) {
    let defined: Vec<String> = suite_source
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub fn "))
        .filter_map(|rest| rest.split_once('<'))
        .filter(|(name, generics)| {
            name.chars().all(|c| c.is_alphanumeric() || c == '_')
                && (generics.contains("Backend<") || generics.contains("IndexOps"))
        })
        .map(|(name, _)| name.to_string())
        .collect();
    // Split so that this source does not hold the marker it looks for.
    let marker = concat!("_suite!", "(@");
    let listed: Vec<String> = macro_source
        .split(marker)
        .skip(1)
        .filter_map(|arm| arm.split_once(';'))
        .filter_map(|(_, rest)| rest.split_once(')'))
        .flat_map(|(names, _)| names.split(','))
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect();
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
