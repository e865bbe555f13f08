//! Checkpoints on disk: every rank's [`State`] (a [`crate::Trainer`]'s, or
//! any state a caller builds around it) in a directory with a manifest.
//!
//! A checkpoint `D/NAME/` holds, for each rank `r` of `P`:
//! - `rank-RRRR.safetensors`: the state's tensors, each under its path in
//!   the state's tree (`layer.0/memory/v`), one dimension, in `safetensors`
//!   (the format Python and Rust ML code load alike);
//! - `rank-RRRR.json`: the tree itself: each part's kind and version, each
//!   entry's scope, element type and length (versioned metadata);
//!
//! and `manifest.json`: the format and its version, the name, `P`, the
//! caller's metadata (string pairs: a run's settings, its epoch), each
//! file's length and CRC-32, and the CRC-32 of its own content
//! (`manifest_crc32`, [`manifest_crc`]). `D/LATEST` names the newest
//! complete checkpoint.
//!
//! Saving is crash-safe: every file is written under a temporary name,
//! synced and renamed; the checkpoint is assembled in `D/.NAME.tmp/` and
//! renamed into place only when every rank's files and the manifest are on
//! disk, and `LATEST` moves last. A crash at any point leaves the previous
//! checkpoint and `LATEST` as they were. Every checkpoint saved is kept
//! until [`prune`] removes those its caller rejects (never the one
//! `LATEST` names).
//!
//! Loading treats the files as hostile: the manifest's format, version and
//! rank count, each file's length and CRC before it is parsed, every
//! tensor's element type and length against the tree, no tensor left
//! unread; nothing is allocated beyond what a file's length can hold. Any
//! failure on any rank is an error on every rank, naming the file and what
//! disagrees, and no state is returned.

use sparse_coll::dense::bruck_allgather;
use sparse_coll::{Transport, agree_or_fail};
use sparse_core::state::{Scope, State, Tensor};
use sparse_core::{Error, Result};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The format's name in manifests.
pub const FORMAT: &str = "sparse-gradient checkpoint";
/// The format's version this code writes and reads.
pub const FORMAT_VERSION: u64 = 2;
/// The file naming the newest complete checkpoint of a directory.
pub const LATEST: &str = "LATEST";
/// The manifest's file name.
pub const MANIFEST: &str = "manifest.json";
/// The largest manifest or tree file read.
pub const MAX_METADATA: u64 = 64 << 20;
/// The largest tensor file read.
pub const MAX_TENSORS: u64 = 1 << 36;

/// One file of a checkpoint, as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSum {
    /// Its name in the checkpoint's directory.
    pub name: String,
    /// Its length in bytes.
    pub bytes: u64,
    /// Its CRC-32 (IEEE).
    pub crc32: u32,
}

/// A checkpoint's manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The checkpoint's name (its directory's).
    pub name: String,
    /// The ranks that saved it.
    pub ranks: usize,
    /// The caller's metadata.
    pub meta: BTreeMap<String, String>,
    /// Every file but the manifest.
    pub files: Vec<FileSum>,
}

fn corrupt(file: &str, detail: impl std::fmt::Display) -> Error {
    Error::corrupt("checkpoint", format!("{file}: {detail}"))
}

fn io(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::invalid("checkpoint", format!("{}: {what}: {e}", path.display()))
}

/// The tensor file of rank `r`.
pub fn tensor_file(r: usize) -> String {
    format!("rank-{r:04}.safetensors")
}

/// The tree file of rank `r`.
pub fn tree_file(r: usize) -> String {
    format!("rank-{r:04}.json")
}

