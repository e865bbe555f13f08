//! Durable training runs (issue 32): `sparse-bench train
//! --checkpoint-every N --checkpoint-dir D` saves every rank's whole
//! state ([`residual_sgd::Trainer::save_state`] and the loop's own: epoch,
//! step, the accumulators of the epoch, the run's history) every `N` steps
//! and at the end, as a checkpoint of [`residual_sgd::checkpoint`] under
//! `D/<run>-d<density>-s<seed>/`; `--resume D` continues each run from
//! its newest checkpoint up to `--epochs`. The data order of an epoch is
//! derived from the seed, the epoch and the rank, and DGC's density from
//! the epoch, so a resumed run takes exactly the steps an unbroken one
//! would: the same weights, bit for bit, and the same accuracies.
//!
//! A checkpoint of `P` ranks resumed on `P'` ranks (a rank was lost) is
//! resharded first ([`residual_sgd::checkpoint::reshard`]): weights
//! copied, residuals and momenta summed, state that depends on `P`
//! rebuilt. The shards then change, so the epoch goes on at the same
//! fraction of its steps (`round(s P / P')` of the new epoch's steps); the
//! per-step figures (bytes, times) count from the resume. What was lost
//! (the steps since the last checkpoint, from `progress`, which rank 0
//! writes after every step) is reported.

use super::{Run, TrainArgs};
use residual_sgd::checkpoint;
use sparse_coll::{Transport, agree_or_fail};
use sparse_core::state::{Scope, State, Tensor};
use sparse_core::{Error, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The state kind of the loop's own state.
pub const KIND: &str = "bench::train";

/// The directory of `run`'s checkpoints with `seed` under `base`.
pub fn run_dir(base: &Path, run: &Run, seed: u64) -> PathBuf {
    base.join(format!("{}-d{}-s{seed}", run.name(), run.density()))
}

/// Whether `dir` holds a checkpoint (its `LATEST`).
pub fn has_checkpoint(dir: &Path) -> bool {
    dir.join(checkpoint::LATEST).is_file()
}

/// Checks that `--resume D` matches what `D` holds: a run of `runs` with
/// one of `seeds` that has no checkpoint in `D` starts afresh only where
/// that is a run the interrupted job never reached, that is where `D`
/// holds a checkpoint of at least one of this job's runs and of none
/// other. Settings that match no run of `D`, or that leave runs of `D`
/// aside while starting others afresh (another `--density`, a typo in a
/// `--scheme`: the dense baselines, shared by every density, still
/// match), are an error naming what `D` holds, unless `--allow-fresh`
/// asks for fresh starts. Every row says whether it resumed or started
/// fresh.
///
/// # Errors
/// [`Error::InvalidParameter`] naming the runs without a checkpoint and
/// `D`'s run directories.
pub fn check_resume(runs: &[Run], a: &TrainArgs, seeds: &[u64]) -> Result<()> {
    let Some(base) = &a.resume else {
        return Ok(());
    };
    if !base.is_dir() || a.allow_fresh {
        // A missing directory: the run's own check names it (or, with
        // --allow-fresh, starts afresh).
        return Ok(());
    }
    let want: Vec<String> = seeds
        .iter()
        .flat_map(|&seed| {
            runs.iter()
                .map(move |run| run_dir(Path::new(""), run, seed).display().to_string())
        })
        .collect();
    let mut held: Vec<String> = std::fs::read_dir(base)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| has_checkpoint(&e.path()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .take(1024)
                .collect()
        })
        .unwrap_or_default();
    held.sort();
    let missing: Vec<&String> = want.iter().filter(|w| !held.contains(w)).collect();
    let matched = want.len() - missing.len();
    let foreign = held.iter().any(|h| !want.contains(h));
    if missing.is_empty() || (matched > 0 && !foreign) {
        return Ok(());
    }
    let list = |v: Vec<&String>| -> String {
        let n = v.len();
        let mut s: Vec<&str> = v.into_iter().take(16).map(String::as_str).collect();
        if n > 16 {
            s.push("...");
        }
        if s.is_empty() {
            "none".into()
        } else {
            s.join(", ")
        }
    };
    Err(Error::invalid(
        "--resume",
        format!(
            "{}: no checkpoint of {} of this job's runs ({}); it holds {}: another --scheme, --density or --seeds? (--allow-fresh starts the runs without one from step 0)",
            base.display(),
            missing.len(),
            list(missing),
            list(held.iter().collect()),
        ),
    ))
}

