//! `sparse-bench calibrate`: the MPI transport's latency and time per byte,
//! measured by ping-pong and by exchange between ranks 0 and 1, and by a
//! shift among all the ranks at once, over message sizes from 0 to 64 MiB,
//! fitted to the alpha-beta model and written as a network file the
//! simulator reads ([`sparse_coll::sim::read_network`]).

use sparse_coll::sim::AlphaBeta;
use sparse_core::{Error, Result};
use std::path::PathBuf;
use std::time::Duration;

/// The flags of `sparse-bench calibrate`.
#[derive(clap::Args, Debug, Clone)]
pub struct CalibrateArgs {
    /// Write the network file here.
    #[arg(long, default_value = "calibrated.net")]
    pub out: PathBuf,
    /// The largest message, MiB (sizes are 0, then 1 KiB, 4 KiB, ... up to
    /// this).
    #[arg(long, default_value_t = 64)]
    pub max_mib: usize,
    /// Time spent per size at least, milliseconds (small sizes repeat more).
    #[arg(long, default_value_t = 200)]
    pub min_ms: u64,
    /// How the link is fitted to the ping-pong times.
    #[arg(long, value_enum, default_value_t = Fit::Relative)]
    pub fit: Fit,
    /// Where the latency comes from: the fit of the ping-pong between
    /// ranks 0 and 1 (the others idle), or the empty shift among all the
    /// ranks, what one round of a collective costs with this job's ranks
    /// on this job's cores.
    #[arg(long, value_enum, default_value_t = Latency::PingPong)]
    pub latency: Latency,
}

/// Where [`calibrate`] takes the link's latency from.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Latency {
    /// The fit's ([`Fit`]) of the ping-pong between ranks 0 and 1, the
    /// other ranks waiting: the wire's and the MPI stack's latency.
    PingPong,
    /// The median time of the empty shift among all the ranks
    /// ([`Sample::shift`]): every rank sends and receives at once, as in a
    /// round of a collective, so the latency includes what the ranks'
    /// sharing of the cores adds (a rank asleep between polls, or waiting
    /// for a core, answers late).
    Shift,
}

/// How [`calibrate`] fits the alpha-beta link.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// Least squares in relative error over every size ([`fit`]): right
    /// where the times lie on one line (MPICH's shared memory).
    Relative,
    /// The bandwidth of the large messages, the latency of the empty one
    /// ([`fit_large`]): for a shaped link, whose token bucket lets small
    /// messages through faster than the rate and bends the line.
    Large,
}

/// The smallest message [`fit_large`] takes the bandwidth from: 1 MiB.
pub const LARGE: usize = 1 << 20;

/// One message size's measurements.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Message bytes.
    pub bytes: usize,
    /// Median one-way time of a ping-pong (half the round trip), seconds.
    pub ping_pong: f64,
    /// Median time of an exchange (both ranks send and receive at once),
    /// seconds.
    pub exchange: f64,
    /// Median time of a shift among all the ranks, seconds: every rank
    /// sends to the next (`r + 1 mod P`) and receives from the previous at
    /// once. Rank 0's time of [`SHIFTS`] shifts back to back (one from 64
    /// KiB on) divided by their number, each shift waiting on the one
    /// before through the ring, after an empty shift.
    pub shift: f64,
}

/// The shifts timed back to back in a rep of [`Sample::shift`] below 64
/// KiB (one from 64 KiB on): a round's time, not one message's arrival.
pub const SHIFTS: usize = 8;

/// The calibration of one run.
#[derive(Debug, Clone)]
pub struct Calibration {
    /// The measurements.
    pub samples: Vec<Sample>,
    /// The fitted link.
    pub link: AlphaBeta,
    /// Where its latency came from.
    pub latency: Latency,
}

/// The message sizes measured: 0, then powers of 4 from 1 KiB up to
/// `max_mib` MiB.
pub fn sizes(max_mib: usize) -> Vec<usize> {
    let max = max_mib.saturating_mul(1 << 20);
    std::iter::once(0)
        .chain(
            std::iter::successors(Some(1024usize), |s| s.checked_mul(4))
                .take_while(move |&s| s <= max),
        )
        .collect()
}

