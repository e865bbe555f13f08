//! `sparse_comm._native`: the compiled core of the `sparse_comm` Python
//! package. The hook itself is Python (`py/sparse_comm/torch.py`); here are
//! the parts it calls:
//!
//! - [`Engine`]: `residual_sgd::hook::BucketFeedback` on the CPU backend,
//!   one bucket at a time, its state as bytes;
//! - [`PyTransport`]: a `sparse_coll::Transport` whose messages are a
//!   Python object's `send`, `recv` and `exchange` (the package's
//!   torch.distributed point-to-point operations), so that every registry
//!   algorithm runs unchanged over a process group;
//! - the collective suite over that transport, and the trainer's step as
//!   the hook's reference, for the package's tests.
//!
//! Tensors cross as bytes of little-endian `f32`: no libtorch is linked,
//! and one build serves every torch.

use backend_cpu::Cpu;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use residual_sgd::hook::{BucketFeedback, SelectorFactory};
use residual_sgd::{BucketBudget, Buckets, Config, FillOrder, LayerSpec, Rule, Trainer};
use sparse_coll::{Registry, ThreadCluster, Traffic, TrafficCounter, Transport};
use sparse_core::generate::{ValueDist, dense_values};
use sparse_core::{Error, Result};
use sparse_select::{
    RadixTopK, SampledThreshold, Selector, ThresholdBinarySearch, ThresholdReuse, TrimmedTopK,
};
use std::sync::Mutex;

pyo3::create_exception!(
    _native,
    SparseCommError,
    PyRuntimeError,
    "A sparse allreduce, its hook or its transport failed; the message names the rank."
);

/// A `sparse_coll::Transport` over a Python object with `send(to, data)`,
/// `recv(frm) -> bytes` and `exchange(to, data, frm) -> bytes` (the
/// package's process-group transport), counting bytes, messages and rounds
/// here. Each call takes the GIL for the Python call only.
pub struct PyTransport {
    comm: Py<PyAny>,
    rank: usize,
    size: usize,
    counter: TrafficCounter,
}

impl PyTransport {
    fn new(comm: Py<PyAny>, rank: usize, size: usize) -> Self {
        Self {
            comm,
            rank,
            size,
            counter: TrafficCounter::default(),
        }
    }

    fn peer(&self, r: usize) -> Result<()> {
        if r < self.size {
            Ok(())
        } else {
            Err(Error::NoSuchRank {
                rank: r,
                size: self.size,
            })
        }
    }

    /// `comm.<method>(*args)`, its bytes (`None` for nothing).
    fn call<'py, A>(&self, py: Python<'py>, method: &str, args: A) -> Result<Option<Vec<u8>>>
    where
        A: pyo3::call::PyCallArgs<'py>,
    {
        let out = self
            .comm
            .bind(py)
            .call_method1(method, args)
            .map_err(|e| Error::Transport {
                rank: self.rank,
                detail: format!("the process group's {method}: {e}"),
            })?;
        if out.is_none() {
            return Ok(None);
        }
        out.extract::<Vec<u8>>()
            .map(Some)
            .map_err(|e| Error::Transport {
                rank: self.rank,
                detail: format!("the process group's {method} returned no bytes: {e}"),
            })
    }
}

impl Transport for PyTransport {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn send(&mut self, to: usize, data: &[u8]) -> Result<()> {
        self.peer(to)?;
        Python::attach(|py| self.call(py, "send", (to, PyBytes::new(py, data))))?;
        self.counter.sent(data.len());
        self.counter.round();
        Ok(())
    }
    fn recv(&mut self, from: usize) -> Result<Vec<u8>> {
        self.peer(from)?;
        let got = Python::attach(|py| self.call(py, "recv", (from,)))?.unwrap_or_default();
        self.counter.received(got.len());
        self.counter.round();
        Ok(got)
    }
    fn exchange(&mut self, to: usize, data: &[u8], from: usize) -> Result<Vec<u8>> {
        self.peer(to)?;
        self.peer(from)?;
        let got =
            Python::attach(|py| self.call(py, "exchange", (to, PyBytes::new(py, data), from)))?
                .unwrap_or_default();
        self.counter.sent(data.len());
        self.counter.received(got.len());
        self.counter.round();
        Ok(got)
    }
    fn traffic(&self) -> Traffic {
        self.counter.traffic()
    }
}

