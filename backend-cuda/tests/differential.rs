//! Differential tests (`sparse_core::testing::differential`): the same
//! seeded inputs through the CPU reference and the kernel backend, for the
//! element type its kernels implement (`f32`). Run over wgpu (lavapipe
//! where there is no GPU), and over CUDA when built with `--features cuda`
//! (skipped, with the reason printed, where no CUDA device is found).
#![cfg(any(feature = "wgpu", feature = "cuda"))]

mod common;

#[cfg(feature = "wgpu")]
mod wgpu {
    sparse_core::differential_test_suite!(backend_cpu::Cpu, crate::common::wgpu(); f32);
}

#[cfg(feature = "cuda")]
mod cuda {
    sparse_core::differential_test_suite!(backend_cpu::Cpu, match crate::common::cuda() {
        Some(b) => b,
        None => return,
    }; f32);
}
