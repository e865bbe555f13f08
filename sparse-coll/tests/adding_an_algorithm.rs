//! `docs/adding-an-algorithm.md`, followed from outside the crate: a
//! trivial algorithm (every rank's pairs allgathered and summed in rank
//! order) written as the guide says, in one file (this one) plus one
//! registry line, and nothing else. Registering it is what gets it
//! tested: the checks below name no algorithm, they take what the line
//! added to the registry ([`added`]: the specs the registry-driven suites
//! iterate, past the built-in ones) and run on it the suites that
//! `tests/suite.rs`, `tests/failure.rs` and the rest run on every built-in
//! entry: the collective suite, the bad-input suite, the facts it states,
//! a corrupt message on every rank, and the planner choosing among it.

use sparse_coll::dense::bruck_allgather;
use sparse_coll::testing::{
    bad_input_suite_for, cases, check_facts, collective_suite_for, corrupt_case, corrupt_sweep,
    real_cases,
};
use sparse_coll::{
    Catalog, Defaults, Entered, Params, Profile, Promises, Reduced, Registered, Registry,
    SparseAllreduce, ThreadCluster, Transport, wire,
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
    fn enter(&mut self, t: &mut dyn Transport, v: &SparseVec<E>) -> Result<Entered> {
        wire::enter(t, NAME, v, &[], Ok(()))
    }
    fn agreed_body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        _: Entered,
        out: &mut Reduced<E>,
    ) -> Result<Result<()>> {
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
        Ok(Ok(()))
    }
}

/// What it promises of a first call, which the collective suite checks.
impl<E: Element> Promises<E> for NaiveSum {
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

/// What the registry line added to the specs the registry-driven suites
/// run on `p` ranks ([`Registry::suite_specs`], as `testing::algorithms`
/// reads them for the built-in ones): the registry's, less the built-in
/// registry's.
fn added(registry: &Registry<f32>, p: usize) -> Vec<String> {
    let builtin = Registry::<f32>::builtin().suite_specs(p);
    let mut specs = registry.suite_specs(p);
    specs.retain(|s| !builtin.contains(s));
    specs
}

/// The registry line adds the algorithm, and only it, to what every
/// registry-driven suite runs (at every `P` the suites use), with the
/// facts its `Registered` impl states: the tests below need no list.
#[test]
fn the_registry_line_adds_it_to_the_suites() {
    let registry = registry();
    for p in 1..=17 {
        assert_eq!(added(&registry, p), [NAME], "P={p}");
    }
    let entry = registry.entries().iter().find(|e| e.name() == NAME);
    let facts = entry.expect("registered").facts();
    assert!(facts.lossless && facts.planned && !facts.stateful && !facts.budget);
    assert!(!facts.values && !facts.warm);
}

/// The collective suite, with sends that wait for their receive as MPI's
/// do: every input of the matrix, on 1 to 9 ranks.
#[test]
fn the_added_algorithm_passes_the_collective_suite() {
    let registry = registry();
    let mut runs = 0;
    for p in 1..=9usize {
        for spec in added(&registry, p) {
            for (r, res) in ThreadCluster::new(p)
                .synchronous(true)
                .run(|t| collective_suite_for(t, &registry, &spec))
                .into_iter()
                .enumerate()
            {
                let n = res.unwrap_or_else(|e| panic!("{spec} P={p} rank {r}: {e}"));
                assert_eq!(n, cases(p).len() + real_cases(p).len(), "P={p} rank {r}");
                runs += 1;
            }
        }
    }
    assert_eq!(runs, (1..=9).sum::<usize>());
}

/// Invalid inputs on one rank: an error on every rank, then a good call.
#[test]
fn the_added_algorithm_passes_the_bad_input_suite() {
    let registry = registry();
    for p in 1..=5usize {
        for spec in added(&registry, p) {
            for res in ThreadCluster::new(p).run(|t| bad_input_suite_for(t, &registry, &spec)) {
                assert!(res.unwrap() > 0, "{spec} P={p}");
            }
        }
    }
}

/// The facts every entry of the registry states, the added one's among
/// them, are true (`testing::check_facts`, which `tests/suite.rs` runs on
/// the built-in registry): the tests that pick entries by their facts
/// (lossless, budgeted, stateful, warm) pick it rightly.
#[test]
fn the_added_algorithm_states_true_facts() {
    let registry = registry();
    assert_eq!(
        check_facts(&registry),
        Registry::<f32>::builtin().entries().len() + 1
    );
}

/// Each message of the first and of the last rank corrupted in turn, on
/// the transport and on a `Group` of every rank (in reverse order): every
/// rank fails by its next call, none waits in vain
/// (`testing::corrupt_sweep`, as `tests/failure.rs` runs it on every
/// built-in algorithm).
#[test]
fn a_corrupt_message_in_the_added_algorithm_fails_every_rank() {
    let registry = registry();
    let mut corrupted = 0;
    for p in 2..=4usize {
        for spec in added(&registry, p) {
            corrupted += corrupt_sweep(&spec, p, |t, victim, nth| {
                corrupt_case(t, &registry, &spec, victim, nth)
            });
            corrupted += corrupt_sweep(&format!("group {spec}"), p, |t, victim, nth| {
                let mut group = sparse_coll::Group::new(t, (0..p).rev().collect())?;
                corrupt_case(&mut group, &registry, &spec, victim, nth)
            });
        }
    }
    assert!(corrupted > 10, "{corrupted} corrupted messages");
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