/// A state's tensors (by path) and its tree as JSON.
///
/// # Errors
/// [`Error::InvalidParameter`] for an entry or part name holding `/`.
pub fn encode(state: &State) -> Result<(Vec<u8>, Vec<u8>)> {
    let mut tensors: Vec<(String, Vec<u8>, safetensors::Dtype, usize)> = Vec::new();
    let tree = encode_node(state, "", &mut tensors)?;
    let views = tensors
        .iter()
        .map(|(name, bytes, dtype, len)| {
            safetensors::tensor::TensorView::new(*dtype, vec![*len], bytes)
                .map(|v| (name.clone(), v))
                .map_err(|e| Error::invalid("checkpoint", format!("tensor {name}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let st = safetensors::serialize(views, None)
        .map_err(|e| Error::invalid("checkpoint", format!("safetensors: {e}")))?;
    let json = serde_json::to_vec_pretty(&tree)
        .map_err(|e| Error::invalid("checkpoint", format!("tree: {e}")))?;
    Ok((st, json))
}

fn encode_node(
    s: &State,
    prefix: &str,
    out: &mut Vec<(String, Vec<u8>, safetensors::Dtype, usize)>,
) -> Result<serde_json::Value> {
    let check = |n: &str| {
        if n.is_empty() || n.contains('/') {
            Err(Error::invalid(
                "state",
                format!("name {n:?} is empty or holds '/'"),
            ))
        } else {
            Ok(())
        }
    };
    let mut entries = serde_json::Map::new();
    for (name, scope, t) in s.entries() {
        check(name)?;
        let (bytes, dtype): (Vec<u8>, _) = match t {
            Tensor::F32(v) => (
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                safetensors::Dtype::F32,
            ),
            Tensor::U32(v) => (
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                safetensors::Dtype::U32,
            ),
            Tensor::U64(v) => (
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                safetensors::Dtype::U64,
            ),
        };
        entries.insert(
            name.into(),
            serde_json::json!({"scope": scope.name(), "dtype": t.dtype(), "len": t.len()}),
        );
        out.push((format!("{prefix}{name}"), bytes, dtype, t.len()));
    }
    let mut children = serde_json::Map::new();
    for (name, c) in s.children() {
        check(name)?;
        children.insert(
            name.into(),
            encode_node(c, &format!("{prefix}{name}/"), out)?,
        );
    }
    Ok(serde_json::json!({
        "kind": s.kind(), "version": s.version(), "resharded": s.resharded(),
        "entries": entries, "children": children,
    }))
}

/// The state encoded as [`encode`] does, read back from the tensor file
/// `tensors` and the tree file `tree` (`file`, for errors, names them).
///
/// # Errors
/// [`Error::Corrupt`] naming the file and what is wrong: an unreadable
/// file, a tree node without its fields, a tensor missing or of another
/// element type or length than the tree says, a tensor the tree does not
/// name.
pub fn decode(tensors: &[u8], tree: &[u8], file: &str) -> Result<State> {
    let st = safetensors::SafeTensors::deserialize(tensors)
        .map_err(|e| corrupt(&format!("{file}.safetensors"), e))?;
    let tree: serde_json::Value =
        serde_json::from_slice(tree).map_err(|e| corrupt(&format!("{file}.json"), e))?;
    let mut used = 0usize;
    let s = decode_node(&tree, "", &st, file, &mut used)?;
    if used != st.len() {
        return Err(corrupt(
            &format!("{file}.safetensors"),
            format!("{} tensors, the tree names {used}", st.len()),
        ));
    }
    Ok(s)
}

fn decode_node(
    v: &serde_json::Value,
    prefix: &str,
    st: &safetensors::SafeTensors<'_>,
    file: &str,
    used: &mut usize,
) -> Result<State> {
    let json = format!("{file}.json");
    let bad = |what: String| corrupt(&json, what);
    let at = if prefix.is_empty() {
        "the root"
    } else {
        prefix
    };
    let obj = v
        .as_object()
        .ok_or_else(|| bad(format!("{at}: not an object")))?;
    let field = |k: &str| {
        obj.get(k)
            .ok_or_else(|| bad(format!("{at}: no field {k:?}")))
    };
    let kind = field("kind")?
        .as_str()
        .ok_or_else(|| bad(format!("{at}: kind is not a string")))?;
    let version = field("version")?
        .as_u64()
        .and_then(|x| u32::try_from(x).ok())
        .ok_or_else(|| bad(format!("{at}: version is not a u32")))?;
    let name_ok = |n: &str| !n.is_empty() && n.len() <= 256 && !n.contains('/');
    let mut s = State::new(kind, version);
    let entries = field("entries")?
        .as_object()
        .ok_or_else(|| bad(format!("{at}: entries is not an object")))?;
    for (name, e) in entries {
        if !name_ok(name) {
            return Err(bad(format!(
                "{at}: entry name {name:?} is empty, too long or holds '/'"
            )));
        }
        let path = format!("{prefix}{name}");
        let scope = e
            .get("scope")
            .and_then(|x| x.as_str())
            .ok_or_else(|| bad(format!("{path}: no scope")))
            .and_then(|x| Scope::from_name(x).map_err(|err| bad(format!("{path}: {err}"))))?;
        let dtype = e
            .get("dtype")
            .and_then(|x| x.as_str())
            .ok_or_else(|| bad(format!("{path}: no dtype")))?;
        let len = e
            .get("len")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| bad(format!("{path}: no len")))?;
        let view = st.tensor(&path).map_err(|err| {
            corrupt(
                &format!("{file}.safetensors"),
                format!("tensor {path}: {err}"),
            )
        })?;
        let want = match dtype {
            "f32" => safetensors::Dtype::F32,
            "u32" => safetensors::Dtype::U32,
            "u64" => safetensors::Dtype::U64,
            other => return Err(bad(format!("{path}: unknown dtype {other:?}"))),
        };
        if view.dtype() != want || view.shape() != [len as usize] {
            return Err(corrupt(
                &format!("{file}.safetensors"),
                format!(
                    "tensor {path} is {:?} {:?}, the tree says {dtype} [{len}]",
                    view.dtype(),
                    view.shape()
                ),
            ));
        }
        let d = view.data();
        let t = match want {
            safetensors::Dtype::F32 => Tensor::F32(
                d.chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                    .collect(),
            ),
            safetensors::Dtype::U32 => Tensor::U32(
                d.chunks_exact(4)
                    .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
                    .collect(),
            ),
            _ => Tensor::U64(
                d.chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .collect(),
            ),
        };
        *used += 1;
        s.put(name.clone(), scope, t);
    }
    let children = field("children")?
        .as_object()
        .ok_or_else(|| bad(format!("{at}: children is not an object")))?;
    for (name, c) in children {
        if !name_ok(name) {
            return Err(bad(format!(
                "{at}: part name {name:?} is empty, too long or holds '/'"
            )));
        }
        let child = decode_node(c, &format!("{prefix}{name}/"), st, file, used)?;
        s.put_child(name.clone(), child);
    }
    match obj.get("resharded") {
        None | Some(serde_json::Value::Bool(false)) => {}
        Some(serde_json::Value::Bool(true)) => s.mark_resharded(),
        Some(_) => return Err(bad(format!("{at}: resharded is not a flag"))),
    }
    Ok(s)
}

/// Writes `bytes` to `path` through a temporary name: written, synced,
/// renamed.
/// Removes the directory `path` and all it holds; one already gone is no
/// error.
fn remove_dir_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(path, "remove", e)),
        _ => Ok(()),
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("part");
    let mut f = std::fs::File::create(&tmp).map_err(|e| io(&tmp, "create", e))?;
    f.write_all(bytes).map_err(|e| io(&tmp, "write", e))?;
    f.sync_all().map_err(|e| io(&tmp, "sync", e))?;
    std::fs::rename(&tmp, path).map_err(|e| io(path, "rename", e))
}

/// Syncs a directory (its entries: the renames into it).
fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io(dir, "sync directory", e))
}

