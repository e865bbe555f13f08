//! The `sparse-bench allreduce` measurement from the library: two
//! algorithms on three thread ranks, their rows checked against the
//! input's profile (the lossless one returns the exact union).
//!
//! Run with `cargo run -p bench --example allreduce_rows`.

use bench::allreduce::{AllreduceArgs, run_threads};
use sparse_core::Result;

fn main() -> Result<()> {
    let a = AllreduceArgs {
        ranks: 3,
        n: 10_000,
        density: 0.01,
        overlap: 0.5,
        algos: vec!["topk_a".into(), "spardl:k=50".into()],
        seed: 1,
        reps: 1,
        gap_ms: 0.0,
        settle_ms: 0.0,
    };
    let rep = run_threads(&a)?;
    assert_eq!(rep.rows.len(), 2);
    let (topk_a, spardl) = (&rep.rows[0], &rep.rows[1]);
    assert!(topk_a.lossless && topk_a.max_abs_err < 1e-4);
    assert_eq!(topk_a.result_nnz, rep.profile.union);
    assert!(!spardl.lossless && spardl.result_nnz <= 50);
    for r in &rep.rows {
        assert!(r.bytes_recv_max.is_some_and(|b| b > 0), "{}", r.algo);
        println!(
            "{}: received at most {:?} bytes, {:.3} ms",
            r.algo, r.bytes_recv_max, r.ms
        );
    }
    Ok(())
}
