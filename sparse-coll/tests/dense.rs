//! Dense baselines and the thread transport, for P = 1..=9, 16 and 17:
//! results against the dense oracle, bitwise identical on every rank, and
//! traffic equal to the cost model's formulas.

use sparse_coll::{Group, ThreadCluster, Traffic, Transport, dense};
use sparse_core::cost;
use sparse_core::testing::generate::{ValueDist, dense_values};
use sparse_core::{Error, Result};
use std::time::{Duration, Instant};

const RANKS: [usize; 11] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17];

type Allreduce = fn(&mut sparse_coll::ThreadTransport, &[f32]) -> Result<Vec<f32>>;

const ALGOS: [(&str, Allreduce); 3] = [
    ("ring", dense::ring_allreduce::<_, f32>),
    (
        "recursive_doubling",
        dense::recursive_doubling_allreduce::<_, f32>,
    ),
    ("rabenseifner", dense::rabenseifner_allreduce::<_, f32>),
];

fn input(rank: usize, n: usize) -> Vec<f32> {
    dense_values(n, ValueDist::Integer { max: 1000 }, 1000 + rank as u64)
}

fn run(p: usize, n: usize, f: Allreduce) -> Vec<(Vec<f32>, Traffic)> {
    ThreadCluster::new(p)
        .run(|t| {
            let x = input(t.rank(), n);
            let out = f(t, &x)?;
            Ok((out, t.traffic()))
        })
        .into_iter()
        .map(|r| r.expect("rank succeeded"))
        .collect()
}

fn pow2_floor(p: usize) -> usize {
    1 << cost::floor_log2(p)
}

#[test]
fn allreduces_equal_the_oracle_and_agree_bitwise() {
    for p in RANKS {
        for n in [0, 1, 5, 1001, 3 * p * pow2_floor(p)] {
            let mut oracle = vec![0.0f32; n];
            for r in 0..p {
                for (o, v) in oracle.iter_mut().zip(input(r, n)) {
                    *o += v;
                }
            }
            for (name, f) in ALGOS {
                let out = run(p, n, f);
                for (r, (res, _)) in out.iter().enumerate() {
                    assert_eq!(res, &oracle, "{name} P={p} n={n} rank {r}");
                    let bits = |v: &Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(res),
                        bits(&out[0].0),
                        "{name} P={p} n={n}: rank {r} differs bitwise from rank 0"
                    );
                }
            }
        }
    }
}

#[test]
fn traffic_equals_the_cost_model() {
    for p in RANKS {
        let pp = pow2_floor(p);
        // n divisible by P and by p', so the formulas are exact.
        let n = 4 * p * pp;
        for (name, f) in ALGOS {
            let out = run(p, n, f);
            let model = match name {
                "ring" => cost::ring_allreduce(p, n),
                "recursive_doubling" => cost::recursive_doubling_allreduce(p, n),
                _ => cost::rabenseifner_allreduce(p, n),
            };
            let max_recv = out.iter().map(|(_, t)| t.bytes_recv).max().unwrap();
            let max_rounds = out.iter().map(|(_, t)| t.rounds).max().unwrap();
            assert_eq!(
                max_recv as f64,
                model.bytes(),
                "{name} P={p}: bytes received by the busiest rank"
            );
            assert_eq!(
                max_rounds as f64, model.rounds,
                "{name} P={p}: rounds of the busiest rank"
            );
            let sent: u64 = out.iter().map(|(_, t)| t.bytes_sent).sum();
            let recv: u64 = out.iter().map(|(_, t)| t.bytes_recv).sum();
            assert_eq!(sent, recv, "{name} P={p}: every byte sent is received");
            if name == "ring" {
                // The ring is symmetric: every rank moves the same.
                assert!(out.iter().all(|(_, t)| t.bytes_recv == max_recv && t.msgs_recv == 2 * (p as u64 - 1)));
            }
        }
    }
}

