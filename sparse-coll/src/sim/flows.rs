//! Bandwidth sharing on links: the messages moving at a time (flows) and
//! their max-min fair shares of the links they cross, found by progressive
//! filling and recomputed whenever a flow starts or ends (SimGrid's flow
//! model, with its correction factors at 1).
//!
//! # The model
//! A flow of `m` bytes over a [`Route`](super::Route) of time per byte
//! `beta` has `m beta` seconds of work: the time it takes at the whole
//! bandwidth of its route. Each link gives its flows shares of its time
//! that add up to at most 1; a flow with share `s` moves `s / beta` bytes a
//! second, on every link it crosses at once. The shares are max-min fair
//! (Bertsekas and Gallager, *Data Networks*, sec. 6.5.2): no share can
//! grow without shrinking one that is no larger. On links whose routes all
//! have one `beta` (every preset network), this is max-min fairness of the
//! links' bandwidth, as SimGrid's `CM02` model with its factors at 1
//! computes it.
//!
//! Progressive filling: every share grows at the same pace until a link is
//! full; its flows keep the share they have; the others grow on. So each
//! round takes the link whose remaining time, divided among its flows not
//! yet fixed, is the least, and fixes them at that quotient.
//!
//! Shares depend only on the flows that share links with each other, so a
//! start or an end recomputes only the flows linked to it (through links
//! they share, transitively): its component. A flow whose share does not
//! change keeps its finish time unchanged, bit for bit; a flow alone on
//! its links takes share 1 and finishes `m beta` after it started, exactly.

use super::Link;
use std::collections::{HashMap, HashSet};

/// A token bucket in front of a link ([`super::Bucket`]) in the units of
/// the shares: seconds of work at the link's rate.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tank {
    /// Its size: the bucket's bytes times the rate's time per byte.
    depth: f64,
    /// The peak's capacity in shares of the rate (the wire's bandwidth
    /// over the rate), at least 1.
    peak: f64,
    /// The tokens held at `at`.
    tokens: f64,
    /// When `tokens` was last brought up to date.
    at: f64,
    /// The sum of its flows' shares since `at`.
    usage: f64,
    /// Bumped at each new time of running dry, so that one scheduled
    /// before is known to be stale.
    generation: u32,
}

impl Tank {
    /// `bucket` (its size, peak and starting level) on a link of `beta`
    /// seconds per byte.
    pub(super) fn new(bucket: super::Bucket, beta: f64) -> Self {
        let depth = bucket.bytes() * beta;
        Self {
            depth,
            peak: (bucket.peak_bytes_per_s() * beta).max(1.0),
            tokens: bucket.level_bytes() * beta,
            at: 0.0,
            usage: 0.0,
            generation: 0,
        }
    }
    /// The tokens at `now`: what `usage` under or over the rate has added
    /// or drained since `at`. A bucket within a billionth of its size of
    /// empty is empty (so that rounding cannot keep it at the peak).
    fn settle(&mut self, now: f64) {
        let t = self.tokens + (1.0 - self.usage) * (now - self.at).max(0.0);
        self.tokens = if t <= self.depth * 1e-9 {
            0.0
        } else {
            t.min(self.depth)
        };
        self.at = now;
    }
    /// The share of its link's rate it lets through now.
    fn capacity(&self) -> f64 {
        if self.tokens > 0.0 { self.peak } else { 1.0 }
    }
}

/// A link's bucket that runs dry: the link, when, and the generation
/// that time carries.
pub(super) type Drained = (usize, f64, u32);

/// One flow: a message moving over its links.
#[derive(Debug, Clone)]
struct Flow {
    /// The links it crosses (indices into [`Flows::on_link`]); the second
    /// is `None` where its route leaves and arrives by the same link.
    links: [Option<usize>; 2],
    /// Its work (seconds at share 1), until its first share.
    work: f64,
    /// Its share of its links (0 until the first recomputation).
    share: f64,
    /// When it ends at its share.
    finish: f64,
    /// Bumped at each new finish, so that a finish scheduled before is
    /// known to be stale.
    generation: u32,
}

/// A flow whose finish is new: its message, its finish and the generation
/// that finish carries.
pub(super) type Changed = (usize, f64, u32);

