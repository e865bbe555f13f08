//! The shared backend and selector suites on the kernel backend, over wgpu
//! (Mesa's software Vulkan driver where there is no GPU).
#![cfg(feature = "wgpu")]

fn backend() -> backend_cuda::WgpuBackend {
    backend_cuda::WgpuBackend::new_default().expect("no wgpu device: install mesa-vulkan-drivers")
}

mod backend_suite {
    sparse_core::backend_test_suite!(super::backend());
}

mod selector_suite {
    sparse_select::selector_test_suite!(super::backend());
}
