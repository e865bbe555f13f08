//! What `sparse-bench train` reports: one row per scheme and density (means
//! over seeds) with its dense counterpart from the same run, as a table,
//! JSON lines, a CSV and two SVG plots.

use super::run::Summary;
use super::{LayerUse, Run};
use sparse_core::{Error, Result};
use std::path::Path;

/// One scheme at one density (or a dense baseline), averaged over seeds.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// What ran.
    pub run: Run,
    /// Density (1 for dense).
    pub density: f64,
    /// Ranks.
    pub ranks: usize,
    /// Epochs.
    pub epochs: usize,
    /// Seeds averaged.
    pub seeds: usize,
    /// Mean test accuracy after each epoch.
    pub test_acc: Vec<f64>,
    /// Mean training loss after each epoch.
    pub train_loss: Vec<f64>,
    /// Mean bytes per step of the busiest rank.
    pub bytes_per_step: f64,
    /// Median forward-and-backward, select, communicate, apply and step
    /// milliseconds, the straggler's local milliseconds before a step's
    /// communication, the ranks' CPU milliseconds per step and the
    /// agreement rounds' milliseconds
    /// ([`Summary::phase_ms`](super::run::Summary)), each the mean over
    /// seeds.
    pub phase_ms: [f64; 8],
    /// Layers that went dense.
    pub dense_layers: Vec<String>,
    /// How each layer went (the first seed's).
    pub layers: Vec<LayerUse>,
    /// Each seed's digest of its final weights.
    pub digests: Vec<u64>,
    /// Each seed's resume: the step and the ranks that saved it.
    pub resumed: Vec<Option<(u64, usize)>>,
    /// Steps lost, summed over seeds.
    pub lost_steps: u64,
    /// Identical weights on every rank after every epoch, in every seed.
    pub identical: bool,
}

impl Row {
    /// Final mean test accuracy.
    pub fn final_acc(&self) -> f64 {
        self.test_acc.last().copied().unwrap_or(0.0)
    }
}

/// Averages `summaries` over seeds, in the order the runs first appear.
pub fn rows(summaries: &[Summary], layer_names: &[String]) -> Vec<Row> {
    let mut out: Vec<(Row, usize)> = Vec::new();
    for s in summaries {
        let density = s.run.density();
        let pos = out.iter().position(|(r, _)| r.run == s.run);
        let (row, n) = match pos {
            Some(i) => &mut out[i],
            None => {
                out.push((
                    Row {
                        run: s.run.clone(),
                        density,
                        ranks: s.ranks,
                        epochs: s.test_acc.len(),
                        seeds: 0,
                        test_acc: vec![0.0; s.test_acc.len()],
                        train_loss: vec![0.0; s.train_loss.len()],
                        bytes_per_step: 0.0,
                        phase_ms: [0.0; 8],
                        dense_layers: layer_names
                            .iter()
                            .zip(&s.dense_layers)
                            .filter(|(_, d)| **d)
                            .map(|(n, _)| n.clone())
                            .collect(),
                        layers: s.layers.clone(),
                        digests: Vec::new(),
                        resumed: Vec::new(),
                        lost_steps: 0,
                        identical: true,
                    },
                    0,
                ));
                out.last_mut().expect("pushed")
            }
        };
        *n += 1;
        row.seeds = *n;
        let add = |acc: &mut [f64], x: &[f64]| acc.iter_mut().zip(x).for_each(|(a, x)| *a += x);
        add(&mut row.test_acc, &s.test_acc);
        add(&mut row.train_loss, &s.train_loss);
        row.bytes_per_step += s.bytes_per_step;
        add(&mut row.phase_ms, &s.phase_ms);
        row.identical &= s.identical;
        row.digests.push(s.weights_digest);
        row.resumed.push(s.resumed);
        row.lost_steps += s.lost_steps;
    }
    out.into_iter()
        .map(|(mut r, n)| {
            let n = n as f64;
            r.test_acc.iter_mut().for_each(|x| *x /= n);
            r.train_loss.iter_mut().for_each(|x| *x /= n);
            r.bytes_per_step /= n;
            r.phase_ms.iter_mut().for_each(|x| *x /= n);
            r
        })
        .collect()
}

/// How `row`'s seeds started: `fresh`, or `resumed from step S` (`of P
/// ranks` where another rank count saved it), one per seed joined by
/// `, ` where they differ.
pub fn start(row: &Row) -> String {
    let mut parts: Vec<String> = Vec::new();
    for r in &row.resumed {
        let s = match r {
            None => "fresh".to_string(),
            Some((step, ranks)) if *ranks == row.ranks => format!("resumed from step {step}"),
            Some((step, ranks)) => format!("resumed from step {step} of {ranks} ranks"),
        };
        parts.push(s);
    }
    if parts.iter().all(|p| *p == parts[0]) {
        parts.truncate(1);
    }
    parts.join(", ")
}

