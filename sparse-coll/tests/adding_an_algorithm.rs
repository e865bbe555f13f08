//! `docs/adding-an-algorithm.md`, followed: a trivial algorithm (every
//! rank's pairs allgathered and summed in rank order) written as the guide
//! says, in one file (this one) plus one registry line, then the checks the
//! guide names: the collective suite, the bad-input suite, and the planner
//! choosing among it.

use sparse_coll::dense::bruck_allgather;
use sparse_coll::testing::{bad_input_suite_for, cases, collective_suite_for, real_cases};
use sparse_coll::{
    Catalog, Defaults, Entered, Params, Profile, Reduced, Registered, Registry, SparseAllreduce,
    ThreadCluster, Transport, wire,
};
use sparse_core::cost::{Cost, ceil_log2};
use sparse_core::{Element, Result, SparseVec};

// --- The algorithm's file (`sparse-coll/src/algorithms/naive_sum.rs` for a
// built-in one). ---

/// The registry name, from which the entry id derives.
const NAME: &str = "naive_sum";

/// Every rank's pairs, as a block, allgathered with Bruck's algorithm and
/// summed in rank order on every rank: lossless, bitwise identical.
#[derive(Debug, Clone, Copy, Default)]
struct NaiveSum;

impl<E: Element> SparseAllreduce<E> for NaiveSum {
    fn name(&self) -> String {
        NAME.into()
    }
    fn lossless(&self) -> bool {
        true
    }
    /// Every other rank's block (a frame length, its count, its pairs) in
    /// `ceil(lg P)` rounds.
    fn cost(&self, prof: &Profile) -> Cost {
        let bytes = prof.others() * (8.0 + prof.pair_bytes() * prof.k_avg() as f64);
        Cost::new(f64::from(ceil_log2(prof.p)), bytes / 4.0)
    }
    fn expected_rounds(&self, p: usize, _r: usize) -> Option<u64> {
        Some(ceil_log2(p).into())
    }
    fn expected_bytes(&self, ins: &[SparseVec<E>], r: usize) -> Option<u64> {
        let others = (0..ins.len()).filter(|&q| q != r);
        Some(
            others
                .map(|q| (8 + (4 + E::BYTES) * ins[q].nnz()) as u64)
                .sum(),
        )
    }
    fn enter(&mut self, t: &mut dyn Transport, v: &SparseVec<E>) -> Result<Entered> {
        wire::enter(t, NAME, v, &[], Ok(()))
    }
    fn body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        _: Entered,
        out: &mut Reduced<E>,
    ) -> Result<()> {
        let mut msg = Vec::new();
        wire::put_block(&mut msg, v);
        let mut result = SparseVec::zeros(v.dim())?;
        for b in bruck_allgather(t, &msg)? {
            let mut rest: &[u8] = &b;
            let part = wire::take_block(&mut rest, v.dim(), 0, v.dim(), "naive_sum block")?;
            if !rest.is_empty() {
                return Err(sparse_core::Error::corrupt(
                    "naive_sum block",
                    "trailing bytes",
                ));
            }
            result = result.merge_sum(&part)?;
        }
        *out = Reduced {
            result,
            dropped: SparseVec::zeros(v.dim())?,
            ..Reduced::default()
        };
        Ok(())
    }
}

impl<E: Element> Registered<E> for NaiveSum {
    const NAME: &'static str = NAME;
    const LOSSLESS: bool = true;
    const PARAMS: &'static str = "";
    const HELP: &'static str = "every rank's pairs allgathered and summed; lossless";
    const PLANNED: bool = true;
    fn build(_: &mut Params, _: Defaults, _: &dyn Catalog<E>) -> Result<Self> {
        Ok(Self)
    }
}

// --- The registry line. ---

fn registry() -> Registry<f32> {
    let mut registry = Registry::builtin();
    registry.add::<NaiveSum>();
    registry
}

// --- The checks the guide names. ---

/// The collective suite, with sends that wait for their receive as MPI's
/// do: every input of the matrix, on 1 to 9 ranks.
#[test]
fn the_added_algorithm_passes_the_collective_suite() {
    let registry = registry();
    for p in 1..=9usize {
        for (r, res) in ThreadCluster::new(p)
            .synchronous(true)
            .run(|t| collective_suite_for(t, &registry, NAME))
            .into_iter()
            .enumerate()
        {
            let runs = res.unwrap_or_else(|e| panic!("P={p} rank {r}: {e}"));
            assert_eq!(runs, cases(p).len() + real_cases(p).len(), "P={p} rank {r}");
        }
    }
}

/// Invalid inputs on one rank: an error on every rank, then a good call.
#[test]
fn the_added_algorithm_passes_the_bad_input_suite() {
    let registry = registry();
    for p in 1..=5usize {
        for res in ThreadCluster::new(p).run(|t| bad_input_suite_for(t, &registry, NAME)) {
            assert!(res.unwrap() > 0, "P={p}");
        }
    }
}

/// The registry lists it, its suite specs and its place among the
/// planner's candidates; `auto` built from this registry plans over it
/// and runs it where it is the cheapest.
#[test]
fn the_planner_sees_the_added_algorithm() {
    let registry = registry();
    assert!(registry.names().contains(&NAME));
    assert!(registry.auto_candidates().contains(&NAME));
    let d = Defaults::lossless();
    // `auto` by name over this registry's default candidates: its spec
    // rebuilds the same planner here, and it predicts the cheapest of them,
    // the added one included.
    let auto = registry.build("auto", d).unwrap();
    assert_eq!(registry.build(&auto.spec(), d).unwrap().spec(), auto.spec());
    let prof = Profile {
        p: 4,
        n: 1000,
        value_bytes: 4,
        k_max: 10,
        k_sum: 40,
        union: 40,
    };
    let cheapest = registry
        .auto_candidates()
        .into_iter()
        .map(|name| {
            registry
                .build(name, d)
                .unwrap()
                .cost(&prof)
                .time(5e-6, 4e-10)
        })
        .fold(f64::INFINITY, f64::min);
    assert_eq!(auto.cost(&prof).time(5e-6, 4e-10), cheapest);
    // Only rounds count: the added one takes `ceil(lg P)`, 2 on 3 ranks;
    // SSAR_Split_allgather `(P - 1) + ceil(lg P)`, 4.
    let ran = ThreadCluster::new(3).run(|t| {
        let v = SparseVec::new(64, vec![t.rank() as u32], vec![1.0f32])?;
        let mut auto = registry.build(
            "auto:alpha=1,beta=0,candidates=naive_sum+ssar_split_allgather",
            d,
        )?;
        let red = auto.allreduce(t, &v)?;
        assert_eq!(red.result.nnz(), 3);
        Ok(auto.ran())
    });
    for r in ran {
        assert_eq!(r.unwrap().as_deref(), Some(NAME));
    }
}
