//! The [`Registry`]: names to algorithms, the built-in ones one line each
//! ([`Registry::builtin`]) and any a user adds, and names to value codecs
//! (the built-in ones and any a user adds, [`Registry::add_values`]).
//! `sparse-bench`, the tests, the planner and the collective suite read the
//! algorithms from here.

use crate::Auto;
use crate::algorithm::{
    Catalog, Defaults, Facts, Params, Promises, Registered, SparseAllreduce, is_name,
};
use crate::plan::lossless_candidates;
use crate::values::{BUILTIN_CODECS, WireValues};
use sparse_core::encoding::{USER_TAGS, ValueCodec};
use sparse_core::{Element, Error, Result};
use std::fmt;

impl<E: Element> Catalog<E> for Registry<E> {
    fn build(&self, spec: &str, defaults: Defaults) -> Result<Box<dyn SparseAllreduce<E>>> {
        Registry::build(self, spec, defaults)
    }
    fn auto_candidates(&self) -> Vec<&str> {
        Registry::auto_candidates(self)
    }
    fn values(&self, name: &str) -> Result<WireValues<E>> {
        Registry::values(self, name)
    }
}

type Builder<E> = Box<
    dyn Fn(&mut Params, Defaults, &Registry<E>) -> Result<Box<dyn SparseAllreduce<E>>>
        + Send
        + Sync,
>;

type PromisesBuilder<E> =
    Box<dyn Fn(&mut Params, Defaults, &Registry<E>) -> Result<Box<dyn Promises<E>>> + Send + Sync>;

/// One entry of a [`Registry`].
pub struct Entry<E> {
    name: String,
    params: String,
    help: String,
    facts: Facts,
    suite: Option<fn(usize) -> Vec<String>>,
    build: Builder<E>,
    /// What it promises of its calls ([`Promises`]; only a
    /// [`Registered`] one states them).
    promises: Option<PromisesBuilder<E>>,
}

impl<E> Entry<E> {
    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The parameters it takes.
    pub fn params(&self) -> &str {
        &self.params
    }
    /// One line of help.
    pub fn help(&self) -> &str {
        &self.help
    }
    /// What it says of itself ([`Facts`]).
    pub fn facts(&self) -> Facts {
        self.facts
    }
    /// Whether it is lossless with its default parameters
    /// ([`Registered::LOSSLESS`]).
    pub fn lossless(&self) -> bool {
        self.facts.lossless
    }
    /// Whether it keeps state across calls ([`Registered::STATEFUL`]).
    pub fn stateful(&self) -> bool {
        self.facts.stateful
    }
    /// Whether it takes a budget, `k=` or `density=`
    /// ([`Registered::BUDGET`]).
    pub fn takes_budget(&self) -> bool {
        self.facts.budget
    }
    /// Whether warm calls allocate nothing that grows with the data
    /// ([`Registered::WARM`]).
    pub fn warm(&self) -> bool {
        self.facts.warm
    }
    /// Whether the planner chooses among it by default
    /// ([`Registered::PLANNED`]).
    pub fn planned(&self) -> bool {
        self.facts.planned
    }
    /// Whether it takes the `values` parameter ([`Registered::VALUES`]).
    pub fn takes_values(&self) -> bool {
        self.facts.values
    }
    /// The specs the collective suite runs on `p` ranks
    /// ([`Registered::suite_specs`]; the name alone for
    /// [`Registry::register`]ed ones), each with its default values (raw;
    /// [`Registry::suite_specs`] adds the codecs).
    pub fn suite_specs(&self, p: usize) -> Vec<String> {
        self.suite.map_or_else(|| vec![self.name.clone()], |f| f(p))
    }
}

impl<E> fmt::Debug for Entry<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry").field("name", &self.name).finish()
    }
}