/// The dense counterpart of `row` among `rows`.
pub fn dense_of<'a>(row: &Row, rows: &'a [Row]) -> Option<&'a Row> {
    let want = row.run.dense();
    rows.iter().find(|r| r.run == want)
}

/// A figure as JSON: null where it is not finite (no CPU clock).
fn finite(x: f64) -> serde_json::Value {
    if x.is_finite() {
        x.into()
    } else {
        serde_json::Value::Null
    }
}

/// The JSON line of a row.
pub fn json(row: &Row, rows: &[Row], transport: &str) -> serde_json::Value {
    let dense = dense_of(row, rows).unwrap_or(row);
    serde_json::json!({
        "bench": "train", "transport": transport, "scheme": row.run.name(),
        "collective": row.run.collective(), "density": row.density, "ranks": row.ranks,
        "epochs": row.epochs, "seeds": row.seeds,
        "final_test_acc": row.final_acc(), "dense_test_acc": dense.final_acc(),
        "gap_points": 100.0 * (row.final_acc() - dense.final_acc()),
        "test_acc": row.test_acc, "train_loss": row.train_loss,
        "bytes_per_step": row.bytes_per_step, "dense_bytes_per_step": dense.bytes_per_step,
        "bytes_ratio": row.bytes_per_step / dense.bytes_per_step,
        "grad_ms": row.phase_ms[0], "select_ms": row.phase_ms[1], "comm_ms": row.phase_ms[2],
        "apply_ms": row.phase_ms[3], "step_ms": row.phase_ms[4], "dense_step_ms": dense.phase_ms[4],
        "straggler_local_ms": row.phase_ms[5], "ranks_cpu_ms": if transport == "threads" {
            // One process holds every rank: its clock is not a rank's.
            serde_json::Value::Null
        } else {
            finite(row.phase_ms[6])
        },
        "agree_ms": row.phase_ms[7], "agree_rounds": residual_sgd::AGREEMENT_ROUNDS,
        "dense_layers": row.dense_layers, "identical_weights": row.identical,
        "weights_digest": row.digests.iter().map(|d| format!("{d:016x}")).collect::<Vec<_>>(),
        "resumed_from_step": row.resumed.iter().map(|r| r.map(|x| x.0)).collect::<Vec<_>>(),
        "resumed_from_ranks": row.resumed.iter().map(|r| r.map(|x| x.1)).collect::<Vec<_>>(),
        "lost_steps": row.lost_steps, "start": start(row),
        "layers": row.layers.iter().map(|l| serde_json::json!({
            "name": l.name, "len": l.len, "dense_because": l.dense, "density": l.density,
        })).collect::<Vec<_>>(),
    })
}

/// The table of `rows`: one line per run.
pub fn table(rows: &[Row]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|r| {
            let d = dense_of(r, rows).unwrap_or(r);
            vec![
                r.run.name(),
                r.run.collective(),
                format!("{}", r.density),
                format!("{:.2}", 100.0 * r.final_acc()),
                format!("{:+.2}", 100.0 * (r.final_acc() - d.final_acc())),
                format!("{:.0}", r.bytes_per_step),
                format!("{:.4}", r.bytes_per_step / d.bytes_per_step),
                format!("{:.3}", r.phase_ms[0]),
                format!("{:.3}", r.phase_ms[1]),
                format!("{:.3}", r.phase_ms[2]),
                format!("{:.3}", r.phase_ms[3]),
                format!("{:.3}", r.phase_ms[7]),
                format!("{:.3}", r.phase_ms[4]),
                format!("{:.2}", r.phase_ms[4] / d.phase_ms[4]),
                start(r),
                if r.dense_layers.is_empty() {
                    "-".into()
                } else {
                    r.dense_layers.join(",")
                },
            ]
        })
        .collect()
}

/// The table's header.
pub const HEADER: [&str; 16] = [
    "scheme",
    "collective",
    "density",
    "test_acc%",
    "gap_pts",
    "bytes/step",
    "x_dense_bytes",
    "grad_ms",
    "select_ms",
    "comm_ms",
    "apply_ms",
    "agree_ms",
    "step_ms",
    "x_dense_step",
    "start",
    "dense_layers",
];

fn io(e: impl std::fmt::Display) -> Error {
    Error::invalid("--out", e.to_string())
}

