//! SMPI's time-independent traces of a run's [`Trace`]s: one text file per
//! rank and the index file that lists them (see the [module](super) doc
//! for how each op is written).

use crate::sim::{Op, Trace};
use sparse_core::{Error, Result};
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Simulated flops per second of every host of the platforms written here
/// ([`super::Platform`]): a `compute` line of `s` seconds is `s *
/// HOST_SPEED` flops.
pub const HOST_SPEED: f64 = 1e9;

/// The tag of every message: SMPI matches a receive with the sends of its
/// source and tag in order, as the replay matches with its source's.
const TAG: u32 = 0;

/// The name of rank `r`'s trace file in a trace directory.
pub fn rank_file(r: usize) -> String {
    format!("rank_{r}.txt")
}

/// The name of the index file of a trace directory (one rank's file a
/// line, rank 0 first: what `smpirun -replay` reads).
pub const INDEX_FILE: &str = "index.txt";

/// Each rank's ops between its marks `i` and `i + 1` ([`crate::sim::
/// SimTransport::mark`]): the traces of the call the marks bracket, as
/// [`crate::sim::Timeline::span`] times it, that SimGrid can replay from
/// a common start.
///
/// # Errors
/// [`Error::InvalidParameter`] named `traces`: a rank without both marks;
/// a message that crosses a mark (sent before it and received after, or
/// the other way): the call is then not separable from what surrounds it,
/// and the error names the ranks.
pub fn between_marks(traces: &[Trace], i: usize) -> Result<Vec<Trace>> {
    let p = traces.len();
    let mut out = Vec::with_capacity(p);
    // Per (source, destination): messages sent and received before mark i
    // and before mark i + 1.
    let mut counts: HashMap<(usize, usize), [i64; 2]> = HashMap::new();
    for (r, trace) in traces.iter().enumerate() {
        let marks: Vec<usize> = (0..trace.len()).filter(|&j| trace[j] == Op::Mark).collect();
        let (Some(&a), Some(&b)) = (marks.get(i), marks.get(i + 1)) else {
            return Err(Error::invalid(
                "traces",
                format!(
                    "rank {r} made {} marks: the call between marks {i} and {} needs both",
                    marks.len(),
                    i + 1
                ),
            ));
        };
        for (j, op) in trace[..b].iter().enumerate() {
            let slot = usize::from(j > a);
            let (sent, received) = peers(op);
            if let Some(to) = sent {
                check_rank(to, p)?;
                counts.entry((r, to)).or_default()[slot] += 1;
            }
            if let Some(from) = received {
                check_rank(from, p)?;
                counts.entry((from, r)).or_default()[slot] -= 1;
            }
        }
        out.push(trace[a + 1..b].to_vec());
    }
    let mut crossing: Vec<_> = counts
        .iter()
        .filter(|(_, c)| c[0] != 0 || c[1] != 0)
        .map(|(k, _)| *k)
        .collect();
    crossing.sort_unstable();
    if let Some((from, to)) = crossing.first() {
        return Err(Error::invalid(
            "traces",
            format!(
                "messages from rank {from} to rank {to} cross mark {i} or {}: the call between \
                 them does not stand alone (time the whole run instead)",
                i + 1
            ),
        ));
    }
    Ok(out)
}

/// The rank an op sends to and the rank it receives from.
fn peers(op: &Op) -> (Option<usize>, Option<usize>) {
    match *op {
        Op::Send { to, .. } => (Some(to), None),
        Op::Recv { from } => (None, Some(from)),
        Op::Exchange { to, from, .. } => (Some(to), Some(from)),
        Op::Compute(_) | Op::Mark => (None, None),
    }
}

fn check_rank(rank: usize, size: usize) -> Result<()> {
    if rank < size {
        Ok(())
    } else {
        Err(Error::NoSuchRank { rank, size })
    }
}

