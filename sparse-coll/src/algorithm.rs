//! One interface for every sparse allreduce ([`SparseAllreduce`]), the
//! parameters of a name (`spardl_bsag:k=40,d=2`), and what an algorithm
//! says to join a registry ([`Registered`]); the [`crate::Registry`]
//! (`registry.rs`) turns names into algorithms.
//!
//! Adding a built-in algorithm is one file (its collective, a type that
//! implements [`SparseAllreduce`] and [`Registered`]) plus one line in
//! [`Registry::builtin`](crate::Registry::builtin). A user's own algorithm implements
//! [`SparseAllreduce`] outside this crate (with the framing helpers of
//! [`crate::wire`]) and joins a registry with [`Registry::register`](crate::Registry::register); the
//! [`crate::Auto`] planner and the collective suite
//! (`sparse_coll::testing`) then treat it like a built-in one.

use crate::{Admission, Entered, Profile, Reduced, Transport};
use sparse_core::cost::Cost;
use sparse_core::state::State;
use sparse_core::{Element, Error, Result, SparseVec};
use std::collections::BTreeMap;
use std::fmt;

/// A sparse allreduce with the state it keeps across calls.
///
/// Every rank calls [`SparseAllreduce::allreduce`] (or
/// [`SparseAllreduce::allreduce_into`]) with its own input, the
/// same algorithm and parameters. The outcome follows the contract of
/// [`Reduced`]: `result` bitwise identical on every rank; lossless
/// algorithms return the exact sum and drop nothing; lossy ones return in
/// `dropped` what this rank keeps, so that the inputs sum to `result` plus
/// every rank's `dropped` exactly.
///
/// A call is two steps, which an implementation writes and the provided
/// [`SparseAllreduce::allreduce_into`] runs: the entry round
/// ([`SparseAllreduce::enter`]), whose errors every rank shares, and the
/// body ([`SparseAllreduce::body`]), after which a failure abandons the
/// transport. The body takes the [`Entered`] only an entry round makes.
///
/// Object safe: planners and benches hold `Box<dyn SparseAllreduce<E>>`.
pub trait SparseAllreduce<E: Element>: Send {
    /// The registry name (without parameters), e.g. `"spardl_bsag"`.
    fn name(&self) -> String;
    /// The parameters as a registry would parse them back (`"k=40,d=2"`;
    /// empty when there are none).
    fn params(&self) -> String {
        String::new()
    }
    /// Whether the result is always the exact sum.
    fn lossless(&self) -> bool;
    /// The predicted cost of one call on an input of this profile: the
    /// rounds and the 32-bit words received by the busiest rank (the entry
    /// agreement excluded). Planners choose by it.
    fn cost(&self, prof: &Profile) -> Cost;
    /// The paper's own formula for this profile, where it counts something
    /// else than [`SparseAllreduce::cost`] (a critical path, a bound);
    /// `None` where the prediction is the paper's formula.
    fn paper_cost(&self, _prof: &Profile) -> Option<Cost> {
        None
    }
    /// For a planner: the name of the algorithm its last call ran (`None`
    /// for everything else).
    fn ran(&self) -> Option<String> {
        None
    }
    /// Returns the algorithm to its state before its first call (its
    /// parameters kept). A call that fails part way may have advanced the
    /// state of some ranks and not of others (a call counter, reused
    /// thresholds, a planner's choice), which puts the ranks out of step at
    /// every later call; after a failure every rank calls `reset` (the
    /// trainer does after a failed step) and the next call is a first call
    /// everywhere. The default does nothing: for algorithms without state
    /// across calls, and for those whose state every rank derives alike
    /// from the results alone.
    fn reset(&mut self) {}
    /// What this instance keeps across calls, as data
    /// ([`sparse_core::state`]): a fresh instance of the same spec given it
    /// by [`SparseAllreduce::load_state`] makes the same next calls, bit
    /// for bit, as this one. State that depends on the number of ranks or
    /// on one rank's data has [`sparse_core::state::Scope::Local`], so that
    /// a reshard drops it. Buffers kept only for speed are not state. The
    /// default, for algorithms whose [`SparseAllreduce::reset`] does
    /// nothing: the stateless state.
    ///
    /// # Errors
    /// None by default.
    fn save_state(&self) -> Result<State> {
        Ok(State::stateless())
    }
    /// Restores what [`SparseAllreduce::save_state`] saved. Everything is
    /// checked before anything is assigned: on an error the instance is
    /// unchanged. The state saved right after [`SparseAllreduce::reset`]
    /// loads as `reset`. The default accepts only the stateless state.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming the kind and the entry that disagrees.
    fn load_state(&mut self, state: &State) -> Result<()> {
        state.expect_stateless(&self.name())
    }
    /// The local half of a call's entry round, where that round is only
    /// the agreement ([`crate::wire::admit`]): the input and this rank's
    /// readiness checked (its parameters, allocations made before the
    /// call) and the fields every rank must agree on, without
    /// communicating. An algorithm that admits its calls so can enter
    /// them jointly with others, one round for them all
    /// ([`crate::allreduce_jointly`]). `None` (the default): the call's
    /// entry round is more than the agreement (a planner's profile) and
    /// runs in [`SparseAllreduce::enter`], which the algorithm then
    /// implements. Whether it returns `Some` must not depend on the
    /// input or the rank (a joint round counts the calls it admits and
    /// fails on every rank where they differ).
    fn admit(&mut self, _t: &dyn Transport, _v: &SparseVec<E>) -> Option<Admission> {
        None
    }
    /// The entry round of a call: checks the input and this rank's
    /// readiness (its parameters, allocations made before the call), and
    /// every rank agrees on the algorithm, the dimension, the element type
    /// and the parameters ([`crate::wire::enter`]). An error here reaches
    /// every rank at the same point of the same call, so the transport
    /// stays usable: it never abandons it. The default is
    /// [`SparseAllreduce::admit`]'s admission agreed in a round of its own
    /// ([`Admission::enter`]); an algorithm implements one of the two
    /// (without either, every call is [`Error::InvalidParameter`] on every
    /// rank).
    ///
    /// # Errors
    /// This rank's error, [`Error::PeerError`], [`Error::Disagreement`];
    /// transport errors.
    fn enter(&mut self, t: &mut dyn Transport, v: &SparseVec<E>) -> Result<Entered> {
        match self.admit(&*t, v) {
            Some(a) => a.enter(t),
            None => Err(Error::invalid(
                "algorithm",
                format!(
                    "{} implements neither `admit` nor `enter` of `SparseAllreduce`",
                    self.name()
                ),
            )),
        }
    }
    /// Enters this call with this rank not ready: `e` in place of its
    /// readiness, so that the call fails at its entry on every rank (this
    /// one with `e`, the others with [`Error::PeerError`] naming it) and
    /// the transport stays usable, while the other ranks call
    /// [`SparseAllreduce::allreduce`] as usual. A composite collective
    /// whose rank learned of a failure elsewhere fails its part's call so
    /// (the hierarchical allreduce does), where skipping the call would
    /// leave its peers waiting. Returns `Ok(())` once the call failed on
    /// every rank. The default is [`SparseAllreduce::admit`]'s admission
    /// failing ([`Admission::failing`]) in its own round; an algorithm
    /// that implements [`SparseAllreduce::enter`] instead overrides it
    /// (the planner does), else its calls cannot be failed so.
    ///
    /// # Errors
    /// `e` where the call could not be failed so (peers may wait: the
    /// caller abandons the transport); the round's transport errors (a
    /// timeout, a lost peer, a corrupt message).
    fn enter_failing(&mut self, t: &mut dyn Transport, v: &SparseVec<E>, e: Error) -> Result<()> {
        let Some(a) = self.admit(&*t, v) else {
            return Err(e);
        };
        crate::failure::Failure::failed_entry(a.failing(e).enter(t))
    }
    /// The rest of a call, once every rank has entered, with its failures
    /// told apart: its result and dropped part into `out` (contents
    /// replaced; where the algorithm builds its result in place, its
    /// allocations reused). The outer error may leave peers waiting on
    /// this rank (the call abandons the transport on it); the inner one is
    /// a failure every rank reached at the same point with no message left
    /// unread (the transport stays usable, and the next call works). An
    /// algorithm whose body cannot fail alike on every rank returns
    /// `Ok(Ok(()))` or its outer error (`?` works as usual); those whose
    /// body can fail so return the inner error: DSAR with QSGD (a
    /// partition sum it cannot scale), SparDL and recursive doubling with a
    /// lossy value codec (a partial sum it cannot carry, told to every rank
    /// in failure frames), the hierarchical allreduce (a part's call that
    /// failed on its group), the planner (its candidate's). Its traffic is
    /// not the body's to count: [`SparseAllreduce::allreduce_into`] records
    /// it in `out.traffic`.
    ///
    /// # Errors
    /// The algorithm's errors (a corrupt message, a failed peer, ...).
    fn agreed_body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        entered: Entered,
        out: &mut Reduced<E>,
    ) -> Result<Result<()>>;
    /// [`SparseAllreduce::agreed_body`] with the two kinds of failure as
    /// one, for a caller that does not tell them apart (a collective that
    /// calls another's body inside its own).
    ///
    /// # Errors
    /// As [`SparseAllreduce::agreed_body`].
    fn body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        entered: Entered,
        out: &mut Reduced<E>,
    ) -> Result<()> {
        self.agreed_body(t, v, entered, out)?
    }
    /// The body run as a call runs it, once every rank has entered
    /// ([`SparseAllreduce::allreduce_into`] and
    /// [`crate::allreduce_jointly`] call it):
    /// [`SparseAllreduce::agreed_body`] inside [`crate::guard`], which
    /// abandons the transport on an outer error, so that no peer waits on
    /// this rank, and returns an inner one with the transport usable.
    ///
    /// # Errors
    /// As [`SparseAllreduce::body`].
    fn guarded_body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        entered: Entered,
        out: &mut Reduced<E>,
    ) -> Result<()> {
        crate::guard(t, |t| self.agreed_body(t, v, entered, out))?
    }
    /// One allreduce of `v` into `out`, which a caller keeps across calls
    /// (start from [`Reduced::default`]): [`SparseAllreduce::enter`], then
    /// [`SparseAllreduce::guarded_body`], the body inside [`crate::guard`],
    /// which abandons the transport when the body fails, so that no peer
    /// waits on this rank (but not for a failure every rank agreed on,
    /// [`SparseAllreduce::agreed_body`]). On an error `out` holds no valid result. Where the algorithm
    /// builds its result in place (TopkA with raw values;
    /// SSAR_Split_allgather, TopkDSA and DSAR) `out`'s allocations are
    /// reused, so a training loop's collective allocates nothing once
    /// warm. It records the call's traffic: `out.traffic` the body's (what
    /// the papers' formulas count), `out.entry` the entry round's, so that
    /// `out.total()` is what the transport counted during the call.
    ///
    /// # Errors
    /// As [`SparseAllreduce::enter`] and [`SparseAllreduce::body`]; every
    /// rank returns one when any rank fails.
    fn allreduce_into(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        out: &mut Reduced<E>,
    ) -> Result<()> {
        let before = t.traffic();
        let entered = self.enter(t, v)?;
        self.guarded_body(t, v, entered, out)?;
        out.account(before, entered, t.traffic());
        Ok(())
    }
    /// [`SparseAllreduce::allreduce_into`] on a fresh outcome.
    ///
    /// # Errors
    /// As [`SparseAllreduce::allreduce_into`].
    fn allreduce(&mut self, t: &mut dyn Transport, v: &SparseVec<E>) -> Result<Reduced<E>> {
        let mut out = Reduced::default();
        self.allreduce_into(t, v, &mut out)?;
        Ok(out)
    }
}