/// Reads at most `max` bytes of `path`, which must be exactly `want`
/// bytes long where given.
fn read_bounded(path: &Path, max: u64, want: Option<u64>) -> Result<Vec<u8>> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| io(path, "open", e))?;
    let len = f.metadata().map_err(|e| io(path, "stat", e))?.len();
    if let Some(w) = want
        && len != w
    {
        return Err(corrupt(
            &name,
            format!("{len} bytes, the manifest says {w}"),
        ));
    }
    if len > max {
        return Err(corrupt(&name, format!("{len} bytes, more than {max}")));
    }
    let mut out = Vec::new();
    out.try_reserve_exact(len as usize)
        .map_err(|_| Error::OutOfMemory {
            what: "checkpoint file",
            bytes: len,
        })?;
    // At most one byte more than its length said: a file that grows (or
    // is no file) is an error, not a read up to `max`.
    f.take(len + 1)
        .read_to_end(&mut out)
        .map_err(|e| io(path, "read", e))?;
    if out.len() as u64 != len {
        return Err(corrupt(&name, "changed while it was read"));
    }
    Ok(out)
}

/// Saves this rank's `state` as part of the checkpoint `dir/name` of every
/// rank of `t` (each its own state) with the caller's `meta`, then points
/// `dir/LATEST` at it. Every rank calls it. Crash-safe (module docs); a
/// checkpoint of the same name is replaced whole.
///
/// # Errors
/// I/O errors (as [`Error::InvalidParameter`] naming the path) and
/// encoding errors on any rank, on every rank ([`Error::PeerError`] on
/// the others); transport errors.
pub fn save(
    t: &mut dyn Transport,
    dir: &Path,
    name: &str,
    state: &State,
    meta: &BTreeMap<String, String>,
) -> Result<PathBuf> {
    let (p, r) = (t.size(), t.rank());
    if name.is_empty() || name.contains('/') || name.starts_with('.') || name == LATEST {
        return Err(Error::invalid(
            "checkpoint name",
            format!("{name:?}: empty, a path, hidden or {LATEST}"),
        ));
    }
    let tmp = dir.join(format!(".{name}.tmp"));
    let fin = dir.join(name);
    // Rank 0 clears what a crashed save left, before anyone writes.
    let ready = if r == 0 {
        std::fs::create_dir_all(dir)
            .map_err(|e| io(dir, "create", e))
            .and_then(|()| remove_dir_if_present(&tmp))
            .and_then(|()| std::fs::create_dir(&tmp).map_err(|e| io(&tmp, "create", e)))
    } else {
        Ok(())
    };
    agree_or_fail(t, &[("checkpoint directory", 1)], ready)?;
    let mine = (|| -> Result<Vec<FileSum>> {
        let (st, tree) = encode(state)?;
        let mut sums = Vec::new();
        for (file, bytes) in [(tensor_file(r), st), (tree_file(r), tree)] {
            write_synced(&tmp.join(&file), &bytes)?;
            sums.push(FileSum {
                name: file,
                bytes: bytes.len() as u64,
                crc32: crc32fast::hash(&bytes),
            });
        }
        Ok(sums)
    })();
    let sums = match &mine {
        Ok(s) => s.clone(),
        Err(_) => Vec::new(),
    };
    agree_or_fail(t, &[("checkpoint files", 1)], mine.map(drop))?;
    let mut msg = Vec::new();
    for s in &sums {
        msg.extend((s.name.len() as u64).to_le_bytes());
        msg.extend(s.name.as_bytes());
        msg.extend(s.bytes.to_le_bytes());
        msg.extend(s.crc32.to_le_bytes());
    }
    let all = bruck_allgather(t, &msg)?;
    let committed = if r == 0 {
        (|| -> Result<()> {
            let mut files = Vec::new();
            for (q, m) in all.iter().enumerate() {
                files.extend(parse_sums(m).map_err(|e| {
                    Error::invalid("checkpoint", format!("rank {q}'s file list: {e}"))
                })?);
            }
            let manifest = Manifest {
                name: name.into(),
                ranks: p,
                meta: meta.clone(),
                files,
            };
            write_synced(&tmp.join(MANIFEST), &manifest_json(&manifest))?;
            sync_dir(&tmp)?;
            let old = dir.join(format!(".{name}.old"));
            if fin.exists() {
                let _ = std::fs::remove_dir_all(&old);
                std::fs::rename(&fin, &old).map_err(|e| io(&fin, "rename", e))?;
            }
            if let Err(e) = std::fs::rename(&tmp, &fin) {
                if old.exists() {
                    let _ = std::fs::rename(&old, &fin);
                }
                return Err(io(&fin, "rename", e));
            }
            sync_dir(dir)?;
            write_synced(&dir.join(LATEST), name.as_bytes())?;
            sync_dir(dir)?;
            if old.exists() {
                std::fs::remove_dir_all(&old).map_err(|e| io(&old, "remove", e))?;
            }
            Ok(())
        })()
    } else {
        Ok(())
    };
    agree_or_fail(t, &[("checkpoint commit", 1)], committed)?;
    Ok(fin)
}

