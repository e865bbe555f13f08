//! The optimizers under `mpiexec -n 1..5` (feature `mpi`): the
//! `residual-mpi` program checks identical weights on every rank after
//! every step and equality with the thread transport; this test checks its
//! exit status, the world size and one `OK` line per rank, so a program
//! started without the launcher (one rank) cannot pass for more.
#![cfg(feature = "mpi")]

use std::process::Command;

#[test]
fn identical_weights_under_mpiexec_on_1_to_5_ranks() {
    for n in 1..=5usize {
        let out = Command::new("mpiexec")
            .env("MPIEXEC_TIMEOUT", "300")
            .args(["-n", &n.to_string(), env!("CARGO_BIN_EXE_residual-mpi")])
            .output()
            .expect("mpiexec runs (install mpich)");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let ctx = format!(
            "mpiexec -n {n}: {:?}\nstdout:\n{stdout}\nstderr:\n{}",
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
}
