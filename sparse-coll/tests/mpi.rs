//! The collective suite under `mpiexec` (features `mpi` and `testing`):
//! each test launches the `mpi-suite` program on `n` ranks and checks the
//! exit status, the world size it reports and one `OK` line per rank, so a
//! binary started without the launcher (one rank) cannot pass for more.
#![cfg(all(feature = "mpi", feature = "testing"))]

use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// `mode` on `n` ranks waiting as [`wait_for`] says.
fn mpiexec(n: usize, mode: &str, timeout_s: u64) -> Output {
    mpiexec_waiting(n, mode, timeout_s, wait_for(n))
}

/// How `n` ranks on this machine wait, as docs/mpi.md advises: spinning
/// (`MpiWait::Spin`, the default) where every rank has a core of its own,
/// yielding the core between polls (`MpiWait::Yield`) where ranks
/// outnumber the cores. Spinning ranks on shared cores wait for the
/// scheduler's slice at every message: the suite at `n` = 5 on 2 cores
/// took 186 s spinning and 2.7 s yielding (0.25 s at `n` = 2), all of it
/// time spent waiting, none of it checking anything more. On a machine
/// with 5 cores or more every test here spins; the pausing waits have
/// their own tests below, on as many ranks as cores and on more.
fn wait_for(n: usize) -> &'static str {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    if n <= cores { "spin" } else { "yield" }
}

/// As [`mpiexec`], the ranks' transports waiting as `wait` says
/// (`SPARSE_MPI_WAIT`, which Hydra hands every rank).
fn mpiexec_waiting(n: usize, mode: &str, timeout_s: u64, wait: &str) -> Output {
    Command::new("mpiexec")
        .env("MPIEXEC_TIMEOUT", timeout_s.to_string())
        .env("SPARSE_MPI_WAIT", wait)
        .args(["-n", &n.to_string(), env!("CARGO_BIN_EXE_mpi-suite"), mode])
        .output()
        .expect("mpiexec runs (install mpich)")
}

fn check_ok(n: usize, mode: &str, out: &Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ctx = format!(
        "mpiexec -n {n} {mode}: {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{ctx}");
    assert!(stdout.contains(&format!("world size {n}\n")), "{ctx}");
    for r in 0..n {
        assert_eq!(
            stdout.matches(&format!("OK rank {r} of {n}")).count(),
            1,
            "{ctx}"
        );
    }
}

/// The pauses each rank's waits took, by rank, from the lines `rank R
/// waited W: N pauses`, each rank's wait checked to be `wait`.
fn pauses(n: usize, out: &Output, wait: &str) -> Vec<u64> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    (0..n)
        .map(|r| {
            let head = format!("rank {r} waited {wait}: ");
            let line = stdout
                .lines()
                .find_map(|l| l.strip_prefix(&head))
                .unwrap_or_else(|| panic!("no line {head:?} in\n{stdout}"));
            let count = line.strip_suffix(" pauses").expect("N pauses");
            count.parse().expect("a count")
        })
        .collect()
}

#[test]
fn the_collective_suite_passes_on_1_to_5_ranks() {
    for n in 1..=5 {
        check_ok(n, "suite", &mpiexec(n, "suite", 300));
    }
}

#[test]
fn sums_that_overflow_part_way_fail_every_rank_and_leave_the_transport_usable() {
    for n in 2..=5 {
        let out = mpiexec(n, "overflow", 120);
        check_ok(n, "overflow", &out);
        let stdout = String::from_utf8_lossy(&out.stdout);
        // At least the calls where every rank is hot fail (two ranks'
        // values meet in a sum).
        assert!(
            !stdout.contains(" 0 failed on every rank"),
            "n={n}: no call failed:\n{stdout}"
        );
    }
}

#[test]
fn disagreeing_ranks_all_get_an_error() {
    for n in [2usize, 3] {
        check_ok(n, "disagree", &mpiexec(n, "disagree", 60));
    }
}