/// A Rust error as the exception every rank raises: it names this rank.
fn py_err(rank: usize, e: &Error) -> PyErr {
    SparseCommError::new_err(format!("rank {rank}: {e}"))
}

/// Little-endian `f32`s from bytes.
fn f32s(bytes: &[u8], what: &str) -> PyResult<Vec<f32>> {
    if !bytes.len().is_multiple_of(4) {
        return Err(SparseCommError::new_err(format!(
            "{what}: {} bytes is not a whole number of float32",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// `v` as little-endian bytes into `out` (of `4 * v.len()` bytes).
fn write_le(v: &[f32], out: &mut [u8]) {
    for (o, x) in out.chunks_exact_mut(4).zip(v) {
        o.copy_from_slice(&x.to_le_bytes());
    }
}

/// `v` as a Python `bytes` of little-endian `f32`s, written in place.
fn py_f32s<'py>(py: Python<'py>, v: &[f32]) -> PyResult<Bound<'py, PyBytes>> {
    PyBytes::new_with(py, 4 * v.len(), |out| {
        write_le(v, out);
        Ok(())
    })
}

/// The rule of a name: `topk` (SparCML's top-k SGD) or `rgc` (RedSync's
/// momentum correction).
fn rule(name: &str, momentum: f32, nesterov: bool, masking: bool) -> PyResult<Rule> {
    match name {
        "topk" => Ok(Rule::TopK),
        "rgc" => Ok(Rule::Rgc {
            momentum,
            nesterov,
            weight_decay: 0.0,
            factor_masking: masking,
        }),
        other => Err(SparseCommError::new_err(format!(
            "unknown rule {other:?}: topk (SparCML's top-k SGD) or rgc (RedSync's RGC)"
        ))),
    }
}

/// The selectors by name.
const SELECTORS: [&str; 5] = ["radix", "trimmed", "threshold", "reuse", "sampled"];

fn selector(name: &str) -> PyResult<SelectorFactory<Cpu>> {
    type S = Box<dyn Selector<Cpu, f32> + Send>;
    let make: SelectorFactory<Cpu> = match name {
        "radix" => Box::new(|| Box::new(RadixTopK::magnitude()) as S),
        "trimmed" => Box::new(|| Box::new(TrimmedTopK::default()) as S),
        "threshold" => Box::new(|| Box::new(ThresholdBinarySearch::default()) as S),
        "reuse" => Box::new(|| Box::new(ThresholdReuse::new(5)) as S),
        "sampled" => Box::new(|| Box::new(SampledThreshold::default()) as S),
        other => {
            return Err(SparseCommError::new_err(format!(
                "unknown selector {other:?}; known: {}",
                SELECTORS.join(", ")
            )));
        }
    };
    Ok(make)
}

/// The collective's spec, with the value codec `values` as its parameter.
fn spec(algorithm: &str, values: Option<&str>) -> String {
    match values {
        None => algorithm.into(),
        Some(v) if algorithm.contains(':') => format!("{algorithm},values={v}"),
        Some(v) => format!("{algorithm}:values={v}"),
    }
}

/// A bucket in its parameters' order (ascending), whatever order DDP gives
/// them in: DDP's first iteration after a (re)start lays a bucket out in
/// another order than its rebuilt buckets do, and the collective's input,
/// its state and (for a lossy collective) its result must not depend on
/// that, so that a resumed run takes the steps of an unbroken one.
struct Canonical {
    params: Vec<usize>,
    /// Per parameter of the canonical order, its span in DDP's layout.
    spans: Vec<std::ops::Range<usize>>,
    /// DDP's layout is the canonical one already (its rebuilt buckets'
    /// usual case): nothing to reorder.
    identity: bool,
}

impl Canonical {
    fn of(fb: &BucketFeedback<Cpu>, params: &[usize]) -> Result<Self> {
        let lens = fb.lens();
        let mut at = 0;
        let mut spans = Vec::with_capacity(params.len());
        for &m in params {
            let n = *lens.get(m).ok_or_else(|| {
                Error::invalid(
                    "parameter",
                    format!("{m} is not a parameter: there are {}", lens.len()),
                )
            })?;
            spans.push((m, at..at + n));
            at += n;
        }
        let identity = spans.windows(2).all(|w| w[0].0 < w[1].0);
        spans.sort_by_key(|(m, _)| *m);
        Ok(Self {
            params: spans.iter().map(|(m, _)| *m).collect(),
            spans: spans.into_iter().map(|(_, s)| s).collect(),
            identity,
        })
    }
    /// DDP's layout in the canonical order (a bucket of another length is
    /// passed on for the feedback to refuse); borrowed where the layouts
    /// are one.
    fn forward<'a>(&self, x: &'a [f32]) -> std::borrow::Cow<'a, [f32]> {
        if self.identity || self.spans.iter().map(|s| s.len()).sum::<usize>() != x.len() {
            return x.into();
        }
        self.spans
            .iter()
            .flat_map(|s| x[s.clone()].iter().copied())
            .collect::<Vec<_>>()
            .into()
    }
    /// The canonical order back in DDP's layout (`y` itself where the
    /// layouts are one).
    fn back(&self, y: Vec<f32>) -> Vec<f32> {
        if self.identity {
            return y;
        }
        let mut out = vec![0.0; y.len()];
        let mut at = 0;
        for s in &self.spans {
            out[s.clone()].copy_from_slice(&y[at..at + s.len()]);
            at += s.len();
        }
        out
    }
}

/// Error feedback for DDP's buckets keyed by parameter
/// (`residual_sgd::hook::BucketFeedback` on the CPU backend).
#[pyclass(module = "sparse_comm._native")]
pub struct Engine {
    inner: Mutex<BucketFeedback<Cpu>>,
}

#[pymethods]
impl Engine {
    /// Feedback for the parameters `names` of lengths `lens` (the model's
    /// order, the same on every rank).
    #[new]
    #[pyo3(signature = (names, lens, algorithm, density, rule_name, momentum=0.9, nesterov=false, masking=true, selector_name="radix", values=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        names: Vec<String>,
        lens: Vec<usize>,
        algorithm: &str,
        density: f64,
        rule_name: &str,
        momentum: f32,
        nesterov: bool,
        masking: bool,
        selector_name: &str,
        values: Option<&str>,
    ) -> PyResult<Self> {
        let rule = rule(rule_name, momentum, nesterov, masking)?;
        let cfg = Config::new(1.0, density, rule)
            .map_err(|e| SparseCommError::new_err(e.to_string()))?
            .compress_threshold(0);
        let inner = BucketFeedback::new(
            Cpu,
            cfg,
            &names,
            &lens,
            selector(selector_name)?,
            Registry::builtin(),
            &spec(algorithm, values),
        )
        .map_err(|e| SparseCommError::new_err(e.to_string()))?;
        Ok(Self {
            inner: Mutex::new(inner),
        })
    }

    /// Reduces one bucket over `comm` (this rank `rank` of `size`): `grad`
    /// the float32 bytes of the parameters `params` laid end to end.
    /// Returns the mean's bytes and the call's statistics.
    fn reduce<'py>(
        &self,
        py: Python<'py>,
        comm: Py<PyAny>,
        rank: usize,
        size: usize,
        params: Vec<usize>,
        grad: &[u8],
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyDict>)> {
        let grad = f32s(grad, "bucket")?;
        let mut t = PyTransport::new(comm, rank, size);
        let (out, rep) = py
            .detach(|| {
                let mut fb = self.inner.lock().unwrap_or_else(|p| p.into_inner());
                let canon = Canonical::of(&fb, &params)?;
                let grad = canon.forward(&grad);
                let mut out = vec![0.0f32; grad.len()];
                let rep = fb.reduce(&mut t, &canon.params, &grad, &mut out)?;
                Ok::<_, Error>((canon.back(out), rep))
            })
            .map_err(|e| py_err(rank, &e))?;
        let stats = PyDict::new(py);
        stats.set_item("len", rep.len)?;
        stats.set_item("sent", rep.sent)?;
        stats.set_item("density", rep.density())?;
        stats.set_item("bytes_sent", rep.bytes_sent)?;
        stats.set_item("bytes_recv", rep.bytes_recv)?;
        stats.set_item("select_s", rep.select.as_secs_f64())?;
        stats.set_item("communicate_s", rep.communicate.as_secs_f64())?;
        stats.set_item("update_s", rep.update.as_secs_f64())?;
        Ok((py_f32s(py, &out)?, stats))
    }

    /// Every parameter's residual, as float32 bytes.
    fn residuals<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let fb = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let res = fb
            .residuals()
            .map_err(|e| SparseCommError::new_err(e.to_string()))?;
        res.iter().map(|r| py_f32s(py, r)).collect()
    }

    /// The whole state (every residual and momentum, the selectors' and
    /// the collectives' state) as `(tensors, tree)`: safetensors bytes and
    /// the tree as JSON, as `residual_sgd::checkpoint` writes a rank's.
    fn save_state<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        let fb = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let state = fb
            .save_state()
            .map_err(|e| SparseCommError::new_err(e.to_string()))?;
        let (tensors, tree) = residual_sgd::checkpoint::encode(&state)
            .map_err(|e| SparseCommError::new_err(e.to_string()))?;
        Ok((PyBytes::new(py, &tensors), PyBytes::new(py, &tree)))
    }

    /// Restores what `save_state` returned: checked (bounded by the bytes'
    /// length, every tensor against the tree), all or nothing.
    fn load_state(&self, tensors: &[u8], tree: &[u8]) -> PyResult<()> {
        let state = residual_sgd::checkpoint::decode(tensors, tree, "the hook's state")
            .map_err(|e| SparseCommError::new_err(e.to_string()))?;
        let mut fb = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        fb.load_state(&state)
            .map_err(|e| SparseCommError::new_err(e.to_string()))
    }
}

