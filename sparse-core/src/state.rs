//! Cross-call state as data: what a selector, a residual memory or a
//! collective keeps from one call to the next (a reused threshold, a call
//! counter that seeds the next quantization, a residual), named, typed and
//! versioned, so that it can be saved, checked, restored and resharded by
//! code that does not know the part it came from.
//!
//! A [`State`] is a tree: named entries (each a flat [`Tensor`] of `f32`,
//! `u32` or `u64` with the [`Scope`] that says what a reshard does with
//! it) and named children (the states of the parts a part is made of). It
//! carries the `kind` and `version` of the part that wrote it, and a part
//! loading it checks both ([`State::expect`]) before it reads an entry.
//! Scalars are one-element tensors: an `f64` travels as its bits (so NaN,
//! a "not yet" marker of some parts, survives), a `bool` as 0 or 1, an
//! `Option<u64>` as zero or one element.
//!
//! Every accessor checks what it reads: a missing entry, another element
//! type or another length is an error naming the part's kind, the entry
//! and what was expected, never a panic. A part's `load` reads everything
//! first and assigns after, so a failed load changes nothing.

use crate::{Error, Result};

/// What resharding (restoring `P` ranks' states onto `P'` ranks) does
/// with an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Equal on every rank (weights, counters every rank advances alike):
    /// checked equal across the old ranks, then copied to every new rank.
    Shared,
    /// A rank's share of an additive quantity (a residual, a momentum):
    /// summed into the new ranks, so the sum over ranks is unchanged.
    Summed,
    /// Derived from this rank's data or from the rank count (a reused
    /// threshold, Ok-Topk's regions): dropped on reshard; the part then
    /// loads as on its first call.
    Local,
}

impl Scope {
    /// The scope's name in files.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Shared => "shared",
            Scope::Summed => "summed",
            Scope::Local => "local",
        }
    }
    /// The scope named `name` ([`Scope::name`]).
    ///
    /// # Errors
    /// [`Error::Corrupt`] for another name.
    pub fn from_name(name: &str) -> Result<Self> {
        match name {
            "shared" => Ok(Scope::Shared),
            "summed" => Ok(Scope::Summed),
            "local" => Ok(Scope::Local),
            other => Err(Error::corrupt(
                "training state",
                format!("unknown scope {other:?} (shared, summed or local)"),
            )),
        }
    }
}

/// A flat tensor of one element type.
#[derive(Debug, Clone, PartialEq)]
pub enum Tensor {
    /// `f32` values (residuals, weights), compared bit for bit.
    F32(Vec<f32>),
    /// `u32` values (indices, bounds).
    U32(Vec<u32>),
    /// `u64` values (counters, `f64` bits, flags).
    U64(Vec<u64>),
}

impl Tensor {
    /// The element type's name (`f32`, `u32`, `u64`).
    pub fn dtype(&self) -> &'static str {
        match self {
            Tensor::F32(_) => "f32",
            Tensor::U32(_) => "u32",
            Tensor::U64(_) => "u64",
        }
    }
    /// Elements.
    pub fn len(&self) -> usize {
        match self {
            Tensor::F32(v) => v.len(),
            Tensor::U32(v) => v.len(),
            Tensor::U64(v) => v.len(),
        }
    }
    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether two tensors hold the same bits (`f32` compared as bits, so
    /// NaN equals itself and -0 differs from +0).
    pub fn same_bits(&self, other: &Tensor) -> bool {
        match (self, other) {
            (Tensor::F32(a), Tensor::F32(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
            }
            (a, b) => a == b,
        }
    }
}

/// Values by name, sorted, each name once: a map whose memory is its
/// elements' (a `BTreeMap` allocates a node of eleven for its first
/// element), so that a state decoded from a file holds no more than a
/// small multiple of the file's length.
#[derive(Debug, Clone, PartialEq)]
struct Named<V>(Vec<(String, V)>);

impl<V> Default for Named<V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<V> Named<V> {
    /// `v` sorted by name, or the first name it holds twice.
    fn from_vec(mut v: Vec<(String, V)>) -> std::result::Result<Self, String> {
        v.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        match v.windows(2).find(|w| w[0].0 == w[1].0) {
            Some(w) => Err(w[0].0.clone()),
            None => Ok(Self(v)),
        }
    }
    fn find(&self, name: &str) -> std::result::Result<usize, usize> {
        self.0.binary_search_by(|(n, _)| n.as_str().cmp(name))
    }
    fn get(&self, name: &str) -> Option<&V> {
        self.find(name).ok().map(|i| &self.0[i].1)
    }
    fn contains_key(&self, name: &str) -> bool {
        self.find(name).is_ok()
    }
    fn insert(&mut self, name: String, v: V) {
        match self.find(&name) {
            Ok(i) => self.0[i].1 = v,
            Err(i) => self.0.insert(i, (name, v)),
        }
    }
    fn iter(&self) -> impl Iterator<Item = (&String, &V)> {
        self.0.iter().map(|(n, v)| (n, v))
    }
    fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.0.iter_mut().map(|(_, v)| v)
    }
    fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.iter().map(|(n, _)| n)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One part's state: its kind and version, named entries and named
/// children (module docs).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct State {
    kind: String,
    version: u32,
    entries: Named<(Scope, Tensor)>,
    children: Named<State>,
    resharded: bool,
}