#[test]
fn a_panicking_rank_ends_the_job_within_5_seconds() {
    for n in [2usize, 4] {
        let start = Instant::now();
        let out = mpiexec(n, "panic", 60);
        let took = start.elapsed();
        assert!(!out.status.success(), "n={n}: the job must fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("injected panic"), "n={n}: {stderr}");
        // The hook names the rank that panicked (the last one).
        assert!(
            stderr.contains(&format!("sparse-coll: rank {} of {n} panicked", n - 1)),
            "n={n}: {stderr}"
        );
        assert!(took < Duration::from_secs(5), "n={n}: took {took:?}");
    }
}

#[test]
fn point_to_point_and_non_blocking_calls() {
    for n in [1usize, 2, 3, 5] {
        for mode in ["p2p", "nonblocking"] {
            let out = mpiexec(n, mode, 60);
            check_ok(n, mode, &out);
            // A spinning wait never gives its core up.
            let paused = pauses(n, &out, wait_for(n));
            if wait_for(n) == "spin" {
                assert_eq!(paused, vec![0; n], "{mode}");
            }
        }
    }
}

#[test]
fn warm_calls_allocate_nothing_that_grows_with_the_data_under_mpi() {
    for n in [2usize, 3, 4, 5] {
        check_ok(n, "warm", &mpiexec(n, "warm", 120));
    }
}

#[test]
fn a_corrupt_message_fails_every_rank_without_a_hang_under_mpi() {
    for n in [2usize, 3, 4, 5] {
        check_ok(n, "corrupt", &mpiexec(n, "corrupt", 300));
    }
}

/// The sleeping wait (for more ranks than cores) changes when a rank
/// notices a message, never what it receives: the suite's exact results,
/// the point-to-point and non-blocking calls (their progress thread
/// sleeps too), the dense `MPI_Iallreduce` path, failures reaching every
/// rank from inside a sleeping wait, and warm calls that allocate
/// nothing, on more ranks than this machine has cores.
#[test]
fn the_sleeping_wait_changes_no_result() {
    let modes = ["suite", "p2p", "nonblocking", "disagree", "warm", "corrupt"];
    check_pausing(&[3, 4], &modes, "sleep:20us");
}

/// The yielding wait (a rank's own threads sharing its cores) likewise:
/// the suite's exact results, the point-to-point and non-blocking calls,
/// failures reaching every rank, with the ranks yielding their cores
/// between polls, on as many ranks as cores and on more.
#[test]
fn the_yielding_wait_changes_no_result() {
    check_pausing(
        &[2, 3],
        &["suite", "p2p", "nonblocking", "corrupt"],
        "yield",
    );
}

/// Each mode on each rank count, the ranks' transports waiting as `wait`
/// says (a pausing wait): [`check_ok`], each rank's wait as asked, and in
/// the suite, whose ranks wait on each other, some waits paused.
fn check_pausing(ns: &[usize], modes: &[&str], wait: &str) {
    for &n in ns {
        for &mode in modes {
            let out = mpiexec_waiting(n, mode, 300, wait);
            check_ok(n, mode, &out);
            let paused = pauses(n, &out, wait);
            let any = paused.iter().sum::<u64>() > 0;
            assert!(mode != "suite" || any, "{mode}: {paused:?}");
        }
    }
}

/// Ranks that spin and ranks that pause would run blocking and
/// non-blocking MPI collectives against each other, which never match:
/// `with_wait` fails on every rank instead, at once, naming the waits.
#[test]
fn ranks_that_spin_and_ranks_that_pause_fail_at_once_without_a_hang() {
    for waits in [["spin", "yield"], ["sleep:20us", "spin"]] {
        let start = Instant::now();
        let out = mpmd(&[(waits[0], ""), (waits[1], "")], "p2p");
        let took = start.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{waits:?}: the job must fail\n{stderr}"
        );
        assert!(
            stderr.contains("Disagreement") && stderr.contains("wait"),
            "{waits:?}: {stderr}"
        );
        let (a, b) = if waits[0] == "spin" {
            ("spin", "pause")
        } else {
            ("pause", "spin")
        };
        assert!(
            stderr.contains(&format!("by rank: {a}, {b}")),
            "{waits:?}: {stderr}"
        );
        assert!(took < Duration::from_secs(20), "{waits:?}: took {took:?}");
    }
}

/// One job of `mode`, a rank for each of `ranks`: its wait
/// (`SPARSE_MPI_WAIT`) and the CPUs it is bound to (`taskset -c`; none
/// where empty).
fn mpmd(ranks: &[(&str, &str)], mode: &str) -> Output {
    let mut cmd = Command::new("mpiexec");
    cmd.env("MPIEXEC_TIMEOUT", "60");
    for (i, (wait, cpus)) in ranks.iter().enumerate() {
        if i > 0 {
            cmd.arg(":");
        }
        cmd.args(["-n", "1", "-env", "SPARSE_MPI_WAIT", wait]);
        if !cpus.is_empty() {
            cmd.args(["taskset", "-c", cpus]);
        }
        cmd.args([env!("CARGO_BIN_EXE_mpi-suite"), mode]);
    }
    cmd.output().expect("mpiexec runs (install mpich)")
}

/// `MpiWait::Auto` (`SPARSE_MPI_WAIT=auto`, and where it is empty, as
/// where unset): every rank spins where each has a CPU of its own and
/// yields where ranks outnumber the CPUs of their affinity masks, on this
/// machine's CPUs and bound with `taskset`; a rank that asks for the wait
/// it chooses agrees with it, one that asks for the other fails every
/// rank's `with_wait`.
#[test]
fn the_automatic_wait_spins_where_each_rank_has_a_cpu_and_yields_where_ranks_share() {
    for n in [1usize, 2, 3] {
        for wait in ["auto", ""] {
            let out = mpiexec_waiting(n, "p2p", 60, wait);
            check_ok(n, "p2p", &out);
            pauses(n, &out, wait_for(n));
        }
    }
    // Two ranks bound to CPU 0 yield, whatever the machine.
    let out = mpmd(&[("auto", "0"), ("auto", "0")], "p2p");
    check_ok(2, "p2p", &out);
    pauses(2, &out, "yield");
    let out = mpmd(&[("auto", "0"), ("yield", "0")], "p2p");
    check_ok(2, "p2p", &out);
    pauses(2, &out, "yield");
    if std::thread::available_parallelism().map_or(1, |c| c.get()) < 2 {
        return;
    }
    // Bound to CPUs of their own they spin, and a yielding rank then
    // disagrees.
    let out = mpmd(&[("auto", "0"), ("auto", "1")], "p2p");
    check_ok(2, "p2p", &out);
    pauses(2, &out, "spin");
    let out = mpmd(&[("auto", "0"), ("yield", "1")], "p2p");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Disagreement") && stderr.contains("by rank: auto (spin), pause"),
        "{stderr}"
    );
}

/// A wait that does not parse stops the job with the variable's name and
/// the forms it takes, instead of running with a wait nobody asked for.
#[test]
fn a_wait_that_does_not_parse_stops_the_job() {
    let out = mpiexec_waiting(2, "p2p", 60, "sleep:2ms");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("SPARSE_MPI_WAIT") && stderr.contains("sleep:MICROSECONDS"),
        "{stderr}"
    );
}
