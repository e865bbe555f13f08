//! The same top-k on the kernel backend (wgpu: any Vulkan device, Mesa's
//! software Vulkan without a GPU) as on the CPU backend, bit for bit.
//!
//! Run with `cargo run -p backend-cuda --example wgpu_topk` (needs a
//! Vulkan driver: `apt-get install mesa-vulkan-drivers libvulkan1`).

use backend_cpu::Cpu;
use backend_cuda::WgpuBackend;
use sparse_core::{BufferOps, Result};
use sparse_select::{RadixTopK, Selector};

fn main() -> Result<()> {
    let gpu = WgpuBackend::new_default()?;
    // A residual with a few large entries among many small ones.
    let residual: Vec<f32> = (0..10_000u32)
        .map(|i| {
            if i % 997 == 0 {
                i as f32
            } else {
                1e-3 * (i % 13) as f32 - 6e-3
            }
        })
        .collect();
    let k = 8;
    let on_gpu = RadixTopK::magnitude()
        .select(&gpu, &gpu.upload(&residual)?, k)?
        .to_sparse(&gpu, residual.len())?;
    let on_cpu = RadixTopK::magnitude()
        .select(&Cpu, &Cpu.upload(&residual)?, k)?
        .to_sparse(&Cpu, residual.len())?;
    assert_eq!(on_gpu, on_cpu);
    assert_eq!(
        on_gpu.indices(),
        &[2991, 3988, 4985, 5982, 6979, 7976, 8973, 9970]
    );
    println!("top-{k} on {}: equal to the CPU backend's", gpu.name());
    Ok(())
}
