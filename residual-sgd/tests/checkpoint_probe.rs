//! Checkpoints against a hostile probe through the public API (issue 40,
//! item 8): saves that report success but cannot be loaded, a `prune`
//! that removes every checkpoint, an older checkpoint loaded under a
//! newer name, files that are not regular files, a name that collides
//! with a file. Each is an error on every rank, and nothing that was
//! loadable before stops being loadable.

mod common;

use common::*;
use residual_sgd::checkpoint::{self, LATEST, MANIFEST};
use sparse_coll::{ThreadCluster, Transport};
use sparse_core::state::{Scope, State};
use std::path::{Path, PathBuf};

/// A state of one entry, distinct for each `tag`.
fn small_state(tag: u64) -> State {
    let mut s = State::new("probe::Part", 1);
    s.put_u64("tag", Scope::Shared, tag);
    s
}

/// Every rank loads `path` and gets back what `small_state(tag)` holds.
fn loads_as(path: &Path, p: usize, tag: u64) {
    let out = ThreadCluster::new(p).run(|t| checkpoint::load(t, path).map(|(s, _)| s));
    for (r, s) in out.into_iter().enumerate() {
        let s = s.unwrap_or_else(|e| panic!("rank {r}: {e}"));
        assert!(s.same_bits(&small_state(tag)), "rank {r}");
    }
}

