//! Built-in sparse allreduces by their registry names, four ranks as
//! threads: a lossless one (TopkA) gives every rank the exact sum; a lossy
//! one (SparDL with a budget of 4 entries) keeps what it cuts in the
//! ranks' `dropped`, so that nothing is lost.
//!
//! Run with `cargo run -p sparse-coll --example allreduce`.

use sparse_coll::{Defaults, Reduced, Registry, ThreadCluster, Transport};
use sparse_core::{Result, SparseVec};

/// Rank `r` holds 1 at `r` and 2 at 500; every rank calls `spec`.
fn run(p: usize, spec: &str) -> Result<Vec<Reduced<f32>>> {
    ThreadCluster::new(p)
        .run(|t| {
            let r = t.rank() as u32;
            let v = SparseVec::new(1000, vec![r, 500], vec![1.0f32, 2.0])?;
            let mut algo = Registry::<f32>::builtin().build(spec, Defaults::lossless())?;
            algo.allreduce(t, &v)
        })
        .into_iter()
        .collect()
}

fn main() -> Result<()> {
    let p = 4;
    for red in run(p, "topk_a")? {
        assert_eq!(red.result.indices(), &[0, 1, 2, 3, 500]);
        assert_eq!(red.result.values(), &[1.0, 1.0, 1.0, 1.0, 8.0]);
        assert_eq!(red.dropped.nnz(), 0);
        assert!(red.traffic.bytes_recv > 0);
    }

    // SparDL keeps at most 4 entries of the sum; result plus every rank's dropped
    // is the exact sum.
    let reds = run(p, "spardl:k=4")?;
    let mut total = reds[0].result.to_dense();
    for red in &reds {
        assert_eq!(red.result, reds[0].result, "every rank the same result");
        red.dropped.add_to_dense(&mut total);
    }
    assert!(reds[0].result.nnz() <= 4);
    let mut exact = vec![0.0f32; 1000];
    exact[..p].fill(1.0);
    exact[500] = 8.0;
    assert_eq!(total, exact);
    println!(
        "topk_a: the exact sum on {p} ranks; spardl:k=4 kept {:?}, the rest in dropped",
        reds[0].result.iter().collect::<Vec<_>>()
    );
    Ok(())
}
