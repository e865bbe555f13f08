//! The collective suite under MPI: run it with `mpiexec -n P mpi-suite
//! MODE`. Rank 0 prints `world size P`; every rank prints one `OK` line,
//! then `rank R waited W: N pauses` (its wait, `SPARSE_MPI_WAIT`, and the
//! pauses its waits took, `MpiWait::pauses`).
//!
//! Modes:
//! - `suite`: `sparse_coll::testing::collective_suite` on `MPI_COMM_WORLD`;
//! - `disagree`: rank 1 passes another dimension; every rank must get
//!   `Error::Disagreement`;
//! - `panic`: the last rank panics in the middle of a SparDL allreduce; the
//!   panic hook must end the job (non-zero exit) at once;
//! - `p2p`: zero-length messages, exchanges whose target and source differ,
//!   messages split into pieces (every algorithm of the registry over them
//!   equals itself over whole messages), and the traffic counters;
//! - `nonblocking`: SparDL started on a progress thread while the rank
//!   computes equals the blocking call, bit for bit;
//! - `corrupt`: every algorithm (and the registry's first lossless and
//!   first budgeted one on a `Group` of every rank), with
//!   each message of the first and of the last rank corrupted in turn
//!   (`testing::corrupt_case`, on a fresh transport each time): every rank
//!   fails by its next call, none hangs
//!   (`testing::check_corrupt` on every rank's report, gathered on a
//!   transport of their own);
//! - `overflow`: inputs whose sums overflow part way (SparDL and recursive
//!   doubling with lossy value codecs, DSAR with QSGD, the hierarchical
//!   allreduce with failing parts): every rank fails or every rank
//!   returns, every peer's error names the lowest rank whose own work
//!   failed, and the next calls on the same transport succeed, the
//!   lossless one exactly;
//! - `warm`: once warm, every algorithm of the registry that promises it
//!   (`Entry::warm`: all but the hierarchical one and the planner)
//!   allocates nothing that grows with the data (a counting global
//!   allocator; MPICH's own allocations are not Rust's and are not
//!   counted).

use mpi::environment::Universe;
use sparse_coll::testing::{
    CountingAlloc, algorithms, bad_input_suite, check_corrupt, collective_suite, corrupt_case,
};
use sparse_coll::{
    Budget, Defaults, Intercept, Intercepting, JointCall, MpiTransport, Reduced, Registry, Spardl,
    SparseAllreduce, TopkA, Transport, allreduce_jointly,
};
use sparse_core::{Error, Result, SparseVec};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Panics at the `at`-th call of a transport (a send, receive or
/// exchange, in either form): the hook of an intercepting transport.
#[derive(Debug)]
struct PanicAt {
    calls: u64,
    at: u64,
}

impl Intercept for PanicAt {
    fn call(&mut self) -> Result<()> {
        self.calls += 1;
        assert!(self.calls != self.at, "injected panic at call {}", self.at);
        Ok(())
    }
}

fn main() {
    // Thread support for the non-blocking mode's progress thread.
    let (universe, level) =
        mpi::initialize_with_threading(mpi::Threading::Multiple).expect("MPI initializes once");
    assert!(
        level >= mpi::Threading::Serialized,
        "MPI provides only {level:?}"
    );
    MpiTransport::abort_on_panic();
    let wait = sparse_coll::MpiWait::from_env().expect("SPARSE_MPI_WAIT parses");
    let t = match MpiTransport::new(universe.world()).with_wait(wait) {
        Ok(t) => t,
        // Every rank fails here alike (the check is collective): each
        // prints its error and ends the job with MPI finalized, so that
        // no abort cuts the message off before the launcher forwards it.
        Err(e) => {
            eprintln!("every rank spins or every rank pauses: {e:?}");
            drop(universe);
            std::process::exit(3);
        }
    };
    if t.rank() == 0 {
        println!("world size {}", t.size());
    }
    let (rank, wait) = (t.rank(), t.wait());
    let mode = std::env::args().nth(1).unwrap_or_else(|| "suite".into());
    match mode.as_str() {
        "suite" => suite(t),
        "disagree" => disagree(t),
        "panic" => panic_mode(t),
        "p2p" => p2p(t, &universe),
        "nonblocking" => nonblocking(t),
        "warm" => warm(t),
        "corrupt" => corrupt(t, &universe),
        "overflow" => overflow(t),
        other => panic!("unknown mode {other:?}"),
    }
    println!(
        "rank {rank} waited {wait}: {} pauses",
        sparse_coll::MpiWait::pauses()
    );
}

/// The collective suite and the bad-input suite on MPI, and the
/// transport's own dense allreduce against the ring.
fn suite(mut t: MpiTransport) {
    let (r, p) = (t.rank(), t.size());
    let runs = collective_suite(&mut t).expect("the suite runs");
    // Invalid inputs on one rank: an error on every rank, no hang.
    let bad = bad_input_suite(&mut t).expect("the bad-input suite runs");
    // The transport's own dense allreduce (MPI_Allreduce): integer
    // sums are exact, so it equals the ring bit for bit.
    for n in [0usize, 1, 7, 1000, 100_003] {
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 7 + r * 13) % 97) as f32 - 48.0)
            .collect();
        let mpi = t.allreduce_sum_f32(&x).expect("MPI_Allreduce");
        let ring = sparse_coll::dense::ring_allreduce(&mut t, &x).expect("ring");
        assert_eq!(
            mpi, ring,
            "rank {r}: MPI_Allreduce and the ring differ at n = {n}"
        );
    }
    let n = if r == 0 && p > 1 { 5 } else { 6 };
    match t.allreduce_sum_f32(&vec![1.0; n]) {
        Err(Error::Disagreement { .. }) if p > 1 => {}
        Ok(_) if p == 1 => {}
        other => panic!("rank {r}: lengths that differ gave {other:?}"),
    }
    let joint = joint_calls(&mut t);
    println!("OK rank {r} of {p}: {runs} runs checked, {bad} bad-input calls, {joint} joint calls");
}