/// Ranks passing different names (with a stale `.B.tmp` that rank 1
/// could write into) or different directories: an error on every rank,
/// and `LATEST` and the checkpoints as they were.
#[test]
fn ranks_passing_different_names_or_directories_fail_everywhere() {
    let dir = tmpdir("names");
    let other = tmpdir("names-other");
    let first = ThreadCluster::new(3)
        .run(|t| checkpoint::save(t, &dir, "first", &small_state(1), &meta(1)).map(drop));
    first.into_iter().for_each(|r| r.unwrap());
    std::fs::create_dir_all(dir.join(".B.tmp")).unwrap();
    std::fs::create_dir_all(other.join(".A.tmp")).unwrap();
    type Pick<'a> = &'a (dyn Fn(usize) -> (PathBuf, &'static str) + Sync);
    let cases: [(&str, Pick<'_>); 2] = [
        ("names", &|r| (dir.clone(), if r == 1 { "B" } else { "A" })),
        ("directories", &|r| {
            (if r == 1 { other.clone() } else { dir.clone() }, "A")
        }),
    ];
    for (what, pick) in cases {
        let out = ThreadCluster::new(3).run(|t| {
            let (d, name) = pick(t.rank());
            checkpoint::save(t, &d, name, &small_state(2), &meta(2)).map(drop)
        });
        let errs = all_failed(what, out);
        if what == "names" {
            for e in &errs {
                let m = e.to_string();
                assert!(m.contains("\"A\"") && m.contains("\"B\""), "{m}");
            }
        }
        assert_eq!(latest(&dir).as_deref(), Some("first"), "{what}");
        assert!(!dir.join("A").exists() && !dir.join("B").exists(), "{what}");
        loads_as(&dir, 3, 1);
    }
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&other).unwrap();
}

/// What `load` refuses, `save` refuses: metadata that makes the manifest
/// larger than [`checkpoint::MAX_METADATA`], an entry name longer than
/// the reader accepts. An error on every rank, `LATEST` unmoved.
#[test]
fn save_refuses_what_load_would_refuse() {
    let dir = tmpdir("limits");
    let first = ThreadCluster::new(2)
        .run(|t| checkpoint::save(t, &dir, "first", &small_state(1), &meta(1)).map(drop));
    first.into_iter().for_each(|r| r.unwrap());
    let mut big = meta(2);
    big.insert(
        "notes".into(),
        "x".repeat(checkpoint::MAX_METADATA as usize + (1 << 20)),
    );
    let out = ThreadCluster::new(2)
        .run(|t| checkpoint::save(t, &dir, "big-meta", &small_state(2), &big).map(drop));
    let errs = all_failed("metadata", out);
    assert!(errs[0].to_string().contains("manifest"), "{}", errs[0]);
    let mut long = small_state(3);
    long.put_u64("n".repeat(300), Scope::Shared, 1);
    let out = ThreadCluster::new(2)
        .run(|t| checkpoint::save(t, &dir, "long-name", &long, &meta(3)).map(drop));
    all_failed("entry name", out);
    assert_eq!(latest(&dir).as_deref(), Some("first"));
    assert!(!dir.join("big-meta").exists() && !dir.join("long-name").exists());
    loads_as(&dir, 2, 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Two clusters saving the same name into one directory at once, 30
/// rounds: each save is an error or a checkpoint that loads as what that
/// save wrote; `LATEST` always loads.
#[test]
fn concurrent_saves_of_one_name_never_leave_a_corrupt_checkpoint() {
    let dir = tmpdir("concurrent");
    // States large enough that the two saves overlap.
    let state = |tag: u64| {
        let mut s = small_state(tag);
        s.put_f32s("w", Scope::Shared, &vec![tag as f32; 1 << 16]);
        s
    };
    for round in 0..30u64 {
        let (a, b) = std::thread::scope(|sc| {
            let save = |tag: u64| {
                let (dir, s) = (&dir, state(tag));
                sc.spawn(move || {
                    ThreadCluster::new(3)
                        .run(|t| checkpoint::save(t, dir, "A", &s, &meta(tag)).map(drop))
                })
            };
            let (a, b) = (save(2 * round), save(2 * round + 1));
            (a.join().unwrap(), b.join().unwrap())
        });
        let ok = |out: &[sparse_core::Result<()>]| {
            // Every rank of a save agrees on its outcome.
            assert!(
                out.iter().all(Result::is_ok) || out.iter().all(Result::is_err),
                "round {round}: {out:?}"
            );
            out[0].is_ok()
        };
        let (a_ok, b_ok) = (ok(&a), ok(&b));
        let out = ThreadCluster::new(3).run(|t| checkpoint::load(t, &dir).map(|(s, _)| s));
        if !a_ok && !b_ok {
            continue;
        }
        let states: Vec<State> = out
            .into_iter()
            .enumerate()
            .map(|(r, s)| s.unwrap_or_else(|e| panic!("round {round}, rank {r}: {e}")))
            .collect();
        let is = |tag: u64| states.iter().all(|s| s.same_bits(&state(tag)));
        assert!(
            (a_ok && is(2 * round)) || (b_ok && is(2 * round + 1)),
            "round {round}: the checkpoint is neither save's"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A `LATEST` that names no complete checkpoint: `prune(|_| false)` is
/// an error on every rank and removes nothing.
#[test]
fn prune_never_removes_every_checkpoint() {
    let dir = tmpdir("prune");
    saved_run(&dir);
    type Damage = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, Damage)> = vec![
        (
            "garbage",
            Box::new(|d| std::fs::write(d.join(LATEST), [0xff, 0, 7]).unwrap()),
        ),
        (
            "empty",
            Box::new(|d| std::fs::write(d.join(LATEST), "").unwrap()),
        ),
        (
            "newline",
            Box::new(|d| std::fs::write(d.join(LATEST), "step-6\n").unwrap()),
        ),
        (
            "one off",
            Box::new(|d| std::fs::write(d.join(LATEST), "step-7").unwrap()),
        ),
        (
            "no LATEST",
            Box::new(|d| std::fs::remove_file(d.join(LATEST)).unwrap()),
        ),
        (
            "manifest deleted",
            Box::new(|d| std::fs::remove_file(d.join("step-6").join(MANIFEST)).unwrap()),
        ),
    ];
    for (i, (what, damage)) in cases.iter().enumerate() {
        let d = dir.join(format!("case-{i}"));
        for name in ["step-3", "step-6"] {
            copy_dir(&dir.join(name), &d.join(name));
        }
        std::fs::write(d.join(LATEST), "step-6").unwrap();
        damage(&d);
        let out = ThreadCluster::new(P).run(|t| checkpoint::prune(t, &d, |_| false));
        let errs = all_failed(what, out);
        assert!(errs[0].to_string().contains(LATEST), "{what}: {}", errs[0]);
        assert!(d.join("step-3").join(MANIFEST).is_file(), "{what}");
        assert!(d.join("step-6").is_dir(), "{what}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `step-3` and `step-6` swapped, or `step-6` gone with step 3's
/// checkpoint left as `.step-6.old`: `LATEST = step-6` loads neither
/// silently; every rank's error names both names.
#[test]
fn an_older_checkpoint_under_a_newer_name_is_not_loaded() {
    let dir = tmpdir("swapped");
    saved_run(&dir);
    let swapped = dir.join("swapped");
    copy_dir(&dir.join("step-3"), &swapped.join("step-6"));
    copy_dir(&dir.join("step-6"), &swapped.join("step-3"));
    std::fs::write(swapped.join(LATEST), "step-6").unwrap();
    let old = dir.join("old");
    copy_dir(&dir.join("step-3"), &old.join(".step-6.old"));
    std::fs::write(old.join(LATEST), "step-6").unwrap();
    for d in [&swapped, &old] {
        let out = ThreadCluster::new(P).run(|t| checkpoint::load(t, d).map(drop));
        for e in all_failed("load", out) {
            let m = e.to_string();
            assert!(m.contains("step-3") && m.contains("step-6"), "{m}");
        }
        let e = checkpoint::manifest(d).unwrap_err().to_string();
        assert!(e.contains("step-3") && e.contains("step-6"), "{e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A FIFO in place of `manifest.json`, a rank file or `LATEST`, a
/// directory in place of a file, a file in place of the checkpoint: an
/// error on every rank, not a call that blocks forever.
#[test]
fn files_that_are_not_regular_files_are_refused() {
    let dir = tmpdir("fifo");
    saved_run(&dir);
    type Damage = Box<dyn Fn(&Path) -> PathBuf>;
    let cases: Vec<(&str, Damage)> = vec![
        (
            "manifest FIFO",
            Box::new(|d| {
                mkfifo(&d.join("step-6").join(MANIFEST));
                d.to_path_buf()
            }),
        ),
        (
            "rank file FIFO",
            Box::new(|d| {
                mkfifo(&d.join("step-6").join("rank-0001.safetensors"));
                d.to_path_buf()
            }),
        ),
        (
            "tree file FIFO",
            Box::new(|d| {
                mkfifo(&d.join("step-6").join("rank-0002.json"));
                d.to_path_buf()
            }),
        ),
        (
            "LATEST FIFO",
            Box::new(|d| {
                mkfifo(&d.join(LATEST));
                d.to_path_buf()
            }),
        ),
        (
            "rank file a directory",
            Box::new(|d| {
                let f = d.join("step-6").join("rank-0000.json");
                std::fs::remove_file(&f).unwrap();
                std::fs::create_dir(&f).unwrap();
                d.to_path_buf()
            }),
        ),
        (
            "checkpoint a file",
            Box::new(|d| {
                std::fs::write(d.join("plain"), b"x").unwrap();
                d.join("plain")
            }),
        ),
    ];
    for (i, (what, damage)) in cases.into_iter().enumerate() {
        let d = dir.join(format!("case-{i}"));
        for name in ["step-3", "step-6"] {
            copy_dir(&dir.join(name), &d.join(name));
        }
        std::fs::write(d.join(LATEST), "step-6").unwrap();
        let path = damage(&d);
        let what = what.to_string();
        let out = within_a_minute(&what, move || {
            ThreadCluster::new(P).run(|t| checkpoint::load(t, &path).map(drop))
        });
        all_failed(&what, out);
        if what == "LATEST FIFO" {
            let d2 = d.clone();
            let out = within_a_minute("prune", move || {
                ThreadCluster::new(P).run(|t| checkpoint::prune(t, &d2, |_| false))
            });
            all_failed("prune with a FIFO LATEST", out);
            assert!(d.join("step-3").join(MANIFEST).is_file());
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A save whose name is taken by a file (or a directory that is no
/// checkpoint): an error on every rank, and then nothing moved: `LATEST`
/// still names the previous checkpoint, the file is as it was.
#[test]
fn a_name_taken_by_something_else_is_refused_before_anything_moves() {
    let dir = tmpdir("collide");
    saved_run(&dir);
    std::fs::write(dir.join("taken"), b"a user's file").unwrap();
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(dir.join("data").join("notes"), b"a user's notes").unwrap();
    for name in ["taken", "data"] {
        let out = ThreadCluster::new(P).run(|t| {
            checkpoint::save(t, &dir, name, &trainer()?.save_state()?, &meta(0)).map(drop)
        });
        let errs = all_failed(name, out);
        assert!(errs[0].to_string().contains(name), "{}", errs[0]);
        assert_eq!(latest(&dir).as_deref(), Some("step-6"), "{name}");
    }
    assert_eq!(std::fs::read(dir.join("taken")).unwrap(), b"a user's file");
    assert_eq!(
        std::fs::read(dir.join("data").join("notes")).unwrap(),
        b"a user's notes"
    );
    let out = ThreadCluster::new(P).run(|t| checkpoint::load(t, &dir).map(drop));
    out.into_iter().for_each(|r| r.unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}
