//! The lossy sparse allreduces (gTopk, Ok-Topk, SparDL with R-SAG and
//! B-SAG) on the thread transport: the conservation identity on
//! integer-valued inputs (exact), bitwise identical results, budgets kept,
//! brute-force oracles for what is selected, and traffic equal to the
//! formulas for each input.

mod common;
use common::{
    RANKS, assert_all_disagree, assert_conserved, assert_within_shares, inputs, oracle, run,
    topk_by_sort,
};
use sparse_coll::cost;
use sparse_coll::{
    Budget, Gtopk, OkTopk, Reduced, Spardl, SpardlBsag, SpardlRsag, SparseAllreduce, ThreadCluster,
    Transport,
};
use sparse_core::stats::{even_len, even_start};
use sparse_core::{Error, SparseVec};

/// `(dim, density, overlap, k)` cases: sparse and dense, the least budget
/// (k = 1) included (k = 0 is an error: `tests/budget.rs`).
const CASES: [(usize, f64, f64, usize); 4] = [
    (1000, 0.05, 0.5, 20),
    (10_007, 0.01, 0.0, 33),
    (97, 0.3, 1.0, 5),
    (500, 0.02, 0.2, 1),
];

/// Every rank holds every coordinate (non-zero), so every block is full.
fn full_inputs(p: usize, dim: usize) -> Vec<SparseVec<f32>> {
    (0..p)
        .map(|r| {
            let d: Vec<f32> = (0..dim)
                .map(|i| {
                    (((i * 7 + r * 13) % 23) as f32 + 1.0) * if i % 3 == 0 { -1.0 } else { 1.0 }
                })
                .collect();
            SparseVec::from_dense(&d).unwrap()
        })
        .collect()
}

fn ceil_lg(p: usize) -> u64 {
    (usize::BITS - (p - 1).leading_zeros()) as u64
}

#[test]
fn gtopk_conserves_the_sum_and_keeps_k() {
    for p in RANKS {
        for (dim, density, overlap, k) in CASES {
            for skew in [false, true] {
                let ins = inputs(p, dim, density, overlap, skew, (p * 7 + dim + k) as u64);
                let out = run(p, &ins, |t, v| Gtopk::new(Budget::k(k)?).allreduce(t, v));
                let ctx = format!("gtopk P={p} dim={dim} k={k} skew={skew}");
                assert_conserved(&ins, &out, &ctx);
                assert!(out[0].result.nnz() <= k, "{ctx}");
            }
        }
    }
}

/// gTopk's result, brute force: rank `r` sums its own top `k` with its
/// children's results (distances 1, 2, 4, ... below `upto`), cutting the
/// sum to its top `k` after each child, as the binomial tree does.
fn gtopk_tree(ins: &[SparseVec<f32>], r: usize, upto: usize, k: usize) -> SparseVec<f32> {
    let mut acc = topk_by_sort(&ins[r], k);
    let mut dist = 1;
    while dist < upto && r + dist < ins.len() {
        let child = gtopk_tree(ins, r + dist, dist, k);
        acc = topk_by_sort(&acc.merge_sum(&child).unwrap(), k);
        dist *= 2;
    }
    acc
}

#[test]
fn gtopk_equals_a_brute_force_reduction_tree() {
    for p in RANKS {
        for (dim, density, overlap, k) in CASES {
            let ins = inputs(p, dim, density, overlap, false, (p * 5 + k) as u64);
            let want = gtopk_tree(&ins, 0, usize::MAX, k);
            for (r, red) in run(p, &ins, |t, v| Gtopk::new(Budget::k(k)?).allreduce(t, v))
                .iter()
                .enumerate()
            {
                assert_eq!(red.result, want, "P={p} dim={dim} k={k} rank {r}");
            }
        }
    }
}

#[test]
fn gtopk_with_room_for_everything_is_lossless() {
    for p in RANKS {
        let ins = inputs(p, 300, 0.05, 0.3, false, 4);
        for red in run(p, &ins, |t, v| Gtopk::new(Budget::k(300)?).allreduce(t, v)) {
            assert_eq!(red.result.to_dense(), oracle(&ins), "P={p}");
            assert_eq!(red.dropped.nnz(), 0, "P={p}");
        }
    }
}