/// The settings a checkpoint was saved under, which a resume must share
/// (all of [`TrainArgs`] but the epochs and the checkpoint flags).
pub fn settings(run: &Run, a: &TrainArgs) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        m.insert(format!("setting.{k}"), v);
    };
    put("run", run.name());
    put("collective", run.collective());
    put("density", run.density().to_string());
    put("data", a.data.to_string());
    put("model", format!("{:?}", a.model));
    put("hidden", a.hidden().to_string());
    put("batch", a.batch.to_string());
    put("lr", a.lr.to_string());
    put("momentum", a.momentum.to_string());
    put("weight_decay", a.weight_decay.to_string());
    put("compress_threshold", a.redsync_threshold().to_string());
    put("clip", a.clip.to_string());
    put("warmup", a.warmup.to_string());
    put("seed", a.seed.to_string());
    put(
        "train_images",
        a.train_images.map_or("all".into(), |n| n.to_string()),
    );
    m
}

/// Where a run stands: the position and the history a checkpoint holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Position {
    /// The epoch under way.
    pub epoch: usize,
    /// Its next step.
    pub next: usize,
    /// Steps taken since the start of the run.
    pub global: u64,
    /// Steps per epoch at the rank count that saved it.
    pub steps: usize,
    /// Rank 0's accuracy, loss, weight digest and Zen statistics per
    /// finished epoch (`[grad density, overlap, densification]` per layer).
    pub history: History,
}

/// A run's per-epoch record.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    /// Test accuracy.
    pub test_acc: Vec<f64>,
    /// Training loss.
    pub train_loss: Vec<f64>,
    /// Digest of the weights.
    pub weight_hash: Vec<u64>,
    /// Zen's statistics per layer.
    pub sparsity: Vec<Vec<[f64; 3]>>,
}

fn history_json(h: &History) -> String {
    // f64 and u64 as bits in hex: exact, and NaN (a dense layer's overlap)
    // survives.
    let bits =
        |v: &[f64]| -> Vec<String> { v.iter().map(|x| format!("{:x}", x.to_bits())).collect() };
    serde_json::json!({
        "test_acc": bits(&h.test_acc),
        "train_loss": bits(&h.train_loss),
        "weight_hash": h.weight_hash.iter().map(|x| format!("{x:x}")).collect::<Vec<_>>(),
        "sparsity": h.sparsity.iter().map(|e| e.iter().map(|l| bits(l)).collect::<Vec<_>>()).collect::<Vec<_>>(),
    })
    .to_string()
}

fn parse_history(s: &str) -> Result<History> {
    let bad = |w: &str| Error::corrupt("checkpoint", format!("manifest meta history: {w}"));
    let v: serde_json::Value = serde_json::from_str(s).map_err(|e| bad(&e.to_string()))?;
    let hex = |x: &serde_json::Value| -> Result<u64> {
        x.as_str()
            .and_then(|s| u64::from_str_radix(s, 16).ok())
            .ok_or_else(|| bad("not a hex word"))
    };
    let list = |k: &str| -> Result<Vec<u64>> {
        v.get(k)
            .and_then(|x| x.as_array())
            .ok_or_else(|| bad(k))?
            .iter()
            .map(hex)
            .collect()
    };
    let sparsity = v
        .get("sparsity")
        .and_then(|x| x.as_array())
        .ok_or_else(|| bad("sparsity"))?
        .iter()
        .map(|e| {
            e.as_array()
                .ok_or_else(|| bad("sparsity epoch"))?
                .iter()
                .map(|l| {
                    let w: Vec<u64> = l
                        .as_array()
                        .ok_or_else(|| bad("sparsity layer"))?
                        .iter()
                        .map(hex)
                        .collect::<Result<_>>()?;
                    match w[..] {
                        [a, b, c] => Ok([f64::from_bits(a), f64::from_bits(b), f64::from_bits(c)]),
                        _ => Err(bad("sparsity layer of 3")),
                    }
                })
                .collect()
        })
        .collect::<Result<_>>()?;
    let f =
        |k: &str| -> Result<Vec<f64>> { Ok(list(k)?.into_iter().map(f64::from_bits).collect()) };
    Ok(History {
        test_acc: f("test_acc")?,
        train_loss: f("train_loss")?,
        weight_hash: list("weight_hash")?,
        sparsity,
    })
}