/// The alpha-beta link that best fits `(bytes, seconds)` points in relative
/// error: the least squares of `(alpha + m beta - t) / t`, so that the
/// microsecond latencies of small messages weigh as much as the
/// milliseconds of large ones.
///
/// # Errors
/// [`Error::InvalidParameter`] for fewer than two distinct sizes, a time
/// that is not finite and positive, or a fit whose latency or bandwidth is
/// not positive (the measurements are too noisy: run it again on a quieter
/// machine).
pub fn fit(points: &[(usize, f64)]) -> Result<AlphaBeta> {
    if let Some(&(m, t)) = points.iter().find(|(_, t)| !(t.is_finite() && *t > 0.0)) {
        return Err(Error::invalid(
            "calibration",
            format!("{t} s for {m} bytes"),
        ));
    }
    // Minimise sum w (a + b m - t)^2 with w = 1 / t^2.
    let (mut s, mut sm, mut smm, mut st, mut smt) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(m, t) in points {
        let (m, w) = (m as f64, 1.0 / (t * t));
        s += w;
        sm += w * m;
        smm += w * m * m;
        st += w * t;
        smt += w * m * t;
    }
    let det = s * smm - sm * sm;
    if !(det.is_finite() && det > 0.0) {
        return Err(Error::invalid(
            "calibration",
            "fewer than two distinct message sizes",
        ));
    }
    let beta = (s * smt - sm * st) / det;
    let alpha = (st - beta * sm) / s;
    if !(beta.is_finite() && beta > 0.0) {
        return Err(Error::invalid(
            "calibration",
            format!("the fit's time per byte is {beta} s: too noisy, run it again"),
        ));
    }
    AlphaBeta::new(alpha.max(0.0), 1.0 / beta)
}

/// The alpha-beta link of a shaped network: the time per byte is the
/// least-squares slope (in absolute error) of the messages of [`LARGE`]
/// bytes or more, where the rate holds however full the shaper's bucket
/// was; the latency is the time of the smallest message.
///
/// # Errors
/// [`Error::InvalidParameter`] for a time that is not finite and positive,
/// fewer than two distinct sizes of [`LARGE`] bytes or more (measure up
/// to `--max-mib 4` at least), or a slope that is not positive.
pub fn fit_large(points: &[(usize, f64)]) -> Result<AlphaBeta> {
    if let Some(&(m, t)) = points.iter().find(|(_, t)| !(t.is_finite() && *t > 0.0)) {
        return Err(Error::invalid(
            "calibration",
            format!("{t} s for {m} bytes"),
        ));
    }
    let large: Vec<(f64, f64)> = points
        .iter()
        .filter(|(m, _)| *m >= LARGE)
        .map(|&(m, t)| (m as f64, t))
        .collect();
    let n = large.len() as f64;
    let (mm, tm) = large
        .iter()
        .fold((0.0, 0.0), |(a, b), (m, t)| (a + m / n, b + t / n));
    let (cov, var) = large.iter().fold((0.0, 0.0), |(c, v), (m, t)| {
        (c + (m - mm) * (t - tm), v + (m - mm) * (m - mm))
    });
    if var.is_nan() || var <= 0.0 {
        return Err(Error::invalid(
            "calibration",
            format!(
                "fewer than two distinct message sizes of {LARGE} bytes or more: measure up to --max-mib 4 at least"
            ),
        ));
    }
    let beta = cov / var;
    if !(beta.is_finite() && beta > 0.0) {
        return Err(Error::invalid(
            "calibration",
            format!("the large messages' time per byte is {beta} s: too noisy, run it again"),
        ));
    }
    let smallest = points.iter().min_by_key(|(m, _)| *m).map_or(0.0, |p| p.1);
    AlphaBeta::new(smallest, 1.0 / beta)
}

/// The calibration of `samples`: the fit of the ping-pong times (what the
/// simulator's one message costs), with the exchanges' and shifts' times
/// beside them; with [`Latency::Shift`] the latency is the empty shift's
/// time instead of the fit's.
///
/// # Errors
/// As [`fit`] or [`fit_large`]; with [`Latency::Shift`], no empty message
/// among the samples or a shift time that is not finite and positive.
pub fn calibrate(samples: Vec<Sample>, how: Fit, latency: Latency) -> Result<Calibration> {
    let points: Vec<(usize, f64)> = samples.iter().map(|s| (s.bytes, s.ping_pong)).collect();
    let mut link = match how {
        Fit::Relative => fit(&points)?,
        Fit::Large => fit_large(&points)?,
    };
    if latency == Latency::Shift {
        let empty = samples
            .iter()
            .find(|s| s.bytes == 0)
            .ok_or_else(|| Error::invalid("calibration", "no empty message measured"))?;
        if !(empty.shift.is_finite() && empty.shift > 0.0) {
            return Err(Error::invalid(
                "calibration",
                format!("{} s for the empty shift", empty.shift),
            ));
        }
        link = AlphaBeta::new(empty.shift, 1.0 / link.beta())?;
    }
    Ok(Calibration {
        samples,
        link,
        latency,
    })
}

