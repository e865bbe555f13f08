//! The files' formats: a state's tensors in safetensors and its tree in
//! JSON ([`encode`], [`decode`]), and the manifest ([`parse_manifest`]).
//!
//! Both JSON files are parsed into typed structures, never into a tree of
//! JSON values (which took 33 times a file of `[0,0,...]`): an unknown
//! field, a value of another type or a name given twice is an error where
//! the parser meets it, and what a parse allocates is at most a small
//! multiple of the bytes it parsed. A tree is parsed twice: first without
//! building anything, to learn how many tensors of how many bytes the
//! tensor file must hold (so that its length is checked before it is
//! read), then into the state itself, each tensor taken from the tensor
//! file as its entry is met.

use super::{FORMAT, FORMAT_VERSION, FileSum, MAX_METADATA, MAX_TENSORS, Manifest, corrupt};
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use sparse_core::state::{Scope, State, Tensor};
use sparse_core::{Error, Result};
use std::collections::BTreeMap;
use std::fmt;

/// The longest name of an entry or a part in a state's tree.
pub const MAX_PART_NAME: usize = 256;
/// The most metadata pairs a manifest holds.
pub const MAX_META_ENTRIES: usize = 4096;
/// The most ranks a checkpoint holds.
pub const MAX_RANKS: usize = 1 << 20;
/// The largest safetensors header the `safetensors` crate reads.
const MAX_HEADER: u64 = 100_000_000;

/// A state's tensors (by path) and its tree as JSON.
///
/// # Errors
/// [`Error::InvalidParameter`] for an entry or part name that is empty,
/// longer than [`MAX_PART_NAME`] bytes or holds `/`.
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

fn name_ok(n: &str) -> bool {
    !n.is_empty() && n.len() <= MAX_PART_NAME && !n.contains('/')
}

