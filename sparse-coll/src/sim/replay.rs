//! The replay of traces over a network: a discrete-event simulation (see
//! the [module](super) doc for the model).

use super::network::shown;
use super::{Link, Network, Op, Route, SimRun, Trace};
use sparse_core::{Error, Result};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

/// Simulated times of a replay, by rank, in seconds from the start.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// Each rank's clock at the end of its trace.
    pub finish: Vec<f64>,
    /// Each rank's clock at each of its marks, in order.
    pub marks: Vec<Vec<f64>>,
    /// The network's label.
    pub network: String,
}

impl Timeline {
    /// The slowest rank's finish: the simulated time of the whole run.
    pub fn makespan(&self) -> f64 {
        self.finish.iter().copied().fold(0.0, f64::max)
    }
    /// The slowest rank's time from its mark `i` to its mark `i + 1` (the
    /// time of the call between them, as the papers time a collective),
    /// over the ranks that made both marks; `None` where no rank did.
    pub fn span(&self, i: usize) -> Option<f64> {
        self.marks
            .iter()
            .filter_map(|m| Some(m.get(i + 1)? - m.get(i)?))
            .reduce(f64::max)
    }
    /// `simulated (<network>)`: what every printed figure carries.
    pub fn label(&self) -> String {
        format!("simulated ({})", self.network)
    }
}

/// A time as an ordered key (times are finite and non-negative).
fn key(t: f64) -> u64 {
    t.to_bits()
}

/// What the replay schedules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A message's head reaches its incoming link (before ranks run at the
    /// same time, so that a rank that receives then sees it).
    Arrive(usize),
    /// A rank runs its next op.
    Run(usize),
}

/// A message in flight.
#[derive(Debug, Clone, Copy)]
struct Message {
    to: usize,
    bytes: usize,
    route: Route,
    /// When it has left its outgoing link.
    left: f64,
    /// When it has finished arriving; `None` until its arrival is replayed.
    done: Option<f64>,
    /// Whether its receiver waits for it.
    claimed: bool,
}

/// What a waiting rank waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// This message, already sent.
    Message(usize),
    /// The next message from this rank, not sent yet.
    Next(usize),
}

/// A rank's place in the replay.
#[derive(Debug, Clone, Default)]
struct RankState {
    pc: usize,
    clock: f64,
    /// What it waits for, with the time its own send leaves by (an
    /// exchange returns when both are done).
    waiting: Option<(Wait, f64)>,
}

impl<T> SimRun<T> {
    /// The simulated times of this run over `net` ([`replay`]).
    ///
    /// # Errors
    /// As [`replay`].
    pub fn timeline(&self, net: &dyn Network) -> Result<Timeline> {
        replay(&self.traces, net)
    }
}

/// Replays `traces` over `net`: a discrete-event simulation, events in
/// order of time, ties by kind and then by rank or message number, each
/// link a FIFO server (see the [module](super) doc for the model).
///
/// # Errors
/// [`Error::NoSuchRank`] if a trace names a rank outside the traces;
/// [`Error::InvalidParameter`] if the traces do not match (a receive
/// without its send, or a send that no receive takes: the run failed, or
/// the traces come from different runs), naming the ranks; if a trace
/// computes for a negative or non-finite time, or the network routes a
/// message with a negative or non-finite latency or time per byte; if a
/// time would pass the largest finite one (finite inputs whose sum
/// overflows), naming the rank and what overflowed: every time a replay
/// returns is finite.
pub fn replay(traces: &[Trace], net: &dyn Network) -> Result<Timeline> {
    let mut sim = Replay::new(traces, net);
    sim.run()?;
    Ok(Timeline {
        finish: sim.ranks.iter().map(|r| r.clock).collect(),
        marks: sim.marks,
        network: net.label(),
    })
}

