//! What the simulator refuses (issue 40, items 5 and 9): cluster sizes it
//! cannot hold, networks and traces it cannot time, files that are not
//! network files; each an error that says what happened and what to do,
//! never an abort, a panic, an infinite time or a hang.

use sparse_coll::sim::{
    AlphaBeta, FullBisection, MAX_RANKS, Op, network, parse_network, read_network, replay,
};
use sparse_coll::{SimCluster, Transport};
use sparse_core::Error;
use std::path::PathBuf;
use std::time::Duration;

/// The reason of an [`Error::InvalidParameter`] and its name, or a panic.
fn invalid(e: Error) -> (&'static str, String) {
    match e {
        Error::InvalidParameter { name, reason } => (name, reason),
        e => panic!("not an invalid parameter: {e:?}"),
    }
}

/// A directory of its own under the system's temporary one.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sparse-coll-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Sizes past what the simulator holds (a thread per rank) are errors
/// naming the bound, not an abort (2^40: a mailbox each) or a capacity
/// overflow (2^62); zero ranks is one too; the bound itself is accepted
/// (nothing proportional to the size is allocated before `run`).
#[test]
fn cluster_sizes_it_cannot_hold_are_errors() {
    for p in [0, MAX_RANKS + 1, 1 << 40, 1 << 62, usize::MAX] {
        let (name, reason) = invalid(SimCluster::new(p).unwrap_err());
        assert_eq!(name, "ranks", "{p}");
        assert!(reason.contains(&p.to_string()), "{p}: {reason}");
        assert!(reason.contains(&MAX_RANKS.to_string()), "{p}: {reason}");
    }
    assert!(SimCluster::new(MAX_RANKS).is_ok());
    let run = SimCluster::new(3).unwrap().run(|t| Ok(t.rank())).unwrap();
    assert_eq!(
        run.results
            .into_iter()
            .map(Result::unwrap)
            .collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
}

/// A bandwidth so small that a byte takes longer than any finite time is
/// refused, in a file naming the key and its line, and by `AlphaBeta`.
#[test]
fn a_bandwidth_whose_byte_time_is_infinite_is_refused() {
    // 1 / 1e-310 is past f64::MAX: a byte would take an infinite time.
    let (name, reason) = invalid(AlphaBeta::new(1e-6, 1e-310).unwrap_err());
    assert_eq!(name, "bytes_per_s");
    assert!(reason.contains("1e-310"), "{reason}");
    let file = "model = full_bisection\nalpha_s = 1e-6\nbytes_per_s = 1e-310\n";
    let (name, reason) = invalid(parse_network(file).unwrap_err());
    assert_eq!(name, "network file");
    assert!(reason.contains("line 3: bytes_per_s"), "{reason}");
    let two = "model = two_level\nranks_per_node = 2\nintra_alpha_s = 1e-6\nintra_bytes_per_s = 1e9\ninter_alpha_s = 1e-6\ninter_bytes_per_s = 1e-310\n";
    let (_, reason) = invalid(parse_network(two).unwrap_err());
    assert!(reason.contains("line 6: inter_bytes_per_s"), "{reason}");
    // A bandwidth just above that bound still times a byte.
    assert!(AlphaBeta::new(0.0, 1e-308).is_ok());
}

/// A replay whose clocks would pass every finite time (finite inputs whose
/// sum overflows) is an error naming the rank and what overflowed, not an
/// infinite makespan.
#[test]
fn a_replay_whose_times_overflow_is_an_error() {
    let net = FullBisection::new("test", AlphaBeta::new(1e-6, 1e9).unwrap());
    let computing = [vec![Op::Compute(f64::MAX), Op::Compute(f64::MAX)]];
    let (name, reason) = invalid(replay(&computing, &net).unwrap_err());
    assert_eq!(name, "traces");
    assert!(
        reason.contains("rank 0") && reason.contains("overflow"),
        "{reason}"
    );
    // A latency of 1e308 s, twice on one path.
    let slow = FullBisection::new("slow", AlphaBeta::new(1e308, 1e9).unwrap());
    let ping_pong = [
        vec![Op::Send { to: 1, bytes: 1 }, Op::Recv { from: 1 }],
        vec![Op::Recv { from: 0 }, Op::Send { to: 0, bytes: 1 }],
    ];
    let (_, reason) = invalid(replay(&ping_pong, &slow).unwrap_err());
    assert!(reason.contains("overflow"), "{reason}");
    // Once is finite, and timed.
    let once = [
        vec![Op::Send { to: 1, bytes: 1 }],
        vec![Op::Recv { from: 0 }],
    ];
    let t = replay(&once, &slow).unwrap();
    assert!(t.makespan().is_finite() && t.makespan() >= 1e308);
    // Bytes whose time overflows, over a finite link.
    let huge = [
        vec![
            Op::Compute(f64::MAX / 2.0),
            Op::Send {
                to: 1,
                bytes: usize::MAX,
            },
        ],
        vec![Op::Recv { from: 0 }],
    ];
    let slowest = FullBisection::new("s", AlphaBeta::new(0.0, 1e-300).unwrap());
    assert!(replay(&huge, &slowest).is_err());
}

/// `f` on its own thread, or `None` if it has not returned within 10 s
/// (the thread is left blocked).
fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10)).ok()
}