fn encode_node(
    s: &State,
    prefix: &str,
    out: &mut Vec<(String, Vec<u8>, safetensors::Dtype, usize)>,
) -> Result<serde_json::Value> {
    let check = |n: &str| {
        if name_ok(n) {
            Ok(())
        } else {
            Err(Error::invalid(
                "state",
                format!(
                    "name {n:?} at {prefix:?} is empty, longer than {MAX_PART_NAME} bytes or \
                     holds '/', which a checkpoint cannot hold: rename the entry or part"
                ),
            ))
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

/// What a tree says its tensor file holds, learnt without building the
/// state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct TreeSize {
    /// Tensors.
    pub tensors: u64,
    /// Bytes of tensor data.
    pub data: u64,
    /// The most bytes of safetensors header that can name them (each path
    /// escaped, its type, shape and offsets; padding).
    pub header: u64,
}

/// The size of the tree `tree` (the file `file`, for errors): its
/// structure checked as [`decode`] checks it, nothing built.
pub(super) fn tree_size(tree: &[u8], file: &str) -> Result<TreeSize> {
    let mut ctx = Ctx {
        st: None,
        st_file: String::new(),
        size: TreeSize {
            header: 16,
            ..TreeSize::default()
        },
        used: 0,
        error: None,
    };
    parse_tree(tree, file, &mut ctx)?;
    Ok(ctx.size)
}

/// Checks that a tensor file of `len` bytes can be the one the tree of
/// `size` describes: 8 bytes of header length, a header that can name
/// its tensors, their data.
pub(super) fn check_tensor_len(len: u64, size: &TreeSize, file: &str) -> Result<()> {
    let need = size.data.saturating_add(8);
    if len < need || len - need > size.header {
        return Err(corrupt(
            file,
            format!(
                "{len} bytes, but its tree names {} tensors of {} bytes, which take between \
                 {need} and {} bytes",
                size.tensors,
                size.data,
                need.saturating_add(size.header)
            ),
        ));
    }
    Ok(())
}

/// Checks what [`decode`] and the reader check on files that `save`
/// writes: the tree's and the tensor file's lengths, the header length
/// the `safetensors` crate reads, the tensor file's length against its
/// tree. `file` names the rank's files for errors.
pub(super) fn check_encoded(st: &[u8], tree: &[u8], file: &str) -> Result<()> {
    let refuse = |what: String| {
        Error::invalid(
            "checkpoint",
            format!("{file}: {what}, which a load refuses: save a smaller state"),
        )
    };
    if tree.len() as u64 > MAX_METADATA {
        return Err(refuse(format!(
            "the tree file would be {} bytes, more than {MAX_METADATA}",
            tree.len()
        )));
    }
    if st.len() as u64 > MAX_TENSORS {
        return Err(refuse(format!(
            "the tensor file would be {} bytes, more than {MAX_TENSORS}",
            st.len()
        )));
    }
    let header = st
        .get(..8)
        .map_or(u64::MAX, |b| u64::from_le_bytes(b.try_into().expect("8")));
    if header > MAX_HEADER {
        return Err(refuse(format!(
            "its safetensors header would be {header} bytes, more than {MAX_HEADER}"
        )));
    }
    let size = tree_size(tree, file)?;
    check_tensor_len(st.len() as u64, &size, &format!("{file}.safetensors"))
}

/// The state encoded as [`encode`] does, read back from the tensor file
/// `tensors` and the tree file `tree` (`file`, for errors, names them).
/// Allocates at most a small multiple of the two files' lengths.
///
/// # Errors
/// [`Error::Corrupt`] naming the file and what is wrong: an unreadable
/// file, a tree node with a field missing, unknown or of another type, a
/// name given twice, a tensor file of another length than its tree's
/// tensors take, a tensor missing or of another element type or length
/// than the tree says, a tensor the tree does not name.
pub fn decode(tensors: &[u8], tree: &[u8], file: &str) -> Result<State> {
    let size = tree_size(tree, &format!("{file}.json"))?;
    let st_file = format!("{file}.safetensors");
    check_tensor_len(tensors.len() as u64, &size, &st_file)?;
    let st = safetensors::SafeTensors::deserialize(tensors).map_err(|e| corrupt(&st_file, e))?;
    let mut ctx = Ctx {
        st: Some(&st),
        st_file: st_file.clone(),
        size: TreeSize::default(),
        used: 0,
        error: None,
    };
    let s = parse_tree(tree, &format!("{file}.json"), &mut ctx)?
        .ok_or_else(|| corrupt(&st_file, "no state"))?;
    if ctx.used != st.len() {
        return Err(corrupt(
            &st_file,
            format!("{} tensors, the tree names {}", st.len(), ctx.used),
        ));
    }
    Ok(s)
}

/// What a parse of a tree carries: the tensors to take entries from (none
/// on the first pass), the size learnt, the tensors used, and the first
/// error that is not the parser's own.
struct Ctx<'a> {
    st: Option<&'a safetensors::SafeTensors<'a>>,
    st_file: String,
    size: TreeSize,
    used: usize,
    error: Option<Error>,
}

impl Ctx<'_> {
    /// Records `e` and returns the parser's error that stops the parse.
    fn fail<E: de::Error>(&mut self, e: Error) -> E {
        let text = e.to_string();
        self.error.get_or_insert(e);
        E::custom(text)
    }
}