struct Replay<'a> {
    traces: &'a [Trace],
    net: &'a dyn Network,
    ranks: Vec<RankState>,
    marks: Vec<Vec<f64>>,
    messages: Vec<Message>,
    /// Messages sent from `.0` to `.1` that no receive has claimed, in
    /// order.
    unclaimed: HashMap<(usize, usize), VecDeque<usize>>,
    free: HashMap<Link, f64>,
    events: BinaryHeap<Reverse<(u64, Event)>>,
}

impl<'a> Replay<'a> {
    fn new(traces: &'a [Trace], net: &'a dyn Network) -> Self {
        let p = traces.len();
        let events = (0..p).map(|r| Reverse((key(0.0), Event::Run(r)))).collect();
        Self {
            traces,
            net,
            ranks: vec![RankState::default(); p],
            marks: vec![Vec::new(); p],
            messages: Vec::new(),
            unclaimed: HashMap::new(),
            free: HashMap::new(),
            events,
        }
    }

    fn run(&mut self) -> Result<()> {
        while let Some(Reverse((at, event))) = self.events.pop() {
            let now = f64::from_bits(at);
            match event {
                Event::Arrive(m) => self.arrive(m, now)?,
                Event::Run(r) => self.step(r, now)?,
            }
        }
        let stuck: Vec<usize> = (0..self.ranks.len())
            .filter(|&r| self.ranks[r].pc < self.traces[r].len())
            .collect();
        let unreceived = self
            .unclaimed
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .min_by_key(|(link, _)| **link);
        if let Some((&(from, to), q)) = unreceived {
            return Err(Error::invalid(
                "traces",
                format!(
                    "{} messages from rank {from} to rank {to} are never received",
                    q.len()
                ),
            ));
        }
        if stuck.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid(
                "traces",
                format!("ranks {stuck:?} wait for messages that no rank sent"),
            ))
        }
    }

    fn check(&self, peer: usize) -> Result<()> {
        if peer < self.ranks.len() {
            Ok(())
        } else {
            Err(Error::NoSuchRank {
                rank: peer,
                size: self.ranks.len(),
            })
        }
    }

    fn schedule(&mut self, at: f64, event: Event) {
        self.events.push(Reverse((key(at), event)));
    }

    /// Runs rank `r`'s ops from time `now` until one makes it wait or
    /// schedules its next op later.
    fn step(&mut self, r: usize, now: f64) -> Result<()> {
        let rs = &mut self.ranks[r];
        rs.clock = rs.clock.max(now);
        if let Some((Wait::Message(m), left)) = rs.waiting {
            // Woken by its message's arrival.
            rs.waiting = None;
            let done = self.messages[m].done.unwrap_or(now);
            rs.clock = rs.clock.max(done).max(left);
            rs.pc += 1;
        }
        while let Some(&op) = self.traces[r].get(self.ranks[r].pc) {
            let clock = self.ranks[r].clock;
            match op {
                Op::Mark => {
                    self.marks[r].push(clock);
                    self.ranks[r].pc += 1;
                    continue;
                }
                Op::Compute(secs) => {
                    if !(secs.is_finite() && secs >= 0.0) {
                        return Err(Error::invalid(
                            "traces",
                            format!(
                                "rank {r} computes for {secs} s: give a finite time of at least 0 s"
                            ),
                        ));
                    }
                    self.ranks[r].clock = timed(clock + secs, || {
                        format!(
                            "rank {r}'s clock at {} s plus computation of {} s",
                            shown(clock),
                            shown(secs)
                        )
                    })?;
                    self.ranks[r].pc += 1;
                }
                Op::Send { to, bytes } => {
                    self.check(to)?;
                    self.ranks[r].clock = self.send(r, to, bytes, clock)?;
                    self.ranks[r].pc += 1;
                }
                Op::Recv { from } => {
                    self.check(from)?;
                    self.receive(r, from, clock);
                }
                Op::Exchange { to, bytes, from } => {
                    self.check(to)?;
                    self.check(from)?;
                    let left = self.send(r, to, bytes, clock)?;
                    self.receive(r, from, left);
                }
            }
            // The rank's next op runs in time order with the other ranks'
            // (unless it now waits: its message's arrival wakes it).
            if self.ranks[r].waiting.is_none() {
                let at = self.ranks[r].clock;
                self.schedule(at, Event::Run(r));
            }
            return Ok(());
        }
        Ok(())
    }

    /// Puts a message from `r` to `to` on its outgoing link at `now`;
    /// returns when it has left. A receiver already waiting for the next
    /// message from `r` claims it.
    fn send(&mut self, r: usize, to: usize, bytes: usize, now: f64) -> Result<f64> {
        let route = self.net.route(r, to);
        let valid = |x: f64| x.is_finite() && x >= 0.0;
        if !(valid(route.alpha) && valid(route.beta)) {
            return Err(Error::invalid(
                "network",
                format!(
                    "route {r} -> {to}: alpha {} s, beta {} s/B",
                    route.alpha, route.beta
                ),
            ));
        }
        let link = self.free.entry(route.out).or_insert(0.0);
        let start = now.max(*link);
        let what = || {
            format!(
                "rank {r}'s message of {bytes} B to rank {to} sent at {} s",
                shown(start)
            )
        };
        let left = timed(start + bytes as f64 * route.beta, what)?;
        timed(start + route.alpha, what)?;
        *link = left;
        let m = self.messages.len();
        let waiting = &mut self.ranks[to].waiting;
        let claimed = match *waiting {
            Some((Wait::Next(from), their_left)) if from == r => {
                *waiting = Some((Wait::Message(m), their_left));
                true
            }
            _ => {
                self.unclaimed.entry((r, to)).or_default().push_back(m);
                false
            }
        };
        self.messages.push(Message {
            to,
            bytes,
            route,
            left,
            done: None,
            claimed,
        });
        self.schedule(start + route.alpha, Event::Arrive(m));
        Ok(left)
    }

    /// Rank `r` receives its next message from `from`; its own send, if
    /// any, has left at `left`. It goes on at once if that message has
    /// arrived, else it waits.
    fn receive(&mut self, r: usize, from: usize, left: f64) {
        let next = self
            .unclaimed
            .get_mut(&(from, r))
            .and_then(VecDeque::pop_front);
        let rs = &mut self.ranks[r];
        match next {
            Some(m) => match self.messages[m].done {
                Some(done) => {
                    rs.clock = rs.clock.max(left).max(done);
                    rs.pc += 1;
                }
                None => {
                    self.messages[m].claimed = true;
                    rs.waiting = Some((Wait::Message(m), left));
                }
            },
            None => rs.waiting = Some((Wait::Next(from), left)),
        }
    }

    /// A message's head reaches its incoming link at `now`: it occupies the
    /// link once the link is free, and wakes its receiver if it waits.
    fn arrive(&mut self, m: usize, now: f64) -> Result<()> {
        let msg = self.messages[m];
        let link = self.free.entry(msg.route.into).or_insert(0.0);
        let begin = now.max(*link);
        let done = timed(
            (begin + msg.bytes as f64 * msg.route.beta).max(msg.left + msg.route.alpha),
            || {
                format!(
                    "the arrival at rank {} of {} B from {begin} s",
                    msg.to, msg.bytes
                )
            },
        )?;
        *link = done;
        self.messages[m].done = Some(done);
        if msg.claimed {
            self.schedule(done, Event::Run(msg.to));
        }
        Ok(())
    }
}

/// `t`, a simulated time, where it is finite; else the error naming `what`
/// overflowed: finite inputs (computation, latencies, bytes) whose sum
/// passes the largest finite time cannot be timed.
fn timed(t: f64, what: impl FnOnce() -> String) -> Result<f64> {
    if t.is_finite() {
        Ok(t)
    } else {
        Err(Error::invalid(
            "traces",
            format!(
                "{} overflows the largest finite time ({:e} s): scale the traces' times or \
                 the network's latency and time per byte down",
                what(),
                f64::MAX
            ),
        ))
    }
}
