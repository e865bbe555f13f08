//! Checkpoints on disk: every rank's [`State`](sparse_core::state::State)
//! (a [`crate::Trainer`]'s, or any state a caller builds around it) in a
//! directory with a manifest.
//!
//! A checkpoint `D/NAME/` holds, for each rank `r` of `P`:
//! - `rank-RRRR.safetensors`: the state's tensors, each under its path in
//!   the state's tree (`layer.0/memory/v`), one dimension, in `safetensors`
//!   (the format Python and Rust ML code load alike);
//! - `rank-RRRR.json`: the tree itself: each part's kind and version, each
//!   entry's scope, element type and length (versioned metadata);
//!
//! and `manifest.json`: the format and its version, the name it was saved
//! under, `P`, the caller's metadata (string pairs: a run's settings, its
//! epoch), each file's length and CRC-32, and the CRC-32 of its own
//! content (`manifest_crc32`, [`manifest_crc`]). `D/LATEST` names the
//! newest complete checkpoint.
//!
//! # What a save guarantees
//!
//! - **Every rank saves the same checkpoint, or none does.** The ranks
//!   agree on the name before anything is written (ranks that pass
//!   different names are an error naming each rank's); rank 0 prepares
//!   `D/.NAME.tmp/` with an identifier that every rank must read there
//!   before it writes (a rank that passes another directory, or does not
//!   share rank 0's file system, is an error), and checks that every
//!   rank's files are there, of the lengths reported, before it commits.
//! - **What a save writes, a load reads.** A save refuses what
//!   [`load`] would refuse (a manifest over [`MAX_METADATA`], a tree or
//!   tensor file over its limit, names the reader refuses, more than
//!   [`MAX_RANKS`] ranks or [`MAX_META_ENTRIES`] metadata pairs) before
//!   `LATEST` moves.
//! - **Crash-safe.** Every file is written under a temporary name, synced
//!   and renamed; the checkpoint is assembled in `D/.NAME.tmp/` and renamed
//!   into place only when every rank's files and the manifest are on disk,
//!   and `LATEST` moves last. A crash at any point leaves the previous
//!   checkpoint and `LATEST` as they were.
//! - **One save or prune of a directory at a time.** Rank 0 holds an
//!   exclusive lock (`flock` of `D/.checkpoint-lock`, [`LOCK`]) from
//!   before the temporary directory is made until `LATEST` has moved;
//!   another save or prune of `D` meanwhile, in this process or another,
//!   is an error on its every rank, and leaves the first's checkpoint
//!   whole. (On a network file system the lock holds as far as its locks
//!   reach across machines.)
//! - **The report is the outcome.** A save that returns an error has not
//!   moved `LATEST` (a name taken by a file or by a directory that is no
//!   checkpoint is refused before anything is written); one that returns
//!   `Ok` has. A checkpoint of the same name is replaced whole.
//!
//! Every checkpoint saved is kept until [`prune`] removes those its
//! caller rejects, never the one `LATEST` names, and nothing at all while
//! `LATEST` names no complete checkpoint.
//!
//! # What a load guarantees
//!
//! Loading treats the files as hostile. Only regular files are opened,
//! without blocking (a FIFO, a socket or a device in place of a file, or
//! a file where a directory is expected, is an error, not a read that
//! blocks forever). The manifest is read whole (at most
//! [`MAX_METADATA`]) and parsed into typed fields (an unknown field or
//! value of another type is an error where the parser meets it), then
//! its format, version, own CRC-32 and rank count are checked; reached
//! through `LATEST`, it must have been saved under the name `LATEST`
//! holds (so directories renamed or swapped, or a stale `.NAME.old` of
//! another checkpoint, are an error, not an older state loaded). Each
//! rank file's length is checked against the manifest and its CRC-32
//! computed by streaming it, before it is held in memory or parsed; the
//! tensor file's length must be what its tree's tensors take; then every
//! tensor's element type and length against the tree, no tensor left
//! unread. What a parse allocates is at most a small multiple of the
//! file's length. Any failure on any rank is an error on every rank,
//! naming the file and what disagrees, and no state is returned. A
//! checkpoint of another rank count is an [`Error::Mismatch`] that says
//! to reshard it.
//!
//! [`crate::Trainer::load_state`] then checks the state against the
//! trainer: settings and layer shapes ([`Error::Mismatch`], values as
//! numbers), weights and residuals finite, and that every rank loaded the
//! same settings and weights.