impl State {
    /// An empty state of a part of `kind` at `version`.
    pub fn new(kind: impl Into<String>, version: u32) -> Self {
        Self {
            kind: kind.into(),
            version,
            ..Self::default()
        }
    }

    /// A state read back whole (a decoder's): `entries` and `children`
    /// in any order, each name once; no state is marked resharded.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming the kind and a name given twice.
    pub fn from_parts(
        kind: impl Into<String>,
        version: u32,
        entries: Vec<(String, Scope, Tensor)>,
        children: Vec<(String, State)>,
    ) -> Result<Self> {
        let mut s = Self::new(kind, version);
        let twice = |what: &str, name: String| s.err(format!("the {what} {name:?} is given twice"));
        let entries = entries.into_iter().map(|(n, sc, t)| (n, (sc, t))).collect();
        let entries = match Named::from_vec(entries) {
            Ok(e) => e,
            Err(name) => return Err(twice("entry", name)),
        };
        let children = match Named::from_vec(children) {
            Ok(c) => c,
            Err(name) => return Err(twice("part", name)),
        };
        s.entries = entries;
        s.children = children;
        Ok(s)
    }

    /// The state of a part that keeps nothing across calls: no kind, no
    /// entries.
    pub fn stateless() -> Self {
        Self::default()
    }

    /// Whether this is [`State::stateless`]'s.
    pub fn is_stateless(&self) -> bool {
        self.kind.is_empty() && self.entries.is_empty() && self.children.is_empty()
    }

    /// The kind of the part that wrote it.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The version of the part's state layout.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The entries, by name.
    pub fn entries(&self) -> impl Iterator<Item = (&str, Scope, &Tensor)> {
        self.entries.iter().map(|(n, (s, t))| (n.as_str(), *s, t))
    }

    /// The children, by name.
    pub fn children(&self) -> impl Iterator<Item = (&str, &State)> {
        self.children.iter().map(|(n, c)| (n.as_str(), c))
    }

    fn err(&self, detail: impl std::fmt::Display) -> Error {
        let kind = if self.kind.is_empty() {
            "a stateless part"
        } else {
            &self.kind
        };
        Error::corrupt(
            "training state",
            format!("{kind} (version {}): {detail}", self.version),
        )
    }

    /// Checks that this is the state of a part of `kind` at `version`.
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming both kinds or both versions.
    pub fn expect(&self, kind: &str, version: u32) -> Result<()> {
        if self.kind != kind {
            let saved = if self.kind.is_empty() {
                "a stateless part's"
            } else {
                &self.kind
            };
            return Err(Error::mismatch(
                "the kind of part that saved this state",
                saved,
                kind,
                "load a state into the kind of part that saved it",
            ));
        }
        if self.version != version {
            return Err(Error::mismatch(
                format!("the state version of {kind}"),
                self.version,
                version,
                format!("this {kind} reads version {version} only"),
            ));
        }
        Ok(())
    }

