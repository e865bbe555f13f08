//! Checkpoints on disk (`residual_sgd::checkpoint`, issue 32): a trainer
//! saved by every rank and loaded by fresh trainers continues bit for bit;
//! `LATEST` names the newest complete checkpoint and a crash part way
//! through a save leaves the previous one loadable; hostile files
//! (truncated, corrupted, missing, swapped between ranks, from another
//! checkpoint, another format version or rank count) are an error on
//! every rank naming the file, before any state changes; the reader, fed
//! mutated files, never panics and allocates no more than its input's
//! length allows.

mod common;

use common::{
    P, SIZES, Tr, copy_dir, meta, rgc_trainer, saved_run, step, tmpdir, trainer, weight_bits,
};
use rand::{Rng as _, SeedableRng as _};
use residual_sgd::checkpoint::{self, LATEST, MANIFEST};
use sparse_coll::{ThreadCluster, Transport};
use sparse_core::testing::Rng;
use sparse_core::testing::peak::{PeakAlloc, peak_during};
use sparse_core::{Error, Result};
use std::path::Path;

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

/// RGC with factor masking at learning rate `lr` and `momentum`, over
/// `spec` at density 5%.
fn trainer_of(lr: f32, momentum: f32, spec: &str) -> Result<Tr> {
    rgc_trainer(lr, momentum, 0.05, spec)
}

/// Fresh trainers load `path` on P ranks and, where it is `step-3`, take
/// the last 3 steps.
fn resume(path: &Path, from: u64) -> Vec<Result<Vec<Vec<u32>>>> {
    ThreadCluster::new(P).run(|t| {
        let (state, manifest) = checkpoint::load(t, path)?;
        assert_eq!(manifest.meta["step"], from.to_string());
        assert_eq!(manifest.ranks, P);
        let mut tr = trainer()?;
        tr.load_state(t, &state)?;
        for s in from..6 {
            step(&mut tr, t, s)?;
        }
        weight_bits(&tr)
    })
}

#[test]
fn saved_and_loaded_through_files_continues_bit_for_bit() {
    let dir = tmpdir("roundtrip");
    let want = saved_run(&dir);
    assert_eq!(std::fs::read_to_string(dir.join(LATEST)).unwrap(), "step-6");
    for (path, from) in [
        (dir.join("step-3"), 3),
        (dir.clone(), 6),
        (dir.join("step-6"), 6),
    ] {
        let got: Vec<_> = resume(&path, from)
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(got, want, "{}", path.display());
    }
    // A save that crashed part way (a half-written temporary directory)
    // leaves LATEST and the checkpoints as they were; the next save of
    // that name clears it.
    let stale = dir.join(".step-9.tmp");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("rank-0000.safetensors"), b"half a file").unwrap();
    let got: Vec<_> = resume(&dir, 6).into_iter().map(Result::unwrap).collect();
    assert_eq!(got, want);
    let out = ThreadCluster::new(P).run(|t| {
        let tr = trainer()?;
        checkpoint::save(t, &dir, "step-9", &tr.save_state()?, &meta(0)).map(drop)
    });
    out.into_iter().for_each(|r| r.unwrap());
    assert!(!stale.exists());
    assert_eq!(std::fs::read_to_string(dir.join(LATEST)).unwrap(), "step-9");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `prune` removes the complete checkpoints its caller rejects, and only
