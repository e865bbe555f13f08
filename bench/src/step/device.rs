//! The device phases of `sparse-bench step`: select and update modelled
//! as passes over memory at a device's bandwidth ([`device_phases`]), on
//! the device whose throughput the compute model assumes, so that the
//! headline speedup compares like with like.

use super::RunPlan;
use crate::models;
use residual_sgd::recipe::{Family, Run};
use sparse_core::{Error, Result};

/// A device the step's local phases are modelled on, with the
/// throughput the compute model assumes on it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Device {
    /// Its `--device` name.
    pub name: &'static str,
    /// What it is.
    pub label: &'static str,
    /// The throughput the compute model assumes, GFlop/s.
    pub gflops: f64,
    /// Peak memory bandwidth, bytes per second.
    pub bandwidth: f64,
    /// Where the figures come from.
    pub source: &'static str,
}

/// The devices of `--device`: the P100 the compute model has always
/// assumed (RedSync's Piz Daint), and the two GPUs the selectors were
/// measured on (2026-11-26). The throughput is half the FP32 peak, as
/// [`models::DEVICE_GFLOPS`] takes it for the P100.
pub const DEVICES: [Device; 3] = [
    Device {
        name: "p100",
        label: "NVIDIA P100 16 GB (Piz Daint, RedSync Fig. 7)",
        gflops: models::DEVICE_GFLOPS,
        bandwidth: 732e9,
        source: "NVIDIA Tesla P100 datasheet: 9.3 TFlop/s FP32, 732 GB/s HBM2",
    },
    Device {
        name: "h100",
        label: "NVIDIA H100 SXM 80 GB",
        gflops: 33_500.0,
        bandwidth: 3.35e12,
        source: "NVIDIA H100 datasheet (SXM): 67 TFlop/s FP32, 3.35 TB/s HBM3",
    },
    Device {
        name: "h200",
        label: "NVIDIA H200 141 GB",
        gflops: 33_500.0,
        bandwidth: 4.8e12,
        source: "NVIDIA H200 datasheet: 67 TFlop/s FP32, 4.8 TB/s HBM3e",
    },
];

/// The device `name` names.
///
/// # Errors
/// [`Error::InvalidParameter`] listing the known names.
pub fn device(name: &str) -> Result<Device> {
    DEVICES
        .iter()
        .copied()
        .find(|d| d.name == name)
        .ok_or_else(|| {
            let known: Vec<&str> = DEVICES.iter().map(|d| d.name).collect();
            Error::invalid(
                "device",
                format!("unknown {name:?}; known: {}", known.join(", ")),
            )
        })
}

/// Radix top-k (`radix_topk`, the step's selector) measured on an NVIDIA
/// H200 on 2026-11-26 (the run's output: `git show
/// 8b2fbb5:bench/gpu/h200_select_cuda.txt`; later runs, 2-3x faster, are
/// in `bench/gpu/select_h200.csv` and `bench/RESULTS.md`, "Selection on a
/// GPU", and the step tables of RESULTS were made with these):
/// `(n, density, ms, read_ms)`, `read_ms` being one read of the same array
/// on the same device (`max_abs`). `ms / read_ms` (`x_read`) is the
/// selection's cost in reads of its input, what [`topk_passes`] takes.
pub const MEASURED_TOPK: [(usize, f64, f64, f64); 4] = [
    (1 << 24, 0.001, 0.986, 0.097),
    (1 << 24, 0.01, 1.279, 0.098),
    (1 << 26, 0.001, 1.659, 0.242),
    (1 << 26, 0.01, 2.356, 0.248),
];

/// The top-k's passes over a layer of `n` at `density`: `x_read` of the
/// [`MEASURED_TOPK`] point nearest in `(log2 n, log10 density)`.
pub fn topk_passes(n: usize, density: f64) -> f64 {
    let d = |&(m, q, _, _): &(usize, f64, f64, f64)| {
        ((n.max(1) as f64).log2() - (m as f64).log2()).abs()
            + (density.max(1e-9).log10() - q.log10()).abs()
    };
    MEASURED_TOPK
        .iter()
        .min_by(|a, b| d(a).total_cmp(&d(b)))
        .map_or(1.0, |&(_, _, ms, read)| ms / read)
}

