//! Token buckets in the simulator's links (a `tbf` shaper in front of each
//! port): closed forms of a bucket's drain and refill, the network file's
//! keys, and a brute-force fluid model of two shaped flows.

use sparse_coll::sim::{AlphaBeta, Bucket, FullBisection, Op, Trace, parse_network, replay};

/// 10 us, a rate of 1e8 bytes/s (0.8 Gb/s), a bucket of 250,000 bytes in
/// front of a wire of 1e9 bytes/s (ten times the rate).
const ALPHA: f64 = 1e-5;
const RATE: f64 = 1e8;
const PEAK: f64 = 1e9;
const DEPTH: f64 = 250_000.0;

fn shaped() -> FullBisection {
    FullBisection::new("tbf", AlphaBeta::new(ALPHA, RATE).unwrap())
        .with_bucket(Bucket::new(DEPTH, PEAK).unwrap())
}

/// When rank 0's send of `m` bytes to rank 1 completes on `net`.
fn one_send(net: &dyn sparse_coll::sim::Network, m: usize) -> f64 {
    let traces: Vec<Trace> = vec![
        vec![Op::Send { to: 1, bytes: m }],
        vec![Op::Recv { from: 0 }],
    ];
    replay(&traces, net).unwrap().finish[0]
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// One message of `m` bytes after a pause (both ports' buckets full): it
/// moves at the peak while the buckets hold tokens, which drain at
/// `peak - rate`; they run dry after `DEPTH / (PEAK - RATE)` seconds, when
/// `PEAK DEPTH / (PEAK - RATE)` bytes have gone; the rest goes at the
/// rate. So a send takes `m / PEAK` up to that size and `(m - DEPTH) /
/// RATE` above it.
fn one_message(m: f64) -> f64 {
    let through = PEAK * DEPTH / (PEAK - RATE);
    if m <= through {
        m / PEAK
    } else {
        (m - DEPTH) / RATE
    }
}

/// As [`one_message`] where the buckets start with `level` bytes of
/// tokens: the tokens last `level / (PEAK - RATE)` seconds, then the rest
/// goes at the rate, so a send takes `m / PEAK` up to `PEAK level / (PEAK -
/// RATE)` bytes and `(m - level) / RATE` above.
fn one_message_from(level: f64, m: f64) -> f64 {
    let through = PEAK * level / (PEAK - RATE);
    if m <= through {
        m / PEAK
    } else {
        (m - level) / RATE
    }
}

/// A bucket that starts part full (`Bucket::with_level`): the closed form
/// with that level; at 0 the message goes at the rate, as without a
/// bucket; a message sent later finds what the idle link refilled (at the
/// rate, to the size at most). Levels outside 0 to the size are refused,
/// in the file too, and the file's level needs a bucket.
#[test]
fn a_bucket_part_full_passes_what_it_holds_at_the_peak() {
    for level in [0.0, 1_000.0, 100_000.0, DEPTH] {
        let net = FullBisection::new("tbf", AlphaBeta::new(ALPHA, RATE).unwrap())
            .with_bucket(Bucket::new(DEPTH, PEAK).unwrap().with_level(level).unwrap());
        for m in [1_000usize, 50_000, 200_000, 1_000_000] {
            let (t, want) = (one_send(&net, m), one_message_from(level, m as f64));
            assert!(
                close(t, want),
                "level {level}, m = {m}: send {t} want {want}"
            );
        }
        // After 1 ms idle the link has refilled 1e5 bytes (to the size).
        let traces: Vec<Trace> = vec![
            vec![
                Op::Compute(1e-3),
                Op::Send {
                    to: 1,
                    bytes: 1_000_000,
                },
            ],
            vec![Op::Recv { from: 0 }],
        ];
        let t = replay(&traces, &net).unwrap();
        let want = 1e-3 + one_message_from((level + 1e-3 * RATE).min(DEPTH), 1e6);
        assert!(
            close(t.finish[0], want),
            "level {level}: {} want {want}",
            t.finish[0]
        );
    }
    for bad in [-1.0, DEPTH + 1.0, f64::NAN] {
        let e = Bucket::new(DEPTH, PEAK)
            .unwrap()
            .with_level(bad)
            .unwrap_err();
        assert!(e.to_string().contains("bucket_level_bytes"), "{e}");
    }
    let base = "model = full_bisection\nalpha_s = 1e-5\nbytes_per_s = 1e8\n";
    let net = parse_network(&format!(
        "{base}bucket_bytes = 250000\npeak_bytes_per_s = 1e9\nbucket_level_bytes = 0\n"
    ))
    .unwrap();
    assert!(
        net.label().contains("holding 0 B at the start"),
        "{}",
        net.label()
    );
    let t = one_send(&*net, 1_000_000);
    assert!(close(t, 1e6 / RATE), "{t}");
    for (extra, says) in [
        ("bucket_level_bytes = 1000\n", "needs a bucket"),
        (
            "bucket_bytes = 250000\npeak_bytes_per_s = 1e9\nbucket_level_bytes = 3e5\n",
            "line 6: bucket_level_bytes",
        ),
    ] {
        let e = parse_network(&format!("{base}{extra}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{extra:?}: {e}");
    }
}

#[test]
fn a_message_after_a_pause_passes_its_first_bytes_at_the_peak() {
    let net = shaped();
    for m in [
        1_000usize,
        100_000,
        277_777,
        277_778,
        300_000,
        1_000_000,
        16 << 20,
    ] {
        let traces: Vec<Trace> = vec![
            vec![Op::Send { to: 1, bytes: m }],
            vec![Op::Recv { from: 0 }],
        ];
        let t = replay(&traces, &net).unwrap();
        let want = one_message(m as f64);
        assert!(
            close(t.finish[0], want),
            "m = {m}: send {} want {want}",
            t.finish[0]
        );
        assert!(close(t.finish[1], ALPHA + want), "m = {m}: {t:?}");
    }
}

/// Without a bucket the same link is plain alpha-beta: `m / RATE`.
#[test]
fn no_bucket_is_alpha_beta() {
    let net = FullBisection::new("plain", AlphaBeta::new(ALPHA, RATE).unwrap());
    let m = 100_000usize;
    let traces: Vec<Trace> = vec![
        vec![Op::Send { to: 1, bytes: m }],
        vec![Op::Recv { from: 0 }],
    ];
    let t = replay(&traces, &net).unwrap();
    assert!(close(t.finish[0], m as f64 / RATE), "{t:?}");
}

/// Two messages back to back, then a pause: the first (1 MB) empties the
/// buckets; the second (100 KB) sent at once goes at the rate; a third
/// (100 KB) sent after a pause of `g` finds `min(DEPTH, g RATE)` tokens
/// (the bucket refills at the rate while the link is idle).
#[test]
fn an_empty_bucket_refills_at_the_rate() {
    let net = shaped();
    let (big, small) = (1_000_000usize, 100_000usize);
    let first = one_message(big as f64);
    // Sent at once after the first: the buckets are empty, the rate holds.
    let traces: Vec<Trace> = vec![
        vec![
            Op::Send { to: 1, bytes: big },
            Op::Send {
                to: 1,
                bytes: small,
            },
        ],
        vec![Op::Recv { from: 0 }, Op::Recv { from: 0 }],
    ];
    let t = replay(&traces, &net).unwrap();
    assert!(close(t.finish[0], first + small as f64 / RATE), "{t:?}");
    // After a pause of g: tokens g RATE (below DEPTH), drained at PEAK -
    // RATE while the message moves at PEAK: dry after g RATE / (PEAK -
    // RATE), having moved PEAK g RATE / (PEAK - RATE) bytes.
    for g in [2e-4, 1e-3, 1e-2] {
        let traces: Vec<Trace> = vec![
            vec![
                Op::Send { to: 1, bytes: big },
                Op::Compute(g),
                Op::Send {
                    to: 1,
                    bytes: small,
                },
            ],
            vec![Op::Recv { from: 0 }, Op::Recv { from: 0 }],
        ];
        let t = replay(&traces, &net).unwrap();
        let tokens = (g * RATE).min(DEPTH);
        let through = PEAK * tokens / (PEAK - RATE);
        let second = if (small as f64) <= through {
            small as f64 / PEAK
        } else {
            (small as f64 - tokens) / RATE
        };
        let want = first + g + second;
        assert!(
            close(t.finish[0], want),
            "g = {g}: {} want {want}",
            t.finish[0]
        );
    }
}

/// Two ranks send to a third at once, each through its own full bucket
/// into the receiver's: a brute-force fluid model (time steps of 10 ns,
/// each port's bucket filled at the rate and drained by what passes, every
/// flow at an equal share of the least link it crosses; the two flows are
/// alike, so max-min is that) agrees within 0.1%.
#[test]
fn two_shaped_flows_into_one_port_match_a_fluid_model() {
    let net = shaped();
    let m = 400_000usize;
    let traces: Vec<Trace> = vec![
        vec![Op::Recv { from: 1 }, Op::Recv { from: 2 }],
        vec![Op::Send { to: 0, bytes: m }],
        vec![Op::Send { to: 0, bytes: m }],
    ];
    let t = replay(&traces, &net).unwrap();
    // Fluid: the senders' ports each carry one flow; the receiver's port
    // carries both. Capacity of a port: PEAK while its bucket holds
    // tokens, else RATE.
    let dt = 1e-8;
    let (mut out_tokens, mut in_tokens) = (DEPTH, DEPTH);
    let mut left = m as f64;
    let mut now = 0.0;
    while left > 0.0 {
        let cap_out = if out_tokens > 0.0 { PEAK } else { RATE };
        let cap_in = if in_tokens > 0.0 { PEAK } else { RATE };
        let each = cap_out.min(cap_in / 2.0);
        let moved = (each * dt).min(left);
        left -= moved;
        out_tokens = (out_tokens + (RATE - each) * dt).clamp(0.0, DEPTH);
        in_tokens = (in_tokens + (RATE - 2.0 * each) * dt).clamp(0.0, DEPTH);
        now += dt;
    }
    for r in [1, 2] {
        assert!(
            (t.finish[r] - now).abs() <= 1e-3 * now,
            "sender {r}: replay {} fluid {now}",
            t.finish[r]
        );
    }
}

/// The file keys: both or neither, positive and finite, named with their
/// line where refused; the label says the bucket.
#[test]
fn network_files_give_a_bucket_with_both_keys() {
    let base = "model = full_bisection\nalpha_s = 1e-5\nbytes_per_s = 1e8\n";
    let net = parse_network(&format!(
        "{base}bucket_bytes = 250000\npeak_bytes_per_s = 1e9\n"
    ))
    .unwrap();
    assert!(
        net.label().contains("token bucket 250000 B"),
        "{}",
        net.label()
    );
    let t = one_send(&*net, 1_000_000);
    assert!(close(t, one_message(1e6)), "{t}");
    for (extra, says) in [
        ("bucket_bytes = 250000\n", "needs its pair"),
        ("peak_bytes_per_s = 1e9\n", "needs its pair"),
        ("bucket_bytes = 0\npeak_bytes_per_s = 1e9\n", "bucket_bytes"),
        (
            "bucket_bytes = 1e5\npeak_bytes_per_s = inf\n",
            "peak_bytes_per_s",
        ),
    ] {
        let e = parse_network(&format!("{base}{extra}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{extra:?}: {e}");
    }
    // Two-level files have no bucket key.
    let e = parse_network(
        "model = two_level\nranks_per_node = 2\nintra_alpha_s = 0\nintra_bytes_per_s = 1e9\n\
         inter_alpha_s = 0\ninter_bytes_per_s = 1e9\nbucket_bytes = 1\npeak_bytes_per_s = 1\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("unknown key"), "{e}");
}