/// Agrees `digest` (the hook's settings) across the ranks of `comm`: a
/// rank whose settings differ fails every rank, naming the field.
#[pyfunction]
fn agree(py: Python<'_>, comm: Py<PyAny>, rank: usize, size: usize, digest: u64) -> PyResult<()> {
    let mut t = PyTransport::new(comm, rank, size);
    py.detach(|| sparse_coll::agree(&mut t, &[("the hook's settings", digest)]))
        .map_err(|e| py_err(rank, &e))
}

/// The registry's algorithms with the specs the collective suite runs on
/// `size` ranks (each with every codec where it takes one).
#[pyfunction]
fn suite_specs(size: usize) -> Vec<String> {
    Registry::<f32>::builtin().suite_specs(size)
}

/// The registry's algorithm names and their help.
#[pyfunction]
fn algorithms() -> Vec<(String, String)> {
    Registry::<f32>::builtin()
        .entries()
        .iter()
        .map(|e| (e.name().to_string(), e.help().to_string()))
        .collect()
}

/// The collective suite (`sparse_coll::testing::collective_suite_for`:
/// exact sums or exact conservation, identical bits on every rank, the
/// traffic the call reports, its state across calls) of `spec` over
/// `comm`. Returns the number of inputs checked; a failed check raises.
#[pyfunction]
fn collective_suite(
    py: Python<'_>,
    comm: Py<PyAny>,
    rank: usize,
    size: usize,
    spec: &str,
) -> PyResult<usize> {
    let mut t = PyTransport::new(comm, rank, size);
    let registry = Registry::builtin();
    py.detach(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            sparse_coll::testing::collective_suite_for(&mut t, &registry, spec)
        }))
    })
    .map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        SparseCommError::new_err(format!("rank {rank}: {spec}: a check failed: {msg}"))
    })?
    .map_err(|e| py_err(rank, &e))
}

