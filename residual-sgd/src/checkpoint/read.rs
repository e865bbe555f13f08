//! Finding a checkpoint and reading it back (module docs: what a load
//! guarantees).

use super::files::{holds_checkpoint, is_dir, read_checked};
use super::format::{check_tensor_len, tree_size};
use super::{
    LATEST, MANIFEST, MAX_METADATA, MAX_NAME, MAX_TENSORS, Manifest, check_name, corrupt, decode,
    parse_manifest, tensor_file, tree_file,
};
use sparse_coll::{Transport, agree_or_fail};
use sparse_core::state::State;
use sparse_core::{Error, Result};
use std::path::{Path, PathBuf};

/// Where a path leads: the checkpoint's directory, and the name its
/// manifest must hold where `LATEST` named it.
pub(super) struct Located {
    pub dir: PathBuf,
    pub name: Option<String>,
}

/// The checkpoint `path` names: `path` itself where it holds a manifest,
/// else the one `path/LATEST` names.
pub(super) fn locate(path: &Path) -> Result<Located> {
    if holds_checkpoint(path) {
        return Ok(Located {
            dir: path.to_path_buf(),
            name: None,
        });
    }
    if !is_dir(path) || std::fs::symlink_metadata(path.join(LATEST)).is_err() {
        return Err(Error::invalid(
            "checkpoint",
            format!(
                "{}: no {MANIFEST} and no {LATEST}: not a checkpoint or a checkpoint directory",
                path.display()
            ),
        ));
    }
    through_latest(path)
}

/// The checkpoint `dir/LATEST` names: `dir/NAME`, or `dir/.NAME.old`
/// where a crash while `NAME` was replaced left the previous one aside.
pub(super) fn through_latest(dir: &Path) -> Result<Located> {
    let latest = dir.join(LATEST);
    let shown = latest.display().to_string();
    let bytes = read_checked(&latest, MAX_NAME as u64, None)?;
    let name = String::from_utf8(bytes).map_err(|e| {
        corrupt(
            &shown,
            format!("holds {:?}, not a checkpoint's name", e.as_bytes()),
        )
    })?;
    check_name(&name)
        .map_err(|_| corrupt(&shown, format!("holds {name:?}, not a checkpoint's name")))?;
    for dir in [dir.join(&name), dir.join(format!(".{name}.old"))] {
        if holds_checkpoint(&dir) {
            return Ok(Located {
                dir,
                name: Some(name),
            });
        }
    }
    Err(corrupt(
        &shown,
        format!(
            "names {name:?}, but {} holds no checkpoint (no {MANIFEST}): point {LATEST} at a \
             complete checkpoint, or load one by its path",
            dir.join(&name).display()
        ),
    ))
}

/// The checkpoint `path` names: `path` itself where it holds a manifest,
/// else the one `path/LATEST` names (or, where a crash while it was
/// replaced left it aside, `path/.NAME.old`).
///
/// # Errors
/// [`Error::InvalidParameter`] where neither is there, or `LATEST` is not
/// a regular file; [`Error::Corrupt`] for a `LATEST` that holds no
/// checkpoint's name or names none.
pub fn resolve(path: &Path) -> Result<PathBuf> {
    locate(path).map(|l| l.dir)
}

/// The manifest of the checkpoint `path` ([`resolve`]), read bounded and
/// checked (its name against `LATEST`'s where `LATEST` named it), and
/// where it is.
///
/// # Errors
/// As [`resolve`]; [`Error::Corrupt`] naming the field.
pub fn manifest(path: &Path) -> Result<(PathBuf, Manifest)> {
    let loc = locate(path)?;
    let (m, _) = read_manifest(&loc, None)?;
    Ok((loc.dir, m))
}

