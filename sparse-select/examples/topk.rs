//! The exact top-k by magnitude of a residual on the CPU backend, as the
//! pairs a collective sends.
//!
//! Run with `cargo run -p sparse-select --example topk`.

use backend_cpu::Cpu;
use sparse_core::{BufferOps, Result};
use sparse_select::{RadixTopK, Selector};

fn main() -> Result<()> {
    let residual = [0.1f32, -5.0, 0.3, 2.0, -0.2, 4.0];
    let x = Cpu.upload(&residual)?;
    let top = RadixTopK::magnitude().select(&Cpu, &x, 3)?;
    let pairs = top.to_sparse(&Cpu, residual.len())?;
    // The three largest magnitudes, indices increasing.
    assert_eq!(pairs.indices(), &[1, 3, 5]);
    assert_eq!(pairs.values(), &[-5.0, 2.0, 4.0]);
    println!(
        "top-3 of {residual:?}: {:?}",
        pairs.iter().collect::<Vec<_>>()
    );
    Ok(())
}