/// Names to algorithms: the built-in ones ([`Registry::builtin`]) and any a
/// user registers; and names to value codecs: `raw`, the built-in `f16`,
/// `bf16` and `ssmean`, and any a user adds ([`Registry::add_values`]), which
/// every algorithm that takes `values=` then sends with
/// (`topk_a:values=mycodec`). `sparse-bench`, the tests and the planner all
/// read the algorithms from here.
#[derive(Debug)]
pub struct Registry<E> {
    entries: Vec<Entry<E>>,
    /// The codecs besides raw, in registration order.
    codecs: Vec<WireValues<E>>,
}

impl<E: Element> Default for Registry<E> {
    fn default() -> Self {
        Self::builtin()
    }
}

impl<E: Element> Registry<E> {
    /// A registry with no algorithm, and the built-in value codecs.
    pub fn empty() -> Self {
        Self {
            entries: Vec::new(),
            codecs: BUILTIN_CODECS
                .iter()
                .map(|name| WireValues::parse(name).expect("a built-in codec"))
                .collect(),
        }
    }

    /// Every built-in algorithm, one line each.
    pub fn builtin() -> Self {
        use crate::*;
        let mut r = Self::empty();
        r.add::<TopkA<E>>();
        r.add::<TopkDsa>();
        r.add::<SsarRecursiveDouble<E>>();
        r.add::<SsarSplitAllgather>();
        r.add::<DsarSplitAllgather>();
        r.add::<ZenBalancedParallelism>();
        r.add::<OmniReduceBlocks>();
        r.add::<Gtopk>();
        r.add::<OkTopk<E>>();
        r.add::<Spardl<E>>();
        r.add::<SpardlRsag>();
        r.add::<SpardlBsag>();
        r.add::<Hierarchical<E>>();
        DsarSplitAllgather::register_qsgd(&mut r);
        r.add::<Auto<E>>();
        r
    }

    /// Adds a built-in style algorithm: everything about it comes from its
    /// [`Registered`] implementation.
    ///
    /// # Panics
    /// If its name is taken or not a plain identifier.
    pub fn add<A: Registered<E>>(&mut self) {
        self.insert(Entry {
            name: A::NAME.into(),
            params: A::PARAMS.into(),
            help: A::HELP.into(),
            facts: Facts::of::<E, A>(),
            suite: Some(A::suite_specs),
            build: Box::new(|p, d, registry| {
                Ok(Box::new(A::build(p, d, registry)?) as Box<dyn SparseAllreduce<E>>)
            }),
            promises: Some(Box::new(|p, d, registry| {
                Ok(Box::new(A::build(p, d, registry)?) as Box<dyn Promises<E>>)
            })),
        })
        .expect("built-in names are distinct");
    }

    /// Registers an algorithm under `name`: `build` gets the parsed
    /// parameters (take the ones it knows; any left over is an error) and
    /// the defaults. It states no [`Facts`] (all `false`):
    /// [`Registry::register_with`] gives them.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if the name is taken or not a plain
    /// identifier (`[a-z0-9_]`).
    pub fn register(
        &mut self,
        name: &str,
        params: &str,
        help: &str,
        build: impl Fn(&mut Params, Defaults) -> Result<Box<dyn SparseAllreduce<E>>>
        + Send
        + Sync
        + 'static,
    ) -> Result<()> {
        self.register_with(name, params, help, Facts::default(), build)
    }

    /// [`Registry::register`] with the algorithm's [`Facts`].
    ///
    /// # Errors
    /// As [`Registry::register`].
    pub fn register_with(
        &mut self,
        name: &str,
        params: &str,
        help: &str,
        facts: Facts,
        build: impl Fn(&mut Params, Defaults) -> Result<Box<dyn SparseAllreduce<E>>>
        + Send
        + Sync
        + 'static,
    ) -> Result<()> {
        self.insert(Entry {
            name: name.into(),
            params: params.into(),
            help: help.into(),
            facts,
            suite: None,
            build: Box::new(move |p, d, _| build(p, d)),
            promises: None,
        })
    }