fn parse_tree(tree: &[u8], file: &str, ctx: &mut Ctx<'_>) -> Result<Option<State>> {
    let mut de = serde_json::Deserializer::from_slice(tree);
    let parsed = NodeSeed {
        ctx: &mut *ctx,
        prefix: String::new(),
    }
    .deserialize(&mut de)
    .and_then(|s| de.end().map(|()| s));
    match parsed {
        Ok(s) => Ok(s),
        Err(e) => Err(ctx.error.take().unwrap_or_else(|| corrupt(file, e))),
    }
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum NodeField {
    Kind,
    Version,
    Resharded,
    Entries,
    Children,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum ScopeJson {
    Shared,
    Summed,
    Local,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "lowercase")]
enum DtypeJson {
    F32,
    U32,
    U64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryJson {
    scope: ScopeJson,
    dtype: DtypeJson,
    len: u64,
}

/// One node of a tree, at `prefix` (its path and `/`).
struct NodeSeed<'c, 'a> {
    ctx: &'c mut Ctx<'a>,
    prefix: String,
}

impl<'de> DeserializeSeed<'de> for NodeSeed<'_, '_> {
    type Value = Option<State>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for NodeSeed<'_, '_> {
    type Value = Option<State>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a part's state: an object of kind, version, entries and children")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut kind, mut version, mut resharded) = (None::<String>, None::<u32>, None::<bool>);
        let (mut entries, mut children) = (None, None);
        while let Some(field) = map.next_key::<NodeField>()? {
            match field {
                NodeField::Kind if kind.is_none() => kind = Some(map.next_value()?),
                NodeField::Version if version.is_none() => version = Some(map.next_value()?),
                NodeField::Resharded if resharded.is_none() => {
                    resharded = Some(map.next_value()?);
                }
                NodeField::Entries if entries.is_none() => {
                    entries = Some(map.next_value_seed(EntriesSeed {
                        ctx: &mut *self.ctx,
                        prefix: &self.prefix,
                    })?);
                }
                NodeField::Children if children.is_none() => {
                    children = Some(map.next_value_seed(ChildrenSeed {
                        ctx: &mut *self.ctx,
                        prefix: &self.prefix,
                    })?);
                }
                _ => {
                    return Err(de::Error::custom(format!(
                        "{}: a field given twice",
                        self.at()
                    )));
                }
            }
        }
        let missing = |f: &str| de::Error::custom(format!("{}: no field {f:?}", self.at()));
        let kind = kind.ok_or_else(|| missing("kind"))?;
        let version = version.ok_or_else(|| missing("version"))?;
        let entries = entries.ok_or_else(|| missing("entries"))?;
        let children = children.ok_or_else(|| missing("children"))?;
        if self.ctx.st.is_none() {
            return Ok(None);
        }
        let mut s =
            State::from_parts(kind, version, entries, children).map_err(|e| self.ctx.fail(e))?;
        if resharded == Some(true) {
            s.mark_resharded();
        }
        Ok(Some(s))
    }
}

impl NodeSeed<'_, '_> {
    fn at(&self) -> &str {
        if self.prefix.is_empty() {
            "the root"
        } else {
            &self.prefix
        }
    }
}

/// A node's entries: checked, counted, and (on the second pass) each
/// tensor taken from the tensor file.
struct EntriesSeed<'c, 'a, 'p> {
    ctx: &'c mut Ctx<'a>,
    prefix: &'p str,
}

impl<'de> DeserializeSeed<'de> for EntriesSeed<'_, '_, '_> {
    type Value = Vec<(String, Scope, Tensor)>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EntriesSeed<'_, '_, '_> {
    type Value = Vec<(String, Scope, Tensor)>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of entries")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(name) = map.next_key::<String>()? {
            if !name_ok(&name) {
                return Err(de::Error::custom(format!(
                    "{}: entry name {name:?} is empty, longer than {MAX_PART_NAME} bytes or \
                     holds '/'",
                    self.prefix
                )));
            }
            let e: EntryJson = map.next_value()?;
            let path = format!("{}{name}", self.prefix);
            let Some(st) = self.ctx.st else {
                count(&mut self.ctx.size, &path, &e).map_err(de::Error::custom)?;
                continue;
            };
            let t =
                take_tensor(st, &path, &e, &self.ctx.st_file).map_err(|err| self.ctx.fail(err))?;
            self.ctx.used += 1;
            let scope = match e.scope {
                ScopeJson::Shared => Scope::Shared,
                ScopeJson::Summed => Scope::Summed,
                ScopeJson::Local => Scope::Local,
            };
            out.push((name, scope, t));
        }
        Ok(out)
    }
}

/// Adds the entry `e` at `path` to `size`.
fn count(size: &mut TreeSize, path: &str, e: &EntryJson) -> std::result::Result<(), String> {
    let width = match e.dtype {
        DtypeJson::U64 => 8,
        _ => 4,
    };
    let data = e
        .len
        .checked_mul(width)
        .and_then(|b| b.checked_add(size.data))
        .filter(|&b| b <= MAX_TENSORS)
        .ok_or_else(|| format!("{path}: {} elements, more than a tensor file holds", e.len))?;
    size.data = data;
    size.tensors += 1;
    // A path escaped in JSON takes at most 6 bytes a byte (\u00XX); the
    // dtype, shape, offsets and punctuation at most 128 more.
    size.header = size.header.saturating_add(6 * path.len() as u64 + 128);
    Ok(())
}

