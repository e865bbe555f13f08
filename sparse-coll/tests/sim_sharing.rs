//! Bandwidth sharing in the simulator's replay: messages that cross a link
//! at once share its bandwidth max-min fairly (SimGrid's flow model), in
//! closed form and against a brute-force fluid simulation.

mod common;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparse_coll::sim::{AlphaBeta, FullBisection, Link, Network, Op, Trace, TwoLevel, replay};

/// 1 us, 1 GB/s: a byte takes 1 ns.
fn ethernet() -> FullBisection {
    FullBisection::new("test", AlphaBeta::new(1e-6, 1e9).unwrap())
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

/// k ranks send `m` bytes each to rank 0 at once: the k flows share rank
/// 0's incoming link, each at 1/k of it, so every send returns at
/// `k m beta` and rank 0 has them all at `alpha + k m beta`. (A FIFO link
/// let every sender go on at `m beta`, its own link being free.)
#[test]
fn k_flows_on_one_link_each_get_a_kth() {
    let net = ethernet();
    let (alpha, beta, m) = (1e-6, 1e-9, 10_000usize);
    for k in 1..=6usize {
        let traces: Vec<Trace> = (0..=k)
            .map(|r| match r {
                0 => (1..=k).map(|from| Op::Recv { from }).collect(),
                _ => vec![Op::Send { to: 0, bytes: m }],
            })
            .collect();
        let t = replay(&traces, &net).unwrap();
        let kmb = k as f64 * m as f64 * beta;
        for r in 1..=k {
            assert!(close(t.finish[r], kmb), "k = {k}, sender {r}: {t:?}");
        }
        assert!(close(t.finish[0], alpha + kmb), "k = {k}: {t:?}");
    }
}

/// Two flows of `m` and `3 m` bytes into one link: both move at 1/2 until
/// the small one ends at `2 m beta`; the large one, alone then, has `2 m`
/// bytes left at the whole bandwidth and ends at `4 m beta`: shares are
/// recomputed when a flow ends.
#[test]
fn a_flow_that_ends_gives_its_share_back() {
    let net = ethernet();
    let (beta, m) = (1e-9, 10_000usize);
    let traces: Vec<Trace> = vec![
        vec![Op::Recv { from: 1 }, Op::Recv { from: 2 }],
        vec![Op::Send { to: 0, bytes: m }],
        vec![Op::Send {
            to: 0,
            bytes: 3 * m,
        }],
    ];
    let t = replay(&traces, &net).unwrap();
    let mb = m as f64 * beta;
    assert!(close(t.finish[1], 2.0 * mb), "{t:?}");
    assert!(close(t.finish[2], 4.0 * mb), "{t:?}");
}

/// A flow that starts while another moves: the first alone for its first
/// `m / 2` bytes, then both at 1/2; the first has `m / 2` left, so ends at
/// `m beta / 2 + m beta`, and the second has moved `m / 2` of its `m` by
/// then, and ends alone `m beta / 2` later: at `2 m beta`.
#[test]
fn a_flow_that_starts_takes_its_share_from_then_on() {
    let net = ethernet();
    let (beta, m) = (1e-9, 10_000usize);
    let half = m as f64 * beta / 2.0;
    let traces: Vec<Trace> = vec![
        vec![Op::Recv { from: 1 }, Op::Recv { from: 2 }],
        vec![Op::Send { to: 0, bytes: m }],
        vec![Op::Compute(half), Op::Send { to: 0, bytes: m }],
    ];
    let t = replay(&traces, &net).unwrap();
    assert!(close(t.finish[1], 3.0 * half), "{t:?}");
    assert!(close(t.finish[2], 4.0 * half), "{t:?}");
}

/// Max-min is not an equal split. Nodes of 2 ranks (a NIC each way per
/// node): rank 0 sends to node 1 (flow A) while rank 1, on the same NIC,
/// sends to node 2 (flow B), where ranks 6 and 8 (nodes 3 and 4) send to
/// rank 5 too (C, D). Node 2's incoming NIC has 3 flows: 1/3 each. Node
/// 0's outgoing NIC then has 2/3 left for A, which so ends at `1.5 m beta`
/// (an equal split of node 0's NIC would give A 1/2 and `2 m beta`; a
/// FIFO NIC served A alone first: `m beta`). B, C, D end at `3 m beta`.
#[test]
fn a_flow_bottlenecked_elsewhere_leaves_bandwidth_to_others() {
    let nic = AlphaBeta::new(2e-6, 1e9).unwrap();
    let net = TwoLevel::new("t", 2, AlphaBeta::new(1e-7, 1e11).unwrap(), nic).unwrap();
    let (alpha, beta, m) = (2e-6, 1e-9, 10_000usize);
    let send = |to| Op::Send { to, bytes: m };
    let mut traces: Vec<Trace> = vec![Vec::new(); 10];
    traces[0] = vec![send(2)];
    traces[1] = vec![send(4)];
    traces[2] = vec![Op::Recv { from: 0 }];
    traces[4] = vec![Op::Recv { from: 1 }];
    traces[5] = vec![Op::Recv { from: 6 }, Op::Recv { from: 8 }];
    traces[6] = vec![send(5)];
    traces[8] = vec![send(5)];
    let t = replay(&traces, &net).unwrap();
    let mb = m as f64 * beta;
    assert!(close(t.finish[0], 1.5 * mb), "A: {t:?}");
    assert!(close(t.finish[2], alpha + 1.5 * mb), "A arrives: {t:?}");
    for r in [1, 6, 8] {
        assert!(close(t.finish[r], 3.0 * mb), "rank {r}: {t:?}");
    }
    assert!(close(t.finish[5], alpha + 3.0 * mb), "{t:?}");
}

/// Where no two messages share a link at a time, the times are those of
/// the alpha-beta model, bit for bit as a message alone: a chain of
/// messages, each `alpha + m beta` after the one before.
#[test]
fn private_links_keep_the_alpha_beta_times() {
    let net = ethernet();
    let (alpha, beta, m) = (1e-6, 1e-9, 1000usize);
    let traces = common::chain(4, m);
    let t = replay(&traces, &net).unwrap();
    // Each hop: the message leaves `m beta` after its sender had the one
    // before, and arrives `alpha` later.
    let mb = m as f64 * beta;
    let mut arrived = 0.0;
    for r in 1..4 {
        let left = arrived + mb;
        assert_eq!(
            t.finish[r - 1],
            left.max(t.finish[r - 1].min(left)),
            "{t:?}"
        );
        arrived = left + alpha;
    }
    assert_eq!(t.finish[3], arrived, "{t:?}");
    assert!(close(t.finish[3], 3.0 * (alpha + mb)), "{t:?}");
}

/// A brute-force fluid simulation of sends: time advances in steps of
/// `dt`; in each step the moving flows' shares come from water-filling in
/// increments of `eps` (every share not yet held by a full link grows by
/// `eps` while all its links have room for it), and each flow's work left
/// drops by its share times `dt`. A rank's sends leave one after the
/// other, each once the one before has left; a message finishes arriving
/// `alpha` after it has left. Returns each message's arrival, by sender
/// and order.
fn fluid(
    net: &dyn Network,
    sends: &[Vec<(f64, usize, usize)>],
    dt: f64,
    eps: f64,
) -> Vec<Vec<f64>> {
    // Per rank: the next send, and when it may start.
    let p = sends.len();
    let mut next = vec![0usize; p];
    let mut ready: Vec<f64> = (0..p)
        .map(|r| sends[r].first().map_or(0.0, |s| s.0))
        .collect();
    let mut arrived: Vec<Vec<f64>> = vec![Vec::new(); p];
    // Moving, by sender: its links, work left (seconds at share 1), alpha.
    let mut moving: Vec<Option<Flow>> = vec![None; p];
    let mut share = vec![0.0; p];
    let mut last_set: Vec<Option<Vec<Link>>> = vec![None; p];
    let mut now = 0.0;
    loop {
        for r in 0..p {
            if moving[r].is_none() && next[r] < sends[r].len() && ready[r] <= now + 1e-15 {
                let (_, to, bytes) = sends[r][next[r]];
                let route = net.route(r, to);
                let mut links = vec![route.out];
                if route.into != route.out {
                    links.push(route.into);
                }
                moving[r] = Some((links, bytes as f64 * route.beta, route.alpha));
            }
        }
        if moving.iter().all(Option::is_none) && (0..p).all(|r| next[r] >= sends[r].len()) {
            return arrived;
        }
        // Shares change only when a flow starts or ends.
        let set: Vec<Option<Vec<Link>>> = moving
            .iter()
            .map(|m| m.as_ref().map(|f| f.0.clone()))
            .collect();
        if set != last_set {
            share = water_fill(&moving, eps);
            last_set = set;
        }
        for r in 0..p {
            if let Some((_, work, alpha)) = &mut moving[r] {
                *work -= share[r] * dt;
                if *work <= 0.0 {
                    // It ends within this step: at the fraction of it its
                    // work left took.
                    let end = now + dt + *work / share[r];
                    arrived[r].push(end + *alpha);
                    next[r] += 1;
                    ready[r] = end + sends[r].get(next[r]).map_or(0.0, |s| s.0);
                    moving[r] = None;
                }
            }
        }
        now += dt;
    }
}

/// A flow of the fluid simulation: its links, its work left (seconds at
/// share 1) and its route's latency.
type Flow = (Vec<Link>, f64, f64);

/// Water-filling in increments of `eps`: every share not yet held by a
/// full link grows by `eps` while all its links have room for it.
fn water_fill(moving: &[Option<Flow>], eps: f64) -> Vec<f64> {
    let p = moving.len();
    let mut share = vec![0.0f64; p];
    let mut frozen = vec![false; p];
    loop {
        let mut grew = false;
        for r in 0..p {
            let Some((links, _, _)) = &moving[r] else {
                continue;
            };
            if frozen[r] {
                continue;
            }
            let room = links.iter().all(|l| {
                let used: f64 = (0..p)
                    .filter(|&o| moving[o].as_ref().is_some_and(|m| m.0.contains(l)))
                    .map(|o| share[o])
                    .sum();
                used + eps <= 1.0 + 1e-12
            });
            if room {
                share[r] += eps;
                grew = true;
            } else {
                frozen[r] = true;
            }
        }
        if !grew {
            return share;
        }
    }
}

/// Random patterns of sends (4 nodes of 2 ranks, NICs shared, sizes and
/// delays random) replayed against the brute-force fluid simulation
/// ([`fluid`], steps of 1/2,000 of the time of the largest message alone,
/// shares in increments of 1/1,200, which divides the shares of 1 to 6
/// flows exactly): every rank's finish agrees within 0.2% of the makespan
/// (the steps bound the fluid simulation's error; the largest difference
/// seen is 3e-4 of it).
#[test]
fn sharing_matches_a_brute_force_fluid_simulation() {
    let nic = AlphaBeta::new(3e-6, 1e9).unwrap();
    let net = TwoLevel::new("t", 2, AlphaBeta::new(1e-6, 4e9).unwrap(), nic).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let p = 8;
    let mut worst = 0.0f64;
    for case in 0..20 {
        // Per rank: (delay before the send, destination, bytes).
        let sends: Vec<Vec<(f64, usize, usize)>> = (0..p)
            .map(|r| {
                (0..rng.random_range(0..3))
                    .map(|_| {
                        let to = (r + rng.random_range(1..p)) % p;
                        let delay = rng.random_range(0..4) as f64 * 2e-6;
                        (delay, to, rng.random_range(1..=4) * 5_000)
                    })
                    .collect()
            })
            .collect();
        let mut traces: Vec<Trace> = vec![Vec::new(); p];
        for (r, list) in sends.iter().enumerate() {
            for &(delay, to, bytes) in list {
                traces[r].push(Op::Compute(delay));
                traces[r].push(Op::Send { to, bytes });
            }
        }
        // Each rank receives after its sends, from each peer in order.
        for (r, list) in sends.iter().enumerate() {
            for &(_, to, _) in list {
                traces[to].push(Op::Recv { from: r });
            }
        }
        let mut order: Vec<Vec<Op>> = traces
            .iter()
            .map(|t| {
                t.iter()
                    .copied()
                    .filter(|o| !matches!(o, Op::Recv { .. }))
                    .collect()
            })
            .collect();
        for (r, t) in traces.iter().enumerate() {
            order[r].extend(t.iter().copied().filter(|o| matches!(o, Op::Recv { .. })));
        }
        let t = replay(&order, &net).unwrap();
        let dt = 20_000.0 * 1e-9 / 2000.0;
        let brute = fluid(&net, &sends, dt, 1.0 / 1200.0);
        let span = t.makespan();
        for r in 0..p {
            // A receiver's finish is its last arrival (or its own last
            // send's leaving).
            let last_in = (0..p)
                .flat_map(|s| {
                    sends[s]
                        .iter()
                        .zip(&brute[s])
                        .filter(move |((_, to, _), _)| *to == r)
                        .map(|(_, &a)| a)
                })
                .fold(0.0, f64::max);
            let last_out = brute[r]
                .last()
                .map_or(0.0, |&a| a - net.route(r, sends[r].last().unwrap().1).alpha);
            let want = last_in.max(last_out);
            worst = worst.max((t.finish[r] - want).abs() / span);
            assert!(
                (t.finish[r] - want).abs() <= 0.002 * span,
                "case {case} rank {r}: replay {} s, fluid {want} s (makespan {span} s)",
                t.finish[r]
            );
        }
    }
    println!("largest difference: {:.2e} of the makespan", worst);
}
