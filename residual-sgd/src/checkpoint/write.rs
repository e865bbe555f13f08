//! Saving, pruning and resharding (module docs: what a save guarantees).

use super::files::{
    holds_checkpoint, io, lock, read_checked, remove_dir_if_present, remove_file_if_present,
    sync_dir, write_synced,
};
use super::format::{check_encoded, manifest_json};
use super::read::{Located, locate, read_manifest, read_rank, through_latest};
use super::{
    FileSum, LATEST, MANIFEST, MAX_METADATA, Manifest, check_meta, check_name, check_ranks, encode,
    tensor_file, tree_file,
};
use sparse_coll::dense::bruck_allgather;
use sparse_coll::{Transport, agree_or_fail};
use sparse_core::state::State;
use sparse_core::{Error, Result};
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

/// The file in a save's temporary directory that tells the ranks it is
/// the one rank 0 prepared.
const SAVE_ID: &str = "save-id";

/// A checkpoint being written by rank 0 (or by [`reshard`] alone): the
/// directory's lock held, a fresh temporary directory made. Dropped
/// before its commit, it removes the temporary directory.
struct Writer {
    dir: PathBuf,
    name: String,
    tmp: PathBuf,
    id: u64,
    committed: bool,
    _lock: File,
}

/// A number no other save of this name has used.
fn fresh_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.write_u32(std::process::id());
    h.finish() | 1
}

impl Writer {
    /// Takes `dir`'s lock, checks that `name` is free for a checkpoint
    /// (absent, or a checkpoint, replaced whole) and that `LATEST` can be
    /// replaced, and makes `dir/.NAME.tmp/` afresh with an identifier.
    fn begin(dir: &Path, name: &str) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| io(dir, "create", e))?;
        let lock = lock(dir)?;
        let fin = dir.join(name);
        if std::fs::symlink_metadata(&fin).is_ok() && !holds_checkpoint(&fin) {
            return Err(Error::invalid(
                "checkpoint name",
                format!(
                    "{}: there is something there that is not a checkpoint (no {MANIFEST}): \
                     choose another name, or move it away; a save replaces only a checkpoint",
                    fin.display()
                ),
            ));
        }
        // A save replaces `LATEST` by a rename, which a directory refuses.
        for path in [dir.join(LATEST), dir.join("LATEST.part")] {
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                return Err(Error::invalid(
                    "checkpoint",
                    format!(
                        "{}: a directory, which a save cannot replace: remove it",
                        path.display()
                    ),
                ));
            }
        }
        let tmp = dir.join(format!(".{name}.tmp"));
        remove_dir_if_present(&tmp)?;
        std::fs::create_dir(&tmp).map_err(|e| io(&tmp, "create", e))?;
        let id = fresh_id();
        write_synced(&tmp.join(SAVE_ID), format!("{id:016x}").as_bytes())?;
        Ok(Self {
            dir: dir.to_path_buf(),
            name: name.into(),
            tmp,
            id,
            committed: false,
            _lock: lock,
        })
    }

    /// Writes the manifest of `ranks` ranks' `files` (checked on disk
    /// first) with `meta`, renames the checkpoint into place and points
    /// `LATEST` at it.
    fn commit(
        mut self,
        ranks: usize,
        meta: &BTreeMap<String, String>,
        files: Vec<FileSum>,
    ) -> Result<PathBuf> {
        check_files(&self.tmp, ranks, &files)?;
        let manifest = Manifest {
            name: self.name.clone(),
            ranks,
            meta: meta.clone(),
            files,
        };
        let bytes = manifest_json(&manifest);
        drop(manifest);
        if bytes.len() as u64 > MAX_METADATA {
            return Err(Error::invalid(
                "checkpoint metadata",
                format!(
                    "the manifest would be {} bytes, more than the {MAX_METADATA} a load reads: \
                     keep the metadata smaller",
                    bytes.len()
                ),
            ));
        }
        remove_file_if_present(&self.tmp.join(SAVE_ID))?;
        write_synced(&self.tmp.join(MANIFEST), &bytes)?;
        drop(bytes);
        sync_dir(&self.tmp)?;
        let fin = self.dir.join(&self.name);
        let old = self.dir.join(format!(".{}.old", self.name));
        let replaced = std::fs::symlink_metadata(&fin).is_ok();
        if replaced {
            remove_dir_if_present(&old)?;
            std::fs::rename(&fin, &old).map_err(|e| io(&fin, "rename", e))?;
        }
        let undo = |e: Error| {
            // `LATEST` has not moved: the previous checkpoint goes back.
            let _ = std::fs::rename(&fin, &self.tmp);
            if replaced {
                let _ = std::fs::rename(&old, &fin);
            }
            Err(e)
        };
        if let Err(e) = std::fs::rename(&self.tmp, &fin) {
            if replaced {
                let _ = std::fs::rename(&old, &fin);
            }
            return Err(io(&fin, "rename", e));
        }
        if let Err(e) = sync_dir(&self.dir) {
            return undo(e);
        }
        if let Err(e) = write_synced(&self.dir.join(LATEST), self.name.as_bytes()) {
            return undo(e);
        }
        self.committed = true;
        sync_dir(&self.dir).map_err(|e| {
            Error::invalid(
                "checkpoint",
                format!(
                    "{} is in place and {LATEST} names it, but a crash may still lose that: {e}",
                    fin.display()
                ),
            )
        })?;
        // Committed: the replaced checkpoint is only a leftover now (the
        // next save of this name removes it where this cannot).
        let _ = remove_dir_if_present(&old);
        Ok(fin)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if !self.committed {
            let _ = remove_dir_if_present(&self.tmp);
        }
    }
}

