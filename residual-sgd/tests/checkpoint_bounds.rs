//! Reads bounded by the file (issue 40, item 8): a manifest or a tree
//! file that is one large JSON array, a tree of many tiny parts, a tensor
//! file grown to the length a forged manifest claims. Every rank's load
//! is an error (or, for what is well formed, a state) and holds at most a
//! small multiple of the file's length at any time, never the 33 times a
//! JSON tree of values took, nor a claimed length before its CRC is
//! checked.

mod common;

use common::*;
use residual_sgd::checkpoint::{self, MANIFEST};
use sparse_coll::{ThreadCluster, Transport};
use sparse_core::testing::peak::{PeakAlloc, peak_during};
use std::path::Path;

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

/// Rewrites the manifest of `d` with `f` applied and its own CRC-32
/// recomputed (a consistent forgery).
fn forge_manifest(d: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let m = d.join(MANIFEST);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&m).unwrap()).unwrap();
    f(&mut v);
    v["manifest_crc32"] = checkpoint::manifest_crc(&v).into();
    std::fs::write(&m, serde_json::to_vec(&v).unwrap()).unwrap();
}

/// Replaces the file `name` of `d` with `bytes`, and its length and CRC
/// in the manifest with theirs.
fn replace_file(d: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(d.join(name), bytes).unwrap();
    let (len, crc) = (bytes.len() as u64, crc32fast::hash(bytes));
    forge_manifest(d, |v| {
        for f in v["files"].as_array_mut().unwrap() {
            if f["name"] == name {
                f["bytes"] = len.into();
                f["crc32"] = crc.into();
            }
        }
    });
}

/// `[0,0,...,0]` of about `bytes` bytes.
fn zeros_array(bytes: usize) -> Vec<u8> {
    let mut v = b"[0".to_vec();
    while v.len() + 3 < bytes {
        v.extend_from_slice(b",0");
    }
    v.push(b']');
    v
}

/// Every rank loads `d`; returns whether each got a state, and the
/// largest peak of live heap bytes of any rank during its load.
fn load_peak(d: &Path) -> (Vec<bool>, usize) {
    let out = ThreadCluster::new(P).run(|t| {
        let (res, peak) = peak_during(|| checkpoint::load(t, d).map(drop));
        if let Err(e) = &res {
            eprintln!("rank {}: {e}", t.rank());
        }
        Ok((res.is_ok(), peak))
    });
    let out: Vec<(bool, usize)> = out.into_iter().map(Result::unwrap).collect();
    (
        out.iter().map(|x| x.0).collect(),
        out.iter().map(|x| x.1).max().unwrap(),
    )
}

#[test]
fn hostile_metadata_is_parsed_within_a_small_multiple_of_its_length() {
    let dir = tmpdir("bounds");
    saved_run(&dir);
    let good = dir.join("step-3");
    let array = zeros_array(16 << 20);
    // (what, the file's length, how it is damaged, whether it loads)
    type Damage<'a> = Box<dyn Fn(&Path) -> usize + 'a>;
    let cases: Vec<(&str, Damage<'_>, bool)> = vec![
        (
            "a manifest of [0,0,...]",
            Box::new(|d| {
                std::fs::write(d.join(MANIFEST), &array).unwrap();
                array.len()
            }),
            false,
        ),
        (
            "a manifest whose metadata holds [0,0,...]",
            Box::new(|d| {
                let mut n = 0;
                forge_manifest(d, |v| {
                    let s = String::from_utf8(array.clone()).unwrap();
                    v["meta"]["notes"] = serde_json::from_str(&s).unwrap();
                    n = s.len();
                });
                n
            }),
            false,
        ),
        (
            "a tree file of [0,0,...]",
            Box::new(|d| {
                replace_file(d, "rank-0001.json", &array);
                array.len()
            }),
            false,
        ),
        (
            "a tree of 200,000 empty parts",
            Box::new(|d| {
                let tree = std::fs::read(d.join("rank-0002.json")).unwrap();
                let mut v: serde_json::Value = serde_json::from_slice(&tree).unwrap();
                let empty = serde_json::json!({
                    "kind": "", "version": 0, "entries": {}, "children": {}
                });
                let kids = v["children"].as_object_mut().unwrap();
                for i in 0..200_000 {
                    kids.insert(format!("x{i}"), empty.clone());
                }
                let bytes = serde_json::to_vec(&v).unwrap();
                replace_file(d, "rank-0002.json", &bytes);
                bytes.len()
            }),
            // Well formed: it loads (the trainer would refuse the parts).
            true,
        ),
    ];
    for (i, (what, damage, loads)) in cases.iter().enumerate() {
        let d = dir.join(format!("case-{i}"));
        copy_dir(&good, &d);
        let len = damage(&d);
        let (ok, peak) = load_peak(&d);
        assert!(ok.iter().all(|o| o == loads), "{what}: {ok:?}");
        eprintln!("{what}: {peak} bytes live for a file of {len}");
        assert!(
            peak <= 4 * len + (1 << 20),
            "{what}: {peak} bytes live for a file of {len}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A tensor file grown by 64 MiB with the manifest's `bytes` forged to
/// match (its CRC not), alone or with the tree forged too (its CRC
/// recomputed) to claim a tensor that long: an error on every rank, and
/// rank 1 holds no more than a few MiB while it checks (the tensor file's
/// length against its tree, then its CRC, before the file is read into
/// memory).
#[test]
fn a_forged_length_is_not_allocated_before_the_crc_is_checked() {
    let dir = tmpdir("forged");
    saved_run(&dir);
    let grow = 64usize << 20;
    for forge_tree in [false, true] {
        let d = dir.join(format!("forged-{forge_tree}"));
        copy_dir(&dir.join("step-3"), &d);
        if forge_tree {
            let t = d.join("rank-0001.json");
            let mut v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&t).unwrap()).unwrap();
            let w = &mut v["children"]["layer.0"]["entries"]["w"]["len"];
            *w = (w.as_u64().unwrap() + grow as u64 / 4).into();
            replace_file(
                &d,
                "rank-0001.json",
                &serde_json::to_vec_pretty(&v).unwrap(),
            );
        }
        let f = d.join("rank-0001.safetensors");
        let mut bytes = std::fs::read(&f).unwrap();
        bytes.resize(bytes.len() + grow, 0);
        std::fs::write(&f, &bytes).unwrap();
        let len = bytes.len() as u64;
        drop(bytes);
        forge_manifest(&d, |v| {
            for e in v["files"].as_array_mut().unwrap() {
                if e["name"] == "rank-0001.safetensors" {
                    e["bytes"] = len.into();
                }
            }
        });
        let (ok, peak) = load_peak(&d);
        assert!(ok.iter().all(|o| !o), "{ok:?}");
        eprintln!("a forged length of {len} (tree forged: {forge_tree}): {peak} bytes live");
        assert!(
            peak <= 4 << 20,
            "{peak} bytes live for a forged length of {len} (tree forged: {forge_tree})"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