/// The size of every receive, by rank and in order: the size of the send
/// it matches (the `k`-th receive of `b` from `a` takes the `k`-th message
/// `a` sent to `b`, as both MPI and the replay match). SMPI's receive lines
/// carry the size.
fn receive_sizes(traces: &[Trace]) -> Result<Vec<Vec<usize>>> {
    let p = traces.len();
    let mut sent: HashMap<(usize, usize), VecDeque<usize>> = HashMap::new();
    for (r, trace) in traces.iter().enumerate() {
        for op in trace {
            if let Op::Send { to, bytes } | Op::Exchange { to, bytes, .. } = *op {
                check_rank(to, p)?;
                sent.entry((r, to)).or_default().push_back(bytes);
            }
        }
    }
    let mut sizes = Vec::with_capacity(p);
    for (r, trace) in traces.iter().enumerate() {
        let mut mine = Vec::new();
        for op in trace {
            if let (_, Some(from)) = peers(op) {
                check_rank(from, p)?;
                let size = sent
                    .get_mut(&(from, r))
                    .and_then(VecDeque::pop_front)
                    .ok_or_else(|| {
                        Error::invalid(
                            "traces",
                            format!("rank {r} receives from rank {from} a message it never sent"),
                        )
                    })?;
                mine.push(size);
            }
        }
        sizes.push(mine);
    }
    let mut left: Vec<_> = sent
        .iter()
        .filter(|(_, q)| !q.is_empty())
        .map(|(k, q)| (*k, q.len()))
        .collect();
    left.sort_unstable();
    if let Some(((from, to), n)) = left.first() {
        return Err(Error::invalid(
            "traces",
            format!("{n} messages from rank {from} to rank {to} are never received"),
        ));
    }
    Ok(sizes)
}

/// Writes rank `r`'s trace in SMPI's time-independent format; `sizes` are
/// its receives' sizes in order.
fn write_rank(out: &mut impl Write, r: usize, trace: &Trace, sizes: &[usize]) -> Result<()> {
    let io = |e: std::io::Error| Error::invalid("traces", format!("rank {r}'s trace: {e}"));
    let mut sizes = sizes.iter();
    let mut size = || sizes.next().copied().unwrap_or(0);
    writeln!(out, "{r} init").map_err(io)?;
    for op in trace {
        match *op {
            Op::Compute(secs) => {
                if !(secs.is_finite() && secs >= 0.0) {
                    return Err(Error::invalid(
                        "traces",
                        format!(
                            "rank {r} computes for {secs} s: give a finite time of at least 0 s"
                        ),
                    ));
                }
                writeln!(out, "{r} compute {:e}", secs * HOST_SPEED).map_err(io)?;
            }
            Op::Send { to, bytes } => writeln!(out, "{r} send {to} {TAG} {bytes}").map_err(io)?,
            Op::Recv { from } => writeln!(out, "{r} recv {from} {TAG} {}", size()).map_err(io)?,
            Op::Exchange { to, bytes, from } => {
                let got = size();
                write!(
                    out,
                    "{r} isend {to} {TAG} {bytes}\n{r} irecv {from} {TAG} {got}\n\
                     {r} wait {r} {to} {TAG}\n{r} wait {from} {r} {TAG}\n"
                )
                .map_err(io)?;
            }
            Op::Mark => {}
        }
    }
    writeln!(out, "{r} finalize").map_err(io)?;
    Ok(())
}

/// The text of every rank's trace file, by rank: what [`write_traces`]
/// writes.
///
/// # Errors
/// As [`write_traces`], less the file errors.
pub fn trace_texts(traces: &[Trace]) -> Result<Vec<String>> {
    let sizes = receive_sizes(traces)?;
    traces
        .iter()
        .zip(&sizes)
        .enumerate()
        .map(|(r, (trace, sizes))| {
            let mut out = Vec::new();
            write_rank(&mut out, r, trace, sizes)?;
            String::from_utf8(out).map_err(|e| Error::invalid("traces", e))
        })
        .collect()
}

/// The text of the index file of `ranks` ranks: one trace file a line, by
/// rank, relative to the directory (replay from inside it).
pub fn index_text(ranks: usize) -> String {
    (0..ranks).map(|r| rank_file(r) + "\n").collect()
}

/// Writes `traces` into `dir` (created where missing) in SMPI's
/// time-independent format: [`rank_file`] per rank and [`INDEX_FILE`];
/// returns the index's path.
///
/// # Errors
/// [`Error::NoSuchRank`] for a trace naming a rank outside the traces;
/// [`Error::InvalidParameter`] named `traces` for a receive without its
/// send or a send no receive takes (the traces are not of one run), or a
/// negative or non-finite computation; named `trace directory` where a
/// file cannot be written.
pub fn write_traces(dir: &Path, traces: &[Trace]) -> Result<PathBuf> {
    let sizes = receive_sizes(traces)?;
    let io = |what: &Path, e: std::io::Error| {
        Error::invalid("trace directory", format!("{}: {e}", what.display()))
    };
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    for (r, (trace, sizes)) in traces.iter().zip(&sizes).enumerate() {
        let path = dir.join(rank_file(r));
        let file = std::fs::File::create(&path).map_err(|e| io(&path, e))?;
        let mut out = std::io::BufWriter::new(file);
        write_rank(&mut out, r, trace, sizes)?;
        out.flush().map_err(|e| io(&path, e))?;
    }
    let index = dir.join(INDEX_FILE);
    std::fs::write(&index, index_text(traces.len())).map_err(|e| io(&index, e))?;
    Ok(index)
}