/// `allreduce_jointly` under MPI: every algorithm of the suite, three
/// calls a step (the specs in turn), equal bit for bit to the same calls
/// one by one, and one entry round for them all. Returns the calls.
fn joint_calls(t: &mut MpiTransport) -> usize {
    let (r, p) = (t.rank(), t.size());
    let specs = algorithms(p);
    let registry = Registry::<f32>::builtin();
    let dims = [1000usize, 37, 4096];
    let input = |c: usize| {
        let (idx, val): (Vec<u32>, Vec<f32>) = (0..dims[c])
            .filter(|i| (i * 31 + r * 17 + c * 5) % 11 < 3)
            .map(|i| (i as u32, ((i + r) % 9) as f32 - 4.0))
            .unzip();
        SparseVec::new(dims[c], idx, val).expect("an input")
    };
    let ins: Vec<SparseVec<f32>> = (0..3).map(input).collect();
    let build = |s: &str| {
        registry
            .build(s, Defaults::density(0.1).expect("a density"))
            .expect("a suite spec")
    };
    for i in (0..specs.len()).step_by(3) {
        let three: Vec<&str> = (i..i + 3)
            .map(|c| specs[c % specs.len()].as_str())
            .collect();
        let mut alone = Vec::new();
        let before = t.traffic().rounds;
        for (s, v) in three.iter().zip(&ins) {
            alone.push(build(s).allreduce(t, v).expect("a call"));
        }
        let rounds_alone = t.traffic().rounds - before;
        let mut algs: Vec<_> = three.iter().map(|s| build(s)).collect();
        let mut outs: Vec<Reduced<f32>> = (0..3).map(|_| Reduced::default()).collect();
        let mut calls = JointCall::zip(&mut algs, &ins, &mut outs);
        let before = t.traffic().rounds;
        allreduce_jointly(t, &mut calls).expect("joint calls");
        let rounds_joint = t.traffic().rounds - before;
        let entries: u64 = alone.iter().map(|o| o.entry.rounds).sum();
        let one = outs[0].entry.rounds;
        assert_eq!(
            rounds_joint,
            rounds_alone - entries + one,
            "rank {r}: {three:?}: rounds"
        );
        for (a, j) in alone.iter().zip(&outs) {
            assert_eq!(
                (&a.result, &a.dropped),
                (&j.result, &j.dropped),
                "rank {r}: {three:?}"
            );
        }
    }
    3 * specs.len().div_ceil(3)
}