impl<E: Element> fmt::Debug for dyn SparseAllreduce<E> + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.spec())
    }
}

impl<E: Element> dyn SparseAllreduce<E> + '_ {
    /// `name:params`, or the name alone without parameters: what
    /// [`Registry::build`](crate::Registry::build) parses back into the same algorithm.
    pub fn spec(&self) -> String {
        let p = self.params();
        if p.is_empty() {
            self.name()
        } else {
            format!("{}:{p}", self.name())
        }
    }
}

/// The parameters of a name: `name:key=value,key=value`. Builders take the
/// values they know with [`Params::take`]; [`Registry::build`](crate::Registry::build) rejects any
/// left over, so a misspelled key is an error, not a silent default.
#[derive(Debug, Clone, Default)]
pub struct Params {
    name: String,
    values: BTreeMap<String, String>,
}

impl Params {
    /// Parses `name` or `name:key=value,...`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for an empty name, a pair without `=`, or
    /// a key given twice.
    pub fn parse(spec: &str) -> Result<Self> {
        let (name, rest) = spec.split_once(':').unwrap_or((spec, ""));
        let name = name.trim();
        if name.is_empty() {
            return Err(Error::invalid("algorithm", format!("no name in {spec:?}")));
        }
        let mut values = BTreeMap::new();
        for pair in rest.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = pair.split_once('=').ok_or_else(|| {
                Error::invalid(
                    "algorithm",
                    format!("{pair:?} in {spec:?} is not key=value"),
                )
            })?;
            if values
                .insert(k.trim().to_string(), v.trim().to_string())
                .is_some()
            {
                return Err(Error::invalid(
                    "algorithm",
                    format!("{k:?} given twice in {spec:?}"),
                ));
            }
        }
        Ok(Self {
            name: name.to_string(),
            values,
        })
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Takes parameter `key` parsed as `T`, `None` when absent.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming the algorithm and the key if the
    /// value does not parse.
    pub fn take<T: std::str::FromStr>(&mut self, key: &str) -> Result<Option<T>>
    where
        T::Err: fmt::Display,
    {
        match self.values.remove(key) {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|e| {
                Error::invalid("algorithm", format!("{}: {key}={v:?}: {e}", self.name))
            }),
        }
    }

    /// Takes the `values` parameter (the wire values of the collectives
    /// that carry them) and resolves its name in `catalog`
    /// ([`Catalog::values`]: the built-in codecs and any the registry
    /// added); raw when absent.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for an unknown codec name.
    pub fn take_values<E: Element>(
        &mut self,
        catalog: &dyn Catalog<E>,
    ) -> Result<crate::values::WireValues<E>> {
        match self.take::<String>("values")? {
            None => Ok(crate::values::WireValues::raw()),
            Some(s) => catalog.values(&s),
        }
    }

    /// Takes the budget of a lossy algorithm: `k=` or `density=` (not
    /// both), else the default's ([`Defaults::budget`]).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming the algorithm for `k=0`, a
    /// density outside `(0, 1]`, both given, or neither given nor
    /// defaulted.
    pub fn take_budget(&mut self, defaults: Defaults) -> Result<Budget> {
        let k = self.take::<usize>("k")?;
        let density = self.take::<f64>("density")?;
        let name = &self.name;
        let with_name = |e: Error| match e {
            Error::InvalidParameter { name: what, reason } => Error::InvalidParameter {
                name: what,
                reason: format!("{name}: {reason}"),
            },
            e => e,
        };
        match (k, density) {
            (Some(_), Some(_)) => Err(Error::invalid(
                "budget",
                format!("{name}: give density= or k=, not both"),
            )),
            (Some(k), None) => Budget::k(k).map_err(with_name),
            (None, Some(d)) => Budget::density(d).map_err(with_name),
            (None, None) => defaults.budget.ok_or_else(|| {
                Error::invalid(
                    "budget",
                    format!(
                        "{name} is lossy and has no budget: give density= or k= \
                         (or a budget in its Defaults)"
                    ),
                )
            }),
        }
    }

    pub(crate) fn finish(&self) -> Result<()> {
        match self.values.keys().next() {
            None => Ok(()),
            Some(k) => Err(Error::invalid(
                "algorithm",
                format!("{}: unknown parameter {k:?}", self.name),
            )),
        }
    }
}

