//! RGC over SparDL and top-k SGD over TopkA under `mpiexec` (feature
//! `mpi`): every rank trains 30 steps on its own seeded gradients; after
//! every step the ranks compare a digest of their weights, and at the end
//! rank 0 checks the compressed layer's weights against the same run on the
//! thread transport in its own process (the small dense layer goes through
//! `MPI_Allreduce` under MPI and the ring on threads, which sum in different
//! orders; layers do not share state, so the compressed layer must still
//! match bit for bit). Prints `world size n` and one `OK rank r of n` per
//! rank.

use rand::{Rng as _, SeedableRng as _};
use residual_sgd::{Config, LayerSpec, Rule, Trainer};
use sparse_coll::dense::bruck_allgather;
use sparse_coll::{MpiTransport, Registry, ThreadCluster, Transport};
use sparse_core::Result;
use sparse_core::generate::Rng;
use sparse_select::RadixTopK;

const SIZES: [usize; 2] = [2000, 50];

/// FNV-1a over every weight's bits.
fn digest(w: &[Vec<f32>]) -> u64 {
    sparse_core::hash::fnv1a(w.iter().flatten().flat_map(|x| x.to_bits().to_le_bytes()))
}

/// Trains on `t`; after every step all ranks' digests must agree. Returns
/// the digests of the compressed layer (the first).
fn train(t: &mut dyn Transport, rule: Rule, spec: &str) -> Result<Vec<u64>> {
    let layers = LayerSpec::matrices(&SIZES);
    let w0: Vec<Vec<f32>> = SIZES.iter().map(|&n| vec![0.25; n]).collect();
    let cfg = Config::new(0.1, 0.02, rule)?.compress_threshold(1024);
    let mut tr = Trainer::from_registry(
        backend_cpu::Cpu,
        cfg,
        layers,
        &w0,
        RadixTopK::magnitude(),
        &Registry::builtin(),
        spec,
    )?;
    let mut rng = Rng::seed_from_u64(1000 + t.rank() as u64);
    let mut digests = Vec::new();
    for step in 0..30 {
        let g: Vec<Vec<f32>> = SIZES
            .iter()
            .map(|&n| {
                (0..n)
                    .map(|_| (rng.random_range(0..257) as f32 - 128.0) / 64.0)
                    .collect()
            })
            .collect();
        tr.step(t, &g)?;
        let d = digest(&tr.weights()?);
        let all = bruck_allgather(t, &d.to_le_bytes())?;
        assert!(
            all.iter().all(|b| b.as_slice() == d.to_le_bytes()),
            "rank {}: weights differ across ranks after step {step}",
            t.rank()
        );
        digests.push(digest(&tr.weights()?[..1]));
    }
    Ok(digests)
}

fn main() {
    let universe = mpi::initialize().expect("MPI initializes once");
    MpiTransport::abort_on_panic();
    let mut t = MpiTransport::new(universe.world())
        .with_wait(sparse_coll::MpiWait::from_env().expect("SPARSE_MPI_WAIT parses"))
        .expect("every rank spins or every rank pauses");
    let (r, p) = (t.rank(), t.size());
    if r == 0 {
        println!("world size {p}");
    }
    let rgc = Rule::Rgc {
        momentum: 0.9,
        nesterov: false,
        weight_decay: 1e-4,
        factor_masking: true,
    };
    for (rule, spec) in [(rgc, "spardl"), (Rule::TopK, "topk_a")] {
        let mpi = train(&mut t, rule, spec).expect("training runs");
        if r == 0 {
            let threads = ThreadCluster::new(p)
                .run(|t| train(t, rule, spec))
                .into_iter()
                .next()
                .expect("rank 0")
                .expect("training runs on threads");
            assert_eq!(mpi, threads, "{spec}: MPI and threads disagree");
        }
    }
    println!(
        "OK rank {r} of {p}: 30 steps of RGC over spardl and top-k SGD over topk_a, identical weights on every rank, the compressed layer's equal to the thread transport's"
    );
}