/// The flows moving and the links they cross.
#[derive(Debug, Default)]
pub(super) struct Flows {
    /// Each link seen, by its index.
    index: HashMap<Link, usize>,
    /// The flows (message numbers) on each link, in order of start.
    on_link: Vec<Vec<usize>>,
    /// The flows, by message number.
    flows: HashMap<usize, Flow>,
    /// Scratch: each link's place in the component being recomputed
    /// (`usize::MAX` outside it).
    local: Vec<usize>,
    /// Each link's token bucket, where a shaper is in front of it.
    tanks: Vec<Option<Tank>>,
    /// Buckets that will run dry, found since the replay last took them.
    drains: Vec<Drained>,
}

impl Flows {
    /// Starts a flow of message `m` at `now` with `work` seconds of work at
    /// share 1 over the links `out` and `into`; returns the flows whose
    /// finish changed (the new one among them).
    pub(super) fn start(
        &mut self,
        m: usize,
        (out, into): (Link, Link),
        tanks: [Option<Tank>; 2],
        now: f64,
        work: f64,
    ) -> Vec<Changed> {
        let a = self.link(out, tanks[0]);
        let b = (into != out).then(|| self.link(into, tanks[1]));
        for l in [Some(a), b].into_iter().flatten() {
            self.on_link[l].push(m);
        }
        self.flows.insert(
            m,
            Flow {
                links: [Some(a), b],
                work,
                share: 0.0,
                finish: f64::INFINITY,
                generation: 0,
            },
        );
        self.reshare(&[Some(a), b], now)
    }

    /// Ends the flow of message `m` at `now` (its finish); returns the
    /// flows whose finish changed. Nothing for a message without a flow.
    pub(super) fn end(&mut self, m: usize, now: f64) -> Vec<Changed> {
        let Some(flow) = self.flows.remove(&m) else {
            return Vec::new();
        };
        for l in flow.links.into_iter().flatten() {
            let on = &mut self.on_link[l];
            if let Some(i) = on.iter().position(|&f| f == m) {
                on.remove(i);
            }
        }
        self.reshare(&flow.links, now)
    }

    /// Whether message `m` has a flow moving.
    pub(super) fn moving(&self, m: usize) -> bool {
        self.flows.contains_key(&m)
    }

    /// Whether `generation` is the current one of message `m`'s flow.
    pub(super) fn current(&self, m: usize, generation: u32) -> bool {
        self.flows
            .get(&m)
            .is_some_and(|f| f.generation == generation)
    }

    /// The index of `link`, registered (with its bucket at its starting
    /// level) the first time it is seen.
    fn link(&mut self, link: Link, tank: Option<Tank>) -> usize {
        let n = self.on_link.len();
        let i = *self.index.entry(link).or_insert(n);
        if i == n {
            self.on_link.push(Vec::new());
            self.local.push(usize::MAX);
            self.tanks.push(tank);
        }
        i
    }

    /// Takes the times at which buckets run dry found since the last call.
    pub(super) fn take_drains(&mut self) -> Vec<Drained> {
        std::mem::take(&mut self.drains)
    }

    /// Link `l`'s bucket runs dry at `now` (stale unless `generation` is
    /// its current one): its flows fall back to the rate. Returns the
    /// flows whose finish changed.
    pub(super) fn drained(&mut self, l: usize, now: f64, generation: u32) -> Vec<Changed> {
        match self.tanks.get(l).copied().flatten() {
            Some(t) if t.generation == generation => self.reshare(&[Some(l)], now),
            _ => Vec::new(),
        }
    }

    /// The links and flows of the component of the links `seeds`: links
    /// in the order found, flows in the order found.
    fn component(&mut self, seeds: &[Option<usize>]) -> (Vec<usize>, Vec<usize>) {
        let mut links: Vec<usize> = Vec::new();
        let mut flows: Vec<usize> = Vec::new();
        let mut seen: HashSet<usize> = HashSet::new();
        for l in seeds.iter().flatten() {
            if self.local[*l] == usize::MAX {
                self.local[*l] = links.len();
                links.push(*l);
            }
        }
        let mut next = 0;
        while next < links.len() {
            let l = links[next];
            next += 1;
            for &f in &self.on_link[l] {
                if !seen.insert(f) {
                    continue;
                }
                flows.push(f);
                for o in self.flows[&f].links.into_iter().flatten() {
                    if self.local[o] == usize::MAX {
                        self.local[o] = links.len();
                        links.push(o);
                    }
                }
            }
        }
        (links, flows)
    }

