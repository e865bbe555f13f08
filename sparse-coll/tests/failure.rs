//! A corrupt message reaches every rank as an error, never as a hang: for
//! every algorithm of the registry and every dense allreduce, on 2 to 5
//! thread ranks, each message that the first or the last rank sends in turn
//! is corrupted (`testing::Corrupting`, swept by `testing::corrupt_sweep`),
//! and `testing::check_corrupt` is the oracle: the corruption is caught, no
//! rank waits until its timeout, every rank fails by its next call, and a
//! lossless result that a rank still returned is the exact sum.
//! `mpi-suite corrupt` runs the same cases under `mpiexec -n 2..5`.

use sparse_coll::testing::{
    CALL_EXACT, CALL_FAILED, CALL_TIMEOUT, CALL_WRONG, CorruptOutcome, Corrupting, algorithms,
    corrupt_case, corrupt_sweep,
};
use sparse_coll::{Registry, Transport, dense};
use sparse_core::{Error, Result};

#[test]
fn a_corrupt_message_fails_every_rank_without_a_hang() {
    let registry = Registry::builtin();
    let mut cases = 0;
    for p in 2..=5usize {
        for spec in algorithms(p) {
            cases += corrupt_sweep(&spec, p, |t, victim, nth| {
                corrupt_case(t, &registry, &spec, victim, nth)
            });
        }
    }
    assert!(cases > 500, "{cases} corrupted messages");
}

/// The dense allreduces: the ring, recursive doubling, Rabenseifner, and
/// the transport's own (`Transport::allreduce_sum_f32`).
const DENSE: [&str; 4] = ["ring", "recursive_doubling", "rabenseifner", "transport"];

fn dense_call(t: &mut dyn Transport, which: &str, x: &[f32]) -> Result<Vec<f32>> {
    match which {
        "ring" => dense::ring_allreduce(t, x),
        "recursive_doubling" => dense::recursive_doubling_allreduce(t, x),
        "rabenseifner" => dense::rabenseifner_allreduce(t, x),
        _ => t.allreduce_sum_f32(x),
    }
}

/// [`corrupt_case`] for a dense allreduce of 1,001 integer-valued
/// elements per rank.
fn dense_case(t: &mut dyn Transport, which: &str, victim: usize, nth: u64) -> CorruptOutcome {
    let (p, r) = (t.size(), t.rank());
    let input =
        |q: usize| -> Vec<f32> { (0..1001).map(|i| ((i * 7 + q * 13) % 97) as f32).collect() };
    let oracle: Vec<f32> = (0..1001)
        .map(|i| (0..p).map(|q| input(q)[i]).sum())
        .collect();
    let x = input(r);
    let code = |res: Result<Vec<f32>>| match res {
        Ok(sum) if sum == oracle => CALL_EXACT,
        Ok(_) => CALL_WRONG,
        Err(Error::Timeout { .. }) => CALL_TIMEOUT,
        Err(_) => CALL_FAILED,
    };
    let mut corrupting = Corrupting::new(t, (r == victim).then_some(nth));
    let first = code(dense_call(&mut corrupting, which, &x));
    let fired = corrupting.fired();
    let second = code(dense_call(t, which, &x));
    [u8::from(fired), first, second]
}

#[test]
fn a_corrupt_message_in_a_dense_allreduce_fails_every_rank_without_a_hang() {
    let mut cases = 0;
    for p in 2..=5usize {
        for which in DENSE {
            cases += corrupt_sweep(which, p, |t, victim, nth| {
                Ok(dense_case(t, which, victim, nth))
            });
        }
    }
    assert!(cases > 50, "{cases} corrupted messages");
}

/// The same on a `Group` (all ranks, in reverse order), for every
/// algorithm of the registry: a collective that fails part way on the
/// group abandons the transport under it, so the peers still waiting fail
/// at once instead of timing out.
#[test]
fn a_corrupt_message_on_a_group_fails_every_rank_without_a_hang() {
    let registry = Registry::builtin();
    let mut cases = 0;
    for p in [3usize, 4] {
        for spec in algorithms(p) {
            cases += corrupt_sweep(&format!("group {spec}"), p, |t, victim, nth| {
                let mut group = sparse_coll::Group::new(t, (0..p).rev().collect())?;
                corrupt_case(&mut group, &registry, &spec, victim, nth)
            });
        }
    }
    assert!(cases > 50, "{cases} corrupted messages");
}