    /// Checks that this is [`State::stateless`]'s, for `owner`, a part
    /// that keeps nothing across calls.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming `owner` and what the state holds.
    pub fn expect_stateless(&self, owner: &str) -> Result<()> {
        if self.is_stateless() {
            Ok(())
        } else {
            Err(self.err(format!(
                "{owner} keeps no state across calls, but this state holds {} entries and {} parts",
                self.entries.len(),
                self.children.len()
            )))
        }
    }

    /// Adds (or replaces) the entry `name`.
    pub fn put(&mut self, name: impl Into<String>, scope: Scope, t: Tensor) -> &mut Self {
        self.entries.insert(name.into(), (scope, t));
        self
    }
    /// Adds a `u64` scalar.
    pub fn put_u64(&mut self, name: impl Into<String>, scope: Scope, v: u64) -> &mut Self {
        self.put(name, scope, Tensor::U64(vec![v]))
    }
    /// Adds an `f64` scalar (as its bits).
    pub fn put_f64(&mut self, name: impl Into<String>, scope: Scope, v: f64) -> &mut Self {
        self.put_u64(name, scope, v.to_bits())
    }
    /// Adds a flag.
    pub fn put_bool(&mut self, name: impl Into<String>, scope: Scope, v: bool) -> &mut Self {
        self.put_u64(name, scope, u64::from(v))
    }
    /// Adds an optional `u64` (zero or one element).
    pub fn put_opt_u64(
        &mut self,
        name: impl Into<String>,
        scope: Scope,
        v: Option<u64>,
    ) -> &mut Self {
        self.put(name, scope, Tensor::U64(v.into_iter().collect()))
    }
    /// Adds `f32` values.
    pub fn put_f32s(&mut self, name: impl Into<String>, scope: Scope, v: &[f32]) -> &mut Self {
        self.put(name, scope, Tensor::F32(v.to_vec()))
    }
    /// Adds (or replaces) the child `name`.
    pub fn put_child(&mut self, name: impl Into<String>, child: State) -> &mut Self {
        self.children.insert(name.into(), child);
        self
    }

    /// The entry `name` and its scope.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming the kind and the entry when it is absent.
    pub fn get(&self, name: &str) -> Result<(Scope, &Tensor)> {
        self.entries
            .get(name)
            .map(|(s, t)| (*s, t))
            .ok_or_else(|| self.err(format!("entry {name:?} is missing")))
    }

