//! The kernel backends the integration tests run on.

/// The wgpu backend (lavapipe where there is no GPU).
#[cfg(feature = "wgpu")]
pub fn wgpu() -> backend_cuda::WgpuBackend {
    backend_cuda::WgpuBackend::new_default().expect("no wgpu device: install mesa-vulkan-drivers")
}

/// The CUDA backend, or `None` (with the reason printed) without a device:
/// `new_default` probes first, as opening a client on a missing device
/// would panic.
#[cfg(feature = "cuda")]
pub fn cuda() -> Option<backend_cuda::CudaBackend> {
    match backend_cuda::CudaBackend::new_default() {
        Ok(b) => Some(b),
        Err(e) => {
            println!("skipped: no CUDA device ({e})");
            None
        }
    }
}