#[test]
fn gtopk_traffic_matches_table_1() {
    for p in RANKS {
        let k = 10;
        let out = run(p, &full_inputs(p, 200), |t, v| {
            Gtopk::new(Budget::k(k)?).allreduce(t, v)
        });
        // Rank 0 receives ceil(lg P) messages of k pairs (4-byte count
        // each) and sends as many down the broadcast tree.
        let t0 = out[0].traffic;
        let lg = ceil_lg(p);
        assert_eq!(t0.bytes_recv, lg * (4 + 8 * k as u64), "P={p}");
        assert_eq!(t0.bytes_sent, lg * (4 + 8 * k as u64), "P={p}");
        assert_eq!(t0.rounds as f64, cost::gtopk(p, k).rounds, "P={p}");
        assert_eq!(
            (t0.bytes_recv + t0.bytes_sent) as f64,
            cost::gtopk(p, k).bytes() + 8.0 * lg as f64,
            "P={p}: Table 1's 4 k lg P words, sent and received"
        );
        for red in &out {
            assert!(red.traffic.rounds <= 2 * lg);
            assert!(red.traffic.bytes_recv <= t0.bytes_recv);
        }
    }
}

/// Ok-Topk's selection by brute force: the entries reaching the `k`-th
/// largest magnitude (all when there are fewer than `k`); past the budget
/// `max(k, floor(1.3 k))` (ties), the `k` largest by a full sort, the lower
/// index first among equal magnitudes.
fn ok_select(v: &SparseVec<f32>, k: usize) -> SparseVec<f32> {
    let th = kth_abs(v.values().iter().copied(), k);
    let mut pairs: Vec<(u32, f32)> = v.iter().filter(|(_, x)| x.abs() >= th).collect();
    if pairs.len() > k.max(k * 13 / 10) {
        pairs.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()).then(a.0.cmp(&b.0)));
        pairs.truncate(k);
        pairs.sort_by_key(|p| p.0);
    }
    let (i, x) = pairs.into_iter().unzip();
    SparseVec::new(v.dim(), i, x).unwrap()
}

/// The `k`-th largest magnitude of `xs` (0 when there are fewer).
fn kth_abs(xs: impl Iterator<Item = f32>, k: usize) -> f32 {
    let mut m: Vec<f32> = xs.map(f32::abs).collect();
    m.sort_by(|a, b| b.total_cmp(a));
    if k == 0 {
        f32::INFINITY
    } else {
        m.get(k - 1).copied().unwrap_or(0.0)
    }
}

#[test]
fn ok_topk_first_call_is_exact_against_a_brute_force_oracle() {
    for p in RANKS {
        for (dim, density, overlap, k) in CASES {
            let ins = inputs(p, dim, density, overlap, true, (p + dim) as u64);
            let out: Vec<(Reduced<f32>, Vec<usize>)> = ThreadCluster::new(p)
                .run(|t| {
                    let mut ok = OkTopk::new(Budget::k(k)?, 4)?;
                    let red = {
                        let r = Transport::rank(t);
                        ok.allreduce(t, &ins[r])
                    }?;
                    Ok((red, ok.bounds().to_vec()))
                })
                .into_iter()
                .map(|r| r.unwrap())
                .collect();
            let ctx = format!("ok-topk P={p} dim={dim} k={k}");
            let reds: Vec<Reduced<f32>> = out.iter().map(|o| o.0.clone()).collect();
            assert_conserved(&ins, &reds, &ctx);
            let bounds = &out[0].1;
            assert!(out.iter().all(|o| &o.1 == bounds), "{ctx}: same regions");
            assert_eq!((bounds[0], bounds[p]), (0, dim));
            // Local selection: each rank's entries reaching its k-th magnitude.
            let sel: Vec<SparseVec<f32>> = ins.iter().map(|v| ok_select(v, k)).collect();
            let mut sum = SparseVec::zeros(dim).unwrap();
            for s in &sel {
                sum = sum.merge_sum(s).unwrap();
            }
            // Global selection: the summed entries reaching the k-th magnitude.
            assert_eq!(out[0].0.result, ok_select(&sum, k), "{ctx}");
            let th = kth_abs(sum.values().iter().copied(), k);
            let (i, x) = sum.iter().filter(|(_, x)| x.abs() >= th).unzip();
            let reaching = SparseVec::new(dim, i, x).unwrap();
            // Traffic, from the inputs and the regions alone.
            let region = |q: usize, v: &SparseVec<f32>| {
                v.indices()
                    .iter()
                    .filter(|&&i| (bounds[q]..bounds[q + 1]).contains(&(i as usize)))
                    .count() as u64
            };
            let (pu, ku) = (p as u64, k as u64);
            for (r, (red, _)) in out.iter().enumerate() {
                let others = (0..p).filter(|&q| q != r);
                let split: u64 = others.clone().map(|q| 4 + 8 * region(r, &sel[q])).sum();
                let cuts = (pu - 1) * (4 + 8 + 4 * (pu - 1));
                let mags: u64 = others
                    .clone()
                    .map(|q| 4 + 4 * region(q, &sum).min(ku))
                    .sum();
                // The allgather carries every entry reaching the threshold
                // (ties included), before the budget cuts them to k.
                let gather: u64 = others.map(|q| 8 + 8 * region(q, &reaching)).sum();
                assert_eq!(
                    red.traffic.bytes_recv,
                    split + cuts + mags + gather,
                    "{ctx} rank {r}"
                );
                assert_eq!(red.traffic.rounds, (pu - 1) + 3 * ceil_lg(p), "{ctx}");
            }
        }
    }
}

