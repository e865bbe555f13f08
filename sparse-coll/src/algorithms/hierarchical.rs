//! A hierarchical sparse allreduce over nodes of ranks (issue 29): a
//! collective within each node, one across nodes on each rank's shard, and
//! an allgather within each node, built on [`crate::Group`].

use crate::algorithm::{Catalog, Defaults, Params, Promises, Registered, SparseAllreduce, is_name};
use crate::dense::bruck_allgather;
use crate::entry::{Admission, admit, entry_id};
use crate::failure::Failure;
use crate::frame::{put_block, take_block};
use crate::profile::{Profile, bytes_cost};
use crate::{Entered, Group, Reduced, Transport};
use sparse_core::cost::{Cost, ceil_log2};
use sparse_core::state::State;
use sparse_core::{Element, Error, Result, SparseVec};
use std::collections::BTreeMap;

/// The registry name, from which the entry id derives.
const NAME: &str = "hierarchical";
/// The kind of its state.
const KIND: &str = "sparse_coll::Hierarchical";

/// The nodes of `p` ranks of `node` ranks each (the last one may hold
/// fewer): rank `r`'s node, its first rank and its size.
fn node_of(p: usize, node: usize, r: usize) -> (usize, usize, usize) {
    let j = r / node;
    let first = j * node;
    (j, first, node.min(p - first))
}

/// Shard `s` of `m` of a dimension `n`: `lo..hi`.
fn shard(n: usize, m: usize, s: usize) -> (usize, usize) {
    (s * n / m, (s + 1) * n / m)
}

/// A two-level sparse allreduce for ranks grouped in nodes of `node`
/// consecutive ranks (the last node may be smaller), as on GPU clusters
/// whose ranks share a fast link within a node and a slower one across:
///
/// 1. within each node, the `intra` collective sums the node's inputs
///    (every member gets the node's sum);
/// 2. the dimension is cut into `node` shards; shard `s` of each node's sum
///    is held by the node's member `s mod size`, and the holders of shard
///    `s` in every node run the `inter` collective on it (re-indexed to
///    the shard), so every rank's inter-node link carries a `1 / node`
///    share instead of one rank per node carrying everything; a member of
///    a smaller last node holds more than one shard and takes part in
///    their collectives in shard order;
/// 3. within each node, the shards' results are allgathered (a Bruck
///    allgather of one block per member).
///
/// With one node (`P <= node`) it is the intra collective alone. Lossless
/// when both collectives are; otherwise each rank's `dropped` is what its
/// intra call dropped plus what its inter calls dropped (shifted back into
/// the whole dimension), so that the result plus every rank's `dropped` is
/// the inputs' sum: exactly where the two parts' additions at a shared
/// index are exact (integer values), else within the rounding of one more
/// addition per index.
///
/// The intra step sums whole vectors (an allreduce, not a reduce-scatter):
/// within a node, links are the fast ones.
///
/// `node` may exceed any cluster (it is then one node): nothing grows with
/// it. A rank runs all its shards on one inter-node instance, each from
/// that shard's own state ([`SparseAllreduce::save_state`] and
/// [`SparseAllreduce::load_state`] between shards, only on a rank that
/// holds several), so it keeps at most `min(node, P)` states, made at the
/// calls. Registry name `hierarchical`,
/// parameters `node` (default 8), `intra` and `inter` (registry names of
/// the catalog it is built in, each with the same defaults; default
/// `ssar_split_allgather` for both).
///
/// A part's call that fails on every rank of its group (an inter-node
/// entry that refuses a node's sum that overflowed, say) fails the whole
/// call on every rank with the transport usable: the ranks that learn of
/// it fail their later inter-node calls at entry and send failure frames
/// in the node's allgather, so every rank takes part in every message.
///
/// # Errors
/// The parts' errors; [`sparse_core::Error::Disagreement`] when ranks
/// differ in `node`, `intra` or `inter`.
pub struct Hierarchical<E: Element> {
    node: usize,
    names: (String, String),
    intra: Box<dyn SparseAllreduce<E>>,
    /// The inter-node collective, one instance for every shard this rank
    /// holds: each shard's calls run from that shard's own state, so that
    /// a stateful collective keeps the state of its own group.
    inter: Box<dyn SparseAllreduce<E>>,
    /// The shard whose state `inter` holds (`None`: a fresh instance's).
    holding: Option<usize>,
    /// The states of the other shards this rank has run (a member of a
    /// smaller last node holds several), by shard: at most `min(node, P)`,
    /// made at the calls, so that nothing grows with `node` at build.
    states: BTreeMap<usize, State>,
    /// The shards of the last call, `min(node, P)` (0 before any, or with
    /// one node): every rank saves a part for each, so that the ranks'
    /// states have the same parts.
    shards: usize,
    /// A fresh inter-node instance's state: the part of a shard this rank
    /// does not hold.
    fresh: State,
}

