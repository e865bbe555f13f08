//! The [`Registry`]: names to algorithms, the built-in ones one line each
//! ([`Registry::builtin`]) and any a user adds. `sparse-bench`, the tests,
//! the planner and the collective suite read the algorithms from here.

use crate::Auto;
use crate::algorithm::{Catalog, Defaults, Params, Registered, SparseAllreduce, is_name};
use crate::plan::lossless_candidates;
use sparse_core::{Element, Error, Result};
use std::fmt;

impl<E: Element> Catalog<E> for Registry<E> {
    fn build(&self, spec: &str, defaults: Defaults) -> Result<Box<dyn SparseAllreduce<E>>> {
        Registry::build(self, spec, defaults)
    }
    fn auto_candidates(&self) -> Vec<&str> {
        Registry::auto_candidates(self)
    }
}

type Builder<E> = Box<
    dyn Fn(&mut Params, Defaults, &Registry<E>) -> Result<Box<dyn SparseAllreduce<E>>>
        + Send
        + Sync,
>;

/// One entry of a [`Registry`].
pub struct Entry<E> {
    name: String,
    params: String,
    help: String,
    planned: bool,
    suite: Option<fn(usize) -> Vec<String>>,
    build: Builder<E>,
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
    /// Whether the planner chooses among it by default
    /// ([`Registered::PLANNED`]; `false` for [`Registry::register`]ed ones).
    pub fn planned(&self) -> bool {
        self.planned
    }
    /// The specs the collective suite runs on `p` ranks
    /// ([`Registered::suite_specs`]; the name alone for
    /// [`Registry::register`]ed ones).
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
/// user registers. `sparse-bench`, the tests and the planner all read the
/// algorithms from here.
#[derive(Debug)]
pub struct Registry<E> {
    entries: Vec<Entry<E>>,
}

impl<E: Element> Default for Registry<E> {
    fn default() -> Self {
        Self::builtin()
    }
}

impl<E: Element> Registry<E> {
    /// A registry with no algorithm.
    pub fn empty() -> Self {
        Self {
            entries: Vec::new(),
        }
    }

    /// Every built-in algorithm, one line each.
    pub fn builtin() -> Self {
        use crate::*;
        let mut r = Self::empty();
        r.add::<TopkA>();
        r.add::<TopkDsa>();
        r.add::<SsarRecursiveDouble>();
        r.add::<SsarSplitAllgather>();
        r.add::<DsarSplitAllgather>();
        r.add::<ZenBalancedParallelism>();
        r.add::<OmniReduceBlocks>();
        r.add::<Gtopk>();
        r.add::<OkTopk<E>>();
        r.add::<Spardl>();
        r.add::<SpardlRsag>();
        r.add::<SpardlBsag>();
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
            planned: A::PLANNED,
            suite: Some(A::suite_specs),
            build: Box::new(|p, d, registry| {
                Ok(Box::new(A::build(p, d, registry)?) as Box<dyn SparseAllreduce<E>>)
            }),
        })
        .expect("built-in names are distinct");
    }

    /// Registers an algorithm under `name`: `build` gets the parsed
    /// parameters (take the ones it knows; any left over is an error) and
    /// the defaults.
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
        self.insert(Entry {
            name: name.into(),
            params: params.into(),
            help: help.into(),
            planned: false,
            suite: None,
            build: Box::new(move |p, d, _| build(p, d)),
        })
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
            .filter(|e| e.planned)
            .map(|e| e.name.as_str())
            .collect()
    }

    /// Builds `spec` (`name` or `name:key=value,...`).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for an unknown name (listing the known
    /// ones), an unknown parameter or a bad value.
    pub fn build(&self, spec: &str, defaults: Defaults) -> Result<Box<dyn SparseAllreduce<E>>> {
        let mut params = Params::parse(spec)?;
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
        let algo = (entry.build)(&mut params, defaults, self)?;
        params.finish()?;
        Ok(algo)
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