/// The tensor `path` of `st`, checked against its entry `e` and copied
/// out (allocated fallibly).
fn take_tensor(
    st: &safetensors::SafeTensors<'_>,
    path: &str,
    e: &EntryJson,
    file: &str,
) -> Result<Tensor> {
    let view = st
        .tensor(path)
        .map_err(|err| corrupt(file, format!("tensor {path}: {err}")))?;
    let found = match view.dtype() {
        safetensors::Dtype::F32 => Some(DtypeJson::F32),
        safetensors::Dtype::U32 => Some(DtypeJson::U32),
        safetensors::Dtype::U64 => Some(DtypeJson::U64),
        _ => None,
    };
    let len = usize::try_from(e.len).unwrap_or(usize::MAX);
    if found != Some(e.dtype) || view.shape() != [len] {
        return Err(corrupt(
            file,
            format!(
                "tensor {path} is {:?} {:?}, the tree says {:?} [{}]",
                view.dtype(),
                view.shape(),
                e.dtype,
                e.len
            ),
        ));
    }
    let d = view.data();
    Ok(match e.dtype {
        DtypeJson::F32 => Tensor::F32(words(d, |c| f32::from_le_bytes(c.try_into().expect("4")))?),
        DtypeJson::U32 => Tensor::U32(words(d, |c| u32::from_le_bytes(c.try_into().expect("4")))?),
        DtypeJson::U64 => Tensor::U64(words(d, |c| u64::from_le_bytes(c.try_into().expect("8")))?),
    })
}

/// `d` (whole words: the view's shape checked it) read as little-endian
/// words of `T`, into a buffer allocated fallibly.
fn words<T>(d: &[u8], f: impl Fn(&[u8]) -> T) -> Result<Vec<T>> {
    let w = std::mem::size_of::<T>();
    let mut out = Vec::new();
    out.try_reserve_exact(d.len() / w)
        .map_err(|_| Error::OutOfMemory {
            what: "checkpoint tensor",
            bytes: d.len() as u64,
        })?;
    out.extend(d.chunks_exact(w).map(f));
    Ok(out)
}

/// A node's children, each parsed at its path.
struct ChildrenSeed<'c, 'a, 'p> {
    ctx: &'c mut Ctx<'a>,
    prefix: &'p str,
}

impl<'de> DeserializeSeed<'de> for ChildrenSeed<'_, '_, '_> {
    type Value = Vec<(String, State)>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ChildrenSeed<'_, '_, '_> {
    type Value = Vec<(String, State)>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of parts")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(name) = map.next_key::<String>()? {
            if !name_ok(&name) {
                return Err(de::Error::custom(format!(
                    "{}: part name {name:?} is empty, longer than {MAX_PART_NAME} bytes or \
                     holds '/'",
                    self.prefix
                )));
            }
            let child = map.next_value_seed(NodeSeed {
                ctx: &mut *self.ctx,
                prefix: format!("{}{name}/", self.prefix),
            })?;
            if let Some(c) = child {
                out.push((name, c));
            }
        }
        Ok(out)
    }
}

/// A manifest as its file holds it, read: typed, every field known.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestIn {
    files: Vec<FileSum>,
    format: String,
    #[serde(default)]
    manifest_crc32: Option<u64>,
    #[serde(deserialize_with = "bounded_meta")]
    meta: BTreeMap<String, String>,
    name: String,
    ranks: u64,
    version: u64,
}