/// Saves the checkpoint `step-<global>` of this rank's `trainer` state and
/// `pos` (with this rank's epoch accumulators, `local`) under `dir` on
/// every rank of `t`.
///
/// # Errors
/// As [`checkpoint::save`].
pub fn save(
    t: &mut dyn Transport,
    dir: &Path,
    meta: &BTreeMap<String, String>,
    trainer: Result<State>,
    pos: &Position,
    local: &[(&str, Vec<f64>)],
) -> Result<PathBuf> {
    // A rank that could not read its trainer's state says so to every rank
    // before any file is written.
    agree_or_fail(
        t,
        &[("trainer state", 1)],
        trainer.as_ref().map(drop).map_err(Clone::clone),
    )?;
    let trainer = trainer?;
    let mut s = State::new(KIND, 1);
    s.put_u64("epoch", Scope::Shared, pos.epoch as u64)
        .put_u64("next", Scope::Shared, pos.next as u64)
        .put_u64("global", Scope::Shared, pos.global)
        .put_u64("steps", Scope::Shared, pos.steps as u64);
    for (name, v) in local {
        s.put(
            *name,
            Scope::Local,
            Tensor::U64(v.iter().map(|x| x.to_bits()).collect()),
        );
    }
    s.put_child("trainer", trainer);
    let mut meta = meta.clone();
    meta.insert("history".into(), history_json(&pos.history));
    meta.insert("global".into(), pos.global.to_string());
    checkpoint::save(t, dir, &step_name(pos.global), &s, &meta)
}

/// The checkpoint name of global step `global` (`step-` and eight digits
/// or more, so that names sort as their steps).
pub fn step_name(global: u64) -> String {
    format!("step-{global:08}")
}

/// The global step of a checkpoint named by [`step_name`] (`step-` and
/// decimal digits only), or `None` for any other name.
pub fn step_of(name: &str) -> Option<u64> {
    name.strip_prefix("step-")
        .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))?
        .parse()
        .ok()
}

/// Keeps the `keep` newest checkpoints of the run directory `dir` up to
/// `upto`, the global step just saved (newest by their step, read from
/// names of [`step_name`]'s form), and removes the older ones
/// ([`checkpoint::prune`]: never the one `LATEST` names). Checkpoints of
/// a later step (another job's in the same directory, or a save that
/// crashed before `LATEST` moved) and anything not named by
/// [`step_name`] are kept. Every rank calls it; returns the removed names
/// on rank 0.
///
/// # Errors
/// As [`checkpoint::prune`].
pub fn prune(t: &mut dyn Transport, dir: &Path, keep: u64, upto: u64) -> Result<Vec<String>> {
    // The keep-th newest step up to `upto` (rank 0 alone reads the
    // directory and removes; a listing it cannot read is prune's error);
    // with fewer checkpoints than that, 0 keeps them all.
    let mut steps: Vec<u64> = if t.rank() == 0 {
        std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.path().join(checkpoint::MANIFEST).is_file())
                    .filter_map(|e| step_of(&e.file_name().to_string_lossy()))
                    .filter(|&s| s <= upto)
                    .collect()
            })
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    steps.sort_unstable_by(|a, b| b.cmp(a));
    let keep = usize::try_from(keep).unwrap_or(usize::MAX).max(1);
    let cutoff = steps.get(keep - 1).copied().unwrap_or(0);
    checkpoint::prune(t, dir, |name| step_of(name).is_none_or(|s| s >= cutoff))
}

/// What [`resume`] restores.
#[derive(Debug)]
pub struct Resumed {
    /// The trainer's state.
    pub trainer: State,
    /// The position, moved to this rank count's epoch where it changed.
    pub pos: Position,
    /// The epoch accumulators saved with it (absent after a reshard).
    pub local: BTreeMap<String, Vec<f64>>,
    /// The ranks that saved it.
    pub from_ranks: usize,
    /// Steps taken after it and lost (from `progress`).
    pub lost_steps: u64,
}