/// The network file of a calibration, its measurements in the comments.
pub fn network_file(c: &Calibration, ranks: usize) -> String {
    let mut comment = format!(
        "sparse-bench calibrate under mpiexec -n {ranks}: ping-pong and exchange between ranks 0 and 1, shift among all {ranks}\nlatency: {}\nbytes  ping_pong_us  exchange_us  shift_us  model_us\n",
        match c.latency {
            Latency::PingPong => "the ping-pong's fit",
            Latency::Shift => "the empty shift's (--latency shift)",
        }
    );
    for s in &c.samples {
        comment += &format!(
            "{}  {:.3}  {:.3}  {:.3}  {:.3}\n",
            s.bytes,
            s.ping_pong * 1e6,
            s.exchange * 1e6,
            s.shift * 1e6,
            model(c.link, s.bytes) * 1e6
        );
    }
    sparse_coll::sim::full_bisection_file("calibrated", c.link, comment.trim_end())
}

/// The model's time of one message of `bytes`.
pub fn model(link: AlphaBeta, bytes: usize) -> f64 {
    link.alpha() + bytes as f64 * link.beta()
}

/// The table rows of a calibration.
pub fn table(c: &Calibration) -> Vec<Vec<String>> {
    c.samples
        .iter()
        .map(|s| {
            let m = model(c.link, s.bytes);
            vec![
                s.bytes.to_string(),
                format!("{:.3}", s.ping_pong * 1e6),
                format!("{:.3}", s.exchange * 1e6),
                format!("{:.3}", s.shift * 1e6),
                format!("{:.3}", m * 1e6),
                format!("{:+.1}", 100.0 * (m - s.ping_pong) / s.ping_pong),
            ]
        })
        .collect()
}

/// The table's header.
pub const HEADER: &[&str] = &[
    "bytes",
    "ping_pong_us",
    "exchange_us",
    "shift_us",
    "model_us",
    "model_err_%",
];

/// Measures on `t`: for each size, ping-pongs and exchanges between ranks
/// 0 and 1 (the others wait), each rep started together (a zero-byte
/// exchange first), the medians over reps; then shifts among all the
/// ranks ([`Sample::shift`]), each rep started by an empty shift. Returns the
/// samples on rank 0.
///
/// # Errors
/// Fewer than two ranks; the transport's errors.
pub fn measure<T: sparse_coll::Transport + ?Sized>(
    t: &mut T,
    a: &CalibrateArgs,
) -> Result<Option<Vec<Sample>>> {
    use std::time::Instant;
    if t.size() < 2 {
        return Err(Error::invalid(
            "ranks",
            "calibrate needs at least two ranks: run it under mpiexec -n 2",
        ));
    }
    let (r, p) = (t.rank(), t.size());
    let min = Duration::from_millis(a.min_ms);
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    // Rank 0 decides whether another rep runs and tells `peers`, so that
    // every rank runs the same reps.
    let go_on = |t: &mut T, done: usize, start: Instant, peers: &[usize]| -> Result<bool> {
        if r == 0 {
            let more = done < 5 || (start.elapsed() < min && done < 10_000);
            for &q in peers {
                t.send(q, &[u8::from(more)])?;
            }
            Ok(more)
        } else {
            Ok(t.recv(0)?.first() == Some(&1))
        }
    };
    let sizes = sizes(a.max_mib);
    let mut samples = Vec::new();
    if r < 2 {
        let peer = 1 - r;
        for &bytes in &sizes {
            let buf = vec![0u8; bytes];
            let mut ping = Vec::new();
            let mut both = Vec::new();
            // Interleaved: a ping-pong, then an exchange, until rank 0 has
            // enough of both.
            let start = Instant::now();
            while go_on(t, ping.len(), start, &[1])? {
                ping.push(rep(t, r, peer, &buf, true)?.as_secs_f64());
                both.push(rep(t, r, peer, &buf, false)?.as_secs_f64());
            }
            samples.push(Sample {
                bytes,
                ping_pong: med(&mut ping),
                exchange: med(&mut both),
                shift: 0.0,
            });
        }
    }
    let (next, prev) = ((r + 1) % p, (r + p - 1) % p);
    let peers: Vec<usize> = (1..p).collect();
    for (i, &bytes) in sizes.iter().enumerate() {
        let buf = vec![0u8; bytes];
        let mut shifts = Vec::new();
        let start = Instant::now();
        let k = if bytes < 64 << 10 { SHIFTS } else { 1 };
        while go_on(t, shifts.len(), start, &peers)? {
            t.exchange(next, &[], prev)?;
            let clock = Instant::now();
            for _ in 0..k {
                t.exchange(next, &buf, prev)?;
            }
            shifts.push(clock.elapsed().as_secs_f64() / k as f64);
        }
        if let Some(s) = samples.get_mut(i) {
            s.shift = med(&mut shifts);
        }
    }
    Ok((r == 0).then_some(samples))
}