/// Checks that `files` are two per rank of `ranks`, by rank, each in
/// `tmp` with the length its rank reported.
fn check_files(tmp: &Path, ranks: usize, files: &[FileSum]) -> Result<()> {
    if files.len() != 2 * ranks {
        return Err(Error::invalid(
            "checkpoint",
            format!(
                "{} files reported by {ranks} ranks, not two each",
                files.len()
            ),
        ));
    }
    for (i, f) in files.iter().enumerate() {
        let q = i / 2;
        let want = if i % 2 == 0 {
            tensor_file(q)
        } else {
            tree_file(q)
        };
        let on_disk = std::fs::metadata(tmp.join(&f.name)).ok();
        if f.name != want
            || !on_disk
                .as_ref()
                .is_some_and(|m| m.is_file() && m.len() == f.bytes)
        {
            return Err(Error::invalid(
                "checkpoint",
                format!(
                    "rank {q} reported writing {:?} of {} bytes, but {} holds no such file: \
                     every rank must save into the same directory, on a file system every \
                     rank shares",
                    f.name,
                    f.bytes,
                    tmp.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Encodes `state` as rank `r`'s files, checks that a load would read
/// them, and writes them into `tmp`.
fn write_rank(tmp: &Path, r: usize, state: &State) -> Result<Vec<FileSum>> {
    let (st, tree) = encode(state)?;
    check_encoded(
        &st,
        &tree,
        &tmp.join(format!("rank-{r:04}")).display().to_string(),
    )?;
    let mut sums = Vec::with_capacity(2);
    for (file, bytes) in [(tensor_file(r), st), (tree_file(r), tree)] {
        write_synced(&tmp.join(&file), &bytes)?;
        sums.push(FileSum {
            name: file,
            bytes: bytes.len() as u64,
            crc32: crc32fast::hash(&bytes),
        });
    }
    Ok(sums)
}

/// The identifier rank 0 wrote in `tmp`, read by a rank that must see
/// the same directory.
fn read_save_id(tmp: &Path) -> Result<u64> {
    let path = tmp.join(SAVE_ID);
    let id = read_checked(&path, 64, None).and_then(|b| {
        std::str::from_utf8(&b)
            .ok()
            .and_then(|s| u64::from_str_radix(s, 16).ok())
            .ok_or_else(|| Error::invalid("checkpoint", "not an identifier"))
    });
    id.map_err(|e| {
        Error::invalid(
            "checkpoint directory",
            format!(
                "{}: {e}: this rank does not see the directory rank 0 prepared for the save: \
                 every rank must pass the same directory, on a file system every rank shares",
                path.display()
            ),
        )
    })
}

/// Agrees on the checkpoint's name (and on every rank's `local` checks);
/// ranks that pass different names learn each rank's.
fn agree_on_name(t: &mut dyn Transport, name: &str, local: Result<()>) -> Result<()> {
    let digest = sparse_core::hash::fnv1a(name.bytes());
    match agree_or_fail(t, &[("checkpoint name", digest)], local) {
        Err(Error::Disagreement {
            what: "checkpoint name",
            ..
        }) => {
            // Only here are the names (checked short) exchanged.
            let all = bruck_allgather(t, name.as_bytes())?;
            let names: Vec<String> = all
                .iter()
                .enumerate()
                .map(|(r, n)| format!("rank {r}: {:?}", String::from_utf8_lossy(n)))
                .collect();
            Err(Error::Disagreement {
                what: "checkpoint name",
                detail: format!(
                    "{}: every rank must pass the same directory and name",
                    names.join(", ")
                ),
            })
        }
        other => other,
    }
}

/// Saves this rank's `state` as part of the checkpoint `dir/name` of every
/// rank of `t` (each its own state) with the caller's `meta` (rank 0's is
/// written), then points `dir/LATEST` at it. Every rank calls it, with the
/// same `dir` and `name`. A checkpoint of the same name is replaced
/// whole; module docs: what a save guarantees.
///
/// # Errors
/// On every rank ([`Error::PeerError`] on the others), and then `LATEST`
/// has not moved: [`Error::Disagreement`] for ranks passing different
/// names or seeing different directories; [`Error::InvalidParameter`] for
/// an invalid name, a name taken by something that is not a checkpoint,
/// another save or prune of `dir` under way, a state or metadata a load
/// would refuse, or an I/O error (naming the path); encoding and
/// transport errors.
pub fn save(
    t: &mut dyn Transport,
    dir: &Path,
    name: &str,
    state: &State,
    meta: &BTreeMap<String, String>,
) -> Result<PathBuf> {
    let (p, r) = (t.size(), t.rank());
    let valid = check_name(name)
        .and_then(|()| check_meta(meta))
        .and_then(|()| check_ranks(p));
    agree_on_name(t, name, valid)?;
    // Rank 0 takes the lock and prepares the temporary directory.
    let mut writer = None;
    let ready = if r == 0 {
        Writer::begin(dir, name).map(|w| writer = Some(w))
    } else {
        Ok(())
    };
    agree_or_fail(t, &[("checkpoint directory", 1)], ready)?;
    // Every rank reads its identifier there, then writes its files.
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut id = 0;
    let mine = read_save_id(&tmp).and_then(|got| {
        id = got;
        write_rank(&tmp, r, state)
    });
    let sums = mine.as_ref().map_or_else(|_| Vec::new(), Clone::clone);
    match agree_or_fail(t, &[("checkpoint directory", id)], mine.map(drop)) {
        Err(Error::Disagreement { .. }) => {
            return Err(Error::Disagreement {
                what: "checkpoint directory",
                detail: format!(
                    "the ranks read different identifiers in {} (rank 0's save wrote one): \
                     every rank must pass the same directory, on a file system every rank \
                     shares",
                    tmp.display()
                ),
            });
        }
        other => other?,
    }
    let mut msg = Vec::new();
    for s in &sums {
        msg.extend((s.name.len() as u64).to_le_bytes());
        msg.extend(s.name.as_bytes());
        msg.extend(s.bytes.to_le_bytes());
        msg.extend(s.crc32.to_le_bytes());
    }
    let all = bruck_allgather(t, &msg)?;
    let committed = match writer.take() {
        Some(w) => {
            debug_assert_eq!(w.id, id);
            collect_sums(&all).and_then(|files| w.commit(p, meta, files).map(drop))
        }
        None => Ok(()),
    };
    agree_or_fail(t, &[("checkpoint commit", 1)], committed)?;
    Ok(dir.join(name))
}

/// Every rank's file list, by rank, from the allgather of [`save`].
fn collect_sums(all: &[Vec<u8>]) -> Result<Vec<FileSum>> {
    let mut files = Vec::new();
    for (q, m) in all.iter().enumerate() {
        files.extend(
            parse_sums(m)
                .map_err(|e| Error::invalid("checkpoint", format!("rank {q}'s file list: {e}")))?,
        );
    }
    Ok(files)
}

fn parse_sums(m: &[u8]) -> std::result::Result<Vec<FileSum>, String> {
    let mut out = Vec::new();
    let mut rest = m;
    let mut take = |n: usize| -> std::result::Result<&[u8], String> {
        if rest.len() < n {
            return Err("short".into());
        }
        let (b, r) = rest.split_at(n);
        rest = r;
        Ok(b)
    };
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    while let Ok(len) = take(8) {
        let n = usize::try_from(word(len)).map_err(|e| e.to_string())?;
        let name = String::from_utf8(take(n.min(4096))?.to_vec()).map_err(|e| e.to_string())?;
        let bytes = word(take(8)?);
        let crc32 = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes"));
        out.push(FileSum { name, bytes, crc32 });
    }
    Ok(out)
}

/// Removes the complete checkpoints of `dir` whose names `retain` rejects,
/// and returns their names, sorted, on rank 0 (an empty list on the
/// others). Every rank calls it, after [`save`]; rank 0 removes, holding
/// the directory's lock.
///
/// A complete checkpoint is a directory of `dir` whose name is not hidden
/// and that holds a manifest; nothing else in `dir` is touched (a crashed
/// save's `.NAME.tmp` and a crashed replacement's `.NAME.old` are left to
/// [`save`] and [`super::resolve`]). The one `dir/LATEST` names is never
/// removed, whatever `retain` says, and `LATEST` must hold a checkpoint's
/// name and lead to a complete checkpoint (`dir/NAME`, or `.NAME.old`
/// after a crash; else nothing is removed: the error says why), so a
/// directory that has a checkpoint keeps one. Each is
/// first renamed to the hidden `.NAME.pruned` (atomic), then removed, so
/// a crash part way leaves either the whole checkpoint or a hidden
/// directory that [`super::resolve`] never names; such leftovers are
/// removed first by the next call.
///
/// # Errors
/// On rank 0 ([`Error::InvalidParameter`] naming the path: `dir`
/// unreadable, `LATEST` missing while checkpoints are there, not a regular
/// file, or naming no complete checkpoint, another save or prune under
/// way, a rename or removal refused), on every rank ([`Error::PeerError`]
/// on the others); transport errors. A checkpoint already gone when it is
/// removed is no error.
pub fn prune(
    t: &mut dyn Transport,
    dir: &Path,
    retain: impl Fn(&str) -> bool,
) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    let done = if t.rank() == 0 {
        prune_here(dir, &retain, &mut removed)
    } else {
        Ok(())
    };
    agree_or_fail(t, &[("checkpoint prune", 1)], done)?;
    Ok(removed)
}

fn prune_here(dir: &Path, retain: &dyn Fn(&str) -> bool, removed: &mut Vec<String>) -> Result<()> {
    let _lock = lock(dir)?;
    // The whole listing first: nothing is renamed while the directory is
    // read.
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io(dir, "read", e))? {
        let entry = entry.map_err(|e| io(dir, "read", e))?;
        if let Ok(name) = entry.file_name().into_string() {
            names.push(name);
        }
    }
    names.sort();
    let complete = |n: &String| !n.starts_with('.') && holds_checkpoint(&dir.join(n));
    let latest = usable_latest(dir, names.iter().any(complete))?;
    for name in names
        .iter()
        .filter(|n| n.starts_with('.') && n.ends_with(".pruned"))
    {
        remove_dir_if_present(&dir.join(name))?;
    }
    for name in names.iter().filter(|n| complete(n)) {
        if latest.as_deref() != Some(name.as_str()) && !retain(name) {
            let (path, aside) = (dir.join(name), dir.join(format!(".{name}.pruned")));
            std::fs::rename(&path, &aside).map_err(|e| io(&path, "rename", e))?;
            remove_dir_if_present(&aside)?;
            removed.push(name.clone());
        }
    }
    Ok(())
}

/// The name `dir/LATEST` holds, checked to lead to a complete checkpoint
/// (as [`prune`] tells one: a directory holding a manifest that is a
/// regular file); `None` where there is no `LATEST` and no checkpoint.
fn usable_latest(dir: &Path, any_checkpoint: bool) -> Result<Option<String>> {
    let latest = dir.join(LATEST);
    let refuse = |detail: String| {
        Error::invalid(
            "checkpoint",
            format!(
                "{}: {detail}; prune removes nothing while {LATEST} names no complete \
                 checkpoint: point it at the newest one",
                latest.display()
            ),
        )
    };
    if std::fs::symlink_metadata(&latest).is_err() {
        return if any_checkpoint {
            Err(refuse(
                "missing, but the directory holds checkpoints".into(),
            ))
        } else {
            Ok(None)
        };
    }
    match through_latest(dir) {
        Ok(Located { name, .. }) => Ok(name),
        Err(Error::Corrupt { detail, .. }) => Err(refuse(detail)),
        Err(Error::InvalidParameter { reason, .. }) => Err(refuse(reason)),
        Err(e) => Err(refuse(e.to_string())),
    }
}

/// Reshards the checkpoint `src` ([`super::resolve`]; saved by any number
/// of ranks) onto `p_new` ranks as the checkpoint `dst/name`, in this
/// process ([`sparse_core::state::reshard`]'s rules: shared state copied,
/// residuals and momenta summed by `old rank mod p_new`, state that
/// depends on the rank count or one rank's data dropped, to be rebuilt as
/// on a first call). Its manifest keeps the metadata and adds
/// `resharded_from`. The new ranks' states are made and written one at a
/// time, so it holds the old states and one new one whatever `p_new`
/// (memory linear in the old rank count, not in `p_new`); a save's
/// guarantees hold.
///
/// # Errors
/// As [`super::load`] for every old rank's files;
/// [`sparse_core::state::reshard`]'s errors; as [`save`].
pub fn reshard(src: &Path, p_new: usize, dst: &Path, name: &str) -> Result<Manifest> {
    check_name(name)?;
    check_ranks(p_new)?;
    let loc = locate(src)?;
    let (m, _) = read_manifest(&loc, None)?;
    let old = (0..m.ranks)
        .map(|r| read_rank(&loc.dir, &m, r))
        .collect::<Result<Vec<State>>>()?;
    let mut meta = m.meta.clone();
    meta.insert("resharded_from".into(), m.ranks.to_string());
    check_meta(&meta)?;
    let w = Writer::begin(dst, name)?;
    let mut files = Vec::new();
    files
        .try_reserve_exact(2 * p_new)
        .map_err(|_| Error::OutOfMemory {
            what: "checkpoint file list",
            bytes: (2 * p_new * std::mem::size_of::<FileSum>()) as u64,
        })?;
    for q in 0..p_new {
        let s = sparse_core::state::reshard_rank(&old, p_new, q)?;
        files.extend(write_rank(&w.tmp, q, &s)?);
    }
    let fin = w.commit(p_new, &meta, files)?;
    let loc = Located {
        dir: fin,
        name: Some(name.into()),
    };
    let (out, _) = read_manifest(&loc, Some(p_new))?;
    Ok(out)
}