/// Calls whose sums overflow part way: each fails on every rank or returns
/// on every rank (the outcomes gathered after the next calls), and the
/// next calls on the same transport succeed, the lossless one exactly.
fn overflow(mut t: MpiTransport) {
    const DIM: usize = 40;
    let (r, p) = (t.rank(), t.size());
    let input = |hot: bool| {
        let mut pairs = vec![(20 + r as u32, 1.0f32)];
        if hot {
            pairs.push((7, 2e38));
        }
        pairs.sort_by_key(|e| e.0);
        let (i, x) = pairs.into_iter().unzip();
        SparseVec::new(DIM, i, x).expect("an input")
    };
    let sum = {
        let (i, x) = (0..p).map(|q| (20 + q as u32, 1.0f32)).unzip();
        SparseVec::new(DIM, i, x).expect("the sum")
    };
    let registry = Registry::<f32>::builtin();
    let specs = [
        "spardl:values=bf16",
        "spardl:values=ssmean",
        "ssar_recursive_double:values=bf16",
        "ssar_recursive_double:values=ssmean",
        "dsar_qsgd",
        "hierarchical:node=2",
        "hierarchical:node=2,intra=dsar_qsgd",
        "hierarchical:node=2,inter=auto",
    ];
    let hots: Vec<Vec<usize>> = vec![(0..p).collect(), vec![0, p.min(2) - 1], vec![p - 1]];
    let (mut calls, mut failed) = (0, 0);
    for spec in specs {
        for h in &hots {
            let mut algo = registry
                .build(spec, Defaults::k(8).expect("k"))
                .expect("an algorithm");
            let first = algo.allreduce(&mut t, &input(h.contains(&r)));
            algo.reset();
            algo.allreduce(&mut t, &input(false))
                .unwrap_or_else(|e| panic!("rank {r}: {spec} hot {h:?}: the next call: {e}"));
            let mut exact = registry
                .build("dsar_split_allgather", Defaults::lossless())
                .expect("dsar");
            let red = exact
                .allreduce(&mut t, &input(false))
                .unwrap_or_else(|e| panic!("rank {r}: {spec} hot {h:?}: DSAR after: {e}"));
            assert_eq!(red.result, sum, "rank {r}: {spec} hot {h:?}");
            // Each rank's outcome: 0 returned, 1 its own error, 2 a peer's
            // error, and the rank a peer's error names.
            let (kind, named) = match &first {
                Ok(_) => (0u8, 0u32),
                Err(Error::PeerError { rank, .. }) => (2, *rank as u32),
                Err(_) => (1, r as u32),
            };
            let mut mine = vec![kind];
            mine.extend_from_slice(&named.to_le_bytes());
            let all =
                sparse_coll::dense::bruck_allgather(&mut t, &mine).expect("the outcomes gathered");
            let ctx = format!("rank {r}: {spec} hot {h:?}: outcomes {all:?} (rank {r}: {first:?})");
            assert!(all.iter().all(|b| (b[0] == 0) == (all[0][0] == 0)), "{ctx}");
            // Every peer's error names the lowest rank whose own failed.
            if let Some(q) = all.iter().position(|b| b[0] == 1) {
                assert!(
                    all.iter()
                        .filter(|b| b[0] == 2)
                        .all(|b| b[1..] == all[q][1..]),
                    "{ctx}"
                );
            }
            calls += 1;
            failed += usize::from(first.is_err());
        }
    }
    println!("OK rank {r} of {p}: {calls} overflowing calls, {failed} failed on every rank");
}

/// Ranks that pass different dimensions all get a disagreement.
fn disagree(mut t: MpiTransport) {
    let (r, p) = (t.rank(), t.size());
    let dim = if r == 1 { 99 } else { 100 };
    let res = TopkA::default().allreduce(&mut t, &SparseVec::<f32>::zeros(dim).expect("dim"));
    match res {
        Err(Error::Disagreement {
            what: "dimension", ..
        }) => {
            println!("OK rank {r} of {p}: disagreement reported")
        }
        other => panic!("rank {r}: expected a disagreement, got {other:?}"),
    }
}

/// The last rank panics inside a collective (at its first call after the
/// entry round, inside Spar-Reduce-Scatter).
fn panic_mode(mut t: MpiTransport) {
    let (r, p) = (t.rank(), t.size());
    let v = SparseVec::from_dense(&vec![1.0f32; 1000]).expect("dense");
    // The agreement check takes ceil(lg P) calls: fail at the first
    // call after it, inside Spar-Reduce-Scatter.
    let lg = u64::from(usize::BITS - (p - 1).leading_zeros());
    let at = if r == p - 1 { lg + 1 } else { u64::MAX };
    let mut f = Intercepting::wrap(&mut t, PanicAt { calls: 0, at });
    let res = Spardl::new(Budget::k(100).expect("k")).allreduce(&mut f, &v);
    println!(
        "rank {r} of {p} finished: {:?}",
        res.map(|x| x.result.nnz())
    );
}