    fn u64s_exact(&self, name: &str, len: Option<usize>) -> Result<&[u64]> {
        match self.get(name)?.1 {
            Tensor::U64(v) if len.is_none_or(|n| v.len() == n) => Ok(v),
            Tensor::U64(v) => Err(self.err(format!(
                "entry {name:?} holds {} elements, expected {}",
                v.len(),
                len.unwrap_or(0)
            ))),
            t => Err(self.err(format!("entry {name:?} is {}, expected u64", t.dtype()))),
        }
    }
    /// The `u64` scalar `name`.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a missing entry, another type or length.
    pub fn u64(&self, name: &str) -> Result<u64> {
        Ok(self.u64s_exact(name, Some(1))?[0])
    }
    /// The `f64` scalar `name`.
    ///
    /// # Errors
    /// As [`State::u64`].
    pub fn f64(&self, name: &str) -> Result<f64> {
        Ok(f64::from_bits(self.u64(name)?))
    }
    /// The flag `name`.
    ///
    /// # Errors
    /// As [`State::u64`], and for a value other than 0 or 1.
    pub fn bool(&self, name: &str) -> Result<bool> {
        match self.u64(name)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(self.err(format!("entry {name:?} is {v}, not a flag (0 or 1)"))),
        }
    }
    /// The optional `u64` `name`.
    ///
    /// # Errors
    /// As [`State::u64`], and for more than one element.
    pub fn opt_u64(&self, name: &str) -> Result<Option<u64>> {
        let v = self.u64s_exact(name, None)?;
        match v {
            [] => Ok(None),
            [x] => Ok(Some(*x)),
            _ => Err(self.err(format!(
                "entry {name:?} holds {} elements, expected 0 or 1",
                v.len()
            ))),
        }
    }
    /// The `u64` values `name` (any length).
    ///
    /// # Errors
    /// As [`State::u64`].
    pub fn u64s(&self, name: &str) -> Result<&[u64]> {
        self.u64s_exact(name, None)
    }
    /// The `u32` values `name` (any length).
    ///
    /// # Errors
    /// As [`State::u64`].
    pub fn u32s(&self, name: &str) -> Result<&[u32]> {
        match self.get(name)?.1 {
            Tensor::U32(v) => Ok(v),
            t => Err(self.err(format!("entry {name:?} is {}, expected u32", t.dtype()))),
        }
    }
    /// The `len` `f32` values `name`.
    ///
    /// # Errors
    /// As [`State::u64`].
    pub fn f32s(&self, name: &str, len: usize) -> Result<&[f32]> {
        match self.get(name)?.1 {
            Tensor::F32(v) if v.len() == len => Ok(v),
            Tensor::F32(v) => Err(self.err(format!(
                "entry {name:?} holds {} elements, expected {len}",
                v.len()
            ))),
            t => Err(self.err(format!("entry {name:?} is {}, expected f32", t.dtype()))),
        }
    }
    /// The child `name`.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming the kind and the child when it is absent.
    pub fn child(&self, name: &str) -> Result<&State> {
        self.children
            .get(name)
            .ok_or_else(|| self.err(format!("part {name:?} is missing")))
    }

    /// Whether this state was resharded ([`reshard`]): its
    /// [`Scope::Local`] entries were dropped, and a part reading one reads
    /// its first call's value instead ([`State::local_u64`] and the
    /// others).
    pub fn resharded(&self) -> bool {
        self.resharded
    }
    /// This state with every entry's scope, its children's included, made
    /// [`Scope::Local`]: for a part whose whole layout depends on the rank
    /// count, so that a reshard drops it all.
    pub fn into_local(mut self) -> Self {
        for (scope, _) in self.entries.values_mut() {
            *scope = Scope::Local;
        }
        self.children = Named(
            self.children
                .0
                .into_iter()
                .map(|(n, c)| (n, c.into_local()))
                .collect(),
        );
        self
    }
    /// Marks this state and its children resharded ([`State::resharded`]).
    pub fn mark_resharded(&mut self) {
        self.resharded = true;
        self.children.values_mut().for_each(State::mark_resharded);
    }
    fn local<T>(&self, name: &str, first: T, read: impl FnOnce(&Self) -> Result<T>) -> Result<T> {
        if self.resharded && !self.entries.contains_key(name) {
            Ok(first)
        } else {
            read(self)
        }
    }
    /// The [`Scope::Local`] `u64` `name`, or `first` (its first call's
    /// value) where a reshard dropped it.
    ///
    /// # Errors
    /// As [`State::u64`].
    pub fn local_u64(&self, name: &str, first: u64) -> Result<u64> {
        self.local(name, first, |s| s.u64(name))
    }
    /// The [`Scope::Local`] `f64` `name`, or `first` where a reshard
    /// dropped it.
    ///
    /// # Errors
    /// As [`State::u64`].
    pub fn local_f64(&self, name: &str, first: f64) -> Result<f64> {
        self.local(name, first, |s| s.f64(name))
    }
    /// The [`Scope::Local`] flag `name`, or `first` where a reshard
    /// dropped it.
    ///
    /// # Errors
    /// As [`State::bool`].
    pub fn local_bool(&self, name: &str, first: bool) -> Result<bool> {
        self.local(name, first, |s| s.bool(name))
    }
    /// The [`Scope::Local`] optional `u64` `name`, or `None` where a
    /// reshard dropped it.
    ///
    /// # Errors
    /// As [`State::opt_u64`].
    pub fn local_opt_u64(&self, name: &str) -> Result<Option<u64>> {
        self.local(name, None, |s| s.opt_u64(name))
    }
    /// The [`Scope::Local`] `u64` values `name`, or none where a reshard
    /// dropped them.
    ///
    /// # Errors
    /// As [`State::u64s`].
    pub fn local_u64s(&self, name: &str) -> Result<Vec<u64>> {
        self.local(name, Vec::new(), |s| s.u64s(name).map(<[u64]>::to_vec))
    }

    /// Whether two states hold the same kinds, versions, names, scopes
    /// and bits ([`Tensor::same_bits`]), children included.
    pub fn same_bits(&self, other: &State) -> bool {
        self.kind == other.kind
            && self.version == other.version
            && self.resharded == other.resharded
            && self.entries.len() == other.entries.len()
            && self
                .entries
                .iter()
                .zip(other.entries.iter())
                .all(|((n, (s, t)), (m, (r, u)))| n == m && s == r && t.same_bits(u))
            && self.children.len() == other.children.len()
            && self
                .children
                .iter()
                .zip(other.children.iter())
                .all(|((n, c), (m, d))| n == m && c.same_bits(d))
    }
}