/// A manifest as its file holds it, written: fields in the order of their
/// names (a JSON object's keys sorted, as the format's first writer wrote
/// them), so that the canonical form [`manifest_crc`] hashes is this
/// structure's pretty JSON without `manifest_crc32`.
#[derive(Serialize)]
struct ManifestOut<'a> {
    #[serde(serialize_with = "files_out")]
    files: &'a [FileSum],
    format: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    manifest_crc32: Option<u64>,
    meta: &'a BTreeMap<String, String>,
    name: &'a str,
    ranks: u64,
    version: u64,
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn files_out<S: serde::Serializer>(files: &&[FileSum], s: S) -> Result<S::Ok, S::Error> {
    struct FileOut<'a>(&'a FileSum);
    impl Serialize for FileOut<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeStruct;
            let mut st = s.serialize_struct("file", 3)?;
            st.serialize_field("bytes", &self.0.bytes)?;
            st.serialize_field("crc32", &self.0.crc32)?;
            st.serialize_field("name", &self.0.name)?;
            st.end()
        }
    }
    s.collect_seq(files.iter().map(FileOut))
}

/// The caller's metadata: string pairs, at most [`MAX_META_ENTRIES`] of
/// them, each key once.
fn bounded_meta<'de, D: de::Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    struct Meta;
    impl<'de> Visitor<'de> for Meta {
        type Value = BTreeMap<String, String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object of string pairs")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((k, v)) = map.next_entry::<String, String>()? {
                if out.len() == MAX_META_ENTRIES {
                    return Err(de::Error::custom(format!(
                        "meta: more than {MAX_META_ENTRIES} pairs"
                    )));
                }
                if out.contains_key(&k) {
                    return Err(de::Error::custom(format!("meta: {k:?} given twice")));
                }
                out.insert(k, v);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Meta)
}

impl<'a> ManifestOut<'a> {
    fn of(m: &'a Manifest) -> Self {
        Self {
            files: &m.files,
            format: FORMAT,
            manifest_crc32: None,
            meta: &m.meta,
            name: &m.name,
            ranks: m.ranks as u64,
            version: FORMAT_VERSION,
        }
    }

    /// The CRC-32 of the canonical form: the pretty JSON without
    /// `manifest_crc32`, streamed through the hash (nothing allocated).
    fn content_crc(&self) -> u32 {
        struct Crc(crc32fast::Hasher);
        impl std::io::Write for Crc {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.update(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let canonical = Self {
            manifest_crc32: None,
            ..*self
        };
        let mut w = Crc(crc32fast::Hasher::new());
        serde_json::to_writer_pretty(&mut w, &canonical).expect("a manifest is JSON");
        w.0.finalize()
    }
}

impl ManifestIn {
    fn out(&self) -> ManifestOut<'_> {
        ManifestOut {
            files: &self.files,
            format: &self.format,
            manifest_crc32: None,
            meta: &self.meta,
            name: &self.name,
            ranks: self.ranks,
            version: self.version,
        }
    }
}

/// The manifest `m` as its file holds it, with its own CRC-32.
pub(super) fn manifest_json(m: &Manifest) -> Vec<u8> {
    let mut j = ManifestOut::of(m);
    j.manifest_crc32 = Some(u64::from(j.content_crc()));
    serde_json::to_vec_pretty(&j).expect("a manifest is JSON")
}

/// The CRC-32 of a manifest's content: its JSON without the field
/// `manifest_crc32`, in the canonical form a saved manifest holds (keys
/// sorted, pretty), so that any change of a value (not of white space or
/// of the keys' order) shows.
pub fn manifest_crc(v: &serde_json::Value) -> u32 {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("manifest_crc32");
    }
    match serde_json::from_value::<ManifestIn>(v.clone()) {
        Ok(j) => j.out().content_crc(),
        Err(_) => crc32fast::hash(&serde_json::to_vec_pretty(&v).expect("a manifest is JSON")),
    }
}