/// Zero-length, shifted and split exchanges, and collectives over
/// messages split into pieces.
fn p2p(mut t: MpiTransport, universe: &Universe) {
    let (r, p) = (t.rank(), t.size());
    let before = t.traffic();
    let empty = t
        .exchange((r + 1) % p, &[], (r + p - 1) % p)
        .expect("exchange");
    assert!(empty.is_empty());
    let got = t
        .exchange((r + 2) % p, &[r as u8; 3], (r + 2 * p - 2) % p)
        .expect("exchange");
    assert_eq!(got, vec![((r + 2 * p - 2) % p) as u8; 3]);
    let tr = t.traffic().since(&before);
    assert_eq!((tr.bytes_sent, tr.bytes_recv, tr.rounds), (3, 3, 2));
    assert_eq!((tr.msgs_sent, tr.msgs_recv), (2, 2));
    assert!(matches!(t.send(p, &[]), Err(Error::NoSuchRank { .. })));
    // A pause out of range on one rank fails every rank's `with_wait`.
    let long = sparse_coll::MpiWait::Sleep(std::time::Duration::from_secs(3600));
    let asked = if r == p - 1 { long } else { t.wait() };
    match MpiTransport::new(universe.world()).with_wait(asked) {
        Err(Error::InvalidParameter { .. }) => {}
        other => panic!("rank {r}: a pause of an hour on rank {}: {other:?}", p - 1),
    }
    // Messages split into pieces (of 1,000 bytes here, as messages
    // of 1 GiB or more are): lengths around multiples of a piece,
    // counted as one message each.
    let mut pieces = MpiTransport::new(universe.world())
        .with_wait(t.wait())
        .expect("the waits agree")
        .with_max_message(1000)
        .expect("a piece length");
    let before = pieces.traffic();
    let lens = [0usize, 1, 999, 1000, 1001, 2000, 4567];
    let fill = |q: usize, len: usize| -> Vec<u8> {
        (0..len).map(|i| (i * 31 + q * 7 + len) as u8).collect()
    };
    for len in lens {
        let (to, from) = ((r + 1) % p, (r + p - 1) % p);
        let got = pieces.exchange(to, &fill(r, len), from).expect("exchange");
        assert_eq!(got, fill(from, len), "rank {r}: {len} bytes in pieces");
    }
    let tr = pieces.traffic().since(&before);
    let total: usize = lens.iter().sum();
    assert_eq!((tr.bytes_sent, tr.bytes_recv), (total as u64, total as u64));
    assert_eq!((tr.msgs_sent, tr.msgs_recv), (7, 7));
    // Every algorithm of the registry, and the dense allreduce (in slices
    // of 250 elements), over pieces equal themselves over whole messages,
    // bit for bit and byte for byte.
    let v = SparseVec::new(
        50_000,
        (0..3000).map(|i| i * 16 + r as u32).collect(),
        (0..3000).map(|i| (i % 17) as f32 - 8.0).collect(),
    )
    .expect("input");
    let registry = Registry::<f32>::builtin();
    let defaults = Defaults::k(3000).expect("a budget");
    for spec in algorithms(p) {
        let call = |t: &mut MpiTransport| {
            let mut algo = registry.build(&spec, defaults).expect("built");
            algo.allreduce(t, &v)
                .unwrap_or_else(|e| panic!("rank {r}: {spec}: {e}"))
        };
        let (whole, split) = (call(&mut t), call(&mut pieces));
        assert_eq!(whole.result, split.result, "rank {r}: {spec}");
        assert_eq!(whole.dropped, split.dropped, "rank {r}: {spec}");
        assert_eq!(whole.traffic, split.traffic, "rank {r}: {spec}");
    }
    let x: Vec<f32> = (0..1001).map(|i| ((i * 7 + r * 13) % 97) as f32).collect();
    assert_eq!(
        pieces.allreduce_sum_f32(&x).expect("sliced MPI_Allreduce"),
        t.allreduce_sum_f32(&x).expect("MPI_Allreduce"),
        "rank {r}"
    );
    println!("OK rank {r} of {p}: zero-length, shifted and split exchanges");
}

/// A collective started on the progress thread equals the blocking one.
fn nonblocking(mut t: MpiTransport) {
    let (r, p) = (t.rank(), t.size());
    let v = SparseVec::new(
        5000,
        vec![r as u32, 100 + r as u32, 4000],
        vec![1.0f32, 2.0, 3.0],
    )
    .expect("input");
    let blocking = Spardl::new(Budget::k(40).expect("k"))
        .allreduce(&mut t, &v)
        .expect("blocking");
    let w = v.clone();
    let pending =
        sparse_coll::nonblocking::start(t, move |t| Spardl::new(Budget::k(40)?).allreduce(t, &w));
    let busy: u64 = (0..1_000_000u64).map(|x| x ^ (x >> 3)).sum();
    let (_t, started) = pending.wait();
    let started = started.expect("non-blocking");
    assert_eq!(started.result, blocking.result, "rank {r}");
    assert_eq!(started.dropped, blocking.dropped, "rank {r}");
    println!("OK rank {r} of {p}: non-blocking equals blocking ({busy})");
}