impl<E: Element> std::fmt::Debug for Hierarchical<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{NAME}:{}", SparseAllreduce::<E>::params(self))
    }
}

impl<E: Element> Hierarchical<E> {
    /// Nodes of `node` ranks, `intra` and `inter` by registry name, built
    /// in `catalog` with `defaults`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for `node = 0`, a name that is not a
    /// plain registry name or is `hierarchical` itself; `catalog`'s errors.
    pub fn new(
        node: usize,
        intra: &str,
        inter: &str,
        defaults: Defaults,
        catalog: &dyn Catalog<E>,
    ) -> Result<Self> {
        if node == 0 {
            return Err(Error::invalid("node", "0 ranks per node"));
        }
        for name in [intra, inter] {
            if !is_name(name) || name == NAME {
                return Err(Error::invalid(
                    "algorithm",
                    format!("{NAME}: {name:?} is not a plain name of another algorithm"),
                ));
            }
        }
        let inter_part = catalog.build(inter, defaults)?;
        Ok(Self {
            node,
            names: (intra.into(), inter.into()),
            intra: catalog.build(intra, defaults)?,
            fresh: inter_part.save_state()?,
            inter: inter_part,
            holding: None,
            states: BTreeMap::new(),
            shards: 0,
        })
    }

    /// Makes `inter` hold shard `s`'s state: the state it holds is kept
    /// for its shard, and `s`'s loaded (a fresh instance's where `s` has
    /// not run yet). Nothing to do for a rank that holds one shard.
    fn hold(&mut self, s: usize) -> Result<()> {
        if self.holding == Some(s) {
            return Ok(());
        }
        if let Some(h) = self.holding.take() {
            self.states.insert(h, self.inter.save_state()?);
        }
        match self.states.remove(&s) {
            Some(state) => self.inter.load_state(&state)?,
            None => self.inter.reset(),
        }
        self.holding = Some(s);
        Ok(())
    }
}

