//! Failures agreed inside a call's body (failure frames), through the
//! public API only: a hostile review's probe (2026-11-29), kept as a test
//! with its sweeps trimmed.
//!
//! Each test asserts what the failure contract (docs/failure-contract.md)
//! promises: an overflow part way through SparDL or recursive doubling
//! with a lossy codec, or a failing part of the hierarchical allreduce,
//! fails every rank or none; no rank waits until its timeout; the next
//! calls on the same transports work and are exact, and no message is
//! left unread; every rank that returns a `PeerError` names the same
//! lowest failing rank, which returned its own error.

use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use sparse_coll::testing::Corrupting;
use sparse_coll::{
    Catalog, Defaults, Hierarchical, JointCall, Reduced, Registry, SparseAllreduce, ThreadCluster,
    Transport, allreduce_jointly,
};
use sparse_core::{Error, Result, SparseVec};
use std::time::Duration;

const DIM: usize = 64;
const TIMEOUT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------
// Inputs and helpers
// ---------------------------------------------------------------------

/// Rank `r`'s input: `extra` (index, value) pairs and a small value of
/// its own at `DIM - 1 - r`.
fn input(r: usize, extra: &[(u32, f32)]) -> SparseVec<f32> {
    let mut pairs: Vec<(u32, f32)> = extra.to_vec();
    pairs.push(((DIM - 1 - r) as u32, 1.0));
    pairs.sort_by_key(|e| e.0);
    pairs.dedup_by_key(|e| e.0);
    let (i, x) = pairs.into_iter().unzip();
    SparseVec::new(DIM, i, x).unwrap()
}

/// An ordinary input of rank `r` (integers), and the exact sum over `p`.
fn small(r: usize) -> SparseVec<f32> {
    SparseVec::new(DIM, vec![3, 20 + r as u32], vec![1.0, 2.0]).unwrap()
}

fn small_sum(p: usize) -> SparseVec<f32> {
    (0..p).fold(SparseVec::zeros(DIM).unwrap(), |acc, r| {
        acc.merge_sum(&small(r)).unwrap()
    })
}

/// No message is left unread on any link: every rank sends a marker along
/// every link and must receive markers only.
fn nothing_unread(t: &mut dyn Transport) -> Result<()> {
    const MARK: &[u8] = b"probe: end of calls";
    let (p, r) = (t.size(), t.rank());
    for s in 0..p {
        let got = t.exchange((r + s) % p, MARK, (r + p - s) % p)?;
        if got != MARK {
            return Err(Error::invalid(
                "probe",
                format!(
                    "rank {r}: a message of {} bytes from rank {} left unread",
                    got.len(),
                    (r + p - s) % p
                ),
            ));
        }
    }
    Ok(())
}

/// After a first call: the same instance reset, an ordinary call with
/// it, an exact lossless call, and no message left unread.
fn then_ordinary(t: &mut dyn Transport, algo: &mut dyn SparseAllreduce<f32>) -> Result<()> {
    let (r, p) = (t.rank(), t.size());
    algo.reset();
    let red = algo.allreduce(t, &small(r))?;
    if algo.lossless() && red.result != small_sum(p) {
        return Err(Error::invalid("probe", "the next call's result is wrong"));
    }
    let mut exact =
        Registry::<f32>::builtin().build("dsar_split_allgather", Defaults::lossless())?;
    if exact.allreduce(t, &small(r))?.result != small_sum(p) {
        return Err(Error::invalid("probe", "a lossless call after it is wrong"));
    }
    nothing_unread(t)
}

type Build<'a> = dyn Fn() -> Result<Box<dyn SparseAllreduce<f32>>> + Sync + 'a;

/// Each rank's first call on `ins` (its result or error), or the error of
/// what followed it (the next calls, a timeout, a panic).
type Outcome = Result<Result<SparseVec<f32>>>;

fn run(build: &Build<'_>, ins: &[SparseVec<f32>]) -> Vec<Outcome> {
    ThreadCluster::new(ins.len()).timeout(TIMEOUT).run(|t| {
        let mut algo = build()?;
        let r = t.rank();
        let first = algo.allreduce(t, &ins[r]).map(|red| red.result);
        then_ordinary(t, algo.as_mut())?;
        Ok(first)
    })
}

