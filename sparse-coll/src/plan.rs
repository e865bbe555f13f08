//! The [`Auto`] planner, which runs whichever of its candidates the cost
//! model finds cheapest for a call's [`Profile`].

use crate::algorithm::{
    Catalog, Defaults, Params, Promises, Registered, SparseAllreduce, is_name, load_parts,
    save_parts,
};
use crate::entry::entry_id;
use crate::profile::Profile;
use crate::transport::agree::agree_sharing;
use crate::{Admission, Entered, Reduced, Transport};
use sparse_core::cost::Cost;
use sparse_core::state::{Scope, State};
use sparse_core::{Element, Error, Result, SparseVec};
/// The network constants [`Auto`] assumes when none are given: 5 us per
/// message and 0.4 ns per 32-bit word (10 GB/s), a fast cluster
/// interconnect.
pub const AUTO_ALPHA: f64 = 5e-6;
/// See [`AUTO_ALPHA`].
pub const AUTO_BETA: f64 = 4e-10;

/// The planner: on each call it picks, among its candidates (any
/// [`SparseAllreduce`], a user's own included), the one with the least
/// modelled time `alpha * rounds + beta * words` ([`SparseAllreduce::cost`])
/// for this call's profile, and runs it.
///
/// The profile must be the same on every rank, or ranks would pick
/// different algorithms. A profiling call therefore starts with a Bruck
/// allgather of every rank's entry count (`ceil(lg P)` rounds of a few
/// bytes, not counted in the returned traffic), which gives `k_max` and
/// `k_sum` exactly. That round is an entry agreement too: it carries the
/// planner's `every` and call counter, so ranks out of step (one
/// profiling while another runs its last choice) get
/// [`Error::Disagreement`] on every rank and the transport stays usable. The union of the index sets is only known after the
/// allreduce: it is estimated from the densification ratio of the last
/// calls (the result's entries over `k_sum`, identical on every rank),
/// averaged with weight 1/2 on the newest, as Zen profiles sparsity at run
/// time. Before the first call the planner assumes no overlap (the worst
/// case for sparse algorithms). Ties go to the earlier candidate.
///
/// A choice made on an estimate is revised once the call has measured
/// the overlap: after each profiling call the planner chooses again, on
/// the same entry counts with the densification just learned, and the
/// calls up to the next profile run that choice. So a first call that
/// assumed no overlap where the ranks' indices overlap runs its assumed
/// choice once, and the second call already runs the one the cost model
/// picks for the measured overlap. Both inputs of the revision (the
/// profile's counts from the allgather, the result's entries of a lossless
/// call) are the same on every rank, so every rank revises alike.
///
/// The profiling round costs a few small messages, which is a large share
/// of a call on small inputs. So the planner profiles and chooses on the
/// first call and then every `every` calls (16 by default,
/// [`Auto::reprofile_every`]), and runs the same choice in between: a
/// training step's sparsity moves slowly. The call counter is the same on
/// every rank, so all ranks profile on the same calls.
pub struct Auto<E> {
    alpha: f64,
    beta: f64,
    candidates: Vec<Box<dyn SparseAllreduce<E>>>,
    densification: Option<f64>,
    /// The choice the calls between profiles run (revised after each
    /// profiling call, [`Auto`]'s doc).
    last: Option<usize>,
    /// The candidate the last call ran.
    ran: Option<usize>,
    /// The candidate the entered call runs, and its profile when it
    /// profiled.
    pending: Option<(usize, Option<Profile>)>,
    /// Whether the candidates are its registry's defaults
    /// ([`crate::Registry::auto_candidates`]), which its spec then leaves
    /// out.
    default_candidates: bool,
    calls: u64,
    every: u64,
}

impl<E: Element> std::fmt::Debug for Auto<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auto")
            .field("alpha", &self.alpha)
            .field("beta", &self.beta)
            .field("candidates", &self.candidates)
            .field("densification", &self.densification)
            .field("last", &self.last)
            .field("ran", &self.ran)
            .finish()
    }
}

