//! Shared setup of the divan benches.

use sparse_core::SparseVec;
use sparse_core::generate::GradientSpec;

/// A seeded gradient of dimension `n` and density 0.1%.
pub fn gradient(n: usize) -> SparseVec<f32> {
    GradientSpec::new(n, 0.001, 7)
        .generate::<f32>(1)
        .expect("valid spec")
        .remove(0)
}
