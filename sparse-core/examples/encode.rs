//! A sparse gradient through an encoding and back, a corrupt message
//! rejected, and SparCML's stream switching to dense once a sum fills in.
//!
//! Run with `cargo run -p sparse-core --example encode`.

use sparse_core::encoding::{Coo, Encoding, Raw};
use sparse_core::{Error, Result, SparseVec, Stream};

fn main() -> Result<()> {
    // Three entries of a 1000-dimensional gradient, as COO pairs: an
    // 8-byte header, the count, then 4 bytes per index and per value.
    let g = SparseVec::new(1000, vec![3, 70, 901], vec![0.5f32, -1.25, 2.0])?;
    let bytes = Coo(Raw).encode(&g)?;
    assert_eq!(bytes.len(), 8 + 4 + 3 * 4 + 3 * 4);
    let back: SparseVec<f32> = Coo(Raw).decode(&bytes)?;
    assert_eq!(back, g);

    // A decoder treats its input as hostile: a cut message is an error.
    let cut: Result<SparseVec<f32>> = Coo(Raw).decode(&bytes[..bytes.len() - 1]);
    assert!(matches!(cut, Err(Error::Corrupt { .. })), "{cut:?}");

    // f32 pairs take 8 bytes, a dense f32 4: a stream of 8 elements stays
    // sparse up to 4 entries (delta) and turns dense past it.
    assert_eq!(Stream::<f32>::delta(8), 4);
    let a = Stream::from_sparse(SparseVec::new(8, vec![0, 1, 2], vec![1.0f32, 2.0, 3.0])?);
    let b = Stream::from_sparse(SparseVec::new(8, vec![5, 6, 7], vec![1.0f32, 1.0, 1.0])?);
    assert!(!a.is_dense() && !b.is_dense());
    let sum = a.sum(&b)?;
    assert!(sum.is_dense());
    assert_eq!(sum.to_dense(), vec![1.0, 2.0, 3.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    assert_eq!(sum.payload_bytes(), 8 * 4);
    println!(
        "COO: {} bytes for 3 entries; a sum of 6 entries in 8 went dense",
        bytes.len()
    );
    Ok(())
}