pub use sparse_core::budget::Budget;

/// What every builder may use besides the name's own parameters: the
/// budget of the lossy algorithms when the name gives none (`k=` or
/// `density=` override it). [`Defaults::lossless`] has none: a lossy
/// algorithm then needs its own in the name, or building it is an error.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Defaults {
    budget: Option<Budget>,
}

impl Defaults {
    /// No default budget: lossless algorithms build, a lossy one only with
    /// `k=` or `density=` in its name.
    pub fn lossless() -> Self {
        Self { budget: None }
    }

    /// Lossy algorithms keep `density` of their input's dimension unless
    /// their name says otherwise.
    ///
    /// # Errors
    /// As [`Budget::density`].
    pub fn density(density: f64) -> Result<Self> {
        Ok(Self::with_budget(Budget::density(density)?))
    }

    /// Lossy algorithms keep `k` entries unless their name says otherwise.
    ///
    /// # Errors
    /// As [`Budget::k`].
    pub fn k(k: usize) -> Result<Self> {
        Ok(Self::with_budget(Budget::k(k)?))
    }

    /// Lossy algorithms keep `budget` unless their name says otherwise.
    pub fn with_budget(budget: Budget) -> Self {
        Self {
            budget: Some(budget),
        }
    }

    /// The default budget, if any.
    pub fn budget(&self) -> Option<Budget> {
        self.budget
    }
}