/// Parses a manifest (the file `file`, for errors): the whole structure
/// typed, then its format, version, own CRC-32, rank count and file
/// names checked. Allocates at most a small multiple of `bytes`' length.
///
/// # Errors
/// [`Error::Corrupt`] naming the file and the field.
pub fn parse_manifest(bytes: &[u8], file: &str) -> Result<Manifest> {
    let j: ManifestIn = match serde_json::from_slice(bytes) {
        Ok(j) => j,
        Err(e) => return Err(why_not_a_manifest(bytes, file, &e)),
    };
    check_format(&j.format, j.version, file)?;
    let crc = j.out().content_crc();
    match j.manifest_crc32 {
        Some(saved) if saved == u64::from(crc) => {}
        Some(saved) => {
            return Err(corrupt(
                file,
                format!("manifest_crc32 is {saved:#010x}, its content's CRC-32 {crc:#010x}"),
            ));
        }
        None => return Err(corrupt(file, "no manifest_crc32")),
    }
    let ranks = usize::try_from(j.ranks)
        .ok()
        .filter(|&p| p > 0 && p <= MAX_RANKS)
        .ok_or_else(|| {
            corrupt(
                file,
                format!("ranks {} out of range 1..={MAX_RANKS}", j.ranks),
            )
        })?;
    if let Some(f) = j
        .files
        .iter()
        .find(|f| f.name.contains('/') || f.name.starts_with('.') || f.name.is_empty())
    {
        return Err(corrupt(
            file,
            format!("a file entry names the path {:?}", f.name),
        ));
    }
    Ok(Manifest {
        name: j.name,
        ranks,
        meta: j.meta,
        files: j.files,
    })
}

fn check_format(format: &str, version: u64, file: &str) -> Result<()> {
    if format != FORMAT {
        return Err(corrupt(file, "not a checkpoint manifest (format)"));
    }
    if version != FORMAT_VERSION {
        return Err(corrupt(
            file,
            format!("format version {version}; this code reads version {FORMAT_VERSION}"),
        ));
    }
    Ok(())
}

/// Why `bytes` did not parse as a manifest: another format or version
/// where its `format` and `version` fields say so (read skipping every
/// other field, nothing allocated for them), else the parser's error.
fn why_not_a_manifest(bytes: &[u8], file: &str, e: &serde_json::Error) -> Error {
    // Unknown fields are skipped (serde's `IgnoredAny`), not built.
    #[derive(Deserialize)]
    struct Probe {
        format: Option<String>,
        version: Option<u64>,
    }
    match serde_json::from_slice::<Probe>(bytes) {
        Ok(p) if p.format.as_deref() != Some(FORMAT) => {
            corrupt(file, "not a checkpoint manifest (format)")
        }
        Ok(Probe {
            version: Some(v), ..
        }) if v != FORMAT_VERSION => corrupt(
            file,
            format!("format version {v}; this code reads version {FORMAT_VERSION}"),
        ),
        Ok(_) => corrupt(file, format!("not a valid checkpoint manifest: {e}")),
        Err(_) => corrupt(file, format!("not a checkpoint manifest: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The canonical CRC-32 of the typed structure is the CRC-32 of the
    /// pretty JSON of its value with sorted keys, which the first
    /// writer of format version 2 wrote: old manifests stay readable.
    #[test]
    fn the_typed_crc_is_the_value_crc_of_version_2() {
        let m = Manifest {
            name: "step-\"3\"\n".into(),
            ranks: 2,
            meta: BTreeMap::from([("b".into(), "2".into()), ("a".into(), "é\t".into())]),
            files: vec![FileSum {
                name: "rank-0000.json".into(),
                bytes: 12,
                crc32: 0xdead_beef,
            }],
        };
        let files: Vec<serde_json::Value> = m
            .files
            .iter()
            .map(|f| serde_json::json!({"name": f.name, "bytes": f.bytes, "crc32": f.crc32}))
            .collect();
        let v = serde_json::json!({
            "format": FORMAT, "version": FORMAT_VERSION, "name": m.name, "ranks": m.ranks,
            "meta": m.meta, "files": files,
        });
        let old = crc32fast::hash(&serde_json::to_vec_pretty(&v).unwrap());
        assert_eq!(ManifestOut::of(&m).content_crc(), old);
        assert_eq!(manifest_crc(&v), old);
        let back = parse_manifest(&manifest_json(&m), "m").unwrap();
        assert_eq!(back, m);
        let empty = Manifest {
            meta: BTreeMap::new(),
            files: Vec::new(),
            ..m
        };
        let v = serde_json::json!({
            "format": FORMAT, "version": FORMAT_VERSION, "name": empty.name,
            "ranks": empty.ranks, "meta": {}, "files": [],
        });
        let old = crc32fast::hash(&serde_json::to_vec_pretty(&v).unwrap());
        assert_eq!(ManifestOut::of(&empty).content_crc(), old);
    }
}