impl<E: Element> Auto<E> {
    /// A planner over `candidates` (mixing lossless and lossy ones is
    /// allowed; the choice then also decides what is dropped).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for no candidates or a bad `alpha`,
    /// `beta`.
    pub fn new(
        alpha: f64,
        beta: f64,
        candidates: Vec<Box<dyn SparseAllreduce<E>>>,
    ) -> Result<Self> {
        for (name, x) in [("alpha", alpha), ("beta", beta)] {
            if !(x.is_finite() && x >= 0.0) {
                return Err(Error::invalid(
                    name,
                    format!("{x} is not a finite non-negative time"),
                ));
            }
        }
        if candidates.is_empty() {
            return Err(Error::invalid("candidates", "none given"));
        }
        Ok(Self {
            alpha,
            beta,
            candidates,
            densification: None,
            last: None,
            ran: None,
            pending: None,
            default_candidates: false,
            calls: 0,
            every: 16,
        })
    }

    /// The same planner, its candidates marked as its registry's defaults
    /// (its spec leaves them out).
    pub(crate) fn with_default_candidates(mut self) -> Self {
        self.default_candidates = true;
        self
    }

    /// Profile and choose every `every` calls (1: on every call).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for 0.
    pub fn reprofile_every(mut self, every: u64) -> Result<Self> {
        if every == 0 {
            return Err(Error::invalid("every", "must be at least 1"));
        }
        self.every = every;
        Ok(self)
    }

    /// The candidates.
    pub fn candidates(&self) -> &[Box<dyn SparseAllreduce<E>>] {
        &self.candidates
    }

    /// The candidate the last call ran (its index in
    /// [`Auto::candidates`]).
    pub fn last_choice(&self) -> Option<usize> {
        self.ran
    }

    /// The name of the candidate the last call ran.
    pub fn last_name(&self) -> Option<String> {
        self.ran.map(|i| self.candidates[i].name())
    }

    /// The candidate the next call runs: the held choice where the next
    /// call does not profile, else the choice for `prof`'s entry counts
    /// with the planner's own estimate of the union (what a profiling call
    /// computes), not `prof.union`.
    pub fn next_choice(&self, prof: &Profile) -> usize {
        match self.last {
            Some(i) if !self.calls.is_multiple_of(self.every) => i,
            _ => self.choose(&self.estimated(
                prof.p,
                prof.n,
                prof.value_bytes,
                prof.k_max,
                prof.k_sum,
            )),
        }
    }

    /// The profile the planner would use for these entry counts.
    pub fn profile(&self, n: usize, value_bytes: usize, counts: &[usize]) -> Profile {
        let k_max = counts.iter().copied().max().unwrap_or(0);
        let k_sum: usize = counts.iter().sum();
        self.estimated(counts.len(), n, value_bytes, k_max, k_sum)
    }

    /// The profile of `p` ranks with these entry counts, the union
    /// estimated from the densification learned so far (none: no overlap).
    fn estimated(
        &self,
        p: usize,
        n: usize,
        value_bytes: usize,
        k_max: usize,
        k_sum: usize,
    ) -> Profile {
        let gamma = self.densification.unwrap_or(1.0);
        let union = ((k_sum as f64 * gamma).round() as usize)
            .clamp(k_max, k_sum.max(k_max))
            .min(n);
        Profile {
            p,
            n,
            value_bytes,
            k_max,
            k_sum,
            union,
        }
    }

    /// The candidate with the least modelled time for `prof`.
    pub fn choose(&self, prof: &Profile) -> usize {
        let mut best = (f64::INFINITY, 0);
        for (i, c) in self.candidates.iter().enumerate() {
            let time = c.cost(prof).time(self.alpha, self.beta);
            if time < best.0 {
                best = (time, i);
            }
        }
        best.1
    }
}

