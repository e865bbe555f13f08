//! The file system under a checkpoint, treated as hostile: only regular
//! files are opened for reading (opening a FIFO blocks until a writer
//! comes), without blocking, and checked again on the handle; reads are
//! bounded by the file's length, and a file's CRC-32 is checked before it
//! is held in memory; writes go through a fresh temporary name, synced
//! and renamed; one save or prune at a time holds a directory's lock.

use super::{FileSum, corrupt};
use sparse_core::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// The lock file of a checkpoint directory: a save or prune holds an
/// exclusive `flock` of it (module docs).
pub const LOCK: &str = ".checkpoint-lock";

pub(super) fn io(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::invalid("checkpoint", format!("{}: {what}: {e}", path.display()))
}

/// A file type in words.
fn kind_of(ft: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return "a FIFO";
        }
        if ft.is_socket() {
            return "a socket";
        }
        if ft.is_block_device() || ft.is_char_device() {
            return "a device";
        }
    }
    if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

fn not_regular(path: &Path, ft: std::fs::FileType) -> Error {
    Error::invalid(
        "checkpoint",
        format!(
            "{}: {}, not a regular file: a checkpoint's files (and LATEST) are regular files; \
             remove it or restore the file",
            path.display(),
            kind_of(ft)
        ),
    )
}

/// Open flags that never wait: opening a FIFO for reading otherwise
/// blocks until a writer opens it.
fn nonblocking(o: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NONBLOCK);
    }
    o
}

/// `path` opened for reading where it is a regular file (a symbolic link
/// followed), checked before and, on the handle, after opening; and its
/// length.
pub(super) fn open_regular(path: &Path) -> Result<(File, u64)> {
    let md = std::fs::metadata(path).map_err(|e| io(path, "open", e))?;
    if !md.is_file() {
        return Err(not_regular(path, md.file_type()));
    }
    let f = nonblocking(OpenOptions::new().read(true))
        .open(path)
        .map_err(|e| io(path, "open", e))?;
    let md = f.metadata().map_err(|e| io(path, "stat", e))?;
    if !md.is_file() {
        return Err(not_regular(path, md.file_type()));
    }
    Ok((f, md.len()))
}

/// Whether `path` is a regular file (a symbolic link followed), found
/// without opening it.
pub(super) fn is_regular(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

/// Whether `path` is a directory (a symbolic link followed).
pub(super) fn is_dir(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_dir())
}

/// Whether `dir` is a directory holding a manifest that is a regular
/// file: a complete checkpoint, as far as names tell.
pub(super) fn holds_checkpoint(dir: &Path) -> bool {
    is_dir(dir) && is_regular(&dir.join(super::MANIFEST))
}

/// The bytes of the regular file `path`, at most `max` of them. Where
/// `sum` is given, the file's length must be `sum.bytes` and its CRC-32
/// `sum.crc32`, both checked before the file is read into memory (a first
/// pass streams it through the CRC), and the CRC again on what was read.
///
/// # Errors
/// As [`open_regular`]; [`Error::Corrupt`] naming the file for another
/// length or CRC, more than `max` bytes, or a file that changed while it
/// was read; [`Error::OutOfMemory`].
pub(super) fn read_checked(path: &Path, max: u64, sum: Option<&FileSum>) -> Result<Vec<u8>> {
    let name = path.display().to_string();
    let (mut f, len) = open_regular(path)?;
    if let Some(s) = sum
        && len != s.bytes
    {
        return Err(corrupt(
            &name,
            format!("{len} bytes, the manifest says {}", s.bytes),
        ));
    }
    if len > max {
        return Err(corrupt(&name, format!("{len} bytes, more than {max}")));
    }
    let crc_mismatch = |crc: u32, want: u32| {
        corrupt(
            &name,
            format!("CRC-32 {crc:#010x}, the manifest says {want:#010x}"),
        )
    };
    if let Some(s) = sum {
        let crc = stream_crc(&mut f, len, path)?;
        if crc != s.crc32 {
            return Err(crc_mismatch(crc, s.crc32));
        }
        f.rewind().map_err(|e| io(path, "seek", e))?;
    }
    let mut out = Vec::new();
    out.try_reserve_exact(usize::try_from(len).unwrap_or(usize::MAX))
        .map_err(|_| Error::OutOfMemory {
            what: "checkpoint file",
            bytes: len,
        })?;
    // At most one byte more than its length said: a file that grows is
    // an error, not a read up to `max`.
    f.take(len + 1)
        .read_to_end(&mut out)
        .map_err(|e| io(path, "read", e))?;
    if out.len() as u64 != len {
        return Err(corrupt(&name, "changed while it was read"));
    }
    if let Some(s) = sum {
        let crc = crc32fast::hash(&out);
        if crc != s.crc32 {
            return Err(corrupt(&name, "changed while it was read"));
        }
    }
    Ok(out)
}