/// The reference of the hook: `residual_sgd::Trainer` on `size` thread
/// ranks, learning rate 1 and zero weights, the parameters of lengths
/// `lens` as layers in one bucket in list order, stepping on `grads[r][s]`
/// (rank `r`'s flat float32 bytes at step `s`), RGC with the hook's
/// default momentum and masking. Returns each rank's
/// weights after each step: the hook's means applied as `w -= mean` give
/// them bit for bit.
#[pyfunction]
fn trainer_reference<'py>(
    py: Python<'py>,
    lens: Vec<usize>,
    grads: Vec<Vec<Vec<u8>>>,
    algorithm: &str,
    density: f64,
    rule_name: &str,
) -> PyResult<Vec<Vec<Bound<'py, PyBytes>>>> {
    // RGC with the hook's defaults (momentum 0.9, factor masking).
    let rule = rule(rule_name, 0.9, false, true)?;
    let grads: Vec<Vec<Vec<f32>>> = grads
        .iter()
        .map(|steps| {
            steps
                .iter()
                .map(|g| f32s(g, "gradient"))
                .collect::<PyResult<_>>()
        })
        .collect::<PyResult<_>>()?;
    let per_rank = py.detach(|| {
        ThreadCluster::new(grads.len()).run(|t| {
            let cfg = Config::new(1.0, density, rule)?
                .compress_threshold(0)
                .buckets(
                    Buckets::new(usize::MAX / 2)?
                        .order(FillOrder::List)
                        .budget(BucketBudget::PerLayer),
                )?;
            let zeros: Vec<Vec<f32>> = lens.iter().map(|&n| vec![0.0; n]).collect();
            let mut tr = Trainer::from_registry(
                Cpu,
                cfg,
                LayerSpec::matrices(&lens),
                &zeros,
                RadixTopK::magnitude(),
                &Registry::builtin(),
                algorithm,
            )?;
            let mut out = Vec::new();
            for flat in &grads[t.rank()] {
                let mut at = 0;
                let g: Vec<Vec<f32>> = lens
                    .iter()
                    .map(|&n| {
                        at += n;
                        flat[at - n..at].to_vec()
                    })
                    .collect();
                tr.step(t, &g)?;
                out.push(tr.weights()?.concat());
            }
            Ok(out)
        })
    });
    per_rank
        .into_iter()
        .map(|r| {
            let steps = r.map_err(|e| SparseCommError::new_err(e.to_string()))?;
            steps.iter().map(|w| py_f32s(py, w)).collect()
        })
        .collect()
}