/// A FIFO given as a network file is refused at once, not opened (which
/// blocks until a writer comes); so is a directory. Both say what the path
/// is not.
#[test]
fn a_network_file_that_is_not_a_regular_file_is_refused() {
    let dir = scratch("fifo");
    let fifo = dir.join("net.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo {}", fifo.display());
    for path in [fifo.clone(), dir.clone()] {
        let p = path.clone();
        let got = within_10s(move || read_network(&p).map(drop))
            .unwrap_or_else(|| panic!("read_network({}) blocked", path.display()));
        let (_, reason) = invalid(got.unwrap_err());
        assert!(reason.contains("not a regular file"), "{reason}");
        assert!(reason.contains(&path.display().to_string()), "{reason}");
        let spec = path.to_str().unwrap().to_string();
        let got = within_10s(move || network(&spec).map(drop)).expect("network() blocked");
        assert!(invalid(got.unwrap_err()).1.contains("not a regular file"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A missing network file says it was not found; an unknown name lists the
/// presets; a file that does not parse names the path, the line and the
/// key. No message repeats its prefix ("invalid parameter network:
/// invalid parameter network: ...").
#[test]
fn network_errors_say_what_is_wrong_once() {
    let dir = scratch("net-errors");
    let missing = dir.join("no-such.net");
    let (name, reason) = invalid(read_network(&missing).map(drop).unwrap_err());
    assert_eq!(name, "network file");
    assert!(
        reason.contains("not found") && reason.contains("no-such.net"),
        "{reason}"
    );
    let e = network(missing.to_str().unwrap()).map(drop).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("not found") && text.contains("1gbe"),
        "{text}"
    );
    let e = network("token-ring").map(drop).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("token-ring") && text.contains("25gbe"),
        "{text}"
    );
    let bad = dir.join("bad.net");
    std::fs::write(
        &bad,
        "model = full_bisection\nalpha_s = -1\nbytes_per_s = 1e9\n",
    )
    .unwrap();
    for e in [
        read_network(&bad).map(drop).unwrap_err(),
        network(bad.to_str().unwrap()).map(drop).unwrap_err(),
    ] {
        let text = e.to_string();
        assert!(
            text.contains("bad.net") && text.contains("line 2: alpha_s"),
            "{text}"
        );
        assert_no_doubled_prefix(&text);
    }
    for e in [
        read_network(&missing).map(drop).unwrap_err(),
        network(missing.to_str().unwrap()).map(drop).unwrap_err(),
        network("token-ring").map(drop).unwrap_err(),
    ] {
        assert_no_doubled_prefix(&e.to_string());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn assert_no_doubled_prefix(text: &str) {
    assert_eq!(text.matches("invalid parameter").count(), 1, "{text}");
}