#[test]
fn ok_topk_reuses_its_thresholds_between_refreshes() {
    for p in [1usize, 3, 4, 7] {
        let period = 3;
        let calls: Vec<Vec<SparseVec<f32>>> = (0..7)
            .map(|c| inputs(p, 2000, 0.05, 0.5, c % 2 == 0, 100 + c))
            .collect();
        let out: Vec<Vec<Reduced<f32>>> = ThreadCluster::new(p)
            .run(|t| {
                let mut ok = OkTopk::new(Budget::k(40)?, period)?;
                calls
                    .iter()
                    .map(|ins| {
                        let r = Transport::rank(t);
                        ok.allreduce(t, &ins[r])
                    })
                    .collect::<sparse_core::Result<Vec<_>>>()
            })
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        for (c, ins) in calls.iter().enumerate() {
            let reds: Vec<Reduced<f32>> = out.iter().map(|o| o[c].clone()).collect();
            assert_conserved(ins, &reds, &format!("ok-topk P={p} call {c}"));
            let extra = if (c as u64).is_multiple_of(period) {
                2 * ceil_lg(p)
            } else {
                0
            };
            for red in &reds {
                assert_eq!(
                    red.traffic.rounds,
                    (p as u64 - 1) + ceil_lg(p) + extra,
                    "P={p} call {c}: refresh calls add two allgathers"
                );
            }
        }
    }
}

#[test]
fn ok_topk_ranks_out_of_step_get_an_error() {
    let out = ThreadCluster::new(3).run(|t| {
        let v = SparseVec::<f32>::zeros(50)?;
        let mut ok = OkTopk::new(Budget::k(5)?, 2)?;
        if t.rank() == 1 {
            // This rank's state runs one call ahead of the others'.
            ok = ThreadCluster::new(1)
                .run(|solo| {
                    let mut ahead = ok.clone();
                    ahead.allreduce(solo, &v).map(|_| ahead)
                })
                .pop()
                .unwrap()?;
        }
        ok.allreduce(t, &v)
    });
    assert_all_disagree(&out, "call", "ok-topk one call ahead");
}

#[test]
fn rsag_conserves_the_sum_and_keeps_shares() {
    for p in RANKS {
        for d in [1usize, 2, 4, 8].into_iter().filter(|d| p % d == 0) {
            for (dim, density, overlap, k) in CASES {
                let ins = inputs(p, dim, density, overlap, true, (p * 3 + d + k) as u64);
                let out = run(p, &ins, |t, v| {
                    SpardlRsag::new(Budget::k(k)?, Some(d)).allreduce(t, v)
                });
                let ctx = format!("r-sag P={p} d={d} dim={dim} k={k}");
                assert_conserved(&ins, &out, &ctx);
                assert_within_shares(&out[0].result, p / d, k, &ctx);
                if d == 1 {
                    let plain = run(p, &ins, |t, v| Spardl::new(Budget::k(k)?).allreduce(t, v));
                    assert_eq!(out[0].result, plain[0].result, "{ctx}: d = 1 is SparDL");
                }
            }
        }
    }
}

#[test]
fn rsag_with_room_for_everything_is_lossless() {
    for p in RANKS {
        for d in [1usize, 2, 4, 8].into_iter().filter(|d| p % d == 0) {
            let ins = inputs(p, 1500, 0.02, 0.5, true, (p + d) as u64);
            // Every block's share is its whole length: nothing is ever cut.
            for red in run(p, &ins, |t, v| {
                SpardlRsag::new(Budget::k(1500)?, Some(d)).allreduce(t, v)
            }) {
                assert_eq!(red.result.to_dense(), oracle(&ins), "P={p} d={d}");
                assert_eq!(red.dropped.nnz(), 0, "P={p} d={d}");
            }
        }
    }
}