impl<E: Element> SparseAllreduce<E> for Hierarchical<E> {
    fn name(&self) -> String {
        NAME.into()
    }
    fn params(&self) -> String {
        format!(
            "node={},intra={},inter={}",
            self.node, self.names.0, self.names.1
        )
    }
    fn lossless(&self) -> bool {
        self.intra.lossless() && self.inter.lossless()
    }
    /// The intra collective's cost on a node (`node` ranks, the union of
    /// their inputs), the inter collective's on a shard (the nodes' sums
    /// restricted to `1 / node` of the dimension) times the shards the
    /// busiest rank holds, the parts' entry rounds, and the allgather of
    /// the shards' results within the node.
    fn cost(&self, prof: &Profile) -> Cost {
        let p = prof.p.max(1);
        let m = self.node.min(p);
        let nodes = p.div_ceil(m);
        let entry = |ranks: usize| {
            // A Bruck allgather of a few words (status, algorithm,
            // dimension, element and the part's own fields).
            Cost::new(
                f64::from(ceil_log2(ranks)),
                (ranks - 1) as f64 * 8.0 * 6.0 / 4.0,
            )
        };
        let in_node = Profile {
            p: m,
            k_sum: prof.k_avg() * m,
            union: prof.union_of(m as f64).round() as usize,
            ..*prof
        };
        let plus = |a: Cost, b: Cost| Cost::new(a.rounds + b.rounds, a.words + b.words);
        let intra = plus(self.intra.cost(&in_node), entry(m));
        if nodes == 1 {
            return intra;
        }
        // The last node's members hold the most shards.
        let last = p - (nodes - 1) * m;
        let held = m.div_ceil(last) as f64;
        let shard_n = prof.n.div_ceil(m);
        let node_sum = in_node.union.div_ceil(m);
        let across = Profile {
            p: nodes,
            n: shard_n,
            k_max: node_sum,
            k_sum: node_sum * nodes,
            union: prof.union.div_ceil(m).max(node_sum),
            ..*prof
        };
        let inter = plus(self.inter.cost(&across), entry(nodes));
        let gather_entries = prof.union as f64 * (m - 1) as f64 / m as f64;
        let gather = bytes_cost(
            f64::from(ceil_log2(m)),
            4.0 * (m - 1) as f64 + prof.pair_bytes() * gather_entries,
        );
        plus(
            plus(intra, Cost::new(inter.rounds * held, inter.words * held)),
            gather,
        )
    }
    fn reset(&mut self) {
        self.intra.reset();
        self.inter.reset();
        self.holding = None;
        self.states.clear();
        self.shards = 0;
    }
    /// Its parts' states: the intra-node algorithm's (child `part.0`) and
    /// one for each shard of the last call (`part.{1 + s}` for shard `s`,
    /// `min(node, P)` of them, the same parts on every rank): the state of
    /// a shard this rank has run, a fresh instance's for the others (and
    /// any loaded). Which shards a rank drives depends on the rank count,
    /// so a reshard drops them all.
    fn save_state(&self) -> Result<State> {
        let mut s = State::new(KIND, 1);
        s.put_child("part.0", self.intra.save_state()?);
        let held = self.holding.map(|h| h + 1).unwrap_or(0);
        let loaded = self.states.keys().next_back().map_or(0, |k| k + 1);
        for shard in 0..self.shards.max(held).max(loaded) {
            let part = if self.holding == Some(shard) {
                self.inter.save_state()?
            } else {
                self.states.get(&shard).unwrap_or(&self.fresh).clone()
            };
            s.put_child(format!("part.{}", shard + 1), part);
        }
        // Which shards a rank drives, and so its parts' states, depend on
        // the rank count: a reshard drops them all.
        Ok(s.into_local())
    }
    /// Loads what [`SparseAllreduce::save_state`] saved (or an earlier
    /// version's state, which held a part for every shard of a node):
    /// every part is checked before anything is assigned. A resharded
    /// state loads as [`SparseAllreduce::reset`].
    fn load_state(&mut self, s: &State) -> Result<()> {
        s.expect(KIND, 1)?;
        if s.resharded() {
            // Every part's state depended on the rank count and was
            // dropped: a first call's, everywhere.
            self.reset();
            return Ok(());
        }
        let mut shards = BTreeMap::new();
        for (name, child) in s.children() {
            match name
                .strip_prefix("part.")
                .and_then(|i| i.parse::<usize>().ok())
            {
                Some(0) => {}
                Some(i) => {
                    shards.insert(i - 1, child.clone());
                }
                None => {
                    return Err(Error::corrupt(
                        "training state",
                        format!("{KIND}: unknown part {name:?}"),
                    ));
                }
            }
        }
        let undo = (self.intra.save_state()?, self.inter.save_state()?);
        self.intra.load_state(s.child("part.0")?)?;
        for state in shards.values() {
            if let Err(e) = self.inter.load_state(state) {
                self.intra.load_state(&undo.0)?;
                self.inter.load_state(&undo.1)?;
                return Err(e);
            }
        }
        self.inter.reset();
        self.holding = None;
        self.states = shards;
        self.shards = 0;
        Ok(())
    }
    fn admit(&mut self, _: &dyn Transport, v: &SparseVec<E>) -> Option<Admission> {
        let fields = [
            ("node", self.node as u64),
            ("intra", entry_id(&self.names.0)),
            ("inter", entry_id(&self.names.1)),
        ];
        Some(admit(NAME, v, &fields, Ok(())))
    }
    /// The inner error: a part's call that failed on every rank of its
    /// group (an inter-node entry that refused a node's sum that
    /// overflowed, say), which fails the whole call on every rank with
    /// the transport usable.
    ///
    /// A part's call that fails so leaves the transport usable, but the
    /// other groups go on. So a rank that knows of a failure
    /// (its own or a peer's) still takes part in every later call: each
    /// inter-node call it enters with that failure as its readiness
    /// ([`SparseAllreduce::enter_failing`]), so that the call fails on every holder of
    /// the shard (every node has one), and in the final allgather it sends
    /// a failure frame, so that every member of its node learns of it.
    /// Every rank ends failing ([`SparseAllreduce::enter_failing`]; a
    /// part of a user's that implements `enter` without overriding it
    /// cannot be failed so, and its failure is an outer error, as any
    /// body's).
    fn agreed_body(
        &mut self,
        t: &mut dyn Transport,
        v: &SparseVec<E>,
        _: Entered,
        out: &mut Reduced<E>,
    ) -> Result<Result<()>> {
        let (p, r, n) = (t.size(), t.rank(), v.dim());
        let m = self.node.min(p);
        let nodes = p.div_ceil(m);
        let (j, first, size) = node_of(p, m, r);
        let members: Vec<usize> = (first..first + size).collect();
        // 1. The node's sum on every member.
        let mut failure = Failure::default();
        let in_node = self
            .intra
            .allreduce(&mut Group::new(&mut *t, members.clone())?, v);
        if nodes == 1 {
            return match in_node {
                Err(e) if !Failure::is_agreed(&e) => Err(e),
                in_node => Ok(in_node.map(|red| {
                    *out = Reduced {
                        result: red.result,
                        dropped: red.dropped,
                        ..Reduced::default()
                    };
                })),
            };
        }
        let (node_sum, mut dropped) = match in_node {
            Ok(red) => (red.result, red.dropped),
            Err(e) => {
                part_failed(&mut failure, r, &members, e)?;
                (SparseVec::zeros(n)?, SparseVec::zeros(n)?)
            }
        };
        self.shards = m;
        // 2. The shards this rank holds, each across the nodes, in shard
        //    order on every rank (a member of the smaller last node holds
        //    several, and their groups meet no other rank twice).
        let local = r - first;
        let mut mine: Vec<(u32, E)> = Vec::new();
        for s in (local..m).step_by(size) {
            let (lo, hi) = shard(n, m, s);
            let part = node_sum.restrict(lo, hi - lo);
            let (_, idx, val) = part.into_parts();
            let shifted =
                SparseVec::new(hi - lo, idx.iter().map(|&i| i - lo as u32).collect(), val)?;
            let holders: Vec<usize> = (0..nodes)
                .map(|q| {
                    let (_, f, sz) = node_of(p, m, q * m);
                    f + s % sz
                })
                .collect();
            debug_assert_eq!(holders[j], r);
            if let Err(e) = self.hold(s) {
                failure.fail(r, e);
            }
            let group = &mut Group::new(&mut *t, holders.clone())?;
            if let Some(e) = failure.error() {
                self.inter.enter_failing(group, &shifted, e)?;
                continue;
            }
            let red = match self.inter.allreduce(group, &shifted) {
                Ok(red) => red,
                Err(e) => {
                    part_failed(&mut failure, r, &holders, e)?;
                    continue;
                }
            };
            mine.extend(red.result.iter().map(|(i, x)| (i + lo as u32, x)));
            let (_, di, dv) = red.dropped.into_parts();
            let back = SparseVec::new(n, di.iter().map(|&i| i + lo as u32).collect(), dv)?;
            dropped = dropped.merge_sum(&back)?;
        }
        // 3. Every member's shards, to every member of the node (a failure
        //    frame from a member that knows of a failure).
        let block = if failure.failed() {
            failure.frame()
        } else {
            mine.sort_unstable_by_key(|e| e.0);
            let (idx, val): (Vec<u32>, Vec<E>) = mine.into_iter().unzip();
            let mut block = Vec::new();
            put_block(&mut block, &SparseVec::new(n, idx, val)?);
            block
        };
        let blocks = bruck_allgather(&mut Group::new(&mut *t, members)?, &block)?;
        for b in &blocks {
            failure.note(b, p)?;
        }
        if failure.failed() {
            return named_alike(t, failure);
        }
        *out = Reduced {
            result: shards_result(&blocks, n)?,
            dropped,
            ..Reduced::default()
        };
        Ok(Ok(()))
    }
}