/// One rep between ranks `r` and `peer` (0 and 1), started together (a
/// zero-byte exchange first): a ping-pong's one-way time (half the round
/// trip) or an exchange's time.
fn rep<T: sparse_coll::Transport + ?Sized>(
    t: &mut T,
    r: usize,
    peer: usize,
    buf: &[u8],
    ping_pong: bool,
) -> Result<Duration> {
    use std::time::Instant;
    t.exchange(peer, &[], peer)?;
    let start = Instant::now();
    if ping_pong {
        if r == 0 {
            t.send(peer, buf)?;
            t.recv(peer)?;
        } else {
            let got = t.recv(peer)?;
            t.send(peer, &got)?;
        }
        Ok(start.elapsed() / 2)
    } else {
        t.exchange(peer, buf, peer)?;
        Ok(start.elapsed())
    }
}

/// `sparse-bench calibrate` under `mpiexec`: measures on `MPI_COMM_WORLD`
/// and hands rank 0's calibration and the world size to `report` before
/// MPI is finalized (`MPI_Finalize` can hang on UCX's TCP at 3 ranks and
/// more, openucx/ucx#8738: the output is complete by then).
///
/// # Errors
/// MPI already initialized; fewer than two ranks; the transport's errors;
/// a fit that fails ([`fit`]); `report`'s.
#[cfg(feature = "mpi")]
pub fn run_mpi(
    a: &CalibrateArgs,
    report: impl FnOnce(usize, &Calibration) -> Result<()>,
) -> Result<()> {
    use mpi::topology::Communicator;
    let universe = mpi::initialize().ok_or_else(|| Error::Transport {
        rank: 0,
        detail: "MPI was already initialized".into(),
    })?;
    sparse_coll::MpiTransport::abort_on_panic();
    let world = universe.world();
    let size = world.size() as usize;
    let mut t =
        sparse_coll::MpiTransport::new(world).with_wait(sparse_coll::MpiWait::from_env()?)?;
    let samples = measure(&mut t, a)?;
    t.barrier();
    if let Some(s) = samples {
        report(size, &calibrate(s, a.fit, a.latency)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fit recovers a link from its own times, and from times with a
    /// few percent of noise within a few percent.
    #[test]
    fn fit_recovers_alpha_and_beta() {
        let link = AlphaBeta::new(3e-6, 5e9).unwrap();
        let exact: Vec<(usize, f64)> = sizes(64).into_iter().map(|m| (m, model(link, m))).collect();
        let got = fit(&exact).unwrap();
        assert!((got.alpha() - 3e-6).abs() < 1e-12 && (got.beta() - 2e-10).abs() < 1e-19);
        let noisy: Vec<(usize, f64)> = exact
            .iter()
            .enumerate()
            .map(|(i, &(m, t))| (m, t * if i % 2 == 0 { 1.03 } else { 0.97 }))
            .collect();
        let got = fit(&noisy).unwrap();
        assert!((got.alpha() / 3e-6 - 1.0).abs() < 0.05, "{got:?}");
        assert!((got.beta() / 2e-10 - 1.0).abs() < 0.05, "{got:?}");
        // The file it writes reads back as the same link.
        let c = Calibration {
            samples: vec![Sample {
                bytes: 0,
                ping_pong: 3e-6,
                exchange: 4e-6,
                shift: 5e-6,
            }],
            link,
            latency: Latency::PingPong,
        };
        let net = sparse_coll::sim::parse_network(&network_file(&c, 2)).unwrap();
        let route = net.route(0, 1);
        assert!((route.alpha - 3e-6).abs() < 1e-15 && (route.beta - 2e-10).abs() < 1e-22);
    }

    /// A shaped link (a token bucket of `b` bytes lets a message's first
    /// `b` bytes through at once): `fit_large` recovers its rate, which
    /// the relative fit overestimates by more than half, pulled by the
    /// small messages that the bucket lets through.
    #[test]
    fn fit_large_recovers_a_shaped_links_rate() {
        let (alpha, beta, bucket) = (10e-6, 8e-9, 62_500usize);
        let shaped: Vec<(usize, f64)> = sizes(16)
            .into_iter()
            .map(|m| {
                (
                    m,
                    alpha + m.saturating_sub(bucket) as f64 * beta + m as f64 * 2e-10,
                )
            })
            .collect();
        let large = fit_large(&shaped).unwrap();
        assert!(
            (large.beta() / (beta + 2e-10) - 1.0).abs() < 0.01,
            "{large:?}"
        );
        assert!((large.alpha() - alpha).abs() < 1e-12, "{large:?}");
        let relative = fit(&shaped).unwrap();
        assert!(relative.beta() < 0.67 * beta, "{relative:?}");
        // A straight line is recovered by both.
        let link = AlphaBeta::new(3e-6, 5e9).unwrap();
        let exact: Vec<(usize, f64)> = sizes(64).into_iter().map(|m| (m, model(link, m))).collect();
        let got = fit_large(&exact).unwrap();
        assert!((got.beta() / 2e-10 - 1.0).abs() < 1e-9 && (got.alpha() - 3e-6).abs() < 1e-15);
        // Too few large sizes, or a bad time, are errors.
        assert!(fit_large(&exact[..exact.len() - 5]).is_err());
        assert!(fit_large(&[(0, 1e-6), (LARGE, f64::NAN), (4 * LARGE, 1e-3)]).is_err());
        assert!(fit_large(&[(0, 1e-6), (LARGE, 2e-3), (4 * LARGE, 1e-3)]).is_err());
    }

    /// `Latency::Shift` takes the empty shift's time as the latency and
    /// keeps the fit's bandwidth; without an empty message, or with an
    /// empty shift that took no time, it is an error.
    #[test]
    fn shift_latency_is_the_empty_shifts_time() {
        let link = AlphaBeta::new(3e-6, 5e9).unwrap();
        let samples: Vec<Sample> = sizes(16)
            .into_iter()
            .map(|m| Sample {
                bytes: m,
                ping_pong: model(link, m),
                exchange: model(link, m),
                shift: 250e-6 + model(link, m),
            })
            .collect();
        let plain = calibrate(samples.clone(), Fit::Large, Latency::PingPong).unwrap();
        assert!((plain.link.alpha() - 3e-6).abs() < 1e-15);
        let shift = calibrate(samples.clone(), Fit::Large, Latency::Shift).unwrap();
        assert!(
            (shift.link.alpha() - 253e-6).abs() < 1e-15,
            "{:?}",
            shift.link
        );
        assert!((shift.link.beta() / plain.link.beta() - 1.0).abs() < 1e-12);
        assert!(calibrate(samples[1..].to_vec(), Fit::Large, Latency::Shift).is_err());
        let mut idle = samples;
        idle[0].shift = 0.0;
        assert!(calibrate(idle, Fit::Large, Latency::Shift).is_err());
    }

    /// `measure` on 3 ranks of threads: rank 0 alone returns samples, one
    /// per size, every time positive; the others return none (and none
    /// waits for ever); rank 2, idle in the pairwise phase, takes part in
    /// every shift.
    #[test]
    fn measure_runs_on_three_ranks() {
        let a = CalibrateArgs {
            out: PathBuf::from("unused.net"),
            max_mib: 0,
            min_ms: 1,
            fit: Fit::Relative,
            latency: Latency::Shift,
        };
        let got: Vec<_> = sparse_coll::ThreadCluster::new(3)
            .run(|t| Ok((measure(t, &a)?, sparse_coll::Transport::traffic(t))))
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        assert!(got[1].0.is_none() && got[2].0.is_none());
        // Rank 2 sends in the shifts only: per rep an empty shift and
        // SHIFTS timed ones, at least 5 reps.
        let sent = got[2].1.msgs_sent;
        let per_rep = 1 + SHIFTS as u64;
        assert!(
            sent >= 5 * per_rep && sent % per_rep == 0,
            "rank 2 sent {sent}"
        );
        let s = got[0].0.as_ref().unwrap();
        assert_eq!(s.iter().map(|s| s.bytes).collect::<Vec<_>>(), vec![0]);
        assert!(
            s.iter()
                .all(|s| s.ping_pong > 0.0 && s.exchange > 0.0 && s.shift > 0.0),
            "{s:?}"
        );
    }

    /// Too few sizes, a non-positive time and a decreasing fit are errors.
    #[test]
    fn bad_measurements_are_errors() {
        assert!(fit(&[(0, 1e-6)]).is_err());
        assert!(fit(&[(0, 1e-6), (10, 0.0)]).is_err());
        assert!(fit(&[(0, 1e-3), (1 << 20, 1e-6)]).is_err());
        assert_eq!(sizes(1), vec![0, 1024, 4096, 16384, 65536, 262144, 1048576]);
    }
}