    /// Recomputes the shares of the component of `seeds` at `now` by
    /// progressive filling; returns the flows whose finish changed.
    fn reshare(&mut self, seeds: &[Option<usize>], now: f64) -> Vec<Changed> {
        let (links, flows) = self.component(seeds);
        // Each link's time left to give (its bucket's peak while it holds
        // tokens) and its flows without a share yet.
        let mut left: Vec<f64> = links
            .iter()
            .map(|&l| match &mut self.tanks[l] {
                Some(t) => {
                    t.settle(now);
                    t.capacity()
                }
                None => 1.0,
            })
            .collect();
        let mut open: Vec<usize> = links.iter().map(|&l| self.on_link[l].len()).collect();
        let mut share: HashMap<usize, f64> = HashMap::with_capacity(flows.len());
        let mut unfixed = flows.len();
        while unfixed > 0 {
            // The link whose time left, divided among its open flows, is
            // the least (the first found on a tie).
            let Some((best, level)) = (0..links.len())
                .filter(|&i| open[i] > 0)
                .map(|i| (i, left[i].max(0.0) / open[i] as f64))
                .reduce(|a, b| if b.1 < a.1 { b } else { a })
            else {
                break;
            };
            for &f in &self.on_link[links[best]] {
                if share.contains_key(&f) {
                    continue;
                }
                share.insert(f, level);
                unfixed -= 1;
                for l in self.flows[&f].links.into_iter().flatten() {
                    let i = self.local[l];
                    left[i] -= level;
                    open[i] -= 1;
                }
            }
        }
        for &l in &links {
            self.local[l] = usize::MAX;
        }
        self.fill_tanks(&links, &share, now);
        let mut changed = Vec::new();
        for f in flows {
            let new = share[&f].max(f64::MIN_POSITIVE);
            let flow = self.flows.get_mut(&f).expect("a flow of the component");
            if new == flow.share {
                continue;
            }
            let work = if flow.share > 0.0 {
                (flow.finish - now).max(0.0) * flow.share
            } else {
                flow.work
            };
            flow.share = new;
            flow.finish = now + work / new;
            flow.generation = flow.generation.wrapping_add(1);
            changed.push((f, flow.finish, flow.generation));
        }
        changed
    }

    /// Each bucket of `links`: its usage under the new shares, and when it
    /// runs dry where it drains.
    fn fill_tanks(&mut self, links: &[usize], share: &HashMap<usize, f64>, now: f64) {
        for &l in links {
            let usage: f64 = self.on_link[l].iter().map(|f| share[f]).sum();
            let Some(t) = &mut self.tanks[l] else {
                continue;
            };
            t.usage = usage;
            t.generation = t.generation.wrapping_add(1);
            if t.tokens > 0.0 && usage > 1.0 {
                let dry = now + t.tokens / (usage - 1.0);
                self.drains.push((l, dry, t.generation));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// k flows into one link, each from its own: each gets 1/k, and the
    /// shares return to 1 as the others end.
    #[test]
    fn flows_on_one_link_share_it_equally() {
        let mut f = Flows::default();
        for k in 0..4usize {
            f.start(k, (Link::RankOut(k), Link::RankIn(9)), [None; 2], 0.0, 1.0);
        }
        for k in 0..4usize {
            assert_eq!(f.flows[&k].share, 0.25);
            assert_eq!(f.flows[&k].finish, 4.0);
        }
        let changed = f.end(0, 4.0);
        assert_eq!(changed.len(), 3);
        assert!(changed.iter().all(|c| c.1 == 4.0));
        assert_eq!(f.flows[&1].share, 1.0 / 3.0);
    }

    /// Two flows share link X; one of them also shares link Y with two
    /// more. Max-min: the three on Y get 1/3 each; the other on X gets
    /// the rest of X, 2/3 (an equal split of X would give it 1/2).
    #[test]
    fn a_flow_bottlenecked_elsewhere_leaves_its_share_to_others() {
        let mut f = Flows::default();
        let x = Link::NodeOut(0);
        let y = Link::NodeIn(1);
        f.start(0, (x, Link::NodeIn(0)), [None; 2], 0.0, 1.0);
        f.start(1, (x, y), [None; 2], 0.0, 1.0);
        f.start(2, (Link::NodeOut(2), y), [None; 2], 0.0, 1.0);
        f.start(3, (Link::NodeOut(3), y), [None; 2], 0.0, 1.0);
        let s = |m: usize| f.flows[&m].share;
        assert!((s(1) - 1.0 / 3.0).abs() < 1e-15);
        assert!((s(0) - 2.0 / 3.0).abs() < 1e-15);
        assert!((s(2) - 1.0 / 3.0).abs() < 1e-15);
    }
}