/// those: never the one `LATEST` names, nothing that is not a checkpoint,
/// no hidden directory but a crashed prune's leftover; what is left still
/// resumes bit for bit; a directory or a `LATEST` it cannot read is an
/// error on every rank, with nothing removed.
#[test]
fn prune_removes_rejected_checkpoints_but_never_the_latest() {
    let dir = tmpdir("prune");
    let want = saved_run(&dir);
    // Not checkpoints: a directory without a manifest, a file, the
    // leftover of a prune that crashed (removed), a crashed save's
    // temporary directory and a crashed replacement's `.step-6.old`
    // (both kept: save and resolve handle them).
    std::fs::create_dir_all(dir.join("notes")).unwrap();
    std::fs::write(dir.join("notes.txt"), b"x").unwrap();
    std::fs::create_dir_all(dir.join(".step-1.pruned")).unwrap();
    std::fs::create_dir_all(dir.join(".step-2.tmp")).unwrap();
    copy_dir(&dir.join("step-3"), &dir.join(".step-6.old"));
    // Two more complete checkpoints.
    copy_dir(&dir.join("step-3"), &dir.join("drop-me"));
    copy_dir(&dir.join("step-3"), &dir.join("keep-me"));
    let prune = |retain: fn(&str) -> bool| -> Vec<String> {
        let out = ThreadCluster::new(P).run(|t| checkpoint::prune(t, &dir, retain));
        let mut out: Vec<Vec<String>> = out.into_iter().map(Result::unwrap).collect();
        assert!(out[1..].iter().all(Vec::is_empty), "{out:?}");
        out.swap_remove(0)
    };
    // What retain rejects goes, and only that.
    assert_eq!(prune(|n| n != "drop-me"), ["drop-me"]);
    // Rejecting everything removes the others but step-6, which LATEST
    // names.
    assert_eq!(prune(|_| false), ["keep-me", "step-3"]);
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    // The lock file that saves and prunes take (checkpoint::LOCK) stays.
    let kept = [
        checkpoint::LOCK,
        ".step-2.tmp",
        ".step-6.old",
        LATEST,
        "notes",
        "notes.txt",
        "step-6",
    ];
    assert_eq!(left, kept);
    let got: Vec<_> = resume(&dir, 6).into_iter().map(Result::unwrap).collect();
    assert_eq!(got, want);
    // Nothing left to remove: the same call removes nothing.
    assert!(prune(|_| false).is_empty());
    // A directory that cannot be read, or whose LATEST cannot (here a
    // directory): an error on every rank, naming it on rank 0, and
    // nothing removed.
    let bad_latest = dir.join("bad-latest");
    copy_dir(&dir.join("step-6"), &bad_latest.join("step-6"));
    std::fs::create_dir_all(bad_latest.join(LATEST)).unwrap();
    for (path, what) in [
        (dir.join("missing"), "missing"),
        (bad_latest.clone(), LATEST),
    ] {
        let out = ThreadCluster::new(P).run(|t| checkpoint::prune(t, &path, |_| false));
        for (r, got) in out.into_iter().enumerate() {
            match got {
                Err(e @ Error::InvalidParameter { .. }) if r == 0 => {
                    assert!(e.to_string().contains(what), "{e}");
                }
                Err(Error::PeerError { .. }) if r != 0 => {}
                other => panic!("rank {r}: {other:?}"),
            }
        }
    }
    assert!(bad_latest.join("step-6").join(MANIFEST).is_file());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every hostile change to a checkpoint is an error on every rank: the
/// rank that read the bad file names it, the others report a peer's
/// failure; no trainer is touched (the load happens before).
#[test]
fn hostile_checkpoints_are_errors_on_every_rank() {
    let dir = tmpdir("hostile");
    saved_run(&dir);
    let good = dir.join("step-3");
    type Mutate = Box<dyn Fn(&Path)>;
    let edit_manifest = |f: fn(&mut serde_json::Value)| -> Mutate {
        Box::new(move |d: &Path| {
            let m = d.join(MANIFEST);
            let mut v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&m).unwrap()).unwrap();
            f(&mut v);
            // A manifest edited consistently: its own CRC-32 recomputed.
            v["manifest_crc32"] = checkpoint::manifest_crc(&v).into();
            std::fs::write(&m, serde_json::to_vec(&v).unwrap()).unwrap();
        })
    };
    let other = dir.join("step-6");
    // What the error says on the ranks that read a bad file (every rank
    // where none is named), and those ranks; the others report a peer.
    let cases: Vec<(&str, &[usize], Mutate)> = vec![
        (
            "rank-0001.safetensors",
            &[1],
            Box::new(|d: &Path| {
                let f = d.join("rank-0001.safetensors");
                let b = std::fs::read(&f).unwrap();
                std::fs::write(&f, &b[..b.len() / 2]).unwrap();
            }),
        ),
        (
            "rank-0002.json",
            &[2],
            Box::new(|d: &Path| {
                let f = d.join("rank-0002.json");
                let mut b = std::fs::read(&f).unwrap();
                let i = b.len() / 3;
                b[i] ^= 0x20;
                std::fs::write(&f, b).unwrap();
            }),
        ),
        (
            "rank-0000.json",
            &[0],
            Box::new(|d: &Path| std::fs::remove_file(d.join("rank-0000.json")).unwrap()),
        ),
        (
            "CRC-32",
            &[0, 1],
            Box::new(|d: &Path| {
                // Two ranks' tensor files swapped: lengths agree, CRCs not.
                let (a, b) = (
                    d.join("rank-0000.safetensors"),
                    d.join("rank-0001.safetensors"),
                );
                let (x, y) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
                std::fs::write(&a, y).unwrap();
                std::fs::write(&b, x).unwrap();
            }),
        ),
        (
            "rank-0002.safetensors",
            &[2],
            Box::new(move |d: &Path| {
                // Another checkpoint's file under this manifest.
                std::fs::copy(
                    other.join("rank-0002.safetensors"),
                    d.join("rank-0002.safetensors"),
                )
                .unwrap();
            }),
        ),
        (
            "format version 3",
            &[],
            edit_manifest(|v| v["version"] = 3.into()),
        ),
        (
            "manifest_crc32",
            &[],
            Box::new(|d: &Path| {
                // One value of the metadata changed, the CRC-32 not.
                let m = d.join(MANIFEST);
                let mut v: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(&m).unwrap()).unwrap();
                v["meta"]["step"] = "4".into();
                std::fs::write(&m, serde_json::to_vec(&v).unwrap()).unwrap();
            }),
        ),
        (
            // A mismatch (Error::Mismatch), not damage.
            "is 4 in what was saved, 3 here",
            &[],
            edit_manifest(|v| v["ranks"] = 4.into()),
        ),
        (
            "lists no rank-0001.json",
            &[],
            edit_manifest(|v| {
                v["files"]
                    .as_array_mut()
                    .unwrap()
                    .retain(|f| f["name"] != "rank-0001.json");
            }),
        ),
        (
            "not a checkpoint manifest",
            &[],
            Box::new(|d: &Path| std::fs::write(d.join(MANIFEST), b"{\"format\": 1}").unwrap()),
        ),
    ];
    for (i, (want, bad, mutate)) in cases.iter().enumerate() {
        let d = dir.join(format!("case-{i}"));
        copy_dir(&good, &d);
        mutate(&d);
        let out = ThreadCluster::new(P).run(|t| checkpoint::load(t, &d).map(drop));
        for (r, res) in out.into_iter().enumerate() {
            let e = res.expect_err(want);
            if bad.is_empty() || bad.contains(&r) {
                assert!(e.to_string().contains(want), "{want}: rank {r}: {e}");
                if !bad.is_empty() {
                    let file = format!("rank-{r:04}");
                    assert!(e.to_string().contains(&file), "{want}: rank {r}: {e}");
                }
            } else {
                // The others learn of it in the failing rank's words.
                assert!(
                    matches!(e, Error::PeerError { .. }) && e.to_string().contains(want),
                    "{want}: rank {r}: {e}"
                );
            }
        }
    }
    // LATEST naming a checkpoint that is not there.
    std::fs::write(dir.join(LATEST), "step-99").unwrap();
    let out = ThreadCluster::new(P).run(|t| checkpoint::load(t, &dir).map(drop));
    assert!(out.iter().all(Result::is_err));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The reader fed mutated files (bytes flipped, cut, inserted; in the
/// tensor file and in the tree) returns a state or an error, never
/// panics, and holds at most a few times its input's length plus a
/// constant at any time.
#[test]
fn the_reader_survives_mutated_files_within_bounded_memory() {
    let rounds: usize = std::env::var("CHECKPOINT_FUZZ_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let tr = trainer().unwrap();
    let (st, tree) = checkpoint::encode(&tr.save_state().unwrap()).unwrap();
    let back = checkpoint::decode(&st, &tree, "rank").unwrap();
    assert!(back.same_bits(&tr.save_state().unwrap()));
    let mut rng = Rng::seed_from_u64(32);
    let mut errors = 0;
    for round in 0..rounds {
        let (mut a, mut b) = (st.clone(), tree.clone());
        let target = if rng.random::<bool>() { &mut a } else { &mut b };
        for _ in 0..rng.random_range(1..4) {
            let n = target.len();
            match rng.random_range(0..4) {
                0 => {
                    let i = rng.random_range(0..n);
                    target[i] ^= 1 << rng.random_range(0..8);
                }
                1 => target.truncate(rng.random_range(0..n)),
                2 => {
                    let i = rng.random_range(0..=n);
                    target.insert(i, rng.random());
                }
                _ => {
                    // A digit in the header or tree changed to a large one.
                    if let Some(i) = (0..n.min(400)).find(|&i| target[i].is_ascii_digit()) {
                        target[i] = b'9';
                        target.insert(i, b'9');
                    }
                }
            }
            if target.is_empty() {
                break;
            }
        }
        let input = a.len() + b.len();
        let (res, peak) = peak_during(|| checkpoint::decode(&a, &b, "rank"));
        errors += usize::from(res.is_err());
        assert!(
            peak <= 4 * input + (1 << 20),
            "round {round}: {peak} bytes live for {input} bytes of input"
        );
    }
    assert!(errors > rounds / 2, "{errors} errors in {rounds} rounds");
}

/// The sum over ranks of every summed entry (`memory/v`, `memory/u` of
/// each layer) of `states`, as bits.
fn summed(states: &[sparse_core::state::State]) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    for (l, &n) in SIZES.iter().enumerate() {
        for e in ["v", "u"] {
            let mut t = vec![0.0f32; n];
            for s in states {
                let m = s
                    .child(&format!("layer.{l}"))
                    .unwrap()
                    .child("memory")
                    .unwrap();
                t.iter_mut()
                    .zip(m.f32s(e, n).unwrap())
                    .for_each(|(a, x)| *a += x);
            }
            out.push(t.iter().map(|x| x.to_bits()).collect());
        }
    }
    out
}

/// A trainer whose every value stays dyadic: gradients in multiples of
/// 1/8, learning rate and momentum powers of two.
fn dyadic_trainer(spec: &str) -> Result<Tr> {
    trainer_of(0.5, 0.5, spec)
}

fn dyadic_step(tr: &mut Tr, t: &mut dyn Transport, s: u64) -> Result<()> {
    let mut rng = Rng::seed_from_u64(s * 131 + t.rank() as u64);
    let g: Vec<Vec<f32>> = SIZES
        .iter()
        .map(|&n| {
            (0..n)
                .map(|_| (rng.random_range(0..33) as f32 - 16.0) / 8.0)
                .collect()
        })
        .collect();
    tr.step(t, &g).map(drop)
}

/// Reshard 4 -> 3 and 3 -> 5 through files: weights identical on every
/// new rank, the sum over ranks of residuals and momenta unchanged bit for
/// bit (dyadic values), Ok-Topk's state (thresholds, regions: it depends
/// on P) that of a fresh instance, and the new ranks train on together.
#[test]
fn reshard_conserves_the_residual_mass_exactly() {
    for (p, p_new, spec) in [
        (4usize, 3usize, "ok_topk:period=2"),
        (3, 5, "topk_a"),
        (4, 2, "hierarchical:node=2,inter=dsar_split_allgather"),
    ] {
        let dir = tmpdir(&format!("reshard-{p}-{p_new}"));
        let before = ThreadCluster::new(p).run(|t| {
            let mut tr = dyadic_trainer(spec)?;
            for s in 0..4 {
                dyadic_step(&mut tr, t, s)?;
            }
            let state = tr.save_state()?;
            checkpoint::save(t, &dir, "step-4", &state, &meta(4))?;
            Ok((state, weight_bits(&tr)?))
        });
        let before: Vec<_> = before.into_iter().map(Result::unwrap).collect();
        let old_states: Vec<_> = before.iter().map(|(s, _)| s.clone()).collect();
        let m = checkpoint::reshard(&dir, p_new, &dir.join("resharded"), "step-4").unwrap();
        assert_eq!(m.ranks, p_new);
        assert_eq!(m.meta["resharded_from"], p.to_string());
        let after = ThreadCluster::new(p_new).run(|t| {
            let (state, _) = checkpoint::load(t, &dir.join("resharded"))?;
            let mut tr = dyadic_trainer(spec)?;
            tr.load_state(t, &state)?;
            let loaded = tr.save_state()?;
            let w = weight_bits(&tr)?;
            // P-dependent collective state is a fresh instance's.
            let fresh = dyadic_trainer(spec)?.save_state()?;
            for l in 0..SIZES.len() {
                let comm = |s: &sparse_core::state::State| {
                    s.child(&format!("layer.{l}"))
                        .unwrap()
                        .child("comm")
                        .unwrap()
                        .clone()
                };
                assert!(
                    comm(&loaded).same_bits(&comm(&fresh)),
                    "layer {l}: the collective's state is not a first call's"
                );
            }
            for s in 4..6 {
                dyadic_step(&mut tr, t, s)?;
            }
            Ok((loaded, w, weight_bits(&tr)?))
        });
        let after: Vec<_> = after.into_iter().map(Result::unwrap).collect();
        let new_states: Vec<_> = after.iter().map(|(s, _, _)| s.clone()).collect();
        assert_eq!(summed(&new_states), summed(&old_states), "{p} -> {p_new}");
        for (w_new, w_next) in after.iter().map(|(_, w, n)| (w, n)) {
            assert_eq!(w_new, &before[0].1, "{p} -> {p_new}: the weights");
            assert_eq!(
                w_next, &after[0].2,
                "{p} -> {p_new}: the ranks train on together"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