#[test]
fn bruck_allgather_any_sizes_and_counts() {
    for p in RANKS {
        let block = |r: usize| vec![r as u8; (r * 3) % 7];
        let out: Vec<(Vec<Vec<u8>>, Traffic)> = ThreadCluster::new(p)
            .run(|t| {
                let b = block(t.rank());
                Ok((dense::bruck_allgather(t, &b)?, t.traffic()))
            })
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        for (r, (blocks, traffic)) in out.iter().enumerate() {
            let want: Vec<Vec<u8>> = (0..p).map(block).collect();
            assert_eq!(blocks, &want, "P={p} rank {r}");
            let expect: usize = (0..p).filter(|&q| q != r).map(|q| 4 + block(q).len()).sum();
            assert_eq!(traffic.bytes_recv, expect as u64, "P={p} rank {r}: bytes");
            assert_eq!(
                traffic.rounds as f64,
                cost::bruck_allgather(p, 1).rounds,
                "P={p}: ceil(lg P) rounds"
            );
        }
        // Equal blocks of m bytes: (P - 1)(m + 4) bytes, the cost model's (P - 1) m words plus framing.
        let m = 12;
        for r in ThreadCluster::new(p).run(|t| {
            dense::bruck_allgather(t, &[7u8; 12])?;
            Ok(t.traffic())
        }) {
            let traffic = r.unwrap();
            assert_eq!(
                traffic.bytes_recv as f64,
                cost::bruck_allgather(p, m).words + 4.0 * (p as f64 - 1.0)
            );
        }
    }
}

#[test]
fn recursive_doubling_allgather_any_sizes_and_counts() {
    for p in RANKS {
        let block = |r: usize| vec![r as u8; (r * 5) % 9];
        let out: Vec<(Vec<Vec<u8>>, Traffic)> = ThreadCluster::new(p)
            .run(|t| {
                let b = block(t.rank());
                Ok((dense::recursive_doubling_allgather(t, &b)?, t.traffic()))
            })
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        let pp = 1usize << p.ilog2();
        let rem = p - pp;
        let framed = |qs: &mut dyn Iterator<Item = usize>| -> u64 {
            qs.map(|q| 4 + block(q).len() as u64).sum()
        };
        for (r, (blocks, traffic)) in out.iter().enumerate() {
            let want: Vec<Vec<u8>> = (0..p).map(block).collect();
            assert_eq!(blocks, &want, "P={p} rank {r}");
            // MPICH's fold: a folded (even) rank gets all P blocks back in one
            // message; its odd partner got the folded block unframed.
            let (bytes, rounds) = if r < 2 * rem && r % 2 == 0 {
                (framed(&mut (0..p)), 2)
            } else if r < 2 * rem {
                (
                    block(r - 1).len() as u64
                        + framed(&mut (0..p).filter(|&q| q != r && q != r - 1)),
                    pp.ilog2() + 2,
                )
            } else {
                (framed(&mut (0..p).filter(|&q| q != r)), pp.ilog2())
            };
            assert_eq!(traffic.bytes_recv, bytes, "P={p} rank {r}: bytes");
            assert_eq!(traffic.rounds, rounds as u64, "P={p} rank {r}: rounds");
        }
    }
}