/// What a built-in style algorithm promises of its calls, besides its
/// result, for the collective suite (`sparse_coll::testing`) to check: the
/// rounds and bytes of a first call and the bound on its result. Apart
/// from [`SparseAllreduce`], which every user implements: only a
/// [`Registered`] algorithm states them (every method has a default,
/// `None`: no promise), and the registry builds an instance to ask
/// ([`crate::Registry::promises`]).
pub trait Promises<E: Element> {
    /// The rounds rank `r` of `p` takes in a first call of this instance
    /// (the entry agreement excluded), where they follow from `p` and `r`
    /// alone; `None` (the default) where they do not. The collective suite
    /// (`sparse_coll::testing`) checks them.
    fn expected_rounds(&self, _p: usize, _r: usize) -> Option<u64> {
        None
    }
    /// The bytes rank `r` receives in a first call on the ranks' inputs
    /// `ins` (by rank), where they follow from the inputs alone; `None`
    /// (the default) where they do not. The collective suite checks them.
    fn expected_bytes(&self, _ins: &[SparseVec<E>], _r: usize) -> Option<u64> {
        None
    }
    /// The most entries a result of dimension `dim` may hold (a lossy
    /// algorithm's budget); `None` (the default): no bound. The collective
    /// suite checks it.
    fn max_result_entries(&self, _dim: usize) -> Option<usize> {
        None
    }
}