impl<E: Element> SparseAllreduce<E> for Auto<E> {
    /// Forgets its choice, its densification estimate and its call count,
    /// and resets every candidate: the next call profiles, as a first call
    /// does.
    fn reset(&mut self) {
        self.calls = 0;
        self.last = None;
        self.ran = None;
        self.pending = None;
        self.densification = None;
        for c in &mut self.candidates {
            c.reset();
        }
    }
    /// The call count, the last choice and the densification estimate
    /// (all from the profiles of this rank count: [`Scope::Local`]), and
    /// every candidate's state (children `cand.0`, `cand.1`, ...).
    fn save_state(&self) -> Result<State> {
        let mut s = State::new("sparse_coll::Auto", 1);
        s.put_u64("calls", Scope::Local, self.calls)
            .put_opt_u64("last", Scope::Local, self.last.map(|l| l as u64))
            .put_opt_u64(
                "densification",
                Scope::Local,
                self.densification.map(f64::to_bits),
            );
        let parts: Vec<&dyn SparseAllreduce<E>> = self.candidates.iter().map(|c| &**c).collect();
        save_parts(&mut s, "cand.", &parts)?;
        Ok(s)
    }
    fn load_state(&mut self, s: &State) -> Result<()> {
        s.expect("sparse_coll::Auto", 1)?;
        let calls = s.local_u64("calls", 0)?;
        let last = match s.local_opt_u64("last")? {
            Some(l) if (l as usize) < self.candidates.len() => Some(l as usize),
            Some(l) => {
                return Err(Error::corrupt(
                    "training state",
                    format!(
                        "sparse_coll::Auto: last choice {l} of {} candidates",
                        self.candidates.len()
                    ),
                ));
            }
            None => None,
        };
        let densification = s.local_opt_u64("densification")?.map(f64::from_bits);
        let mut parts: Vec<&mut (dyn SparseAllreduce<E> + 'static)> =
            self.candidates.iter_mut().map(|c| &mut **c).collect();
        load_parts(s, "cand.", &mut parts)?;
        self.calls = calls;
        self.last = last;
        self.ran = None;
        self.densification = densification;
        self.pending = None;
        Ok(())
    }
    fn name(&self) -> String {
        "auto".into()
    }
    /// With `candidates` (their names joined by `+`) where they are not
    /// its registry's defaults ([`crate::Registry::auto_candidates`]). Only
    /// the candidates' names: a planner over candidates built with
    /// parameters of their own ([`Auto::new`]) reports a spec that rebuilds
    /// them with their defaults.
    fn params(&self) -> String {
        let names: Vec<String> = self.candidates.iter().map(|c| c.name()).collect();
        let candidates = if self.default_candidates {
            String::new()
        } else {
            format!(",candidates={}", names.join("+"))
        };
        format!(
            "alpha={},beta={},every={}{candidates}",
            self.alpha, self.beta, self.every
        )
    }
    fn lossless(&self) -> bool {
        self.candidates.iter().all(|c| c.lossless())
    }
    /// The cost at `prof` of the candidate the next call runs
    /// ([`Auto::next_choice`]), which on a call between profiles may not be
    /// the cheapest for `prof`.
    fn cost(&self, prof: &Profile) -> Cost {
        self.candidates[self.next_choice(prof)].cost(prof)
    }
    fn ran(&self) -> Option<String> {
        self.last_name()
    }
    /// On a call between profiles, the last choice's admission (where it
    /// admits its calls), so that the call can enter jointly with others
    /// ([`crate::allreduce_jointly`]); on a profiling call `None`: its
    /// entry round shares the profile ([`Auto::enter`]).
    fn admit(&mut self, t: &dyn Transport, v: &SparseVec<E>) -> Option<Admission> {
        let i = match self.last {
            Some(i) if !self.calls.is_multiple_of(self.every) => i,
            _ => return None,
        };
        let admitted = self.candidates[i].admit(t, v)?;
        self.calls = self.calls.wrapping_add(1);
        self.pending = Some((i, None));
        Some(admitted)
    }
    /// On a profiling call the profile's round, then the chosen
    /// candidate's entry round; on the others the last choice's entry
    /// round.
    fn enter(&mut self, t: &mut dyn Transport, v: &SparseVec<E>) -> Result<Entered> {
        let (i, prof) = match self.next_entry() {
            Some(i) => (i, None),
            None => {
                let counts = self.profile_round(t, v, Ok(()))?;
                let prof = self.profile(v.dim(), E::BYTES, &counts);
                (self.choose(&prof), Some(prof))
            }
        };
        self.pending = Some((i, prof));
        self.candidates[i].enter(t, v)
    }
    /// On a profiling call the profile's round carrying `e`; on the
    /// others the last choice's call failed so.
    fn enter_failing(&mut self, t: &mut dyn Transport, v: &SparseVec<E>, e: Error) -> Result<()> {
        match self.next_entry() {
            Some(i) => self.candidates[i].enter_failing(t, v, e),
            None => crate::failure::Failure::failed_entry(self.profile_round(t, v, Err(e))),
        }
    }
    /// The chosen candidate's body (its agreed failures as its own); a
    /// profiling call then learns the densification from the result and
    /// revises the choice the calls up to the next profile run.
    fn agreed_body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        entered: Entered,
        out: &mut Reduced<E>,
    ) -> Result<Result<()>> {
        let (i, prof) = self.pending.take().expect("entered");
        if let Err(e) = self.candidates[i].agreed_body(t, v, entered, out)? {
            return Ok(Err(e));
        }
        self.ran = Some(i);
        let Some(prof) = prof else { return Ok(Ok(())) };
        if prof.k_sum > 0 && self.candidates[i].lossless() {
            let seen = out.result.nnz() as f64 / prof.k_sum as f64;
            self.densification = Some(match self.densification {
                Some(old) => 0.5 * old + 0.5 * seen,
                None => seen,
            });
        }
        // The same counts, the union now estimated from what was measured
        // (unchanged after a lossy candidate, which learns nothing: the
        // same choice then).
        let revised = self.estimated(prof.p, prof.n, prof.value_bytes, prof.k_max, prof.k_sum);
        self.last = Some(self.choose(&revised));
        Ok(Ok(()))
    }
}