/// The CRC-32 of the `len` bytes of `f`, read through a small buffer.
fn stream_crc(f: &mut File, len: u64, path: &Path) -> Result<u32> {
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut seen = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| io(path, "read", e))?;
        if n == 0 {
            break;
        }
        seen += n as u64;
        if seen > len {
            break;
        }
        h.update(&buf[..n]);
    }
    if seen != len {
        return Err(corrupt(
            &path.display().to_string(),
            "changed while it was read",
        ));
    }
    Ok(h.finalize())
}

/// `path` with `.part` appended: where [`write_synced`] writes first.
fn part(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".part");
    PathBuf::from(p)
}

/// Removes the file (or FIFO, or link) `path`; one already gone is no
/// error, a directory is.
pub(super) fn remove_file_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(path, "remove", e)),
        _ => Ok(()),
    }
}

/// Removes the directory `path` and all it holds (or the file there);
/// one already gone is no error.
pub(super) fn remove_dir_if_present(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(path, "stat", e)),
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path).map_err(|e| io(path, "remove", e)),
        Ok(_) => remove_file_if_present(path),
    }
}

/// Writes `bytes` to `path` through `path.part`, created afresh (whatever
/// was there removed first, never opened): written, synced, renamed.
pub(super) fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = part(path);
    remove_file_if_present(&tmp)?;
    let mut f = nonblocking(OpenOptions::new().write(true).create_new(true))
        .open(&tmp)
        .map_err(|e| io(&tmp, "create", e))?;
    f.write_all(bytes).map_err(|e| io(&tmp, "write", e))?;
    f.sync_all().map_err(|e| io(&tmp, "sync", e))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| io(path, "rename", e))
}

/// Syncs a directory (its entries: the renames into it).
pub(super) fn sync_dir(dir: &Path) -> Result<()> {
    let mut o = OpenOptions::new();
    o.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NONBLOCK | libc::O_DIRECTORY);
    }
    o.open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io(dir, "sync directory", e))
}

/// Takes the lock of the directory `dir` (an exclusive `flock` of
/// `dir/.checkpoint-lock`, held until the returned file is dropped), or
/// refuses at once where another save or prune holds it, in this process
/// or another (on a network file system, as far as its locks reach).
///
/// # Errors
/// [`Error::InvalidParameter`] naming the directory: held by another, or
/// the lock file cannot be opened (not a regular file, not writable).
pub(super) fn lock(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK);
    let mut o = OpenOptions::new();
    o.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW);
    }
    let f = o.open(&path).map_err(|e| io(&path, "open the lock", e))?;
    let md = f.metadata().map_err(|e| io(&path, "stat", e))?;
    if !md.is_file() {
        return Err(not_regular(&path, md.file_type()));
    }
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::invalid(
            "checkpoint",
            format!(
                "{}: another save or prune of this directory is under way (it holds {LOCK}): \
                 wait for it to end; runs that save at the same time need a directory each",
                dir.display()
            ),
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(io(&path, "lock", e)),
    }
}