/// The lines saying, per sparse run, which layers went dense and why and
/// the density each compressed layer got.
pub fn layer_lines(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .filter(|r| matches!(r.run, Run::Sparse { .. }))
        .map(|r| {
            let parts: Vec<String> = r
                .layers
                .iter()
                .map(|l| match &l.dense {
                    Some(why) => format!("{} ({}) dense: {why}", l.name, l.len),
                    None => format!("{} ({}) at density {:.4}", l.name, l.len, l.density),
                })
                .collect();
            format!("{} {}: {}", r.run.name(), r.density, parts.join("; "))
        })
        .collect()
}

/// `sparsity.csv`: Zen's statistics per run, seed, epoch and layer.
pub fn sparsity_csv(summaries: &[Summary]) -> String {
    let mut csv = String::from(
        "scheme,density,seed,epoch,layer,len,compressed,grad_density,overlap,densification\n",
    );
    for s in summaries {
        for (e, layers) in s.sparsity.iter().enumerate() {
            for (l, x) in s.layers.iter().zip(layers) {
                csv.push_str(&format!(
                    "{},{},{},{},{},{},{},{},{},{}\n",
                    s.run.name(),
                    s.run.density(),
                    s.seed,
                    e + 1,
                    l.name,
                    l.len,
                    l.dense.is_none(),
                    x.grad_density,
                    x.overlap,
                    x.densification
                ));
            }
        }
    }
    csv
}

/// Writes `train.csv` (one line per scheme, density, seed and epoch),
/// `sparsity.csv` ([`sparsity_csv`]) and the plots `accuracy_vs_epoch.svg`
/// and `accuracy_vs_bytes.svg` (means over seeds, one line per scheme and
/// density) into `dir`.
///
/// # Errors
/// [`Error::InvalidParameter`] naming what could not be written.
pub fn write(dir: &Path, summaries: &[Summary], rows: &[Row]) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut csv =
        String::from("scheme,collective,density,seed,epoch,test_acc,train_loss,cumulative_bytes\n");
    for s in summaries {
        let density = s.run.density();
        let per_epoch = s.bytes_per_step * s.steps as f64 / s.test_acc.len().max(1) as f64;
        for (e, (acc, loss)) in s.test_acc.iter().zip(&s.train_loss).enumerate() {
            csv.push_str(&format!(
                "{},{},{},{},{},{},{},{:.0}\n",
                s.run.name(),
                s.run.collective(),
                density,
                s.seed,
                e + 1,
                acc,
                loss,
                per_epoch * (e + 1) as f64
            ));
        }
    }
    std::fs::write(dir.join("train.csv"), csv).map_err(io)?;
    std::fs::write(dir.join("sparsity.csv"), sparsity_csv(summaries)).map_err(io)?;
    let steps = summaries
        .first()
        .map_or(0, |s| s.steps / s.test_acc.len().max(1));
    plot(
        &dir.join("accuracy_vs_epoch.svg"),
        rows,
        "epoch",
        false,
        1.0,
    )
    .map_err(io)?;
    plot(
        &dir.join("accuracy_vs_bytes.svg"),
        rows,
        "cumulative bytes sent by the busiest rank",
        true,
        steps as f64,
    )
    .map_err(io)?;
    Ok(())
}

fn plot(
    path: &Path,
    rows: &[Row],
    x_label: &str,
    by_bytes: bool,
    steps_per_epoch: f64,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let series: Vec<(String, Vec<(f64, f64)>)> = rows
        .iter()
        .map(|r| {
            let name = match &r.run {
                Run::Dense { .. } => r.run.name(),
                Run::Sparse { .. } => format!("{} {}", r.run.name(), r.density),
            };
            let pts = r
                .test_acc
                .iter()
                .enumerate()
                .map(|(e, &a)| {
                    let x = (e + 1) as f64;
                    let x = if by_bytes {
                        (x * steps_per_epoch * r.bytes_per_step).max(1.0).log10()
                    } else {
                        x
                    };
                    (x, 100.0 * a)
                })
                .collect();
            (name, pts)
        })
        .collect();
    let xs = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.0));
    let (lo, hi) = xs.fold((f64::MAX, f64::MIN), |(l, h), x| (l.min(x), h.max(x)));
    let (lo, hi) = if lo < hi { (lo, hi) } else { (0.0, 1.0) };
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("test accuracy (%)", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(lo..hi, 0.0..100.0)?;
    let x_desc = if by_bytes {
        format!("log10 {x_label}")
    } else {
        x_label.to_string()
    };
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("test accuracy (%)")
        .draw()?;
    for (i, (name, pts)) in series.into_iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts, color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()?;
    root.present()?;
    Ok(())
}
