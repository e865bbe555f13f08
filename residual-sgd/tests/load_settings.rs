//! What a load checks besides the files (issue 40, items 5 and 8): ranks
//! that would load different settings, non-finite weights or residuals,
//! and the words of a mismatch: [`Error::Mismatch`] naming the setting
//! (or the rank count) with both values as numbers, not a "corrupt"
//! state and not a float's bits.

mod common;

use backend_cpu::Cpu;
use common::*;
use residual_sgd::checkpoint;
use residual_sgd::memory::{Memory, Momentum};
use sparse_coll::{ThreadCluster, Transport};
use sparse_core::Error;
use sparse_core::state::{Scope, State};

/// `s` with the part at `path` (children's names from the root) changed
/// by `f`.
fn edit(s: &State, path: &[&str], f: &dyn Fn(&mut State)) -> State {
    let mut out = s.clone();
    match path {
        [] => f(&mut out),
        [first, rest @ ..] => {
            let child = edit(s.child(first).unwrap(), rest, f);
            out.put_child(*first, child);
        }
    }
    out
}

/// Puts `x` at index 3 of the `f32` entry `name`.
fn poison(name: &'static str, x: f32) -> impl Fn(&mut State) {
    move |s: &mut State| {
        let n = s.get(name).unwrap().1.len();
        let mut v = s.f32s(name, n).unwrap().to_vec();
        v[3] = x;
        let scope = s.get(name).unwrap().0;
        s.put_f32s(name, scope, &v);
    }
}

/// Three ranks train 3 steps and save; fresh trainers load the states as
/// `tamper(rank, state)` leaves them; returns each rank's error, after
/// checking that no trainer changed and that they still step together.
fn load_tampered(tamper: &(dyn Fn(usize, &State) -> State + Sync)) -> Vec<Error> {
    let out = ThreadCluster::new(P).run(|t| {
        let mut tr = trainer()?;
        for s in 0..3 {
            step(&mut tr, t, s)?;
        }
        let saved = tamper(t.rank(), &tr.save_state()?);
        let mut fresh = trainer()?;
        let before = fresh.save_state()?;
        let res = fresh.load_state(t, &saved);
        assert!(
            fresh.save_state()?.same_bits(&before),
            "the trainer changed"
        );
        step(&mut fresh, t, 9)?;
        Ok(res)
    });
    let out = out
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("{e}")))
        .collect();
    all_failed("load_state", out)
}

#[test]
fn ranks_that_would_load_different_settings_fail_at_load() {
    // Rank 1's saved density 0.5, the others' 0.05.
    let errs = load_tampered(&|r, s| {
        if r != 1 {
            return s.clone();
        }
        edit(s, &["config"], &|c| {
            c.put_u64("density", Scope::Shared, 0.5f64.to_bits());
        })
    });
    for e in errs {
        assert!(
            matches!(
                &e,
                Error::Disagreement {
                    what: "density",
                    ..
                }
            ),
            "{e}"
        );
        let m = e.to_string();
        assert!(m.contains("0.05") && m.contains("0.5"), "{m}");
    }
}

#[test]
fn non_finite_weights_or_residuals_are_refused() {
    // A NaN in rank 1's residual: rank 1 names it, the others hear of it.
    let errs = load_tampered(&|r, s| {
        if r == 1 {
            edit(s, &["layer.0", "memory"], &poison("v", f32::NAN))
        } else {
            s.clone()
        }
    });
    let m = errs[1].to_string();
    assert!(
        m.contains("NaN") && m.contains("layer0") && m.contains("v[3]"),
        "{m}"
    );
    assert!(
        matches!(errs[0], Error::PeerError { rank: 1, .. }),
        "{}",
        errs[0]
    );
    for x in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let errs = load_tampered(&|_, s| edit(s, &["layer.1"], &poison("w", x)));
        for e in errs {
            let m = e.to_string();
            assert!(m.contains(&x.to_string()) && m.contains("w[3]"), "{m}");
        }
    }
}

#[test]
fn a_setting_that_differs_is_a_mismatch_with_both_values_as_numbers() {
    let out = ThreadCluster::new(2).run(|t| {
        let saved = trainer_with(2.0, 0.05)?.save_state()?;
        let mut other = trainer_with(4.0, 0.05)?;
        Ok(other.load_state(t, &saved))
    });
    for res in out {
        let e = res.unwrap().unwrap_err();
        let m = e.to_string();
        assert!(
            matches!(&e, Error::Mismatch { what, saved, here, .. }
                if what.contains("\"lr\"") && saved == "2" && here == "4"),
            "{e:?}"
        );
        assert!(!m.contains("0x") && !m.contains("corrupt"), "{m}");
    }
    // A memory built with another momentum names both momenta.
    let b = Cpu;
    let saved = Momentum::new(&b, 8, 0.9, false, true)
        .unwrap()
        .save_state(&b)
        .unwrap();
    let e = Momentum::new(&b, 8, 0.5, false, true)
        .unwrap()
        .load_state(&b, &saved)
        .unwrap_err();
    assert!(
        matches!(&e, Error::Mismatch { saved, here, .. } if saved == "0.9" && here == "0.5"),
        "{e:?}"
    );
}

#[test]
fn a_checkpoint_of_another_rank_count_says_so() {
    let dir = tmpdir("ranks");
    saved_run(&dir);
    let out = ThreadCluster::new(2).run(|t| checkpoint::load(t, &dir).map(drop));
    for e in all_failed("load on 2 ranks", out) {
        let m = e.to_string();
        assert!(
            matches!(&e, Error::Mismatch { what, saved, here, .. }
                if what.contains("rank count") && saved == "3" && here == "2"),
            "{e:?}"
        );
        assert!(
            m.contains("checkpoint::reshard") && !m.contains("corrupt"),
            "{m}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