#[test]
fn rsag_with_one_worker_per_team_equals_brute_force_recursive_doubling() {
    // d = P: each team is one worker holding the whole vector as its block,
    // so R-SAG is recursive doubling with a cut to the top k after each
    // step, which a brute force reproduces.
    for p in [1usize, 2, 4, 8, 16] {
        for (dim, density, overlap, k) in CASES {
            let ins = inputs(p, dim, density, overlap, true, (p * 13 + k) as u64);
            let mut held: Vec<SparseVec<f32>> = ins.iter().map(|v| topk_by_sort(v, k)).collect();
            let mut mask = 1;
            while mask < p {
                held = (0..p)
                    .map(|r| topk_by_sort(&held[r].merge_sum(&held[r ^ mask]).unwrap(), k))
                    .collect();
                mask <<= 1;
            }
            let out = run(p, &ins, |t, v| {
                SpardlRsag::new(Budget::k(k)?, Some(p)).allreduce(t, v)
            });
            for (r, red) in out.iter().enumerate() {
                assert_eq!(red.result, held[r], "P={p} dim={dim} k={k} rank {r}");
            }
            assert_conserved(&ins, &out, &format!("r-sag d=P={p} dim={dim} k={k}"));
        }
    }
}

#[test]
fn rsag_traffic_matches_eq_5() {
    for p in RANKS {
        for d in [1usize, 2, 4, 8, 16].into_iter().filter(|d| p % d == 0) {
            let (k, m) = (4 * p, p / d);
            let out = run(p, &full_inputs(p, 64 * p + 3), |t, v| {
                SpardlRsag::new(Budget::k(k)?, Some(d)).allreduce(t, v)
            });
            let model = cost::spardl_rsag(p, k, d);
            let lgd = d.ilog2() as f64;
            for red in &out {
                // 4 bytes of count per block in every phase, plus Bruck's frame.
                assert_eq!(
                    red.traffic.bytes_recv as f64,
                    model.bytes() + 12.0 * (m as f64 - 1.0) + 4.0 * lgd,
                    "P={p} d={d}"
                );
                assert_eq!(red.traffic.rounds as f64, model.rounds, "P={p} d={d}");
            }
        }
    }
}

/// Teams that do not fit are `InvalidParameter` named `d`, as the user
/// wrote it.
#[test]
fn sag_rejects_team_counts_that_do_not_fit() {
    for (p, d) in [(4usize, 3usize), (6, 4), (5, 2)] {
        for r in ThreadCluster::new(p).run(|t| {
            SpardlRsag::new(Budget::k(4)?, Some(d)).allreduce(t, &SparseVec::<f32>::zeros(40)?)
        }) {
            assert!(
                matches!(r, Err(Error::InvalidParameter { name: "d", .. })),
                "P={p} d={d}: {r:?}"
            );
        }
    }
    for r in ThreadCluster::new(4)
        .run(|t| SpardlBsag::new(Budget::k(4)?, 3)?.allreduce(t, &SparseVec::<f32>::zeros(40)?))
    {
        assert!(matches!(r, Err(Error::InvalidParameter { name: "d", .. })));
    }
}

#[test]
fn bsag_conserves_the_sum_over_calls() {
    for p in RANKS {
        for d in (1..=p).filter(|d| p % d == 0 && *d <= 6) {
            let k = 30;
            let calls: Vec<Vec<SparseVec<f32>>> = (0..4)
                .map(|c| inputs(p, 1500, 0.04, 0.4, c % 2 == 1, (p * 11 + d + c) as u64))
                .collect();
            let out: Vec<Vec<(Reduced<f32>, f64)>> = ThreadCluster::new(p)
                .run(|t| {
                    let mut b = SpardlBsag::new(Budget::k(k)?, d)?;
                    let mut v = Vec::new();
                    for ins in &calls {
                        let red = {
                            let r = Transport::rank(t);
                            b.allreduce(t, &ins[r])
                        }?;
                        v.push((red, b.h().unwrap()));
                    }
                    Ok(v)
                })
                .into_iter()
                .map(|r| r.unwrap())
                .collect();
            let m = p / d;
            for (c, ins) in calls.iter().enumerate() {
                let reds: Vec<Reduced<f32>> = out.iter().map(|o| o[c].0.clone()).collect();
                assert_conserved(ins, &reds, &format!("b-sag P={p} d={d} call {c}"));
                for (w, o) in out.iter().enumerate() {
                    let share = (k / m + usize::from(w % m < k % m)) as f64;
                    let h = o[c].1;
                    assert!(
                        h >= share / d as f64 - 1e-9 && h <= share + 1e-9,
                        "P={p} d={d} rank {w} call {c}: h = {h} outside [L/d, L]"
                    );
                }
            }
        }
    }
}