#[test]
fn groups_renumber_and_count_through_the_parent() {
    // Even ranks form one group, odd ranks another, in reverse order.
    let out = ThreadCluster::new(5).run(|t| {
        let r = t.rank();
        let mut members: Vec<usize> = (0..5).filter(|q| q % 2 == r % 2).collect();
        members.reverse();
        let before = t.traffic();
        let mut g = Group::new(t, members.clone())?;
        let (gr, gs) = (g.rank(), g.size());
        let blocks = dense::bruck_allgather(&mut g, &[r as u8])?;
        let bad = g.send(gs, &[]);
        drop(g);
        Ok((gr, gs, blocks, members, t.traffic().since(&before), bad))
    });
    for (r, res) in out.into_iter().enumerate() {
        let (gr, gs, blocks, members, traffic, bad) = res.unwrap();
        assert_eq!(members[gr], r, "group rank {gr} is parent rank {r}");
        assert_eq!(gs, members.len());
        let want: Vec<Vec<u8>> = members.iter().map(|&m| vec![m as u8]).collect();
        assert_eq!(blocks, want, "rank {r}");
        assert_eq!(
            traffic.bytes_recv,
            5 * (gs as u64 - 1),
            "counted by the parent"
        );
        assert!(matches!(bad, Err(Error::NoSuchRank { .. })));
    }
    // This rank must be a member; members must be distinct parent ranks.
    for res in ThreadCluster::new(3).run(|t| {
        let errs = [
            Group::new(t, vec![(t.rank() + 1) % 3]).err(),
            Group::new(t, vec![t.rank(), t.rank()]).err(),
            Group::new(t, vec![t.rank(), 3]).err(),
        ];
        Ok(errs)
    }) {
        for e in res.unwrap() {
            assert!(matches!(
                e,
                Some(Error::InvalidParameter {
                    name: "members",
                    ..
                })
            ));
        }
    }
}

#[test]
fn zero_length_messages_and_distinct_peers() {
    let out = ThreadCluster::new(3).run(|t| {
        let (r, p) = (t.rank(), t.size());
        let got = t.exchange((r + 1) % p, &[], (r + p - 1) % p)?;
        let echo = t.exchange((r + 2) % p, &[r as u8], (r + 1) % p)?;
        Ok((got, echo, t.traffic()))
    });
    for (r, res) in out.into_iter().enumerate() {
        let (got, echo, traffic) = res.unwrap();
        assert!(got.is_empty());
        assert_eq!(echo, vec![((r + 1) % 3) as u8]);
        assert_eq!(
            (
                traffic.msgs_sent,
                traffic.msgs_recv,
                traffic.bytes_recv,
                traffic.rounds
            ),
            (2, 2, 1, 2)
        );
    }
    let bad = ThreadCluster::new(2).run(|t| t.send(5, &[1]));
    assert!(matches!(
        bad[0],
        Err(Error::NoSuchRank { rank: 5, size: 2 })
    ));
}

#[test]
fn a_failed_rank_makes_every_other_rank_fail_quickly() {
    let timeout = Duration::from_secs(5);
    for (p, rank, step) in [(5usize, 2usize, 2u64), (4, 0, 1), (9, 8, 5), (17, 3, 3)] {
        let start = Instant::now();
        let out = ThreadCluster::new(p)
            .timeout(timeout)
            .fault(rank, step)
            .run(|t| {
                let x = input(t.rank(), 1000);
                dense::ring_allreduce(t, &x)
            });
        assert!(
            start.elapsed() < timeout,
            "P={p}: took {:?}",
            start.elapsed()
        );
        for (r, res) in out.iter().enumerate() {
            match res {
                Err(Error::Injected { rank: fr, step: s }) => {
                    assert_eq!((r, *fr, *s), (rank, rank, step))
                }
                Err(Error::PeerFailed { .. }) => assert_ne!(r, rank),
                other => panic!("P={p} rank {r}: expected an error, got {other:?}"),
            }
        }
    }
    // A panicking rank counts as failed too.
    let out = ThreadCluster::new(4).timeout(timeout).run(|t| {
        if t.rank() == 1 {
            panic!("boom");
        }
        dense::recursive_doubling_allreduce(t, &input(t.rank(), 64))
    });
    assert!(
        matches!(&out[1], Err(Error::Panicked { rank: 1, message }) if message.contains("boom"))
    );
    assert!(out.iter().all(Result::is_err));
}

#[test]
fn a_silent_rank_times_out() {
    let out = ThreadCluster::new(2)
        .timeout(Duration::from_millis(100))
        .run(|t| {
            if t.rank() == 1 {
                std::thread::sleep(Duration::from_millis(400));
                return Ok(Vec::new());
            }
            t.recv(1)
        });
    assert!(matches!(
        out[0],
        Err(Error::Timeout {
            rank: 0,
            peer: 1,
            timeout_ms: 100
        })
    ));
}
