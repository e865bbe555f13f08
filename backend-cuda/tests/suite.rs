//! The shared backend and selector suites on the kernel backend: over wgpu
//! (Mesa's software Vulkan driver where there is no GPU), and over CUDA
//! when built with `--features cuda` (skipped, with the reason printed,
//! where no CUDA device is found).

#[cfg(feature = "wgpu")]
mod wgpu {
    fn backend() -> backend_cuda::WgpuBackend {
        backend_cuda::WgpuBackend::new_default()
            .expect("no wgpu device: install mesa-vulkan-drivers")
    }

    mod backend_suite {
        sparse_core::backend_test_suite!(super::backend());
    }

    mod selector_suite {
        sparse_select::selector_test_suite!(super::backend());
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    /// The CUDA backend, or `None` (with the reason printed) without a
    /// device: the probe must come first, opening a client would panic.
    pub(crate) fn backend() -> Option<backend_cuda::CudaBackend> {
        match backend_cuda::CudaBackend::new_default() {
            Ok(b) => Some(b),
            Err(e) => {
                println!("skipped: no CUDA device ({e})");
                None
            }
        }
    }

    mod backend_suite {
        sparse_core::backend_test_suite!(match super::backend() {
            Some(b) => b,
            None => return,
        });
    }

    mod selector_suite {
        sparse_select::selector_test_suite!(match super::backend() {
            Some(b) => b,
            None => return,
        });
    }
}