impl<E: Element> Promises<E> for Auto<E> {}

impl<E: Element> Auto<E> {
    /// Counts a call that enters on its own round: `Some(i)` where it runs
    /// the last choice `i` without a profile, `None` where it profiles.
    fn next_entry(&mut self) -> Option<usize> {
        let profiling = self.calls.is_multiple_of(self.every);
        self.calls = self.calls.wrapping_add(1);
        match (profiling, self.last) {
            (false, Some(i)) => Some(i),
            _ => None,
        }
    }

    /// The profile's round, with this rank's readiness `local`: every
    /// rank's entry count. The round is an entry agreement of its own, so
    /// that ranks out of step (one profiling, another running its last
    /// choice, or planners built with another `every`) get
    /// `Error::Disagreement` on every rank, as disagreeing algorithms do.
    fn profile_round(
        &self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        local: Result<()>,
    ) -> Result<Vec<usize>> {
        let all = agree_sharing(
            t,
            &[
                ("algorithm", entry_id(Self::NAME)),
                ("every", self.every),
                ("call", self.calls - 1),
            ],
            local,
            &[v.nnz() as u64],
        )?;
        Ok(all.iter().map(|w| w[0] as usize).collect())
    }
}

impl<E: Element> Registered<E> for Auto<E> {
    const NAME: &'static str = "auto";
    const LOSSLESS: bool = true;
    const STATEFUL: bool = true;
    const PARAMS: &'static str = "alpha (s per message, default 5e-6), beta (s per word, default 4e-10), every (calls between profiles, default 16), candidates (registered names joined by +, each with its defaults; default the built-in lossless ones)";
    const HELP: &'static str =
        "the planner: the cheapest lossless algorithm by the cost model, profiled per call";
    /// The planner over candidates of `catalog` (a user's own included):
    /// the `candidates` given, each with `defaults`, else the catalog's
    /// [`crate::Registry::auto_candidates`] with their own defaults.
    fn build(params: &mut Params, defaults: Defaults, catalog: &dyn Catalog<E>) -> Result<Self> {
        let named = params.take::<String>("candidates")?;
        let default_candidates = named.is_none();
        let candidates = match named {
            Some(list) => list
                .split('+')
                .map(|name| {
                    // Plain names: a candidate's own parameters would
                    // need a syntax of their own inside this one.
                    if !is_name(name) || name == Self::NAME {
                        return Err(Error::invalid(
                            "candidates",
                            format!("{name:?} is not the name of an algorithm other than auto"),
                        ));
                    }
                    catalog.build(name, defaults)
                })
                .collect::<Result<Vec<_>>>()?,
            None => lossless_candidates(catalog)?,
        };
        let alpha = params.take("alpha")?.unwrap_or(AUTO_ALPHA);
        let beta = params.take("beta")?.unwrap_or(AUTO_BETA);
        let auto = Auto::new(alpha, beta, candidates)?;
        let auto = if default_candidates {
            auto.with_default_candidates()
        } else {
            auto
        };
        auto.reprofile_every(params.take("every")?.unwrap_or(16))
    }
    /// None: its profiling round changes the rounds the suite checks;
    /// `tests/plan.rs` checks the planner.
    fn suite_specs(_: usize) -> Vec<String> {
        Vec::new()
    }
}

/// The planner's default candidates in `catalog`
/// ([`crate::Registry::auto_candidates`]), with their defaults.
pub(crate) fn lossless_candidates<E: Element>(
    catalog: &dyn Catalog<E>,
) -> Result<Vec<Box<dyn SparseAllreduce<E>>>> {
    catalog
        .auto_candidates()
        .into_iter()
        .map(|name| catalog.build(name, Defaults::lossless()))
        .collect()
}