#[test]
fn bsag_first_call_equals_a_brute_force_oracle() {
    // k = dim: SRS and the final cut keep everything, so the result is, for
    // every team block, the sum over teams of each team's block sum cut to
    // its top h = round(L / d), L the block's length.
    for p in RANKS {
        for d in (1..=p).filter(|d| p % d == 0) {
            // Every rank holds every coordinate: each block is full, so
            // every cut to h (d > 1) removes entries, many tied in magnitude.
            let dim = 301;
            let ins = full_inputs(p, dim);
            let m = p / d;
            let mut want = SparseVec::zeros(dim).unwrap();
            for team in 0..d {
                let mut team_sum = SparseVec::zeros(dim).unwrap();
                for v in &ins[team * m..(team + 1) * m] {
                    team_sum = team_sum.merge_sum(v).unwrap();
                }
                for j in 0..m {
                    let (lo, len) = (even_start(j, dim, m), even_len(j, dim, m));
                    let h = (len as f64 / d as f64).round() as usize;
                    let cut = topk_by_sort(&team_sum.restrict(lo, len), h);
                    want = want.merge_sum(&cut).unwrap();
                }
            }
            let out = run(p, &ins, |t, v| {
                SpardlBsag::new(Budget::k(dim)?, d)?.allreduce(t, v)
            });
            for (r, red) in out.iter().enumerate() {
                assert_eq!(red.result, want, "P={p} d={d} rank {r}");
            }
            assert_conserved(&ins, &out, &format!("b-sag P={p} d={d}"));
        }
    }
}

#[test]
fn bsag_first_call_meets_its_lower_bound() {
    for p in RANKS {
        for d in (1..=p).filter(|d| p % d == 0) {
            // P divides k: the first h is k / P = L / d, a whole number.
            let (k, m) = (4 * p, p / d);
            let out = run(p, &full_inputs(p, 64 * p + 3), |t, v| {
                SpardlBsag::new(Budget::k(k)?, d)?.allreduce(t, v)
            });
            let model = cost::spardl_bsag(p, k, d).lo;
            let framing = 4 * (m - 1) + 8 * (d - 1) + 8 * (m - 1);
            for red in &out {
                assert_eq!(
                    red.traffic.bytes_recv as f64,
                    model.bytes() + framing as f64,
                    "P={p} d={d}"
                );
                assert_eq!(red.traffic.rounds as f64, model.rounds, "P={p} d={d}");
            }
        }
    }
}

/// Every algorithm of the registry that takes a budget
/// (`Entry::takes_budget`): ranks that give different `k` all get a
/// disagreement; and R-SAG's ranks that give different teams.
#[test]
fn ranks_that_disagree_on_k_or_teams_all_get_an_error() {
    let registry = sparse_coll::Registry::<f32>::builtin();
    let budgeted: Vec<&str> = registry
        .entries()
        .iter()
        .filter(|e| e.takes_budget())
        .map(|e| e.name())
        .collect();
    assert!(!budgeted.is_empty());
    for name in budgeted {
        for p in [2usize, 4] {
            let out = ThreadCluster::new(p).run(|t| {
                let k = if t.rank() == 1 { 7 } else { 8 };
                let spec = format!("{name}:k={k}");
                registry
                    .build(&spec, sparse_coll::Defaults::k(k)?)?
                    .allreduce(t, &SparseVec::<f32>::zeros(100)?)
            });
            assert_all_disagree(&out, "k", &format!("{name} P={p}"));
        }
    }
    let out = ThreadCluster::new(4).run(|t| {
        let d = if t.rank() == 3 { 4 } else { 2 };
        SpardlRsag::new(Budget::k(8)?, Some(d)).allreduce(t, &SparseVec::<f32>::zeros(100)?)
    });
    assert_all_disagree(&out, "teams", "r-sag with 2 and 4 teams");
}

