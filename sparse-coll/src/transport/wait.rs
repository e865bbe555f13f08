//! How an MPI rank waits for a peer: [`MpiWait`].

use sparse_core::{Error, Result};
use std::time::Duration;

/// The environment variable [`MpiWait::from_env`] reads.
pub const MPI_WAIT_ENV: &str = "SPARSE_MPI_WAIT";

/// How `MpiTransport` (feature `mpi`) waits for a message to arrive or a
/// send to complete (and, with its `barrier` and its dense calls, for
/// MPICH's own collectives).
///
/// MPICH's ranks poll: ch4 has no blocking wait. Where every rank has a
/// core of its own that is the fastest wait there is, and the default.
/// Where ranks outnumber cores (a test cluster of network namespaces on a
/// small machine, an oversubscribed node) a polling rank holds a core
/// its peer needs in order to answer, and each message then waits for
/// the scheduler's time slice (milliseconds, where the network needs
/// microseconds). [`MpiWait::Sleep`] gives the core up between polls.
/// Where a rank's own threads share its cores (a pipelined step's
/// producer, a backward pass hooked on a thread of its own, on one core
/// per rank) a polling wait takes the core from them instead:
/// [`MpiWait::Yield`] hands it over between polls, as Open MPI's
/// `mpi_yield_when_idle` does (MPICH's `MPIR_CVAR_POLLS_BEFORE_YIELD`
/// belongs to its ch3 device, which yields once every that many polls;
/// these programs run on ch4).
///
/// Every rank of a communicator waits the same way or pauses the same
/// way: a spinning transport runs MPICH's blocking collectives, a pausing
/// one ([`MpiWait::Sleep`], [`MpiWait::Yield`]) the non-blocking ones,
/// and the two never match (MPI-3.1, sec. 5.12), so
/// `MpiTransport::with_wait` checks it on every rank.
///
/// [`MpiWait::Auto`] chooses between the two: spinning where every rank
/// has a CPU of its own, yielding where ranks outnumber the CPUs of a
/// node (Open MPI turns `mpi_yield_when_idle` on by itself there, MPICH
/// never): the collective suite on 5 ranks and 2 cores took 186 s
/// spinning and 2.7 s yielding (docs/mpi.md).
///
/// Parsed from text (`"spin"`, `"yield"`, `"sleep"`, `"sleep:20us"`,
/// `"auto"`) by [`str::parse`], as [`MpiWait::from_env`] does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MpiWait {
    /// Poll without pause, as MPICH does.
    #[default]
    Spin,
    /// Poll [`MpiWait::SPIN_POLLS`] times, then sleep this long after each
    /// poll that finds nothing: whole microseconds, 1 us to
    /// [`MpiWait::MAX_PAUSE`] (`MpiTransport::with_wait` refuses others,
    /// [`MpiWait::is_valid`]). On Linux a thread's first such sleep sets
    /// its timer slack to 1 ns (`PR_SET_TIMERSLACK`) and leaves it so, for
    /// the thread's later sleeps and timeouts too: a sleep then lasts the
    /// pause and the wake-up, without Linux's default slack of 50 us on
    /// top (a 20 us pause took 45 us here, 96 us with the default). A message that
    /// arrives during a sleep waits for its end: a call costs up to one
    /// pause per message it waits for; the data itself keeps flowing,
    /// as the kernel's TCP receives into the socket meanwhile.
    Sleep(Duration),
    /// Poll [`MpiWait::SPIN_POLLS`] times, then yield the core
    /// (`sched_yield`) after each poll that finds nothing: a thread of
    /// this process (or any other) waiting for the core runs first; with
    /// none, the wait polls on at once, as [`MpiWait::Spin`].
    Yield,
    /// [`MpiWait::Spin`] or [`MpiWait::Yield`], chosen by
    /// `MpiTransport::with_wait` alike on every rank: yielding where on
    /// some node the ranks outnumber the CPUs they may run on (the union
    /// of the node's ranks' affinity masks, `sched_getaffinity`: ranks
    /// bound each to a CPU of its own spin, ranks bound to one CPU
    /// together yield), spinning elsewhere. A transport never waits so
    /// itself: `MpiTransport::wait` returns the wait chosen.
    Auto,
}

impl MpiWait {
    /// The polls without pause in each wait before [`MpiWait::Sleep`]
    /// starts sleeping and [`MpiWait::Yield`] yielding, so that a message
    /// that is already on its way costs no pause.
    pub const SPIN_POLLS: u32 = 64;