    /// Adds a user's value codec under its name ([`ValueCodec::name`]): every
    /// algorithm that takes `values=` then sends with it
    /// (`topk_a:values=<name>`), its quantization error kept exactly in
    /// `dropped` ([`WireValues`]), and the collective suite runs it through
    /// each of them.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if its tag is outside
    /// [`USER_TAGS`] (below 128 is this workspace's) or taken by another
    /// codec of the registry, or its name is taken (`raw` included) or not
    /// a plain identifier (`[a-z0-9_]`).
    pub fn add_values<C: ValueCodec<E> + Send + Sync + 'static>(&mut self, codec: C) -> Result<()> {
        let name = codec.name();
        if !USER_TAGS.contains(&C::TAG) {
            return Err(Error::invalid(
                "values",
                format!(
                    "codec {name:?} has tag {}: a user's codec takes one in {}..={} \
                     (those below are this workspace's)",
                    C::TAG,
                    USER_TAGS.start(),
                    USER_TAGS.end()
                ),
            ));
        }
        if !is_name(&name) {
            return Err(Error::invalid(
                "values",
                format!("{name:?} is not a name of [a-z0-9_]"),
            ));
        }
        if name == "raw" || self.codecs.iter().any(|c| c.name() == name) {
            return Err(Error::invalid("values", format!("{name:?} is taken")));
        }
        if let Some(c) = self.codecs.iter().find(|c| c.tag() == C::TAG) {
            return Err(Error::invalid(
                "values",
                format!("tag {} of {name:?} is {:?}'s", C::TAG, c.name()),
            ));
        }
        self.codecs.push(WireValues::codec(codec));
        Ok(())
    }

    /// The value codec named `name`: `raw`, a built-in one or one added
    /// with [`Registry::add_values`].
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for an unknown name (listing the known
    /// ones and naming [`Registry::add_values`]).
    pub fn values(&self, name: &str) -> Result<WireValues<E>> {
        if name == "raw" {
            return Ok(WireValues::raw());
        }
        self.codecs
            .iter()
            .find(|c| c.name() == name)
            .cloned()
            .ok_or_else(|| {
                Error::invalid(
                    "values",
                    format!(
                        "unknown codec {name:?}; known: raw, {}; a codec of your own \
                         (a sparse_core::encoding::ValueCodec) joins with \
                         Registry::add_values before the algorithm is built",
                        self.value_names().join(", ")
                    ),
                )
            })
    }

    /// The names of the value codecs besides raw, in registration order
    /// (the built-in ones first).
    pub fn value_names(&self) -> Vec<String> {
        self.codecs.iter().map(WireValues::name).collect()
    }

    /// The specs the collective suite runs on `p` ranks: each entry's
    /// [`Entry::suite_specs`], and for one that takes `values=` each of
    /// those with every codec of this registry besides raw
    /// ([`Registry::value_names`], a user's own included).
    pub fn suite_specs(&self, p: usize) -> Vec<String> {
        let mut out = Vec::new();
        for e in &self.entries {
            for spec in e.suite_specs(p) {
                let codecs = e.takes_values() && !spec.contains("values=");
                out.push(spec.clone());
                if codecs {
                    let sep = if spec.contains(':') { ',' } else { ':' };
                    for c in self.value_names() {
                        out.push(format!("{spec}{sep}values={c}"));
                    }
                }
            }
        }
        out
    }

    /// Adds `entry` under its name.
    fn insert(&mut self, entry: Entry<E>) -> Result<()> {
        let name = &entry.name;
        if !is_name(name) {
            return Err(Error::invalid(
                "algorithm",
                format!("{name:?} is not a name of [a-z0-9_]"),
            ));
        }
        if self.entries.iter().any(|e| e.name == *name) {
            return Err(Error::invalid("algorithm", format!("{name:?} is taken")));
        }
        // So that a disagreement about the algorithm names it.
        crate::entry::entry_id(name);
        self.entries.push(entry);
        Ok(())
    }

    /// The entries, in registration order.
    pub fn entries(&self) -> &[Entry<E>] {
        &self.entries
    }

    /// The names, in registration order.
    pub fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|e| e.name.as_str()).collect()
    }

    /// The names the planner chooses among by default, in registration
    /// order: the entries with [`Registered::PLANNED`] (the built-in
    /// lossless algorithms whose result is the exact sparse sum).
    pub fn auto_candidates(&self) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|e| e.facts.planned)
            .map(|e| e.name.as_str())
            .collect()
    }

    /// Builds `spec` (`name` or `name:key=value,...`).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for an unknown name (listing the known
    /// ones), an unknown parameter or a bad value.
    pub fn build(&self, spec: &str, defaults: Defaults) -> Result<Box<dyn SparseAllreduce<E>>> {
        let (entry, mut params) = self.entry(spec)?;
        let algo = (entry.build)(&mut params, defaults, self)?;
        params.finish()?;
        Ok(algo)
    }

    /// What `spec`, built with `defaults`, promises of its calls
    /// ([`Promises`], for the collective suite): a fresh instance to ask,
    /// or `None` for an algorithm registered without them
    /// ([`Registry::register`]).
    ///
    /// # Errors
    /// As [`Registry::build`].
    pub fn promises(&self, spec: &str, defaults: Defaults) -> Result<Option<Box<dyn Promises<E>>>> {
        let (entry, mut params) = self.entry(spec)?;
        let Some(build) = &entry.promises else {
            return Ok(None);
        };
        let promises = build(&mut params, defaults, self)?;
        params.finish()?;
        Ok(Some(promises))
    }

    /// The entry `spec` names, and its parameters parsed.
    fn entry(&self, spec: &str) -> Result<(&Entry<E>, Params)> {
        let params = Params::parse(spec)?;
        let entry = self
            .entries
            .iter()
            .find(|e| e.name == params.name())
            .ok_or_else(|| {
                Error::invalid(
                    "algorithm",
                    format!(
                        "unknown {:?}; known: {}",
                        params.name(),
                        self.names().join(", ")
                    ),
                )
            })?;
        Ok((entry, params))
    }

    /// Builds every registered algorithm with its default parameters.
    ///
    /// # Errors
    /// As [`Registry::build`].
    pub fn build_all(&self, defaults: Defaults) -> Result<Vec<Box<dyn SparseAllreduce<E>>>> {
        self.entries
            .iter()
            .map(|e| self.build(&e.name, defaults))
            .collect()
    }

    /// `--help` text: one line per algorithm, its parameters and what it
    /// is.
    pub fn help(&self) -> String {
        self.entries
            .iter()
            .map(|e| {
                let params = if e.params.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", e.params)
                };
                format!("  {}{params}: {}\n", e.name, e.help)
            })
            .collect()
    }
}

impl<E: Element> Auto<E> {
    /// A planner over the built-in lossless algorithms
    /// ([`Registry::auto_candidates`]) for a network of `alpha` seconds per
    /// message and `beta` seconds per 32-bit word.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a negative or non-finite `alpha` or
    /// `beta`.
    pub fn lossless(alpha: f64, beta: f64) -> Result<Self> {
        Ok(
            Self::new(alpha, beta, lossless_candidates(&Registry::builtin())?)?
                .with_default_candidates(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Registry;
    use crate::entry::entry_id;

    /// The entry ids derive from the names: every built-in algorithm's
    /// (the planner's included) is distinct, so ranks that run different
    /// algorithms disagree on the first field.
    #[test]
    fn builtin_entry_ids_are_distinct() {
        let registry = Registry::<f32>::builtin();
        let mut ids: Vec<u64> = registry.names().into_iter().map(entry_id).collect();
        let n = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), n, "{:?}", registry.names());
        assert!(n >= 14);
    }
}
