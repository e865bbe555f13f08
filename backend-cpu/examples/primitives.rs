//! The reference backend's primitives on a small buffer: upload, a dense
//! update, a reduction, download. Every backend (the kernels of
//! `backend-cuda` too) gives the same results.
//!
//! Run with `cargo run -p backend-cpu --example primitives`.

use backend_cpu::Cpu;
use sparse_core::{BufferOps, DenseOps, ReduceOps, Result};

fn main() -> Result<()> {
    let x = Cpu.upload(&[3.0f32, -4.0, 0.0, 1.0])?;
    let mut y = Cpu.upload(&[1.0f32, 1.0, 1.0, 1.0])?;
    // y = 2 x + y
    Cpu.axpy(2.0, &x, &mut y)?;
    assert_eq!(Cpu.download(&y)?, vec![7.0, -7.0, 1.0, 3.0]);
    // The squared L2 norm (clipping's), summed in f64.
    assert_eq!(Cpu.sum_squares(&x)?, 26.0);
    println!("axpy and sum_squares on the CPU backend: as computed by hand");
    Ok(())
}