/// Passes over a compressed layer before its selection: compensation
/// into the residual (top-k SGD: read the residual and the gradient,
/// write the residual, 3; momentum correction: read the gradient, the
/// weights for weight decay, the momentum and the residual, write the
/// momentum and the residual, 6), and DGC's clipping one more read.
pub fn compensation_passes(run: &Run) -> f64 {
    match run {
        Run::Sparse { scheme, .. } => match scheme.family {
            Family::TopK => 3.0,
            Family::Dgc => 7.0,
            _ => 6.0,
        },
        Run::Dense { .. } => 0.0,
    }
}

/// Passes of a dense layer's update: momentum SGD with weight decay reads
/// the gradient, the momentum and the weights and writes the momentum and
/// the weights (5); plain SGD reads the gradient and the weights and
/// writes the weights (3).
pub fn dense_update_passes(run: &Run) -> f64 {
    let momentum = match run {
        Run::Dense { momentum } => *momentum,
        Run::Sparse { scheme, .. } => scheme.family != Family::TopK,
    };
    if momentum { 5.0 } else { 3.0 }
}

/// Bytes per entry of the reduced result applied to the weights: the
/// entry's index and value read (8), the weight read and written (8).
pub const APPLY_BYTES_PER_ENTRY: f64 = 16.0;

/// The entries of the reduced result of a layer of `n` at `density` over
/// `ranks` ranks sharing `overlap` of their indices: `k (1 + (P - 1)(1 -
/// overlap))`, at most `n`, with `k = max(1, density n)`.
pub fn reduced_entries(n: usize, density: f64, ranks: usize, overlap: f64) -> f64 {
    let k = (density * n as f64).max(1.0);
    (k * (1.0 + (ranks.max(1) - 1) as f64 * (1.0 - overlap))).min(n as f64)
}

/// Select and update of `plan` on `device`, ms, modelled as passes over
/// memory at the device's bandwidth (4 bytes per parameter a pass):
/// - select: every compressed layer of `n` parameters,
///   `(compensation_passes + topk_passes(n, density)) 4 n / bandwidth`;
/// - update: every dense layer, `dense_update_passes 4 n / bandwidth`;
///   every compressed one, `APPLY_BYTES_PER_ENTRY reduced_entries /
///   bandwidth`.
///
/// No kernel launch or host round trip is counted: a lower bound.
pub fn device_phases(plan: &RunPlan, device: &Device, ranks: usize, overlap: f64) -> (f64, f64) {
    let density = plan.run.density();
    let (mut select, mut update) = (0.0, 0.0);
    for l in &plan.layers {
        let n = l.spec.len;
        let bytes = 4.0 * n as f64;
        if l.kept_dense.is_some() {
            update += dense_update_passes(&plan.run) * bytes;
        } else {
            select += (compensation_passes(&plan.run) + topk_passes(n, density)) * bytes;
            update += APPLY_BYTES_PER_ENTRY * reduced_entries(n, density, ranks, overlap);
        }
    }
    let ms = |b: f64| b / device.bandwidth * 1e3;
    (ms(select), ms(update))
}

/// What the device phases are, in words: the device, its bandwidth and
/// where it comes from, and the model.
pub fn device_note(d: &Device) -> String {
    format!(
        "select and update modelled on the {} ({}): passes over memory at {:.0} GB/s ({}); \
         select = (compensation passes + radix top-k's reads measured on an H200, x_read \
         in bench/RESULTS.md) x 4 n bytes per compressed layer; update = 5 passes \
         (momentum SGD; plain SGD 3) over each dense layer + 16 bytes per reduced entry; \
         kernel launches and host round trips not counted (a lower bound)",
        d.name,
        d.label,
        d.bandwidth / 1e9,
        d.source
    )
}
