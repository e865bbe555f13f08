//! One algorithm in a loop on thread ranks, for a profiler: no dense
//! baseline, no oracle, only the calls (after one warm-up call), and the
//! median time of a call on rank 0.
//!
//! ```text
//! cargo build --release -p sparse-coll --example hot_loop
//! perf record -g target/release/examples/hot_loop spardl 2 16777216 0.001 400
//! ```
//!
//! Arguments: algorithm spec, ranks, n, density, calls (defaults:
//! `topk_a 2 16777216 0.001 200`). The inputs are `sparse-bench
//! allreduce`'s (overlap 0.5, normal values, seed 1).

use sparse_coll::{Defaults, Reduced, Registry, ThreadCluster};
use sparse_core::generate::{GradientSpec, ValueDist};
use sparse_core::{Error, Result};
use std::time::Instant;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let spec = arg(0, "topk_a");
    let ranks: usize = arg(1, "2")
        .parse()
        .map_err(|e| Error::invalid("ranks", e))?;
    let n: usize = arg(2, "16777216")
        .parse()
        .map_err(|e| Error::invalid("n", e))?;
    let density: f64 = arg(3, "0.001")
        .parse()
        .map_err(|e| Error::invalid("density", e))?;
    let calls: usize = arg(4, "200")
        .parse()
        .map_err(|e| Error::invalid("calls", e))?;
    let pool = GradientSpec {
        overlap: 0.5,
        values: ValueDist::Normal { std: 1.0 },
        ..GradientSpec::new(n, density, 1)
    }
    .pool(ranks)?;
    let registry = Registry::<f32>::builtin();
    let defaults = Defaults::density(density)?;
    let times = ThreadCluster::new(ranks).run(|t| {
        let v = pool.rank::<f32>(sparse_coll::Transport::rank(t))?;
        let mut algo = registry.build(&spec, defaults)?;
        let mut out = Reduced::default();
        algo.allreduce_into(t, &v, &mut out)?;
        let mut ms = Vec::with_capacity(calls);
        for _ in 0..calls {
            let t0 = Instant::now();
            algo.allreduce_into(t, &v, &mut out)?;
            ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        ms.sort_by(f64::total_cmp);
        Ok(ms)
    });
    let mut first = None;
    for r in times {
        let ms = r?;
        first.get_or_insert(ms);
    }
    let ms = first.unwrap_or_default();
    let med = ms.get(ms.len() / 2).copied().unwrap_or(f64::NAN);
    println!(
        "{spec}: {ranks} thread ranks, n = {n}, density {density}: median {med:.3} ms of {calls} calls"
    );
    Ok(())
}