/// Removes the complete checkpoints of `dir` whose names `retain` rejects,
/// and returns their names, sorted, on rank 0 (an empty list on the
/// others). Every rank calls it, after [`save`]; rank 0 removes.
///
/// A complete checkpoint is a directory of `dir` whose name is not hidden
/// and that holds a manifest; nothing else in `dir` is touched (a crashed
/// save's `.NAME.tmp` and a crashed replacement's `.NAME.old` are left to
/// [`save`] and [`resolve`]). The one `dir/LATEST` names is never
/// removed, whatever `retain` says, so a directory that has a checkpoint
/// keeps one. Each is first renamed to the hidden `.NAME.pruned`
/// (atomic), then removed, so a crash part way leaves either the whole
/// checkpoint or a hidden directory that [`resolve`] never names; such
/// leftovers are removed first by the next call.
///
/// # Errors
/// I/O errors on rank 0 ([`Error::InvalidParameter`] naming the path:
/// `dir` or its `LATEST` unreadable, a rename or removal refused;
/// [`Error::Corrupt`] for a `LATEST` longer than a name), on every rank
/// ([`Error::PeerError`] on the others); transport errors. A checkpoint
/// already gone when it is removed is no error.
pub fn prune(
    t: &mut dyn Transport,
    dir: &Path,
    retain: impl Fn(&str) -> bool,
) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    let done = if t.rank() == 0 {
        (|| -> Result<()> {
            let latest_path = dir.join(LATEST);
            let latest = match std::fs::symlink_metadata(&latest_path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(io(&latest_path, "read", e)),
                Ok(_) => Some(read_bounded(&latest_path, 4096, None)?),
            };
            // The whole listing first: nothing is renamed while the
            // directory is read.
            let mut names = Vec::new();
            for entry in std::fs::read_dir(dir).map_err(|e| io(dir, "read", e))? {
                let entry = entry.map_err(|e| io(dir, "read", e))?;
                if let Ok(name) = entry.file_name().into_string() {
                    names.push(name);
                }
            }
            names.sort();
            for name in names
                .iter()
                .filter(|n| n.starts_with('.') && n.ends_with(".pruned"))
            {
                remove_dir_if_present(&dir.join(name))?;
            }
            for name in names.iter().filter(|n| !n.starts_with('.')) {
                let path = dir.join(name);
                if path.join(MANIFEST).is_file()
                    && latest.as_deref() != Some(name.as_bytes())
                    && !retain(name)
                {
                    let aside = dir.join(format!(".{name}.pruned"));
                    std::fs::rename(&path, &aside).map_err(|e| io(&path, "rename", e))?;
                    remove_dir_if_present(&aside)?;
                    removed.push(name.clone());
                }
            }
            Ok(())
        })()
    } else {
        Ok(())
    };
    agree_or_fail(t, &[("checkpoint prune", 1)], done)?;
    Ok(removed)
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