/// A built-in algorithm's place in the registry: its name, its parameters,
/// the facts the suites, `sparse-bench` and the planner read from the
/// registry ([`Facts`]), and how to build it from its parameters.
pub trait Registered<E: Element>: SparseAllreduce<E> + Promises<E> + Sized + 'static {
    /// The registry name.
    const NAME: &'static str;
    /// The parameters it takes, for `--help` (`"k, d (teams, default: ...)"`).
    const PARAMS: &'static str;
    /// One line for `--help`.
    const HELP: &'static str;
    /// Whether, with its default parameters, its result is always the
    /// exact sum ([`SparseAllreduce::lossless`] of an instance built from
    /// the name alone; the registry's tests check the two agree). Lossy
    /// ones return what they cut in `dropped`.
    const LOSSLESS: bool;
    /// Whether it keeps state across calls that its next calls depend on
    /// (it implements [`SparseAllreduce::save_state`]: thresholds, a call
    /// counter, the state of its parts). `false` by default.
    const STATEFUL: bool = false;
    /// Whether it takes a budget ([`Params::take_budget`]: `k=` or
    /// `density=`, else the [`Defaults`]' budget). `false` by default.
    const BUDGET: bool = false;
    /// Whether, once warm (after a few calls on the same input), a call
    /// allocates nothing that grows with the data: `mpi-suite warm` holds
    /// it to that under MPI. `false` (no promise) by default.
    const WARM: bool = false;
    /// Whether the planner ([`crate::Auto`]) chooses among it by default
    /// ([`Registry::auto_candidates`](crate::Registry::auto_candidates)): a lossless algorithm whose result
    /// is the exact sparse sum. `false` by default.
    const PLANNED: bool = false;
    /// Whether it takes the `values` parameter ([`Params::take_values`]):
    /// the collective suite then runs it with every codec of the registry
    /// it tests, a user's own included. `false` by default.
    const VALUES: bool = false;
    /// Builds it from the parameters, within `catalog` (the registry it
    /// is built from: the planner builds its candidates there; the others
    /// ignore it).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a bad value.
    fn build(params: &mut Params, defaults: Defaults, catalog: &dyn Catalog<E>) -> Result<Self>;
    /// The specs the collective suite runs on `p` ranks
    /// (`sparse_coll::testing::algorithms`): by default the name alone,
    /// with its default parameters.
    fn suite_specs(p: usize) -> Vec<String> {
        let _ = p;
        vec![Self::NAME.to_string()]
    }
}