    /// [`MpiWait::Sleep`]'s pause where the text gives none.
    pub const DEFAULT_PAUSE: Duration = Duration::from_micros(20);

    /// The longest pause of [`MpiWait::Sleep`] (1 s): a message that
    /// arrives during a pause waits for its end, and a failure too.
    pub const MAX_PAUSE: Duration = Duration::from_secs(1);

    /// Whether this wait is one `MpiTransport::with_wait` takes: spinning,
    /// yielding, or a pause of whole microseconds from 1 to
    /// [`MpiWait::MAX_PAUSE`] (the forms the text takes).
    pub fn is_valid(self) -> bool {
        match self {
            Self::Spin | Self::Yield | Self::Auto => true,
            Self::Sleep(d) => {
                d >= Duration::from_micros(1)
                    && d <= Self::MAX_PAUSE
                    && d.subsec_nanos() % 1000 == 0
            }
        }
    }

    /// The wait named by the environment variable `SPARSE_MPI_WAIT`
    /// ([`MPI_WAIT_ENV`]), [`MpiWait::Auto`] where it is unset, empty or
    /// white space (the programs of the workspace read it so: they spin
    /// where every rank has a CPU of its own and yield where ranks
    /// outnumber a node's CPUs).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a value that does not parse (or is
    /// not Unicode).
    pub fn from_env() -> Result<Self> {
        match std::env::var(MPI_WAIT_ENV) {
            Ok(v) if !v.trim().is_empty() => v.parse(),
            Ok(_) | Err(std::env::VarError::NotPresent) => Ok(Self::Auto),
            Err(std::env::VarError::NotUnicode(v)) => Err(Error::invalid(
                MPI_WAIT_ENV,
                format!("{v:?} is not Unicode; use spin, yield, auto, sleep or sleep:MICROSECONDS"),
            )),
        }
    }

    /// The pauses (sleeps and yields of the core) that the waits of this
    /// process have taken so far, all threads and transports together:
    /// whether a wait gives its core up at all (a spinning wait never
    /// does).
    pub fn pauses() -> u64 {
        PAUSES.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Called after each poll that found nothing: `polls` counts them
    /// within one wait (the caller starts it at 0).
    #[cfg(feature = "mpi")]
    pub(crate) fn idle(self, polls: &mut u32) {
        if self != Self::Spin {
            *polls = polls.saturating_add(1);
        }
        match self {
            Self::Spin => std::hint::spin_loop(),
            _ if *polls < Self::SPIN_POLLS => std::hint::spin_loop(),
            // `with_wait` resolves it; yielding is the safe reading.
            Self::Yield | Self::Auto => {
                PAUSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                std::thread::yield_now();
            }
            Self::Sleep(pause) => {
                #[cfg(target_os = "linux")]
                SLACK_SET.with(|set| {
                    if !set.replace(true) {
                        // SAFETY: prctl(PR_SET_TIMERSLACK) takes an
                        // unsigned long and changes only the calling
                        // thread's timer slack. Where it fails the thread
                        // keeps its slack: the sleeps only last longer.
                        #[allow(unsafe_code)]
                        unsafe {
                            libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
                        }
                    }
                });
                PAUSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(pause);
            }
        }
    }
}

/// The bytes of a rank's CPU record ([`cpu_record`]): its affinity mask
/// of [`MASK_BYTES`], then the CPU limit that `available_parallelism`
/// shows below the mask's count (a CPU quota, cgroups' `cpu.max`), a
/// little-endian `u32`, `u32::MAX` for none.
#[cfg(feature = "mpi")]
pub(crate) const CPU_RECORD_BYTES: usize = MASK_BYTES + 4;

/// The bytes of an affinity mask: 1,024 CPUs, glibc's `CPU_SETSIZE`.
#[cfg(feature = "mpi")]
const MASK_BYTES: usize = 128;

/// This thread's CPU record ([`CPU_RECORD_BYTES`]). The mask has CPU `c`
/// as bit `c % 8` of byte `c / 8`: the affinity mask
/// (`sched_getaffinity`) on Linux; CPUs 0 to `available_parallelism() -
/// 1` elsewhere, or where the mask cannot be read (more than 1,024 CPUs).
#[cfg(feature = "mpi")]
pub(crate) fn cpu_record() -> [u8; CPU_RECORD_BYTES] {
    let mut record = [0u8; CPU_RECORD_BYTES];
    let (mask, limit) = record.split_at_mut(MASK_BYTES);
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `cpu_set_t` is an array of bits, all zero an empty set;
        // `sched_getaffinity` writes at most the size it is given into it,
        // and `CPU_ISSET` reads one bit below `CPU_SETSIZE` (1,024 with
        // glibc, the bits `MASK_BYTES` holds).
        #[allow(unsafe_code)]
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let size = std::mem::size_of::<libc::cpu_set_t>();
            if libc::sched_getaffinity(0, size, &mut set) == 0 {
                let last = (MASK_BYTES * 8)
                    .min(libc::CPU_SETSIZE as usize)
                    .min(size * 8);
                for c in 0..last {
                    if libc::CPU_ISSET(c, &set) {
                        mask[c / 8] |= 1 << (c % 8);
                    }
                }
            }
        }
    }
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    if mask.iter().all(|&b| b == 0) {
        for c in 0..available.min(MASK_BYTES * 8) {
            mask[c / 8] |= 1 << (c % 8);
        }
    }
    let in_mask: u32 = mask.iter().map(|b| b.count_ones()).sum();
    let quota = u32::try_from(available).unwrap_or(u32::MAX);
    let quota = if quota < in_mask { quota } else { u32::MAX };
    limit.copy_from_slice(&quota.to_le_bytes());
    record
}