impl<E: Element> Promises<E> for Hierarchical<E> {}

/// The whole result from the node's members' blocks of shards.
///
/// # Errors
/// [`Error::Corrupt`] for a block that does not parse or an index twice
/// (shards are disjoint).
fn shards_result<E: Element>(blocks: &[Vec<u8>], n: usize) -> Result<SparseVec<E>> {
    let mut all: Vec<(u32, E)> = Vec::new();
    for b in blocks {
        let mut rest: &[u8] = b;
        let part: SparseVec<E> = take_block(&mut rest, n, 0, n, "hierarchical shards")?;
        if !rest.is_empty() {
            return Err(Error::corrupt("hierarchical shards", "trailing bytes"));
        }
        all.extend(part.iter());
    }
    all.sort_unstable_by_key(|e| e.0);
    let (idx, val): (Vec<u32>, Vec<E>) = all.into_iter().unzip();
    SparseVec::new(n, idx, val).map_err(|e| Error::corrupt("hierarchical shards", e))
}

/// A part's call failed with `e` on this rank (`r`) of `group` (the
/// part's members, by its rank numbers): a transport's failure is
/// returned (peers may wait); another rank's failure (`PeerError`, named
/// by its rank in the group) is noted under its own rank; this rank's own
/// error is noted as its own.
///
/// # Errors
/// `e` where it is a transport's failure ([`Failure::is_agreed`]).
fn part_failed(failure: &mut Failure, r: usize, group: &[usize], e: Error) -> Result<()> {
    match e {
        e if !Failure::is_agreed(&e) => return Err(e),
        Error::PeerError { rank, detail } => {
            failure.peer(group.get(rank).copied().unwrap_or(r), detail);
        }
        e => failure.fail(r, e),
    }
    Ok(())
}