/// The manifest of the located checkpoint, checked to hold the name
/// `LATEST` gave, to be of `ranks` ranks where given and to list every
/// file of its ranks; and the CRC-32 of its bytes.
pub(super) fn read_manifest(loc: &Located, ranks: Option<usize>) -> Result<(Manifest, u32)> {
    let mpath = loc.dir.join(MANIFEST);
    let shown = mpath.display().to_string();
    let bytes = read_checked(&mpath, MAX_METADATA, None)?;
    let crc = crc32fast::hash(&bytes);
    let m = parse_manifest(&bytes, &shown)?;
    drop(bytes);
    if let Some(name) = &loc.name
        && m.name != *name
    {
        return Err(corrupt(
            &shown,
            format!(
                "{LATEST} names {name:?}, but this checkpoint was saved as {:?}: checkpoint \
                 directories were renamed or swapped; load it by its path if it is the one you \
                 want, or point {LATEST} at the checkpoint saved as {name:?}",
                m.name
            ),
        ));
    }
    if let Some(p) = ranks
        && m.ranks != p
    {
        return Err(Error::mismatch(
            format!("the rank count of the checkpoint {}", loc.dir.display()),
            m.ranks,
            p,
            "reshard it first (checkpoint::reshard), or load it on as many ranks as saved it",
        ));
    }
    let listed: std::collections::HashSet<&str> = m.files.iter().map(|x| x.name.as_str()).collect();
    for q in 0..m.ranks {
        for f in [tensor_file(q), tree_file(q)] {
            if !listed.contains(f.as_str()) {
                return Err(corrupt(
                    &shown,
                    format!("lists no {f} among {} ranks' files", m.ranks),
                ));
            }
        }
    }
    drop(listed);
    Ok((m, crc))
}

/// Rank `r`'s state in the checkpoint `dir` of manifest `m`: the tree
/// file's length and CRC checked before it is parsed; the tensor file's
/// length (the manifest's) against what the tree says, then its CRC,
/// before it is read into memory.
pub(super) fn read_rank(dir: &Path, m: &Manifest, r: usize) -> Result<State> {
    let sum = |file: String| {
        m.files.iter().find(|f| f.name == file).ok_or_else(|| {
            corrupt(
                &dir.join(MANIFEST).display().to_string(),
                format!("lists no {file}"),
            )
        })
    };
    let (tree_sum, st_sum) = (sum(tree_file(r))?, sum(tensor_file(r))?);
    let base = dir.join(format!("rank-{r:04}")).display().to_string();
    let tree = read_checked(&dir.join(&tree_sum.name), MAX_METADATA, Some(tree_sum))?;
    let size = tree_size(&tree, &format!("{base}.json"))?;
    let st_path = dir.join(&st_sum.name);
    check_tensor_len(st_sum.bytes, &size, &st_path.display().to_string())?;
    let st = read_checked(&st_path, MAX_TENSORS, Some(st_sum))?;
    decode(&st, &tree, &base)
}

/// Reads this rank's state and the manifest of the checkpoint `path`
/// ([`resolve`]) on every rank of `t`, which must be as many as saved it.
///
/// # Errors
/// [`Error::Mismatch`] for a checkpoint of another rank count;
/// [`Error::Corrupt`] naming the file and what disagrees (format, version,
/// the name `LATEST` gave, length, CRC, tree, tensors);
/// [`Error::InvalidParameter`] for a file that is not a regular file;
/// [`Error::PeerError`] on the other ranks; [`Error::Disagreement`] where
/// ranks read different manifests; transport errors.
pub fn load(t: &mut dyn Transport, path: &Path) -> Result<(State, Manifest)> {
    let (p, r) = (t.size(), t.rank());
    let mut manifest_crc = 0u64;
    let mine = (|| -> Result<(State, Manifest)> {
        let loc = locate(path)?;
        let (m, crc) = read_manifest(&loc, Some(p))?;
        manifest_crc = u64::from(crc);
        Ok((read_rank(&loc.dir, &m, r)?, m))
    })();
    let local = mine.as_ref().map(drop).map_err(Clone::clone);
    agree_or_fail(t, &[("checkpoint manifest", manifest_crc)], local)?;
    mine
}
