//! A step of SparCML's top-k SGD on two thread ranks: each rank sends the
//! top half of its residual (`lr` times its gradient), TopkA sums the
//! pairs, every rank applies the mean, and what was not sent stays in the
//! residual for the next step.
//!
//! Run with `cargo run -p residual-sgd --example train_steps`.

use backend_cpu::Cpu;
use residual_sgd::{Config, LayerSpec, Rule, Trainer};
use sparse_coll::{Defaults, Registry, ThreadCluster, Transport};
use sparse_core::Result;
use sparse_select::RadixTopK;

fn main() -> Result<()> {
    // One layer of 4 weights; lr 0.5, density 0.5 (2 entries sent).
    let grads = [[4.0f32, 1.0, 0.0, -2.0], [1.0, 3.0, 0.5, -0.25]];
    let per_rank = ThreadCluster::new(2).run(|t| {
        // SparCML's top-k SGD compresses every layer, however small.
        let cfg = Config::new(0.5, 0.5, Rule::TopK)?;
        let mut trainer = Trainer::new(
            Cpu,
            cfg,
            LayerSpec::matrices(&[4]),
            &[vec![1.0; 4]],
            RadixTopK::magnitude(),
            |_| Registry::builtin().build("topk_a", Defaults::lossless()),
        )?;
        let g = grads[t.rank()].to_vec();
        let report = trainer.step(t, &[g])?;
        assert_eq!(report.sent[0].nnz(), 2);
        assert!(report.layers[0].compressed);
        assert_eq!(report.layers[0].density(), 0.5);
        trainer.weights()
    });
    // Rank 0 sends 0.5 * (4 at 0, -2 at 3), rank 1 0.5 * (1 at 0, 3 at 1);
    // every rank applies minus their sum over 2.
    for w in per_rank {
        assert_eq!(w?, vec![vec![-0.25, 0.25, 1.0, 1.5]]);
    }
    println!("one top-k SGD step on 2 ranks: the weights computed by hand on both");
    Ok(())
}