/// The newest checkpoint of `dir` on every rank of `t`, resharded first
/// where another number of ranks saved it, checked against this run's
/// `meta`; `steps` is this rank count's steps per epoch.
///
/// # Errors
/// A setting that differs (naming it), and as [`checkpoint::load`] and
/// [`checkpoint::reshard`].
pub fn resume(
    t: &mut dyn Transport,
    dir: &Path,
    meta: &BTreeMap<String, String>,
    steps: usize,
) -> Result<Resumed> {
    let p = t.size();
    let (path, from_ranks) = newest(t, dir)?;
    let (state, manifest) = checkpoint::load(t, &path)?;
    let checked = (|| -> Result<Resumed> {
        check_settings(&path, meta, &manifest.meta)?;
        state.expect(KIND, 1)?;
        let word = |k: &str| -> Result<usize> {
            usize::try_from(state.u64(k)?)
                .map_err(|_| Error::corrupt("checkpoint", format!("{k} does not fit")))
        };
        let (epoch, mut next, saved_steps) = (word("epoch")?, word("next")?, word("steps")?);
        let global = state.u64("global")?;
        if from_ranks == p && (saved_steps != steps || next > steps) {
            return Err(Error::corrupt(
                "checkpoint",
                format!(
                    "{}: saved at step {next} of epochs of {saved_steps} steps; this run's epochs have {steps}",
                    path.display()
                ),
            ));
        }
        if from_ranks != p && saved_steps > 0 {
            // The same fraction of the epoch on the new shards.
            next = ((next as f64 * steps as f64 / saved_steps as f64).round() as usize).min(steps);
        }
        let history = parse_history(manifest.meta.get("history").map_or("", String::as_str))?;
        check_history(&path, &history, epoch)?;
        let progress = std::fs::read_to_string(dir.join("progress"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(global);
        Ok(Resumed {
            trainer: state.child("trainer")?.clone(),
            pos: Position {
                epoch,
                next,
                global,
                steps,
                history,
            },
            local: local_entries(&state)?,
            from_ranks,
            lost_steps: progress.saturating_sub(global),
        })
    })();
    agree_or_fail(
        t,
        &[("resume", 1)],
        checked.as_ref().map(drop).map_err(Clone::clone),
    )?;
    checked
}

/// The newest checkpoint of `dir` as this rank count loads it, and the
/// number of ranks that saved it: every rank reads which checkpoint is
/// newest and how many saved it; rank 0 reshards it (under
/// `dir/resharded/`) where they were another number.
fn newest(t: &mut dyn Transport, dir: &Path) -> Result<(PathBuf, usize)> {
    let p = t.size();
    let found = checkpoint::manifest(dir).map(|(at, m)| (at, m.ranks));
    let ranks = found.as_ref().map_or(0, |f| f.1);
    agree_or_fail(
        t,
        &[("checkpoint ranks", ranks as u64)],
        found.as_ref().map(drop).map_err(Clone::clone),
    )?;
    let (at, from_ranks) = found?;
    if from_ranks == p {
        return Ok((at, from_ranks));
    }
    let name = format!(
        "{}-on-{p}",
        at.file_name().map_or("resharded".into(), |n| {
            // `.NAME.old` (a crash's fallback) reshards as NAME.
            let n = n.to_string_lossy();
            let n = n.strip_prefix('.').unwrap_or(&n);
            n.strip_suffix(".old").unwrap_or(n).to_string()
        })
    );
    let target = dir.join("resharded");
    let done = if t.rank() == 0 {
        checkpoint::reshard(&at, p, &target, &name).map(drop)
    } else {
        Ok(())
    };
    agree_or_fail(t, &[("reshard", 1)], done)?;
    Ok((target.join(name), from_ranks))
}

/// Every setting of this run (`meta`) as the checkpoint at `path` saved
/// it (`saved`): one that differs or is absent is an error naming it.
fn check_settings(
    path: &Path,
    meta: &BTreeMap<String, String>,
    saved: &BTreeMap<String, String>,
) -> Result<()> {
    for (k, v) in meta {
        match saved.get(k) {
            Some(saved) if saved == v => {}
            saved => {
                return Err(Error::invalid(
                    "--resume",
                    format!(
                        "{}: {k} is {v} in this run, {} in the checkpoint",
                        path.display(),
                        saved.map_or("absent", String::as_str)
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A history that holds `epoch` finished epochs (the test accuracy and
/// the loss of rank 0 at most that many, alike).
fn check_history(path: &Path, h: &History, epoch: usize) -> Result<()> {
    if h.weight_hash.len() != epoch
        || h.test_acc.len() > epoch
        || h.train_loss.len() != h.test_acc.len()
    {
        return Err(Error::corrupt(
            "checkpoint",
            format!(
                "{}: the history does not hold {epoch} epochs",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// The loop's local entries of a checkpoint's state (the epoch's
/// accumulators), as saved: f64 values as their bits.
fn local_entries(state: &State) -> Result<BTreeMap<String, Vec<f64>>> {
    let mut local = BTreeMap::new();
    for (name, _, t) in state.entries() {
        if let Tensor::U64(v) = t
            && state.get(name)?.0 == Scope::Local
        {
            local.insert(
                name.to_string(),
                v.iter().map(|x| f64::from_bits(*x)).collect(),
            );
        }
    }
    Ok(local)
}

/// Records on disk that `global` steps are done (rank 0, after every
/// step; not synced: it only tells a resume how much was lost).
pub fn progress(dir: &Path, global: u64) {
    let _ = std::fs::create_dir_all(dir);
    // Through a temporary name, so that a kill mid-write leaves the last
    // whole count, never a cut one.
    let tmp = dir.join("progress.part");
    if std::fs::write(&tmp, global.to_string()).is_ok() {
        let _ = std::fs::rename(&tmp, dir.join("progress"));
    }
}