/// Issue 11.5: an empty or tiny first call used to leave both thresholds at
/// 0, and the next `period - 1` calls sent everything (34x `k` at P = 4).
/// Now no rank sends more than the budget `max(k, floor(1.3 k))` into the
/// split phase and no result holds more, on every call, conservation holds,
/// and a call whose global threshold could not be estimated is followed by
/// a refresh call.
#[test]
fn ok_topk_stays_within_its_budget_after_a_tiny_first_call() {
    for p in [1usize, 2, 3, 4, 7] {
        for (k, period) in [(10usize, 8u64), (1, 5), (37, 3)] {
            let dim = 5000;
            let first: Vec<SparseVec<f32>> = (0..p)
                .map(|r| {
                    if r == 0 {
                        SparseVec::new(dim, vec![7], vec![1.0]).unwrap()
                    } else {
                        SparseVec::zeros(dim).unwrap()
                    }
                })
                .collect();
            let mut calls = vec![first];
            calls.extend((0..2 * period).map(|c| inputs(p, dim, 0.1, 0.3, c % 2 == 0, 7 + c)));
            let out: Vec<Vec<(Reduced<f32>, usize)>> = ThreadCluster::new(p)
                .run(|t| {
                    let mut ok = OkTopk::new(Budget::k(k)?, period)?;
                    let budget = ok.most(dim);
                    assert_eq!(budget, k.max(13 * k / 10));
                    let mut reds = Vec::new();
                    for (c, ins) in calls.iter().enumerate() {
                        let before = t.traffic();
                        let red = {
                            let r = Transport::rank(t);
                            ok.allreduce(t, &ins[r])
                        }?;
                        assert!(
                            red.result.nnz() <= budget,
                            "P={p} k={k} call {c}: result {} > {budget}",
                            red.result.nnz()
                        );
                        if c == 0 && k > 1 {
                            assert!(ok.refreshes_next(), "fewer than k seen: refresh at once");
                        }
                        reds.push((red, (t.traffic().bytes_sent - before.bytes_sent) as usize));
                    }
                    Ok(reds)
                })
                .into_iter()
                .map(|r| r.unwrap())
                .collect();
            for (c, ins) in calls.iter().enumerate() {
                let reds: Vec<Reduced<f32>> = out.iter().map(|o| o[c].0.clone()).collect();
                let ctx = format!("ok-topk P={p} k={k} call {c}");
                assert_conserved(ins, &reds, &ctx);
                // What a rank sends on a call is bounded by the budget in
                // the split phase, plus the entry, boundaries, magnitudes
                // and its region's share of the gathered selection.
                let most = (p - 1) * (4 + 8 * k.max(13 * k / 10))
                    + 8 * (p + 1) * (8 + 4 * p)
                    + 8 * (p + 1) * (4 + 4 * k)
                    + 8 * (p + 1) * (8 + 8 * k.max(13 * k / 10) * p)
                    + 64 * (p + 1);
                for (r, o) in out.iter().enumerate() {
                    assert!(o[c].1 <= most, "{ctx} rank {r}: sent {} > {most}", o[c].1);
                }
            }
        }
    }
}

/// One Ok-Topk object across calls whose dimension changes (growing and
/// shrinking, between refreshes): its regions are cut again for the new
/// dimension, so the inputs still sum to the result plus every `dropped`
/// on every call.
#[test]
fn ok_topk_conserves_across_changing_dimensions() {
    let dims = [1000usize, 97, 10_007, 500, 1000, 10];
    for p in [2usize, 3, 5] {
        for k in [1usize, 5, 40] {
            let calls: Vec<Vec<SparseVec<f32>>> = dims
                .iter()
                .enumerate()
                .map(|(c, &dim)| inputs(p, dim, 0.2, 0.3, false, 11 + c as u64))
                .collect();
            let out: Vec<Vec<Reduced<f32>>> = ThreadCluster::new(p)
                .run(|t| {
                    // A period longer than the run: only a change of
                    // dimension can make it re-cut.
                    let mut ok = OkTopk::new(Budget::k(k)?, 64)?;
                    let mut reds = Vec::new();
                    for ins in &calls {
                        let r = Transport::rank(t);
                        reds.push(ok.allreduce(t, &ins[r])?);
                        assert_eq!(ok.bounds().last(), Some(&ins[0].dim()));
                    }
                    Ok(reds)
                })
                .into_iter()
                .map(|r| r.unwrap())
                .collect();
            for (c, ins) in calls.iter().enumerate() {
                let per_call: Vec<Reduced<f32>> = out.iter().map(|o| o[c].clone()).collect();
                assert_conserved(ins, &per_call, &format!("P={p} k={k} call {c}"));
            }
        }
    }
}