/// Reshards the states of `P` ranks (`old`, by rank) onto `p_new` ranks:
/// old rank `r` goes to new rank `r mod p_new`.
///
/// - [`Scope::Shared`] entries must be equal, bit for bit, on every old
///   rank; each new rank gets a copy.
/// - [`Scope::Summed`] entries (`f32`) of the old ranks that go to a new
///   rank are added in increasing old rank; a new rank no old rank goes to
///   (`p_new > P`) gets zeros. The sum over ranks is unchanged up to the
///   rounding of those additions: exactly where every partial sum is
///   representable (dyadic values of bounded range), otherwise within
///   `(P - p_new)` roundings of half an ulp each per entry.
/// - [`Scope::Local`] entries are dropped and the states marked
///   [`State::resharded`]: a part then reads its first call's values.
///
/// Every old rank's tree must have the same kinds, versions, children and
/// Shared and Summed entries (names, types, lengths).
///
/// # Errors
/// [`Error::Corrupt`] naming the path and the ranks that differ;
/// [`Error::InvalidParameter`] for no old state or `p_new == 0`.
pub fn reshard(old: &[State], p_new: usize) -> Result<Vec<State>> {
    (0..p_new.max(1))
        .map(|q| reshard_rank(old, p_new, q))
        .collect()
}

/// New rank `q`'s state of [`reshard`]`(old, p_new)`, alone: what a
/// writer that saves one new rank at a time holds (the old states and one
/// new one, whatever `p_new`).
///
/// # Errors
/// As [`reshard`]; [`Error::InvalidParameter`] for `q >= p_new`.
pub fn reshard_rank(old: &[State], p_new: usize, q: usize) -> Result<State> {
    if old.is_empty() || p_new == 0 || q >= p_new {
        return Err(Error::invalid(
            "reshard",
            format!(
                "new rank {q} of {p_new}, from {} old ranks: there must be at least one of \
                 each, and q below p_new",
                old.len()
            ),
        ));
    }
    let old: Vec<&State> = old.iter().collect();
    let mut out = reshard_node(&old, p_new, q, "")?;
    out.mark_resharded();
    Ok(out)
}

