//! The replay of traces over a network: a discrete-event simulation (see
//! the [module](super) doc for the model).

use super::flows::{Changed, Flows, Tank};
use super::network::shown;
use super::{Network, Op, Route, SimRun, Trace};
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
    /// A message's flow ends: its last byte has left its sender (before
    /// anything else at the same time, so that flows starting then share
    /// the links with the ones still moving only). Stale unless the
    /// generation is its flow's current one.
    Left(usize, u32),
    /// A link's token bucket runs dry (stale unless the generation is its
    /// current one): its flows fall back to its rate.
    Drained(usize, u32),
    /// A message has finished arriving (before ranks run at the same time,
    /// so that a rank that receives then sees it).
    Arrived(usize),
    /// A rank runs its next op.
    Run(usize),
}

/// A message sent.
#[derive(Debug, Clone, Copy)]
struct Message {
    from: usize,
    to: usize,
    bytes: usize,
    route: Route,
    /// When it has finished arriving; `None` until its flow has ended.
    done: Option<f64>,
    /// Whether its receiver waits for it.
    claimed: bool,
    /// Sent in rendezvous ([`Network::rendezvous_bytes`]): it moves once
    /// its receive is posted, and its send is done when it has arrived.
    rendezvous: bool,
    /// Whether its flow has started (a rendezvous message's waits for its
    /// receive).
    started: bool,
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
    /// Its own message of the op under way, until it has left.
    sending: Option<usize>,
    /// The message the op under way receives, until it has arrived.
    waiting: Option<Wait>,
    /// When the op under way is done, of what is known yet.
    ready: f64,
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
/// order of time, ties by kind and then by rank or message number, the
/// messages moving at a time sharing their links' bandwidth max-min fairly
/// (see the [module](super) doc for the model).
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
    flows: Flows,
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
            flows: Flows::default(),
            events,
        }
    }

    fn run(&mut self) -> Result<()> {
        while let Some(Reverse((at, event))) = self.events.pop() {
            let now = f64::from_bits(at);
            match event {
                Event::Left(m, generation) => {
                    // Stale: its flow has ended, or its share changed since.
                    if self.messages[m].done.is_some() {
                        continue;
                    }
                    if self.flows.moving(m) {
                        if !self.flows.current(m, generation) {
                            continue;
                        }
                        let changed = self.flows.end(m, now);
                        self.reschedule(changed);
                    }
                    self.left(m, now)?;
                }
                Event::Drained(l, generation) => {
                    let changed = self.flows.drained(l, now, generation);
                    self.reschedule(changed);
                }
                Event::Arrived(m) => self.arrived(m, now),
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
        // In rendezvous a send waits for its receive: blocking sends that
        // eager buffering lets pass may deadlock instead.
        let deadlock = match self.net.rendezvous_bytes() {
            Some(b) => format!(
                " (or, with sends of {b} B and more in rendezvous, ranks that send to each \
                 other before receiving deadlock, as under MPI)"
            ),
            None => String::new(),
        };
        if let Some((&(from, to), q)) = unreceived {
            return Err(Error::invalid(
                "traces",
                format!(
                    "{} messages from rank {from} to rank {to} are never received{deadlock}",
                    q.len()
                ),
            ));
        }
        if stuck.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid(
                "traces",
                format!("ranks {stuck:?} wait for messages that no rank sent{deadlock}"),
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

    /// Schedules the new finishes of flows whose share changed (the
    /// finishes scheduled before are stale by their generation).
    fn reschedule(&mut self, changed: Vec<Changed>) {
        for (m, finish, generation) in changed {
            self.schedule(finish, Event::Left(m, generation));
        }
        for (l, dry, generation) in self.flows.take_drains() {
            self.schedule(dry, Event::Drained(l, generation));
        }
    }

    /// Runs rank `r`'s ops from time `now` until one makes it wait or
    /// schedules its next op later.
    fn step(&mut self, r: usize, now: f64) -> Result<()> {
        let rs = &mut self.ranks[r];
        rs.clock = rs.clock.max(now);
        while let Some(&op) = self.traces[r].get(self.ranks[r].pc) {
            let clock = self.ranks[r].clock;
            self.ranks[r].ready = clock;
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
                    self.ranks[r].ready = timed(clock + secs, || {
                        format!(
                            "rank {r}'s clock at {} s plus computation of {} s",
                            shown(clock),
                            shown(secs)
                        )
                    })?;
                }
                Op::Send { to, bytes } => {
                    self.check(to)?;
                    self.send(r, to, bytes, clock)?;
                }
                Op::Recv { from } => {
                    self.check(from)?;
                    self.receive(r, from)?;
                }
                Op::Exchange { to, bytes, from } => {
                    self.check(to)?;
                    self.check(from)?;
                    self.send(r, to, bytes, clock)?;
                    self.receive(r, from)?;
                }
            }
            // Done now, or when its message has left or arrived: then its
            // next op runs in time order with the other ranks'.
            self.finish_op(r);
            return Ok(());
        }
        Ok(())
    }

    /// Ends rank `r`'s op under way if it waits for nothing more, and
    /// schedules its next op at the time it ended.
    fn finish_op(&mut self, r: usize) {
        let rs = &mut self.ranks[r];
        if rs.sending.is_none() && rs.waiting.is_none() {
            rs.clock = rs.clock.max(rs.ready);
            rs.pc += 1;
            let at = rs.clock;
            self.schedule(at, Event::Run(r));
        }
    }

    /// Sends a message from `r` to `to` at `now`. A receiver already
    /// waiting for the next message from `r` claims it. Its flow starts
    /// now, or for a message in rendezvous once its receive claims it.
    fn send(&mut self, r: usize, to: usize, bytes: usize, now: f64) -> Result<()> {
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
        let rendezvous = self.net.rendezvous_bytes().is_some_and(|t| bytes >= t);
        let m = self.messages.len();
        let claimed = match self.ranks[to].waiting {
            Some(Wait::Next(from)) if from == r => {
                self.ranks[to].waiting = Some(Wait::Message(m));
                true
            }
            _ => {
                self.unclaimed.entry((r, to)).or_default().push_back(m);
                false
            }
        };
        self.messages.push(Message {
            from: r,
            to,
            bytes,
            route,
            done: None,
            claimed,
            rendezvous,
            started: false,
        });
        // A detached eager send is done at once; any other waits for its
        // message to leave (eager) or to arrive (rendezvous).
        if rendezvous || !self.net.detached() {
            self.ranks[r].sending = Some(m);
        }
        if claimed || !rendezvous {
            self.start(m, now)?;
        }
        Ok(())
    }

    /// Starts message `m`'s flow at `now`.
    fn start(&mut self, m: usize, now: f64) -> Result<()> {
        let Message {
            from,
            to,
            bytes,
            route,
            ..
        } = self.messages[m];
        let what = || {
            format!(
                "rank {from}'s message of {bytes} B to rank {to} moving from {} s",
                shown(now)
            )
        };
        let work = bytes as f64 * route.beta;
        timed(now + work, what)?;
        timed(now + route.alpha, what)?;
        self.messages[m].started = true;
        if work > 0.0 {
            let tanks = [route.out, route.into]
                .map(|l| self.net.bucket(l).map(|b| Tank::new(b, route.beta)));
            let changed = self
                .flows
                .start(m, (route.out, route.into), tanks, now, work);
            self.reschedule(changed);
        } else {
            // Nothing to move: it has left at once.
            self.schedule(now, Event::Left(m, 0));
        }
        Ok(())
    }

    /// Rank `r` receives its next message from `from`. It goes on once
    /// that message has arrived; a message in rendezvous that waited for
    /// this receive starts to move now.
    fn receive(&mut self, r: usize, from: usize) -> Result<()> {
        let next = self
            .unclaimed
            .get_mut(&(from, r))
            .and_then(VecDeque::pop_front);
        let rs = &mut self.ranks[r];
        match next {
            Some(m) => match self.messages[m].done {
                Some(done) => rs.ready = rs.ready.max(done),
                None => {
                    self.messages[m].claimed = true;
                    rs.waiting = Some(Wait::Message(m));
                    if !self.messages[m].started {
                        let now = rs.clock;
                        self.start(m, now)?;
                    }
                }
            },
            None => rs.waiting = Some(Wait::Next(from)),
        }
        Ok(())
    }

    /// Message `m`'s last byte has left its sender at `now`: it finishes
    /// arriving `alpha` later, and its sender's send is done now (eager)
    /// or then (rendezvous).
    fn left(&mut self, m: usize, now: f64) -> Result<()> {
        let msg = self.messages[m];
        let done = timed(now + msg.route.alpha, || {
            format!(
                "the arrival at rank {} of {} B from rank {} that left at {} s",
                msg.to,
                msg.bytes,
                msg.from,
                shown(now)
            )
        })?;
        self.messages[m].done = Some(done);
        if msg.claimed {
            self.schedule(done, Event::Arrived(m));
        }
        let sender = &mut self.ranks[msg.from];
        if sender.sending == Some(m) {
            sender.sending = None;
            // Eager: done when its last byte has left; rendezvous: when
            // it has arrived.
            let end = if msg.rendezvous { done } else { now };
            sender.ready = sender.ready.max(end);
            self.finish_op(msg.from);
        }
        Ok(())
    }

    /// Message `m`, which its receiver waits for, has arrived at `now`.
    fn arrived(&mut self, m: usize, now: f64) {
        let to = self.messages[m].to;
        let rs = &mut self.ranks[to];
        if rs.waiting == Some(Wait::Message(m)) {
            rs.waiting = None;
            rs.ready = rs.ready.max(now);
            self.finish_op(to);
        }
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