/// The hook's reduction of one bucket of parameters of lengths `lens` on
/// `size` thread ranks in this process (the thread transport) instead of
/// over a process group, for measuring what the process group's hop
/// costs: each rank's gradients are seeded uniform values in [-1, 1]; returns
/// rank 0's seconds of each of `calls` calls, after three untimed ones.
#[pyfunction]
fn thread_reduce_seconds(
    py: Python<'_>,
    lens: Vec<usize>,
    algorithm: &str,
    density: f64,
    rule_name: &str,
    size: usize,
    calls: usize,
) -> PyResult<Vec<f64>> {
    let warmup = 3;
    let rule = rule(rule_name, 0.9, false, true)?;
    let cfg = Config::new(1.0, density, rule)
        .map_err(|e| SparseCommError::new_err(e.to_string()))?
        .compress_threshold(0);
    let names: Vec<String> = (0..lens.len()).map(|i| format!("p{i}")).collect();
    let params: Vec<usize> = (0..lens.len()).collect();
    let n: usize = lens.iter().sum();
    let spec = spec(algorithm, None);
    let per_rank = py.detach(|| {
        ThreadCluster::new(size).run(|t| {
            let radix = selector("radix").map_err(|e| Error::invalid("selector", e.to_string()))?;
            let mut fb =
                BucketFeedback::new(Cpu, cfg, &names, &lens, radix, Registry::builtin(), &spec)?;
            let mut out = vec![0.0f32; n];
            let mut secs = Vec::with_capacity(calls);
            for c in 0..warmup + calls {
                // Uniform in [-1, 1], a seed per rank and call.
                let seed = (t.rank() * (warmup + calls) + c) as u64;
                let grad: Vec<f32> = dense_values(n, ValueDist::Uniform { half_width: 1.0 }, seed);
                let start = std::time::Instant::now();
                fb.reduce(t, &params, &grad, &mut out)?;
                if c >= warmup {
                    secs.push(start.elapsed().as_secs_f64());
                }
            }
            Ok(secs)
        })
    });
    per_rank
        .into_iter()
        .next()
        .unwrap_or(Ok(Vec::new()))
        .map_err(|e: Error| SparseCommError::new_err(e.to_string()))
}

/// The module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Engine>()?;
    m.add("SparseCommError", m.py().get_type::<SparseCommError>())?;
    m.add("SELECTORS", SELECTORS.to_vec())?;
    m.add_function(wrap_pyfunction!(agree, m)?)?;
    m.add_function(wrap_pyfunction!(suite_specs, m)?)?;
    m.add_function(wrap_pyfunction!(algorithms, m)?)?;
    m.add_function(wrap_pyfunction!(collective_suite, m)?)?;
    m.add_function(wrap_pyfunction!(trainer_reference, m)?)?;
    m.add_function(wrap_pyfunction!(thread_reduce_seconds, m)?)?;
    Ok(())
}