fn reshard_node(old: &[&State], p_new: usize, q: usize, path: &str) -> Result<State> {
    let first = old[0];
    let bad = |detail: String| {
        Error::corrupt(
            "training state",
            format!(
                "reshard: {}: {detail}",
                if path.is_empty() { "the root" } else { path }
            ),
        )
    };
    for (r, s) in old.iter().enumerate() {
        if s.kind != first.kind || s.version != first.version {
            return Err(bad(format!(
                "rank {r} holds {} version {}, rank 0 {} version {}",
                s.kind, s.version, first.kind, first.version
            )));
        }
        if !s.children.keys().eq(first.children.keys()) {
            return Err(bad(format!("rank {r}'s parts differ from rank 0's")));
        }
    }
    let mut s = State::new(first.kind.clone(), first.version);
    for (name, (scope, t)) in first.entries.iter() {
        let at = format!("{path}{name}");
        match scope {
            Scope::Local => continue,
            Scope::Shared => {
                for (r, o) in old.iter().enumerate() {
                    match o.entries.get(name) {
                        Some((Scope::Shared, u)) if u.same_bits(t) => {}
                        _ => {
                            return Err(bad(format!(
                                "{at} is shared, but rank {r}'s differs from rank 0's"
                            )));
                        }
                    }
                }
                s.put(name.clone(), *scope, t.clone());
            }
            Scope::Summed => {
                let Tensor::F32(v0) = t else {
                    return Err(bad(format!("{at} is summed but {}, not f32", t.dtype())));
                };
                let mut sum = vec![0.0f32; v0.len()];
                for (r, o) in old.iter().enumerate() {
                    let v = match o.entries.get(name) {
                        Some((Scope::Summed, Tensor::F32(v))) if v.len() == v0.len() => v,
                        _ => {
                            return Err(bad(format!(
                                "{at}: rank {r}'s is not summed f32 of {} elements",
                                v0.len()
                            )));
                        }
                    };
                    if r % p_new == q {
                        sum.iter_mut().zip(v).for_each(|(a, x)| *a += x);
                    }
                }
                s.put(name.clone(), *scope, Tensor::F32(sum));
            }
        }
    }
    for (r, o) in old.iter().enumerate() {
        for (name, (scope, _)) in o.entries.iter() {
            if *scope != Scope::Local && !first.entries.contains_key(name) {
                return Err(bad(format!("rank {r} holds {path}{name}, rank 0 does not")));
            }
        }
    }
    for name in first.children.keys() {
        let kids = old
            .iter()
            .map(|o| o.children.get(name))
            .collect::<Option<Vec<&State>>>()
            .ok_or_else(|| bad(format!("a rank lacks the part {name}")))?;
        s.put_child(
            name.clone(),
            reshard_node(&kids, p_new, q, &format!("{path}{name}/"))?,
        );
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> State {
        let mut s = State::new("test::Part", 2);
        s.put_u64("calls", Scope::Shared, 7)
            .put_f64("h", Scope::Local, f64::NAN)
            .put_bool("top", Scope::Shared, true)
            .put_opt_u64("threshold", Scope::Local, None)
            .put_f32s("v", Scope::Summed, &[1.5, -0.0, 3.0])
            .put("bounds", Scope::Local, Tensor::U32(vec![0, 4, 9]));
        let mut child = State::new("test::Child", 1);
        child.put_opt_u64("key", Scope::Local, Some(3));
        s.put_child("comm", child);
        s
    }

    #[test]
    fn values_come_back_as_written() {
        let s = sample();
        s.expect("test::Part", 2).unwrap();
        assert_eq!(s.u64("calls").unwrap(), 7);
        assert!(s.f64("h").unwrap().is_nan());
        assert!(s.bool("top").unwrap());
        assert_eq!(s.opt_u64("threshold").unwrap(), None);
        assert_eq!(s.f32s("v", 3).unwrap()[0], 1.5);
        assert_eq!(s.u32s("bounds").unwrap(), [0, 4, 9]);
        assert_eq!(s.get("v").unwrap().0, Scope::Summed);
        let c = s.child("comm").unwrap();
        c.expect("test::Child", 1).unwrap();
        assert_eq!(c.opt_u64("key").unwrap(), Some(3));
        assert!(s.same_bits(&sample()));
        assert!(!s.is_stateless());
        State::stateless().expect_stateless("RadixTopK").unwrap();
        for sc in [Scope::Shared, Scope::Summed, Scope::Local] {
            assert_eq!(Scope::from_name(sc.name()).unwrap(), sc);
        }
        assert!(Scope::from_name("global").is_err());
    }

    #[test]
    fn every_mismatch_is_an_error_naming_the_kind_and_the_entry() {
        let s = sample();
        let msg = |r: Result<()>| r.unwrap_err().to_string();
        let m = msg(s.expect("test::Other", 2));
        assert!(m.contains("test::Part") && m.contains("test::Other"), "{m}");
        let e = s.expect("test::Part", 3).unwrap_err();
        assert!(
            matches!(&e, Error::Mismatch { saved, here, .. } if saved == "2" && here == "3"),
            "{e:?}"
        );
        assert!(e.to_string().contains("state version of test::Part"), "{e}");
        let m = msg(s.u64("nothing").map(|_| ()));
        assert!(m.contains("test::Part") && m.contains("\"nothing\""), "{m}");
        let m = msg(s.u64("v").map(|_| ()));
        assert!(m.contains("\"v\"") && m.contains("f32"), "{m}");
        let m = msg(s.f32s("v", 4).map(|_| ()));
        assert!(m.contains("3 elements, expected 4"), "{m}");
        assert!(s.u64("bounds").is_err());
        assert!(s.u32s("calls").is_err());
        assert!(s.opt_u64("v").is_err());
        let m = msg(s.child("select").map(|_| ()));
        assert!(m.contains("\"select\""), "{m}");
        let m = msg(s.expect_stateless("RadixTopK"));
        assert!(m.contains("RadixTopK keeps no state"), "{m}");
        let mut bad = State::new("k", 1);
        bad.put_u64("flag", Scope::Shared, 2)
            .put("many", Scope::Local, Tensor::U64(vec![1, 2]));
        assert!(bad.bool("flag").is_err());
        assert!(bad.opt_u64("many").is_err());
    }

    #[test]
    fn same_bits_tells_signed_zeros_and_nans_apart() {
        let a = Tensor::F32(vec![0.0, f32::NAN]);
        assert!(a.same_bits(&a.clone()));
        assert!(!a.same_bits(&Tensor::F32(vec![-0.0, f32::NAN])));
        assert!(!a.same_bits(&Tensor::F32(vec![0.0])));
        assert!(!a.same_bits(&Tensor::U32(vec![0, 0])));
        let mut b = sample();
        b.put_f32s("v", Scope::Summed, &[1.5, 0.0, 3.0]);
        assert!(!sample().same_bits(&b));
        let mut c = sample();
        c.put_u64("calls", Scope::Local, 7);
        assert!(!sample().same_bits(&c), "the scope is part of the state");
    }

    /// Resharding 4 ranks onto 3 and onto 6: shared entries copied, summed
    /// ones added by `r mod P'` (dyadic values: exact, so the sum over
    /// ranks is unchanged bit for bit), local ones dropped and read as
    /// their first call's values.
    #[test]
    fn reshard_copies_sums_and_drops() {
        let rank = |r: usize| {
            let mut s = State::new("t::Trainer", 1);
            s.put_f32s("w", Scope::Shared, &[0.5, 1.5]).put_u64(
                "calls",
                Scope::Local,
                10 + r as u64,
            );
            let mut m = State::new("t::Memory", 1);
            m.put_f32s("v", Scope::Summed, &[r as f32 * 0.25, -(r as f32), 8.0]);
            s.put_child("memory", m);
            s
        };
        let old: Vec<State> = (0..4).map(rank).collect();
        let total = |states: &[State]| -> Vec<f32> {
            let mut t = vec![0.0; 3];
            for s in states {
                let v = s.child("memory").unwrap().f32s("v", 3).unwrap();
                t.iter_mut().zip(v).for_each(|(a, x)| *a += x);
            }
            t
        };
        for p_new in [1usize, 3, 4, 6] {
            let new = reshard(&old, p_new).unwrap();
            assert_eq!(new.len(), p_new);
            assert_eq!(total(&new), total(&old), "P' = {p_new}");
            for (q, s) in new.iter().enumerate() {
                assert!(s.resharded() && s.child("memory").unwrap().resharded());
                assert_eq!(s.f32s("w", 2).unwrap(), [0.5, 1.5]);
                assert!(s.u64("calls").is_err(), "dropped");
                assert_eq!(s.local_u64("calls", 0).unwrap(), 0, "first call's value");
                let want: Vec<f32> = (0..3)
                    .map(|i| {
                        (0..4)
                            .filter(|r| r % p_new == q)
                            .map(|r| old[r].child("memory").unwrap().f32s("v", 3).unwrap()[i])
                            .sum()
                    })
                    .collect();
                assert_eq!(s.child("memory").unwrap().f32s("v", 3).unwrap(), want);
            }
        }
        // Not resharded: a missing local entry is an error.
        assert!(old[0].local_u64("nothing", 0).is_err());
        // A shared entry that differs between ranks.
        let mut bad = old.clone();
        bad[2].put_f32s("w", Scope::Shared, &[0.5, 2.5]);
        let e = reshard(&bad, 2).unwrap_err().to_string();
        assert!(e.contains("w is shared") && e.contains("rank 2"), "{e}");
        assert!(reshard(&old, 0).is_err() && reshard(&[], 2).is_err());
    }
}