/// What a registry entry says of its algorithm besides its name and
/// parameters: [`Registered`]'s constants for one added with
/// [`Registry::add`](crate::Registry::add), or given to
/// [`Registry::register_with`](crate::Registry::register_with) (all
/// `false` for [`Registry::register`](crate::Registry::register)). The
/// suites and the MPI suite read them, so a registered algorithm is tested
/// by every check its facts call for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Facts {
    /// [`Registered::LOSSLESS`].
    pub lossless: bool,
    /// [`Registered::STATEFUL`].
    pub stateful: bool,
    /// [`Registered::BUDGET`].
    pub budget: bool,
    /// [`Registered::WARM`].
    pub warm: bool,
    /// [`Registered::PLANNED`].
    pub planned: bool,
    /// [`Registered::VALUES`].
    pub values: bool,
}

impl Facts {
    /// The facts `A` states.
    pub fn of<E: Element, A: Registered<E>>() -> Self {
        Self {
            lossless: A::LOSSLESS,
            stateful: A::STATEFUL,
            budget: A::BUDGET,
            warm: A::WARM,
            planned: A::PLANNED,
            values: A::VALUES,
        }
    }
}

/// What a builder may ask of the registry it is built from
/// ([`Registered::build`]): other algorithms by name, and the planner's
/// default candidates. [`Registry`](crate::Registry) is one.
pub trait Catalog<E: Element> {
    /// Builds `spec` (`name` or `name:key=value,...`).
    ///
    /// # Errors
    /// As [`Registry::build`](crate::Registry::build).
    fn build(&self, spec: &str, defaults: Defaults) -> Result<Box<dyn SparseAllreduce<E>>>;
    /// The names the planner chooses among by default
    /// ([`Registry::auto_candidates`](crate::Registry::auto_candidates)).
    fn auto_candidates(&self) -> Vec<&str>;
    /// The value codec named `name` ([`Params::take_values`]): by default
    /// the built-in ones ([`crate::wire::WireValues::parse`]); a
    /// [`Registry`](crate::Registry) also knows the codecs added to it
    /// ([`Registry::add_values`](crate::Registry::add_values)).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for an unknown name.
    fn values(&self, name: &str) -> Result<crate::values::WireValues<E>> {
        crate::values::WireValues::parse(name)
    }
}

/// Whether `s` is an algorithm's name: non-empty, of `[a-z0-9_]`.
pub(crate) fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Saves each of `parts` as the child `{prefix}{i}` of `s` (the state of
/// an algorithm made of others).
pub(crate) fn save_parts<E: Element>(
    s: &mut State,
    prefix: &str,
    parts: &[&dyn SparseAllreduce<E>],
) -> Result<()> {
    for (i, p) in parts.iter().enumerate() {
        s.put_child(format!("{prefix}{i}"), p.save_state()?);
    }
    Ok(())
}

/// Loads the children `{prefix}{i}` of `s` into `parts`, all or none: the
/// number of children must be the number of parts, and where one part
/// refuses its state the parts loaded before it get their previous state
/// back, so that an error changes nothing.
pub(crate) fn load_parts<E: Element>(
    s: &State,
    prefix: &str,
    parts: &mut [&mut (dyn SparseAllreduce<E> + 'static)],
) -> Result<()> {
    let saved = s
        .children()
        .filter(|(n, _)| {
            n.strip_prefix(prefix)
                .is_some_and(|i| i.parse::<usize>().is_ok())
        })
        .count();
    if saved != parts.len() && s.resharded() {
        // A layout of parts that depends on the rank count (the
        // hierarchical allreduce's shards): rebuilt as on a first call.
        parts.iter_mut().for_each(|p| p.reset());
        return Ok(());
    }
    if saved != parts.len() {
        return Err(Error::corrupt(
            "training state",
            format!(
                "{}: {saved} saved parts {prefix}*, this instance has {}",
                s.kind(),
                parts.len()
            ),
        ));
    }
    let undo = parts
        .iter()
        .map(|p| p.save_state())
        .collect::<Result<Vec<State>>>()?;
    for i in 0..parts.len() {
        if let Err(e) = s
            .child(&format!("{prefix}{i}"))
            .and_then(|c| parts[i].load_state(c))
        {
            for (p, u) in parts[..i].iter_mut().zip(&undo) {
                p.load_state(u)?;
            }
            return Err(e);
        }
    }
    Ok(())
}