fn manifest_json(m: &Manifest) -> Vec<u8> {
    let files: Vec<serde_json::Value> = m
        .files
        .iter()
        .map(|f| serde_json::json!({"name": f.name, "bytes": f.bytes, "crc32": f.crc32}))
        .collect();
    let mut v = serde_json::json!({
        "format": FORMAT, "version": FORMAT_VERSION, "name": m.name, "ranks": m.ranks,
        "meta": m.meta, "files": files,
    });
    let crc = manifest_crc(&v);
    v["manifest_crc32"] = crc.into();
    serde_json::to_vec_pretty(&v).expect("a manifest is JSON")
}

/// The CRC-32 of a manifest's content: its JSON without the field
/// `manifest_crc32`, as a saved manifest holds it (keys sorted,
/// pretty), so that any change of a value (not of white space) shows.
pub fn manifest_crc(v: &serde_json::Value) -> u32 {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("manifest_crc32");
    }
    crc32fast::hash(&serde_json::to_vec_pretty(&v).expect("a manifest is JSON"))
}

/// Parses a manifest (the file `file`, for errors).
///
/// # Errors
/// [`Error::Corrupt`] naming the file and the field.
pub fn parse_manifest(bytes: &[u8], file: &str) -> Result<Manifest> {
    let v: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| corrupt(file, e))?;
    let bad = |what: &str| corrupt(file, what);
    if v.get("format").and_then(|x| x.as_str()) != Some(FORMAT) {
        return Err(bad("not a checkpoint manifest (format)"));
    }
    match v.get("version").and_then(serde_json::Value::as_u64) {
        Some(FORMAT_VERSION) => {}
        Some(other) => {
            return Err(corrupt(
                file,
                format!("format version {other}; this code reads version {FORMAT_VERSION}"),
            ));
        }
        None => return Err(bad("no version")),
    }
    let crc = manifest_crc(&v);
    match v.get("manifest_crc32").and_then(serde_json::Value::as_u64) {
        Some(saved) if saved == u64::from(crc) => {}
        Some(saved) => {
            return Err(corrupt(
                file,
                format!("manifest_crc32 is {saved:#010x}, its content's CRC-32 {crc:#010x}"),
            ));
        }
        None => return Err(bad("no manifest_crc32")),
    }
    let name = v
        .get("name")
        .and_then(|x| x.as_str())
        .ok_or_else(|| bad("no name"))?
        .to_string();
    let ranks = v
        .get("ranks")
        .and_then(serde_json::Value::as_u64)
        .filter(|&p| p > 0 && p <= 1 << 20)
        .ok_or_else(|| bad("ranks missing or out of range"))? as usize;
    let meta = v
        .get("meta")
        .and_then(|x| x.as_object())
        .ok_or_else(|| bad("no meta"))?
        .iter()
        .map(|(k, x)| {
            x.as_str()
                .map(|s| (k.clone(), s.to_string()))
                .ok_or_else(|| bad("a meta value is not a string"))
        })
        .collect::<Result<BTreeMap<_, _>>>()?;
    let files = v
        .get("files")
        .and_then(|x| x.as_array())
        .ok_or_else(|| bad("no files"))?
        .iter()
        .map(|f| {
            let name = f.get("name").and_then(|x| x.as_str());
            let bytes = f.get("bytes").and_then(serde_json::Value::as_u64);
            let crc = f
                .get("crc32")
                .and_then(serde_json::Value::as_u64)
                .and_then(|c| u32::try_from(c).ok());
            match (name, bytes, crc) {
                (Some(n), Some(b), Some(c)) if !n.contains('/') && !n.starts_with('.') => {
                    Ok(FileSum {
                        name: n.into(),
                        bytes: b,
                        crc32: c,
                    })
                }
                _ => Err(bad(
                    "a file entry lacks its name, bytes or crc32, or names a path",
                )),
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Manifest {
        name,
        ranks,
        meta,
        files,
    })
}

/// The checkpoint `path` names: `path` itself where it holds a manifest,
/// else the one `path/LATEST` names.
///
/// # Errors
/// [`Error::InvalidParameter`] where neither is there.
pub fn resolve(path: &Path) -> Result<PathBuf> {
    if path.join(MANIFEST).is_file() {
        return Ok(path.to_path_buf());
    }
    let latest = path.join(LATEST);
    let name = read_bounded(&latest, 4096, None).map_err(|_| {
        Error::invalid(
            "checkpoint",
            format!(
                "{}: no {MANIFEST} and no {LATEST}: not a checkpoint or a checkpoint directory",
                path.display()
            ),
        )
    })?;
    let name = String::from_utf8(name)
        .ok()
        .filter(|n| !n.is_empty() && !n.contains('/') && !n.starts_with('.'))
        .ok_or_else(|| corrupt(&latest.display().to_string(), "not a checkpoint's name"))?;
    // A crash while a checkpoint of the same name was replaced leaves the
    // previous one aside as `.NAME.old`.
    let old = path.join(format!(".{name}.old"));
    if !path.join(&name).join(MANIFEST).is_file() && old.join(MANIFEST).is_file() {
        return Ok(old);
    }
    Ok(path.join(name))
}

/// The manifest of the checkpoint `path` ([`resolve`]), read bounded and
/// checked, and where it is.
///
/// # Errors
/// As [`resolve`]; [`Error::Corrupt`] naming the field.
pub fn manifest(path: &Path) -> Result<(PathBuf, Manifest)> {
    let dir = resolve(path)?;
    let (m, _) = read_manifest(&dir, None)?;
    Ok((dir, m))
}

/// The manifest of the checkpoint `dir` (resolved), checked to be of
/// `ranks` ranks where given and to list every file of its ranks.
fn read_manifest(dir: &Path, ranks: Option<usize>) -> Result<(Manifest, u32)> {
    let mpath = dir.join(MANIFEST);
    let bytes = read_bounded(&mpath, MAX_METADATA, None)?;
    let crc = crc32fast::hash(&bytes);
    let m = parse_manifest(&bytes, &mpath.display().to_string())?;
    if let Some(p) = ranks
        && m.ranks != p
    {
        return Err(corrupt(
            &mpath.display().to_string(),
            format!(
                "saved by {} ranks, loaded by {p}: reshard it first (checkpoint::reshard)",
                m.ranks
            ),
        ));
    }
    let listed: std::collections::HashSet<&str> = m.files.iter().map(|x| x.name.as_str()).collect();
    for q in 0..m.ranks {
        for f in [tensor_file(q), tree_file(q)] {
            if !listed.contains(f.as_str()) {
                return Err(corrupt(
                    &mpath.display().to_string(),
                    format!("lists no {f} among {} ranks' files", m.ranks),
                ));
            }
        }
    }
    Ok((m, crc))
}

/// Rank `r`'s state in the checkpoint `dir` of manifest `m`: each file's
/// length and CRC checked before it is parsed.
fn read_rank(dir: &Path, m: &Manifest, r: usize) -> Result<State> {
    let read = |file: String, max: u64| -> Result<Vec<u8>> {
        let sum = m.files.iter().find(|f| f.name == file).ok_or_else(|| {
            corrupt(
                &dir.join(MANIFEST).display().to_string(),
                format!("lists no {file}"),
            )
        })?;
        let fpath = dir.join(&file);
        let b = read_bounded(&fpath, max, Some(sum.bytes))?;
        let crc = crc32fast::hash(&b);
        if crc != sum.crc32 {
            return Err(corrupt(
                &fpath.display().to_string(),
                format!("CRC-32 {crc:#010x}, the manifest says {:#010x}", sum.crc32),
            ));
        }
        Ok(b)
    };
    let st = read(tensor_file(r), MAX_TENSORS)?;
    let tree = read(tree_file(r), MAX_METADATA)?;
    decode(
        &st,
        &tree,
        &dir.join(format!("rank-{r:04}")).display().to_string(),
    )
}

/// Reads this rank's state and the manifest of the checkpoint `path`
/// ([`resolve`]) on every rank of `t`, which must be as many as saved it.
///
/// # Errors
/// [`Error::Corrupt`] naming the file and what disagrees (format, version,
/// rank count, length, CRC, tree, tensors); [`Error::PeerError`] on the
/// other ranks; [`Error::Disagreement`] where ranks read different
/// manifests; transport errors.
pub fn load(t: &mut dyn Transport, path: &Path) -> Result<(State, Manifest)> {
    let (p, r) = (t.size(), t.rank());
    let mut manifest_crc = 0u64;
    let mine = (|| -> Result<(State, Manifest)> {
        let dir = resolve(path)?;
        let (m, crc) = read_manifest(&dir, Some(p))?;
        manifest_crc = u64::from(crc);
        Ok((read_rank(&dir, &m, r)?, m))
    })();
    let local = mine.as_ref().map(drop).map_err(Clone::clone);
    agree_or_fail(t, &[("checkpoint manifest", manifest_crc)], local)?;
    mine
}

/// Reshards the checkpoint `src` ([`resolve`]; saved by any number of
/// ranks) onto `p_new` ranks as the checkpoint `dst/name`, in this process
/// ([`sparse_core::state::reshard`]'s rules: shared state copied, residuals
/// and momenta summed by `old rank mod p_new`, state that depends on the
/// rank count or one rank's data dropped, to be rebuilt as on a first
/// call). Its manifest keeps the metadata and adds `resharded_from`.
///
/// # Errors
/// As [`load`] for every old rank's files; [`sparse_core::state::reshard`]'s
/// errors; as [`save`].
pub fn reshard(src: &Path, p_new: usize, dst: &Path, name: &str) -> Result<Manifest> {
    let dir = resolve(src)?;
    let (m, _) = read_manifest(&dir, None)?;
    let old = (0..m.ranks)
        .map(|r| read_rank(&dir, &m, r))
        .collect::<Result<Vec<State>>>()?;
    let new = sparse_core::state::reshard(&old, p_new)?;
    let mut meta = m.meta.clone();
    meta.insert("resharded_from".into(), m.ranks.to_string());
    let saved = sparse_coll::ThreadCluster::new(p_new).run(|t| {
        let r = t.rank();
        save(t, dst, name, &new[r], &meta).map(drop)
    });
    saved.into_iter().collect::<Result<Vec<()>>>()?;
    let (out, _) = read_manifest(&dst.join(name), Some(p_new))?;
    Ok(out)
}