fn brief(o: &Outcome) -> String {
    match o {
        Err(e) => format!("NEXT CALLS: {e}"),
        Ok(Ok(_)) => "Ok".into(),
        Ok(Err(Error::PeerError { rank, .. })) => format!("PeerError{{rank: {rank}}}"),
        Ok(Err(e)) => {
            let s = format!("{e:?}");
            s.chars().take(60).collect()
        }
    }
}

fn briefs(out: &[Outcome]) -> String {
    out.iter()
        .enumerate()
        .map(|(r, o)| format!("r{r}={}", brief(o)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The contract on one run: every rank's next calls work, every rank
/// returned or every rank failed, and (with `naming`) when they failed,
/// every `PeerError` names the lowest rank that failed with its own error
/// and no error is a transport's. Results returned are identical on every
/// rank. `None` where it holds.
fn judge(out: &[Outcome], naming: bool) -> Option<String> {
    if out.iter().any(std::result::Result::is_err) {
        return Some(format!("the next calls failed: {}", briefs(out)));
    }
    let firsts: Vec<&Result<SparseVec<f32>>> = out.iter().map(|o| o.as_ref().unwrap()).collect();
    let oks = firsts.iter().filter(|f| f.is_ok()).count();
    if oks == out.len() {
        // By bits: a NaN in a result (+inf and -inf met in a raw sum)
        // is the same result on every rank.
        let bits = |v: &SparseVec<f32>| -> (Vec<u32>, Vec<u32>) {
            (
                v.indices().to_vec(),
                v.values().iter().map(|x| x.to_bits()).collect(),
            )
        };
        let r0 = bits(firsts[0].as_ref().unwrap());
        if firsts.iter().any(|f| bits(f.as_ref().unwrap()) != r0) {
            return Some(format!("results differ: {}", briefs(out)));
        }
        return None;
    }
    if oks > 0 {
        return Some(format!("one-sided: {}", briefs(out)));
    }
    if !naming {
        return None;
    }
    let own: Vec<usize> = (0..out.len())
        .filter(|&r| !matches!(firsts[r], Err(Error::PeerError { .. })))
        .collect();
    let Some(&q) = own.first() else {
        return Some(format!("no rank's own error: {}", briefs(out)));
    };
    for (r, f) in firsts.iter().enumerate() {
        match f {
            Err(Error::PeerError { rank, .. }) if *rank != q => {
                return Some(format!(
                    "rank {r} names rank {rank}, the lowest own error is rank {q}: {}",
                    briefs(out)
                ));
            }
            Err(Error::Corrupt { .. } | Error::PeerFailed { .. } | Error::Timeout { .. }) => {
                return Some(format!("rank {r}: not an agreed failure: {}", briefs(out)));
            }
            _ => {}
        }
    }
    None
}

/// Hot sets of `p` ranks: every subset of two or more ranks up to four
/// ranks, else a seeded sample plus the standard ones.
fn hot_sets(p: usize) -> Vec<Vec<usize>> {
    if p <= 4 {
        return (1u32..1 << p)
            .filter(|m| m.count_ones() >= 2)
            .map(|m| (0..p).filter(|&r| m >> r & 1 == 1).collect())
            .collect();
    }
    let mut out = vec![
        (0..p).collect(),
        vec![0, 1],
        vec![p - 2, p - 1],
        vec![0, p - 1],
        vec![p / 2, p - 1],
        vec![1, p - 1],
        vec![p - 3, p - 2, p - 1],
    ];
    let mut rng = ChaCha8Rng::seed_from_u64(p as u64);
    for _ in 0..8 {
        let set: Vec<usize> = (0..p).filter(|_| rng.random_bool(0.35)).collect();
        if set.len() >= 2 {
            out.push(set);
        }
    }
    out
}

/// The overflowing inputs of the hot ranks `h` of `p`, by kind:
/// `pair` (2e38 at one index: any two overflow), `triple` (1.5e38: three
/// overflow, the overflow late), `mixed` (+3e38 and -3e38 alternating
/// over the hot ranks: cancellations and overflows of either sign),
/// `blocks` (2e38 at the start of the hot rank's own block and of the
/// next one, so different blocks overflow at different ranks and steps),
/// `two` (2e38 at two far indices), `every` (2e38 at the start of every
/// block of SparDL's layout), `odd` (at the start of the odd blocks, so
/// that a bag fails part way).
fn overflowing(kind: &str, p: usize, h: &[usize]) -> Vec<SparseVec<f32>> {
    (0..p)
        .map(|r| {
            let Some(pos) = h.iter().position(|&x| x == r) else {
                return input(r, &[]);
            };
            let extra: Vec<(u32, f32)> = match kind {
                "pair" => vec![(7, 2e38)],
                "triple" => vec![(7, 1.5e38)],
                "mixed" => vec![(7, if pos % 2 == 0 { 3e38 } else { -3e38 })],
                "blocks" => vec![
                    ((r * DIM / p) as u32, 2e38),
                    ((((r + 1) % p) * DIM / p) as u32, 2e38),
                ],
                "two" => vec![(2, 2e38), (40, 2e38)],
                "every" => (0..p).map(|b| ((b * DIM / p) as u32, 2e38)).collect(),
                "odd" => (0..p)
                    .filter(|b| b % 2 == 1)
                    .map(|b| ((b * DIM / p) as u32, 2e38))
                    .collect(),
                _ => unreachable!(),
            };
            input(r, &extra)
        })
        .collect()
}

/// Fails with every run in `bad`, if any.
fn no_bad_runs(bad: &[String]) {
    assert!(
        bad.is_empty(),
        "{} bad runs:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// Runs `build` on `p` ranks for every hot set of `sets` and kind of
/// overflow of `kinds`: returns how many runs failed, and adds each run
/// that breaks the contract ([`judge`], naming alike) to `bad` (up to
/// `cap` of them, then it stops).
fn sweep(
    build: &Build<'_>,
    p: usize,
    sets: Vec<Vec<usize>>,
    kinds: &[&str],
    cap: usize,
    tag: &str,
    bad: &mut Vec<String>,
) -> usize {
    let (mut failed, mut bad_here) = (0, 0);
    for h in sets {
        for &kind in kinds {
            let out = run(build, &overflowing(kind, p, &h));
            if out.iter().any(|o| matches!(o, Ok(Err(_)))) {
                failed += 1;
            }
            if let Some(why) = judge(&out, true) {
                bad.push(format!("{tag} hot {h:?} {kind}: {why}"));
                bad_here += 1;
                if bad_here >= cap {
                    return failed;
                }
            }
        }
    }
    failed
}

const KINDS: [&str; 7] = ["pair", "triple", "mixed", "blocks", "two", "every", "odd"];

// ---------------------------------------------------------------------
// 1. SparDL and recursive doubling with a lossy codec
// ---------------------------------------------------------------------

fn codec_specs() -> Vec<(String, Defaults)> {
    let mut out = Vec::new();
    for codec in ["bf16", "ssmean", "f16"] {
        for k in [1usize, 3, 64] {
            out.push((format!("spardl:values={codec}"), Defaults::k(k).unwrap()));
        }
        out.push((
            format!("ssar_recursive_double:values={codec}"),
            Defaults::lossless(),
        ));
    }
    out
}

/// Every rank fails or none, every rank names the same lowest failing
/// rank, the next calls work: SparDL (small `k`, so that cuts happen,
/// and big) and recursive doubling with each codec, P = 2 to 9, 12 and 16,
/// every hot set up to four ranks and a sample beyond, seven kinds of
/// overflow.
#[test]
fn codecs_fail_alike_on_every_rank() {
    let registry = Registry::<f32>::builtin();
    let mut bad = Vec::new();
    let mut failed_runs = 0;
    for p in (2..=9usize).chain([12, 16]) {
        for (spec, defaults) in codec_specs() {
            let build = || registry.build(&spec, defaults);
            let tag = format!("{spec} {defaults:?} P={p}");
            failed_runs += sweep(&build, p, hot_sets(p), &KINDS, 3, &tag, &mut bad);
        }
    }
    assert!(failed_runs > 300, "only {failed_runs} runs failed");
    no_bad_runs(&bad);
}

/// Several calls in a row with overflowing inputs on the same instance
/// and transports, without a reset between them (a caller that keeps the
/// instance after an error), then an ordinary one: every call fails or
/// returns alike on every rank.
#[test]
fn codecs_fail_alike_call_after_call() {
    let registry = Registry::<f32>::builtin();
    let mut bad = Vec::new();
    for p in [3usize, 5, 6, 7, 8] {
        for (spec, defaults) in codec_specs() {
            let sets = hot_sets(p);
            let out = ThreadCluster::new(p).timeout(TIMEOUT).run(|t| {
                let mut algo = registry.build(&spec, defaults)?;
                let mut seen = Vec::new();
                for (i, h) in sets.iter().enumerate().take(12) {
                    let kind = KINDS[i % KINDS.len()];
                    let ins = overflowing(kind, p, h);
                    let r = t.rank();
                    seen.push(algo.allreduce(t, &ins[r]).is_ok());
                }
                then_ordinary(t, algo.as_mut())?;
                Ok(seen)
            });
            let first = out[0].as_ref().ok();
            if out.iter().any(|o| o.is_err() || o.as_ref().ok() != first) {
                bad.push(format!("{spec} {defaults:?} P={p}: {out:?}"));
            }
        }
    }
    no_bad_runs(&bad);
}

// ---------------------------------------------------------------------
// 2. The hierarchical allreduce
// ---------------------------------------------------------------------

/// The registry, with a few lossy parts under plain names (a hierarchical
/// part is a plain name): `spardl_bf16`, `spardl_ssmean`, `ssar_bf16`,
/// `ssar_ssmean`.
struct Parts(Registry<f32>);

impl Catalog<f32> for Parts {
    fn build(&self, spec: &str, defaults: Defaults) -> Result<Box<dyn SparseAllreduce<f32>>> {
        let spec = match spec {
            "spardl_bf16" => "spardl:values=bf16",
            "spardl_ssmean" => "spardl:values=ssmean",
            "ssar_bf16" => "ssar_recursive_double:values=bf16",
            "ssar_ssmean" => "ssar_recursive_double:values=ssmean",
            other => other,
        };
        self.0.build(spec, defaults)
    }
    fn auto_candidates(&self) -> Vec<&str> {
        self.0.auto_candidates()
    }
}

/// The hierarchical collective over nodes of `node` ranks, `intra` inside
/// them and `inter` across, at k = 8.
fn hierarchical(
    node: usize,
    intra: &str,
    inter: &str,
    parts: &Parts,
) -> Result<Box<dyn SparseAllreduce<f32>>> {
    Ok(Box::new(Hierarchical::new(
        node,
        intra,
        inter,
        Defaults::k(8)?,
        parts,
    )?))
}

/// `spec` of `registry` at k = 8, or for `"hier"` the hierarchical
/// collective over pairs of ranks, lossy inside and across.
fn build_k8(
    registry: &Registry<f32>,
    parts: &Parts,
    spec: &str,
) -> Result<Box<dyn SparseAllreduce<f32>>> {
    if spec == "hier" {
        hierarchical(2, "spardl_bf16", "ssar_bf16", parts)
    } else {
        registry.build(spec, Defaults::k(8)?)
    }
}

const HIER: [(&str, &str); 11] = [
    ("ssar_split_allgather", "ssar_split_allgather"),
    ("spardl_bf16", "ssar_split_allgather"),
    ("ssar_split_allgather", "ssar_bf16"),
    ("ssar_split_allgather", "spardl_bf16"),
    ("spardl_ssmean", "ssar_ssmean"),
    ("ssar_bf16", "spardl_bf16"),
    ("dsar_qsgd", "ssar_recursive_double"),
    ("spardl", "dsar_qsgd"),
    ("ssar_split_allgather", "auto"),
    ("auto", "auto"),
    ("spardl_bf16", "auto"),
];

/// Every rank fails or none, and the next calls work: nodes of 1 to 5
/// ranks, P = 2 to 9 (the last node smaller; one node where P <= node), failing intra- and
/// inter-node parts (lossy codecs, QSGD, the planner), overflows in one
/// node or across nodes.
#[test]
fn hierarchical_fails_alike_on_every_rank() {
    let parts = Parts(Registry::builtin());
    let mut bad = Vec::new();
    let mut failed_runs = 0;
    for node in [1usize, 2, 3, 4, 5] {
        for p in 2..=9 {
            if node == 5 && p > 5 {
                continue; // one node (P <= node): the intra part alone
            }
            for (intra, inter) in HIER {
                let build = || hierarchical(node, intra, inter, &parts);
                let mut sets = hot_sets(p);
                sets.truncate(12);
                let tag = format!("hierarchical:node={node},intra={intra},inter={inter} P={p}");
                let kinds = ["pair", "triple", "mixed"];
                failed_runs += sweep(&build, p, sets, &kinds, 2, &tag, &mut bad);
            }
        }
    }
    assert!(failed_runs > 200, "only {failed_runs} runs failed");
    no_bad_runs(&bad);
}

/// The hierarchical allreduce's agreed failures name the same failing
/// rank on every rank, in the caller's numbering (docs/failure-contract.md:
/// "The hierarchical allreduce does the same across its parts").
#[test]
fn hierarchical_ranks_name_the_same_failing_rank() {
    let parts = Parts(Registry::builtin());
    let mut bad = Vec::new();
    for (node, p, intra, inter, h) in [
        // Node 1 = {2, 3} overflows; the inter-node entry refuses it.
        (
            2usize,
            4usize,
            "ssar_split_allgather",
            "ssar_split_allgather",
            vec![2usize, 3],
        ),
        // Node 0 = {0, 1} overflows inside a lossy intra part.
        (2, 4, "spardl_bf16", "ssar_split_allgather", vec![0, 1]),
        // Node 1 = {2, 3} overflows inside a lossy intra part.
        (2, 4, "spardl_bf16", "ssar_split_allgather", vec![2, 3]),
        // Nodes {0,1,2} and {3,4,5}: one hot rank per node, the overflow
        // in the inter-node part of shard 0.
        (3, 6, "ssar_split_allgather", "ssar_bf16", vec![1, 4]),
    ] {
        let build = || hierarchical(node, intra, inter, &parts);
        let out = run(&build, &overflowing("pair", p, &h));
        if let Some(why) = judge(&out, true) {
            bad.push(format!(
                "hierarchical:node={node},intra={intra},inter={inter} P={p} hot {h:?}: {why}"
            ));
        }
    }
    no_bad_runs(&bad);
}

// ---------------------------------------------------------------------
// 3. Joint calls
// ---------------------------------------------------------------------

/// A joint call holding one failing call among others: every rank fails
/// (or every rank returns), and the next joint call on the same
/// transports is exact.
#[test]
fn joint_calls_with_a_failing_call_fail_alike() {
    let registry = Registry::<f32>::builtin();
    let parts = Parts(Registry::builtin());
    let mut bad = Vec::new();
    let lists: [&[&str]; 5] = [
        &[
            "dsar_split_allgather",
            "spardl:values=bf16",
            "ssar_recursive_double",
        ],
        &["ssar_recursive_double:values=bf16", "dsar_split_allgather"],
        &[
            "spardl:values=ssmean",
            "ssar_recursive_double:values=ssmean",
            "dsar_qsgd",
        ],
        &["dsar_split_allgather", "hier", "spardl:values=bf16"],
        &["auto", "ssar_recursive_double:values=bf16", "hier"],
    ];
    let mut failed_runs = 0;
    for p in 2..=7usize {
        for list in lists {
            for h in hot_sets(p).into_iter().take(10) {
                for kind in ["pair", "triple"] {
                    let hot = overflowing(kind, p, &h);
                    let out = ThreadCluster::new(p).timeout(TIMEOUT).run(|t| {
                        let r = t.rank();
                        let mut algs: Vec<Box<dyn SparseAllreduce<f32>>> = list
                            .iter()
                            .map(|s| build_k8(&registry, &parts, s))
                            .collect::<Result<_>>()?;
                        // The failing inputs on the lossy calls, ordinary
                        // ones on the others.
                        let ins: Vec<SparseVec<f32>> = list
                            .iter()
                            .map(|s| {
                                if s.contains("values") || *s == "hier" {
                                    hot[r].clone()
                                } else {
                                    small(r)
                                }
                            })
                            .collect();
                        let mut outs = vec![Reduced::default(); list.len()];
                        let first = {
                            let mut calls = JointCall::zip(&mut algs, &ins, &mut outs);
                            allreduce_jointly(t, &mut calls)
                        };
                        for a in &mut algs {
                            a.reset();
                        }
                        let ins: Vec<SparseVec<f32>> = list.iter().map(|_| small(r)).collect();
                        {
                            let mut calls = JointCall::zip(&mut algs, &ins, &mut outs);
                            allreduce_jointly(t, &mut calls)?;
                        }
                        for (a, o) in algs.iter().zip(&outs) {
                            if a.lossless() && o.result != small_sum(p) {
                                return Err(Error::invalid(
                                    "probe",
                                    "the next joint call is wrong",
                                ));
                            }
                        }
                        nothing_unread(t)?;
                        Ok(first.map(|()| SparseVec::zeros(DIM).unwrap()))
                    });
                    if out.iter().all(|o| matches!(o, Ok(Err(_)))) {
                        failed_runs += 1;
                    }
                    if let Some(why) = judge(&out, false) {
                        bad.push(format!("{list:?} P={p} hot {h:?} {kind}: {why}"));
                    }
                }
            }
        }
    }
    println!("{failed_runs} joint runs failed on every rank");
    assert!(failed_runs > 200, "only {failed_runs} joint runs failed");
    no_bad_runs(&bad);
}

// ---------------------------------------------------------------------
// 4. Corrupt messages while failure frames are in flight
// ---------------------------------------------------------------------

/// Each message of the first and the last rank corrupted in turn (its
/// last byte lost, `testing::Corrupting`) during an overflowing call, a
/// frame or not: no rank waits until its timeout, and the ordinary call
/// that follows succeeds on every rank (exactly) or fails on every rank.
#[test]
fn a_corrupt_message_among_failure_frames_is_no_one_sided_outcome() {
    let registry = Registry::<f32>::builtin();
    let parts = Parts(Registry::builtin());
    let mut bad = Vec::new();
    let mut fired_runs = 0;
    let specs = [
        "spardl:values=bf16",
        "spardl:values=ssmean",
        "ssar_recursive_double:values=bf16",
        "ssar_recursive_double:values=ssmean",
        "hier",
    ];
    for p in [2usize, 3, 4, 5, 6] {
        for spec in specs {
            for h in [vec![0, 1], vec![p - 2, p - 1], vec![0, p - 1]] {
                let hot = overflowing("pair", p, &h);
                for victim in [0, p - 1, h[0]] {
                    for nth in 1u64..=40 {
                        let out = ThreadCluster::new(p).timeout(TIMEOUT).run(|t| {
                            let r = t.rank();
                            let mut algo = build_k8(&registry, &parts, spec)?;
                            let mut c = Corrupting::new(t, (r == victim).then_some(nth));
                            let first = algo.allreduce(&mut c, &hot[r]);
                            let fired = c.fired();
                            let second = algo.allreduce(t, &small(r));
                            let timed_out = matches!(first, Err(Error::Timeout { .. }))
                                || matches!(second, Err(Error::Timeout { .. }));
                            Ok((fired, timed_out, second.is_ok()))
                        });
                        let out: Vec<(bool, bool, bool)> = match out.into_iter().collect() {
                            Ok(o) => o,
                            Err(e) => {
                                bad.push(format!("{spec} P={p} hot {h:?} {victim}/{nth}: {e}"));
                                continue;
                            }
                        };
                        if !out.iter().any(|o| o.0) {
                            break;
                        }
                        fired_runs += 1;
                        let seconds = out.iter().filter(|o| o.2).count();
                        if out.iter().any(|o| o.1) || !(seconds == 0 || seconds == p) {
                            bad.push(format!(
                                "{spec} P={p} hot {h:?}, message {nth} of rank {victim} \
                                 corrupted: (fired, timed out, next call ok) by rank {out:?}"
                            ));
                        }
                    }
                }
            }
        }
    }
    println!("{fired_runs} corrupted runs");
    assert!(fired_runs > 200, "{fired_runs}");
    no_bad_runs(&bad);
}