/// A failed call's outcome on every rank of `t` (its error), once every
/// rank knows of the failure: one more round (only on failure) in which each rank whose
/// own work or input failed sends its error, so that every rank names the
/// same lowest such rank (it returns its own error, the others
/// [`Error::PeerError`] naming it), whatever parts they learned of it in.
///
/// # Errors
/// Transport errors.
fn named_alike(t: &mut dyn Transport, failure: Failure) -> Result<Result<()>> {
    let mut last = Failure::default();
    if let Some(e) = failure.own() {
        last.fail(t.rank(), e.clone());
    }
    let frame = if last.failed() {
        last.frame()
    } else {
        Vec::new()
    };
    let p = t.size();
    for b in &bruck_allgather(t, &frame)? {
        if !b.is_empty() && !last.note(b, p)? {
            return Err(Error::corrupt(
                "hierarchical failure",
                "not a failure frame",
            ));
        }
    }
    let named = if last.failed() { last } else { failure };
    Ok(named.outcome())
}

impl<E: Element> Registered<E> for Hierarchical<E> {
    const NAME: &'static str = NAME;
    const LOSSLESS: bool = true;
    const STATEFUL: bool = true;
    const PARAMS: &'static str = "node (ranks per node, default 8), intra and inter (registry names, default ssar_split_allgather)";
    const HELP: &'static str = "a collective within each node, one across nodes on each rank's shard, an allgather within the node; lossless when both parts are";
    fn build(params: &mut Params, defaults: Defaults, catalog: &dyn Catalog<E>) -> Result<Self> {
        let node = params.take::<usize>("node")?.unwrap_or(8);
        let intra = params
            .take::<String>("intra")?
            .unwrap_or_else(|| "ssar_split_allgather".into());
        let inter = params
            .take::<String>("inter")?
            .unwrap_or_else(|| "ssar_split_allgather".into());
        Self::new(node, &intra, &inter, defaults, catalog)
    }
    /// Nodes of 2, 3 and 4 ranks (so most `P` leave a smaller last node),
    /// with lossless parts and with SparDL across nodes.
    fn suite_specs(_p: usize) -> Vec<String> {
        vec![
            "hierarchical:node=2".into(),
            "hierarchical:node=3,intra=topk_a,inter=ssar_recursive_double".into(),
            "hierarchical:node=4,inter=spardl".into(),
        ]
    }
}
