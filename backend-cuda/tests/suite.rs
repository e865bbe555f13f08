//! The shared backend and selector suites on the kernel backend, for the
//! element type its kernels implement (`f32`): over wgpu (Mesa's software
//! Vulkan driver where there is no GPU), and over CUDA when built with
//! `--features cuda` (skipped, with the reason printed, where no CUDA
//! device is found).

mod common;

#[cfg(feature = "wgpu")]
mod wgpu {
    mod backend_suite {
        sparse_core::backend_test_suite!(crate::common::wgpu(); f32);
    }

    mod selector_suite {
        sparse_select::selector_test_suite!(crate::common::wgpu(); f32);
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    mod backend_suite {
        sparse_core::backend_test_suite!(match crate::common::cuda() {
            Some(b) => b,
            None => return,
        }; f32);
    }

    mod selector_suite {
        sparse_select::selector_test_suite!(match crate::common::cuda() {
            Some(b) => b,
            None => return,
        }; f32);
    }
}