/// Whether the ranks whose CPU records ([`cpu_record`]) are `records`,
/// one after another, outnumber the CPUs they may run on together: the
/// union of their masks, at most the least of their limits.
#[cfg(feature = "mpi")]
pub(crate) fn crowded(records: &[u8]) -> bool {
    let mut union = [0u8; MASK_BYTES];
    let mut limit = u32::MAX;
    let ranks = records.len() / CPU_RECORD_BYTES;
    for record in records.chunks_exact(CPU_RECORD_BYTES) {
        let (mask, quota) = record.split_at(MASK_BYTES);
        for (u, m) in union.iter_mut().zip(mask) {
            *u |= m;
        }
        let quota = u32::from_le_bytes(quota.try_into().expect("4 bytes"));
        limit = limit.min(quota);
    }
    let cpus: u32 = union.iter().map(|b| b.count_ones()).sum();
    ranks > cpus.min(limit) as usize
}

/// [`MpiWait::pauses`]' count.
static PAUSES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[cfg(all(feature = "mpi", target_os = "linux"))]
thread_local! {
    /// Whether this thread's timer slack is set ([`MpiWait::Sleep`]).
    static SLACK_SET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl std::fmt::Display for MpiWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Spin => write!(f, "spin"),
            Self::Yield => write!(f, "yield"),
            Self::Auto => write!(f, "auto"),
            Self::Sleep(d) => write!(f, "sleep:{}us", d.as_micros()),
        }
    }
}

impl std::str::FromStr for MpiWait {
    type Err = Error;

