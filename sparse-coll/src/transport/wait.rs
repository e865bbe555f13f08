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
/// Parsed from text (`"spin"`, `"yield"`, `"sleep"`, `"sleep:20us"`) by
/// [`str::parse`], as [`MpiWait::from_env`] does.
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
            Self::Spin | Self::Yield => true,
            Self::Sleep(d) => {
                d >= Duration::from_micros(1)
                    && d <= Self::MAX_PAUSE
                    && d.subsec_nanos() % 1000 == 0
            }
        }
    }

    /// The wait named by the environment variable `SPARSE_MPI_WAIT`
    /// ([`MPI_WAIT_ENV`]), [`MpiWait::Spin`] where it is unset, empty or
    /// white space.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a value that does not parse (or is
    /// not Unicode).
    pub fn from_env() -> Result<Self> {
        match std::env::var(MPI_WAIT_ENV) {
            Ok(v) if !v.trim().is_empty() => v.parse(),
            Ok(_) | Err(std::env::VarError::NotPresent) => Ok(Self::Spin),
            Err(std::env::VarError::NotUnicode(v)) => Err(Error::invalid(
                MPI_WAIT_ENV,
                format!("{v:?} is not Unicode; use spin, yield, sleep or sleep:MICROSECONDS"),
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
            Self::Yield => {
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
            Self::Sleep(d) => write!(f, "sleep:{}us", d.as_micros()),
        }
    }
}

impl std::str::FromStr for MpiWait {
    type Err = Error;

    /// `spin`, `yield`, `sleep` (a pause of [`MpiWait::DEFAULT_PAUSE`]) or
    /// `sleep:N` / `sleep:Nus` (N microseconds, 1 to 1,000,000).
    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::invalid(
                MPI_WAIT_ENV,
                format!(
                    "{s:?}: {why}; use spin, yield, sleep or sleep:MICROSECONDS (e.g. sleep:20us)"
                ),
            )
        };
        let s = s.trim();
        match s.split_once(':') {
            None if s == "spin" => Ok(Self::Spin),
            None if s == "yield" => Ok(Self::Yield),
            None if s == "sleep" => Ok(Self::Sleep(Self::DEFAULT_PAUSE)),
            None => Err(bad("not a wait")),
            Some(("spin" | "yield", _)) => Err(bad("spin and yield take no pause")),
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
        for w in [
            MpiWait::Spin,
            MpiWait::Yield,
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
        ] {
            let e = bad.parse::<MpiWait>().unwrap_err();
            assert!(e.to_string().contains("sleep:MICROSECONDS"), "{bad:?}: {e}");
        }
    }
}