mod files;
mod format;
mod read;
mod write;

pub use files::LOCK;
pub use format::{
    MAX_META_ENTRIES, MAX_PART_NAME, MAX_RANKS, decode, encode, manifest_crc, parse_manifest,
};
pub use read::{load, manifest, resolve};
pub use write::{prune, reshard, save};

use sparse_core::{Error, Result};
use std::collections::BTreeMap;

/// The format's name in manifests.
pub const FORMAT: &str = "sparse-gradient checkpoint";
/// The format's version this code writes and reads.
pub const FORMAT_VERSION: u64 = 2;
/// The file naming the newest complete checkpoint of a directory.
pub const LATEST: &str = "LATEST";
/// The manifest's file name.
pub const MANIFEST: &str = "manifest.json";
/// The largest manifest or tree file read (and written).
pub const MAX_METADATA: u64 = 64 << 20;
/// The largest tensor file read (and written).
pub const MAX_TENSORS: u64 = 1 << 36;
/// The longest checkpoint name, in bytes (room is left for the suffixes
/// of the temporary names in a file system's 255).
pub const MAX_NAME: usize = 240;

/// One file of a checkpoint, as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
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
    /// The name the checkpoint was saved under (its directory's).
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

/// The tensor file of rank `r`.
pub fn tensor_file(r: usize) -> String {
    format!("rank-{r:04}.safetensors")
}

/// The tree file of rank `r`.
pub fn tree_file(r: usize) -> String {
    format!("rank-{r:04}.json")
}

/// Checks a checkpoint's name: what a save writes and what `LATEST` may
/// hold: a short file name, not hidden, not `LATEST`.
///
/// # Errors
/// [`Error::InvalidParameter`] saying what is wrong with it.
pub fn check_name(name: &str) -> Result<()> {
    let why = if name.is_empty() {
        "empty".to_string()
    } else if name.len() > MAX_NAME {
        format!("{} bytes long, more than {MAX_NAME}", name.len())
    } else if name.contains('/') {
        "a path (it holds '/')".into()
    } else if name.starts_with('.') {
        "hidden (it starts with '.')".into()
    } else if name == LATEST || name == "LATEST.part" {
        format!("{LATEST}'s own file name")
    } else if name.chars().any(char::is_control) {
        "holding a control character (a newline, a tab)".into()
    } else {
        return Ok(());
    };
    Err(Error::invalid(
        "checkpoint name",
        format!("{name:?} is {why}: name a checkpoint by a short file name, as step-00000100"),
    ))
}

fn check_ranks(p: usize) -> Result<()> {
    if p == 0 || p > MAX_RANKS {
        return Err(Error::invalid(
            "checkpoint",
            format!("{p} ranks: a checkpoint holds 1 to {MAX_RANKS}"),
        ));
    }
    Ok(())
}

fn check_meta(meta: &BTreeMap<String, String>) -> Result<()> {
    if meta.len() > MAX_META_ENTRIES {
        return Err(Error::invalid(
            "checkpoint metadata",
            format!(
                "{} pairs, more than the {MAX_META_ENTRIES} a load reads: keep fewer",
                meta.len()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_a_save_refuses() {
        for bad in ["", ".x", "a/b", LATEST, "LATEST.part", "step-6\n", "a\tb"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name(&"n".repeat(MAX_NAME + 1)).is_err());
        for good in ["step-00000100", "A", "résumé", &"n".repeat(MAX_NAME)] {
            check_name(good).unwrap();
        }
    }
}