    /// `spin`, `yield`, `auto`, `sleep` (a pause of
    /// [`MpiWait::DEFAULT_PAUSE`]) or `sleep:N` / `sleep:Nus` (N
    /// microseconds, 1 to 1,000,000).
    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::invalid(
                MPI_WAIT_ENV,
                format!(
                    "{s:?}: {why}; use spin, yield, auto, sleep or sleep:MICROSECONDS (e.g. sleep:20us)"
                ),
            )
        };
        let s = s.trim();
        match s.split_once(':') {
            None if s == "spin" => Ok(Self::Spin),
            None if s == "yield" => Ok(Self::Yield),
            None if s == "auto" => Ok(Self::Auto),
            None if s == "sleep" => Ok(Self::Sleep(Self::DEFAULT_PAUSE)),
            None => Err(bad("not a wait")),
            Some(("spin" | "yield" | "auto", _)) => Err(bad("spin, yield and auto take no pause")),
            Some(("sleep", us)) => {
                let us = us.trim().strip_suffix("us").unwrap_or(us.trim());
                match us.parse::<u64>() {
                    Ok(n) if Self::Sleep(Duration::from_micros(n)).is_valid() => {
                        Ok(Self::Sleep(Duration::from_micros(n)))
                    }
                    Ok(_) => Err(bad("the pause is 1 to 1,000,000 microseconds")),
                    Err(_) => Err(bad("the pause is a whole number of microseconds")),
                }
            }
            Some(_) => Err(bad("not a wait")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_waits_are_those_the_text_takes() {
        let us = Duration::from_micros;
        for w in [
            MpiWait::Spin,
            MpiWait::Yield,
            MpiWait::Auto,
            MpiWait::Sleep(us(1)),
            MpiWait::Sleep(us(1_000_000)),
        ] {
            assert!(w.is_valid(), "{w:?}");
            assert_eq!(w.to_string().parse::<MpiWait>().unwrap(), w);
        }
        for d in [
            Duration::ZERO,
            Duration::from_nanos(1500),
            us(1_000_001),
            Duration::MAX,
        ] {
            assert!(!MpiWait::Sleep(d).is_valid(), "{d:?}");
        }
    }

    /// A record of the CPUs `cpus` and the limit `quota`.
    #[cfg(feature = "mpi")]
    fn record(cpus: &[usize], quota: u32) -> Vec<u8> {
        let mut r = vec![0u8; CPU_RECORD_BYTES];
        for &c in cpus {
            r[c / 8] |= 1 << (c % 8);
        }
        r[MASK_BYTES..].copy_from_slice(&quota.to_le_bytes());
        r
    }

    #[cfg(feature = "mpi")]
    #[test]
    fn ranks_crowd_where_they_outnumber_the_cpus_they_share() {
        let none = u32::MAX;
        let node = |rs: &[Vec<u8>]| crowded(&rs.concat());
        // Unbound on 2 CPUs: 2 ranks fit, 3 do not.
        let both = record(&[0, 1], none);
        assert!(!node(&[both.clone(), both.clone()]));
        assert!(node(&[both.clone(), both.clone(), both.clone()]));
        // Bound each to a CPU of its own: 4 ranks on CPUs 0, 1, 9 and
        // 1023 fit; two bound to one CPU do not.
        let own: Vec<_> = [0, 1, 9, 1023]
            .iter()
            .map(|&c| record(&[c], none))
            .collect();
        assert!(!node(&own));
        assert!(node(&[record(&[5], none), record(&[5], none)]));
        // Overlapping masks: their union counts.
        assert!(!node(&[
            record(&[0, 1], none),
            record(&[1, 2], none),
            record(&[2], none)
        ]));
        // A quota of 2 CPUs on a mask of 64 crowds 3 ranks.
        let wide: Vec<usize> = (0..64).collect();
        assert!(!node(&[record(&wide, 2), record(&wide, 2)]));
        assert!(node(&[
            record(&wide, 2),
            record(&wide, 2),
            record(&wide, 2)
        ]));
        assert!(node(&[
            record(&wide, none),
            record(&wide, none),
            record(&wide, 1)
        ]));
    }

    /// This thread's record: the CPUs of `/proc/self/status`'s
    /// `Cpus_allowed_list` (the test's threads inherit the process's
    /// mask), no limit where `available_parallelism` counts as many.
    #[cfg(all(feature = "mpi", target_os = "linux"))]
    #[test]
    fn the_record_holds_this_threads_cpus() {
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let list = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .expect("Cpus_allowed_list")
            .trim();
        let mut cpus = Vec::new();
        for part in list.split(',') {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
            cpus.extend(a..=b);
        }
        let available = std::thread::available_parallelism().unwrap().get();
        let quota = if available < cpus.len() {
            available as u32
        } else {
            u32::MAX
        };
        if cpus.iter().all(|&c| c < MASK_BYTES * 8) {
            assert_eq!(cpu_record().to_vec(), record(&cpus, quota), "{list}");
        }
    }

    #[test]
    fn parses_and_prints() {
        assert_eq!("spin".parse::<MpiWait>().unwrap(), MpiWait::Spin);
        assert_eq!(
            "sleep".parse::<MpiWait>().unwrap(),
            MpiWait::Sleep(MpiWait::DEFAULT_PAUSE)
        );
        for text in ["sleep:20us", "sleep:20", " sleep:20us "] {
            assert_eq!(
                text.parse::<MpiWait>().unwrap(),
                MpiWait::Sleep(Duration::from_micros(20))
            );
        }
        assert_eq!(" yield ".parse::<MpiWait>().unwrap(), MpiWait::Yield);
        assert_eq!("auto".parse::<MpiWait>().unwrap(), MpiWait::Auto);
        for w in [
            MpiWait::Spin,
            MpiWait::Yield,
            MpiWait::Auto,
            MpiWait::Sleep(Duration::from_micros(7)),
        ] {
            assert_eq!(w.to_string().parse::<MpiWait>().unwrap(), w);
        }
        for bad in [
            "",
            "poll",
            "sleep:",
            "sleep:0",
            "sleep:-3",
            "sleep:2ms",
            "sleep:1000001",
            "sleep:99999999999999999999",
            "spin:3",
            "yield:3",
            "auto:3",
            "automatic",
        ] {
            let e = bad.parse::<MpiWait>().unwrap_err();
            assert!(e.to_string().contains("sleep:MICROSECONDS"), "{bad:?}: {e}");
        }
    }
}