/// Once warm, every algorithm of the registry that promises it
/// (`Entry::warm`) allocates nothing that grows with the data.
fn warm(mut t: MpiTransport) {
    let (r, p) = (t.rank(), t.size());
    // 12,000 pairs per rank spread over the dimension (every
    // partition gets some), half of them shared by every rank.
    const DIM: u32 = 1 << 20;
    const NNZ: u32 = 12_000;
    const SMALL: u64 = 8 << 10;
    // Calls before the one measured: B-SAG's `h` moves from call to call
    // (Alg. 2), and the pooled buffers its column's allgather receives
    // into grow with it for the first few calls.
    const WARMUP: usize = 6;
    let mut idx: Vec<u32> = (0..NNZ / 2)
        .map(|i| i * (DIM / NNZ))
        .chain((0..NNZ / 2).map(|i| 7 + i * (2 * DIM / NNZ - 3) + r as u32 * 3))
        .filter(|&i| i < DIM)
        .collect();
    idx.sort_unstable();
    idx.dedup();
    let val = idx.iter().map(|&i| (i % 13) as f32 - 6.5).collect();
    let v = SparseVec::new(DIM as usize, idx, val).expect("input");
    let registry = Registry::<f32>::builtin();
    // A budget below the inputs' entries, so that the thresholds Ok-Topk
    // estimates are reused (with more it re-estimates at every call).
    let defaults = Defaults::k(NNZ as usize / 3).expect("a budget");
    let promised = registry.entries().iter().filter(|e| e.warm());
    for spec in promised.map(|e| e.name()) {
        let mut algo = registry.build(spec, defaults).expect("built");
        let mut out = sparse_coll::Reduced::default();
        for _ in 0..WARMUP {
            algo.allreduce_into(&mut t, &v, &mut out).expect("warm-up");
        }
        let before = CountingAlloc::asked();
        algo.allreduce_into(&mut t, &v, &mut out)
            .expect("warm call");
        let bytes = CountingAlloc::asked() - before;
        assert!(
            bytes <= SMALL,
            "rank {r} of {p}: a warm {spec} call allocated {bytes} bytes (at most {SMALL})"
        );
    }
    println!("OK rank {r} of {p}: warm calls allocate at most {SMALL} bytes");
}

/// A corrupted message fails every rank without a hang, for every
/// algorithm, on the transport and on a group.
fn corrupt(mut t: MpiTransport, universe: &Universe) {
    let (r, p) = (t.rank(), t.size());
    let registry = Registry::<f32>::builtin();
    let mut cases = 0;
    // Every algorithm on the transport, and on a `Group` of every rank in
    // reverse order (which must abandon the transport under it) the
    // registry's first lossless one and its first with a budget.
    let cases_of = algorithms(p).into_iter().map(|s| (s, false));
    let entries = registry.entries();
    let grouped = [
        entries.iter().find(|e| e.lossless()),
        entries.iter().find(|e| e.takes_budget()),
    ]
    .map(|e| (e.expect("such an entry").name().to_string(), true));
    for (spec, group) in cases_of.chain(grouped) {
        for victim in [0, p - 1] {
            for nth in 1.. {
                // A fresh transport per case: a failed call
                // abandons its transport on every rank.
                let mut fresh = MpiTransport::new(universe.world())
                    .with_wait(t.wait())
                    .expect("the waits agree");
                let mine = if group {
                    let mut g = sparse_coll::Group::new(&mut fresh, (0..p).rev().collect())
                        .expect("every rank is a member");
                    corrupt_case(&mut g, &registry, &spec, victim, nth)
                } else {
                    corrupt_case(&mut fresh, &registry, &spec, victim, nth)
                }
                .expect("the case builds");
                drop(fresh);
                let all =
                    sparse_coll::dense::bruck_allgather(&mut t, &mine).expect("the reports gather");
                let outcomes: Vec<[u8; 3]> = all
                    .iter()
                    .map(|b| b[..].try_into().expect("3-byte reports"))
                    .collect();
                let fired = check_corrupt(&outcomes).unwrap_or_else(|e| {
                    panic!("{spec} (group: {group}) P={p}, message {nth} of rank {victim}: {e}")
                });
                if !fired {
                    break;
                }
                cases += 1;
            }
        }
    }
    println!("OK rank {r} of {p}: {cases} corrupted messages failed every rank");
}
