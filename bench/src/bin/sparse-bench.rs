//! `sparse-bench`: the workspace's main job. Each subcommand measures one
//! layer of the stack on synthetic gradients and prints a table (or JSON
//! lines with `--json`), with its baselines measured in the same run.

use bench::allreduce::{self, AllreduceArgs, AllreduceReport};
use bench::encode::{self, EncodeArgs};
use bench::print_table;
use bench::select::{self, SelectArgs};
use bench::train::TrainArgs;
use clap::{Args, Parser, Subcommand};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "sparse-bench",
    version,
    about = "Benchmarks of sparse gradient communication (RedSync, SparDL, SparCML, Zen)",
    after_help = "List flags (--algo, --density, --scheme) take one value each: repeat the flag for more."
)]
struct Cli {
    /// Print one JSON object per line instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

/// The subcommands, each holding its flags' struct.
#[derive(Subcommand, Debug)]
enum Command {
    /// Bytes and encode/decode throughput of every encoding on one gradient.
    Encode(EncodeArgs),
    /// Every communication-set selection algorithm on one residual, against
    /// select_nth_unstable_by and a plain copy measured in the same run.
    Select(SelectCli),
    /// Every sparse allreduce on the same synthetic gradients, against the
    /// dense ring allreduce measured in the same run.
    Allreduce(AllreduceCli),
    /// Data-parallel training of an MLP or a CNN on the UCI digits or
    /// Fashion-MNIST: dense SGD and every residual optimizer over its sparse allreduce, test accuracy
    /// per epoch, bytes per step and time per step, in the same run.
    Train(TrainCli),
    /// Every sparse allreduce at up to 1,024 ranks on a simulated network:
    /// simulated time, bytes and rounds per P, the cost model's prediction
    /// and the planner's choice with its regret.
    Scale(bench::scale::ScaleArgs),
    /// Under `mpiexec -n 2`: the MPI transport's latency and time per byte
    /// (ping-pong and exchange, 0 to 64 MiB), written as a network file that
    /// `scale --network FILE` reads. Needs the `mpi` feature.
    Calibrate(bench::calibrate::CalibrateArgs),
    /// One training step of a paper's model (ResNet-50, VGG-16, AlexNet,
    /// RedSync's PTB LSTM, BERT-base): every residual optimizer against
    /// dense allreduce per rank count, select and update modelled on a
    /// device, communication simulated on a preset network; speedup over
    /// dense; per layer, in buckets, and in buckets overlapped with the
    /// backward pass as DDP runs it (--bucket-mib, --timeline).
    Step(bench::step::StepArgs),
}

/// `sparse-bench select`: the benchmark's flags and the backend.
#[derive(Args, Debug)]
struct SelectCli {
    /// Backend the selectors run on.
    #[arg(long, value_enum, default_value_t = BackendKind::Cpu)]
    backend: BackendKind,
    #[command(flatten)]
    args: SelectArgs,
}

/// `sparse-bench allreduce`: the benchmark's flags and the transport.
#[derive(Args, Debug)]
struct AllreduceCli {
    /// Transport the ranks talk over.
    #[arg(long, value_enum, default_value_t = TransportKind::Threads)]
    transport: TransportKind,
    #[command(flatten)]
    args: AllreduceArgs,
}

/// `sparse-bench train`: the optimizer's settings and what to run.
#[derive(Args, Debug)]
struct TrainCli {
    /// Transport the ranks talk over.
    #[arg(long, value_enum, default_value_t = TransportKind::Threads)]
    transport: TransportKind,
    /// Ranks (threads of this process; under MPI the world size).
    #[arg(long, default_value_t = 4)]
    ranks: usize,
    /// Densities of the sent set, each in (0, 1] (one per flag: repeat the
    /// flag for more).
    #[arg(long = "density", default_values_t = [0.01, 0.001])]
    densities: Vec<f64>,
    /// Only these schemes (one per flag: repeat the flag for more):
    /// sparcml_topk_sgd, redsync_rgc, redsync_rgc_quantized, dgc,
    /// spardl_global_residual. All when absent.
    #[arg(long = "scheme")]
    schemes: Vec<String>,
    /// Seeds to average over (1, 2, ..., seeds; from `--first-seed`).
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// The first of the seeds: `--first-seed 2 --seeds 2` runs seeds 2
    /// and 3 (one configuration's seeds split over several runs, which
    /// scripts/fashion-table.py averages).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    first_seed: u64,
    /// Write train.csv and the plots accuracy_vs_epoch.svg and
    /// accuracy_vs_bytes.svg into this directory.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    #[command(flatten)]
    args: TrainArgs,
}

/// Transports `--transport` can name.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum TransportKind {
    /// Ranks as threads of this process.
    Threads,
    /// MPI: run under `mpiexec -n P` (built with the `mpi` feature).
    #[cfg(feature = "mpi")]
    Mpi,
}

/// Backends `--backend` can name.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum BackendKind {
    /// The reference CPU backend.
    Cpu,
    /// The kernel backend on wgpu (any Vulkan device; Mesa's software
    /// Vulkan without a GPU). Needs the `wgpu` feature (on by default).
    Wgpu,
    /// The kernel backend on CUDA. Needs the `cuda` feature.
    Cuda,
}

/// A kernel backend's counters as the select report's.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn kernel_work(w: backend_cuda::Work) -> select::CallWork {
    select::CallWork {
        launches: w.launches,
        round_trips: w.round_trips,
        passes: w.passes,
    }
}

/// The select report on the backend `kind` names, and the backend's name.
fn select_on(
    kind: BackendKind,
    a: &SelectArgs,
) -> sparse_core::Result<(select::SelectReport, &'static str)> {
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    use sparse_core::BufferOps;
    #[cfg(not(all(feature = "wgpu", feature = "cuda")))]
    let missing = |feature: &str| sparse_core::Error::Unsupported {
        backend: "sparse-bench",
        what: format!("--backend {feature}: rebuild with `--features {feature}`"),
    };
    match kind {
        BackendKind::Cpu => Ok((select::run(&backend_cpu::Cpu, a)?, "cpu")),
        #[cfg(feature = "wgpu")]
        BackendKind::Wgpu => {
            let b = backend_cuda::WgpuBackend::new_default()?;
            let work = || kernel_work(b.work());
            Ok((select::run_counted(&b, a, Some(&work))?, b.name()))
        }
        #[cfg(not(feature = "wgpu"))]
        BackendKind::Wgpu => Err(missing("wgpu")),
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => {
            let b = backend_cuda::CudaBackend::new_default()?;
            let work = || kernel_work(b.work());
            Ok((select::run_counted(&b, a, Some(&work))?, b.name()))
        }
        #[cfg(not(feature = "cuda"))]
        BackendKind::Cuda => Err(missing("cuda")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.json;
    let result = match cli.command {
        None => run_default(json),
        Some(Command::Encode(a)) => run_encode(&a, json),
        Some(Command::Select(c)) => run_select(c.backend, &c.args, json),
        Some(Command::Allreduce(c)) => run_allreduce(c.transport, &c.args, json),
        Some(Command::Train(c)) => run_train(&c, json),
        Some(Command::Scale(a)) => run_scale(&a, json),
        Some(Command::Calibrate(a)) => run_calibrate(&a, json),
        Some(Command::Step(a)) => run_step(&a, json),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sparse-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `sparse-bench calibrate`: rank 0 prints the measurements and the fit
/// and writes the network file.
#[cfg(feature = "mpi")]
fn run_calibrate(a: &bench::calibrate::CalibrateArgs, json: bool) -> sparse_core::Result<()> {
    use bench::calibrate;
    calibrate::run_mpi(a, |size, c| {
        let text = calibrate::network_file(c, size);
        std::fs::write(&a.out, &text)
            .map_err(|e| sparse_core::Error::invalid("out", format!("{}: {e}", a.out.display())))?;
        if json {
            for s in &c.samples {
                bench::out!(
                    "{}",
                    serde_json::json!({
                        "kind": "calibrate", "world_size": size, "bytes": s.bytes,
                        "ping_pong_us": s.ping_pong * 1e6, "exchange_us": s.exchange * 1e6,
                        "shift_us": s.shift * 1e6, "model_us": calibrate::model(c.link, s.bytes) * 1e6,
                    })
                );
            }
        } else {
            bench::out!(
                "MPI transport, world size {size}: ping-pong and exchange between ranks 0 and 1, shift among all {size}"
            );
            print_table(calibrate::HEADER, &calibrate::table(c));
        }
        bench::out!(
            "fit: alpha {:.3} us, {:.3} GB/s; wrote {}",
            c.link.alpha() * 1e6,
            1e-9 / c.link.beta(),
            a.out.display()
        );
        Ok(())
    })
}

#[cfg(not(feature = "mpi"))]
fn run_calibrate(_: &bench::calibrate::CalibrateArgs, _: bool) -> sparse_core::Result<()> {
    Err(sparse_core::Error::Unsupported {
        backend: "sparse-bench",
        what: "calibrate measures the MPI transport: rebuild with `--features mpi` and run it under `mpiexec -n 2`".into(),
    })
}

/// `sparse-bench scale`: the table (or JSON lines) and the plot.
fn run_scale(a: &bench::scale::ScaleArgs, json: bool) -> sparse_core::Result<()> {
    use bench::scale;
    let report = scale::run_with(a, |row| {
        if std::env::var_os("SPARSE_BENCH_VERBOSE").is_some() {
            eprintln!(
                "{} P = {}: {:.3} ms simulated, {:.1} s wall",
                row.algo,
                row.ranks,
                row.sim_s * 1e3,
                row.wall.as_secs_f64()
            );
        }
    })?;
    if json {
        for v in scale::json(&report) {
            bench::out!("{v}");
        }
    } else {
        bench::out!(
            "Simulated times ({}); n = {}, density {}, overlap {}; memory cap {:.1} GiB ({})",
            report.network,
            a.n,
            a.density,
            a.overlap,
            report.mem_cap.gib,
            report.mem_cap.from
        );
        print_table(scale::HEADER, &scale::table(&report));
        bench::out!();
        for p in &report.planner {
            bench::out!(
                "P = {}: the planner picks {}; fastest candidate {}; regret {}",
                p.ranks,
                p.choice,
                p.best,
                p.regret.map_or_else(|| "-".into(), |r| format!("{r:.3}"))
            );
        }
        if !report.referee.is_empty() {
            let (header, rows) = scale::referee::table(&report.referee);
            bench::out!();
            bench::out!("SimGrid's replay of the same traces (--engine simgrid)");
            print_table(
                &header.iter().map(String::as_str).collect::<Vec<_>>(),
                &rows,
            );
            for note in scale::referee::notes(&report.referee) {
                bench::out!("{note}");
            }
        }
    }
    if let Some(path) = &a.svg {
        scale::plot(&report, path)?;
    }
    Ok(())
}

/// The default run: every subcommand at a small size, in seconds, ending
/// with a short training run.
fn run_default(json: bool) -> sparse_core::Result<()> {
    let min_time = Duration::from_millis(50);
    run_encode(
        &EncodeArgs {
            n: 1 << 20,
            density: 0.001,
            ranks: 8,
            seed: 1,
            min_time,
        },
        json,
    )?;
    bench::out!();
    run_select(
        BackendKind::Cpu,
        &SelectArgs {
            n: 1 << 20,
            density: 0.001,
            seed: 1,
            min_time,
        },
        json,
    )?;
    bench::out!();
    run_allreduce(
        TransportKind::Threads,
        &AllreduceArgs {
            ranks: 4,
            n: 1 << 18,
            density: 0.01,
            overlap: 0.5,
            algos: Vec::new(),
            seed: 1,
            reps: 3,
            gap_ms: 0.0,
            settle_ms: 0.0,
        },
        json,
    )?;
    bench::out!();
    // The user's first question: does a model still converge, and what
    // does a step send? Dense momentum SGD against RedSync's RGC over
    // TopkA at 1%, P = 4 threads, a few epochs.
    run_train(
        &TrainCli {
            transport: TransportKind::Threads,
            ranks: 4,
            densities: vec![0.01],
            schemes: vec!["redsync_rgc".into()],
            seeds: 1,
            first_seed: 1,
            out: None,
            args: TrainArgs {
                epochs: 8,
                hidden: Some(64),
                ..TrainArgs::default()
            },
        },
        json,
    )
}

fn run_allreduce(
    transport: TransportKind,
    a: &AllreduceArgs,
    json: bool,
) -> sparse_core::Result<()> {
    match transport {
        TransportKind::Threads => print_allreduce("threads", &allreduce::run_threads(a)?, json),
        #[cfg(feature = "mpi")]
        TransportKind::Mpi => allreduce::run_mpi(a, |rep| print_allreduce("mpi", rep, json))?,
    }
    Ok(())
}

fn opt(x: Option<u64>) -> String {
    x.map_or_else(|| "-".into(), |x| x.to_string())
}

/// A row's name in the table: parameters beyond the budget k (teams,
/// codecs, seeds) name the row, and `auto` shows its choice.
fn row_name(r: &bench::allreduce::AllreduceRow) -> String {
    let shown: Vec<&str> = r
        .params
        .split(',')
        .filter(|p| !p.is_empty() && !p.starts_with("k="))
        .collect();
    match &r.chose {
        Some(c) => format!("auto -> {c}"),
        None if r.algo == <sparse_coll::Auto<f32> as sparse_coll::Registered<f32>>::NAME
            || shown.is_empty() =>
        {
            r.algo.clone()
        }
        None => format!("{}:{}", r.algo, shown.join(",")),
    }
}

fn print_allreduce(transport: &str, rep: &AllreduceReport, json: bool) {
    if json {
        allreduce_json(transport, rep);
    } else {
        allreduce_table(transport, rep);
    }
}

/// The allreduce rows and the overlap measurement as JSON lines.
fn allreduce_json(transport: &str, rep: &AllreduceReport) {
    let prof = &rep.profile;
    for r in &rep.rows {
        let obj = serde_json::json!({
            "bench": "allreduce", "transport": transport, "algo": r.algo, "params": r.params,
            "chose": r.chose, "ranks": prof.p, "n": prof.n, "nnz": prof.k_max,
            "nnz_sum": prof.k_sum, "union": prof.union, "result_nnz": r.result_nnz,
            "bytes_recv_max": r.bytes_recv_max, "bytes_sent_max": r.bytes_sent_max,
            "msgs_max": r.msgs_max, "rounds": r.rounds, "model_bytes": r.model_bytes,
            "paper_bytes": r.paper_bytes,
            "ms": r.ms, "dense_ms": rep.dense_ms, "dense_algo": rep.dense_algo, "vs_dense": r.ms / rep.dense_ms,
            "dense_bytes_recv_max": rep.dense_bytes_recv_max,
            "floor_ms": r.floor_ms, "vs_floor": r.floor_ms.map(|f| r.ms / f),
            "max_abs_err": r.max_abs_err, "lossless": r.lossless,
        });
        bench::out!("{obj}");
    }
    if let Some(o) = &rep.overlap {
        let obj = serde_json::json!({
            "bench": "overlap", "transport": transport, "algo": o.algo, "ranks": prof.p,
            "n": prof.n, "compute_ms": o.compute_ms, "allreduce_ms": o.allreduce_ms,
            "sequential_ms": o.sequential_ms, "overlapped_ms": o.overlapped_ms,
            "cpus_per_rank": o.cpus_per_rank, "can_overlap": o.can_overlap(),
            "saved": o.saved().unwrap_or(0.0),
        });
        bench::out!("{obj}");
    }
}

/// The allreduce rows as a table, with a header line and notes.
fn allreduce_table(transport: &str, rep: &AllreduceReport) {
    let prof = &rep.profile;
    bench::out!(
        "allreduce: transport {transport}, {} ranks, n = {}, up to {} non-zeros per rank, union {}; x_dense is against the fastest dense allreduce in this run, {}: {:.3} ms; the ring's busiest rank received {} bytes",
        prof.p,
        prof.n,
        prof.k_max,
        prof.union,
        rep.dense_algo,
        rep.dense_ms,
        rep.dense_bytes_recv_max
    );
    let table: Vec<Vec<String>> = rep
        .rows
        .iter()
        .map(|r| {
            vec![
                row_name(r),
                r.result_nnz.to_string(),
                opt(r.bytes_recv_max),
                opt(r.bytes_sent_max),
                opt(r.msgs_max),
                opt(r.rounds),
                format!("{:.0}", r.model_bytes),
                format!("{:.3}", r.ms),
                format!("{:.3}", r.ms / rep.dense_ms),
                r.floor_ms.map_or("-".into(), |f| format!("{f:.3}")),
                r.floor_ms
                    .map_or("-".into(), |f| format!("{:.2}", r.ms / f)),
                format!("{:.2e}", r.max_abs_err),
                if r.lossless {
                    "yes".into()
                } else {
                    "no".into()
                },
            ]
        })
        .collect();
    print_table(
        &[
            "algo",
            "result_nnz",
            "recv_max",
            "sent_max",
            "msgs",
            "rounds",
            "model_bytes",
            "ms",
            "x_dense",
            "floor_ms",
            "x_floor",
            "max_err",
            "lossless",
        ],
        &table,
    );
    if rep.rows.iter().any(|r| r.floor_ms.is_some()) {
        bench::out!(
            "floor_ms: a bare MPI_Allgather of as many bytes as the row's calls received, timed after each call; mpi_allgather: one of the input's pairs, timed after every call of every row"
        );
    }
    if let Some(o) = &rep.overlap {
        bench::out!("{}", overlap_line(o, rep.profile.p));
    }
}

/// The non-blocking line: the measured saving where each rank had a CPU
/// for its step and one for its allreduce, else why nothing can overlap.
/// It never shows a negative saving: a slower overlapped run (noise, or
/// the two taking turns) says no saving was measured.
fn overlap_line(o: &bench::allreduce::OverlapReport, ranks: usize) -> String {
    let times = format!(
        "local step {:.3} ms, allreduce {:.3} ms; one after the other {:.3} ms, started together {:.3} ms",
        o.compute_ms, o.allreduce_ms, o.sequential_ms, o.overlapped_ms
    );
    let why = if !o.can_overlap() {
        format!(
            "nothing can overlap here: a rank's step and its allreduce's progress thread need a CPU each at once, and the {ranks} ranks have {:.1} CPUs each",
            o.cpus_per_rank
        )
    } else {
        match o.saved() {
            Some(s) => format!("{:.0}% saved", 100.0 * s),
            None => "no saving measured".into(),
        }
    };
    format!("non-blocking {}: {times} ({why})", o.algo)
}

fn run_encode(a: &EncodeArgs, json: bool) -> sparse_core::Result<()> {
    if !(a.density > 0.0 && a.density <= 1.0) {
        return Err(sparse_core::Error::invalid(
            "density",
            format!("{} not in (0, 1]", a.density),
        ));
    }
    if a.ranks == 0 || a.ranks > u32::MAX as usize {
        return Err(sparse_core::Error::invalid("ranks", "must be at least 1"));
    }
    let (v, rows) = encode::run(a)?;
    let (coo, dense) = (rows[0].bytes as f64, (v.dim() * 4) as f64);
    if json {
        for r in &rows {
            let obj = serde_json::json!({
                "bench": "encode", "encoding": r.encoding, "n": v.dim(), "nnz": v.nnz(), "ranks": a.ranks,
                "parts": r.parts, "bytes": r.bytes, "index_bytes": r.index_bytes,
                "ratio_coo": r.bytes as f64 / coo, "ratio_dense": r.bytes as f64 / dense,
                "encode_gbps": r.encode_gbps, "decode_gbps": r.decode_gbps,
                "lossless": r.lossless, "max_abs_err": r.max_abs_err,
            });
            bench::out!("{obj}");
        }
    } else {
        bench::out!(
            "encode: n = {}, nnz = {} (density {}), f32, {} hash-bitmap partitions; GB/s of sparse input (8 bytes per entry)",
            v.dim(),
            v.nnz(),
            a.density,
            a.ranks
        );
        let table: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                vec![
                    r.encoding.clone(),
                    r.bytes.to_string(),
                    r.index_bytes.to_string(),
                    format!("{:.3}", r.bytes as f64 / coo),
                    format!("{:.5}", r.bytes as f64 / dense),
                    format!("{:.2}", r.encode_gbps),
                    format!("{:.2}", r.decode_gbps),
                    if r.lossless {
                        "yes".into()
                    } else {
                        "no".into()
                    },
                    format!("{:.3e}", r.max_abs_err),
                ]
            })
            .collect();
        print_table(
            &[
                "encoding",
                "bytes",
                "index_bytes",
                "vs_coo",
                "vs_dense",
                "enc_GB/s",
                "dec_GB/s",
                "lossless",
                "max_err",
            ],
            &table,
        );
    }
    Ok(())
}

fn run_select(backend: BackendKind, a: &SelectArgs, json: bool) -> sparse_core::Result<()> {
    let (report, name) = select_on(backend, a)?;
    if json {
        for r in &report.rows {
            let obj = serde_json::json!({
                "bench": "select", "backend": name, "algo": r.algo, "n": report.n, "k": report.k,
                "selected": r.selected, "recall": r.recall, "ms": r.ms,
                "copy_ms": r.copy_ms, "nth_ms": report.nth_ms, "read_ms": report.read_ms,
                "vs_copy": r.ms / r.copy_ms, "vs_nth": r.ms / report.nth_ms,
                "vs_read": r.ms / report.read_ms,
                "launches": r.work.map(|w| w.launches),
                "round_trips": r.work.map(|w| w.round_trips),
                "passes": r.work.map(|w| w.passes),
            });
            bench::out!("{obj}");
        }
    } else {
        bench::out!(
            "select: backend {name}, n = {}, k = {}; baselines in this run: host copy {:.3} ms (median; each row is against the copy timed just before it), select_nth_unstable_by {:.3} ms, one read on the backend (max_abs) {:.3} ms",
            report.n,
            report.k,
            report.copy_ms,
            report.nth_ms,
            report.read_ms
        );
        let table: Vec<Vec<String>> = report
            .rows
            .iter()
            .map(|r| {
                vec![
                    r.algo.clone(),
                    r.selected.to_string(),
                    format!("{:.4}", r.recall),
                    format!("{:.3}", r.ms),
                    format!("{:.3}", r.copy_ms),
                    format!("{:.2}", r.ms / r.copy_ms),
                    format!("{:.2}", r.ms / report.read_ms),
                    format!("{:.2}", report.nth_ms / r.ms),
                ]
            })
            .collect();
        print_table(
            &[
                "algo",
                "selected",
                "recall",
                "ms",
                "copy_ms",
                "x_copy",
                "x_read",
                "nth_speedup",
            ],
            &table,
        );
    }
    Ok(())
}

fn run_train(c: &TrainCli, json: bool) -> sparse_core::Result<()> {
    use bench::train::{output, run};
    if c.seeds == 0 || c.ranks == 0 {
        return Err(sparse_core::Error::invalid(
            "seeds, ranks",
            "must be at least 1",
        ));
    }
    for &d in &c.densities {
        sparse_select::k_for_density(1, d)?;
    }
    let runs = run::plan(&bench::train::schemes_named(&c.schemes)?, &c.densities);
    let (mut train_set, test_set) = c.args.data.load()?;
    if let Some(n) = c.args.train_images {
        if n == 0 {
            return Err(sparse_core::Error::invalid(
                "--train-images",
                "must be at least 1",
            ));
        }
        train_set = train_set.range(0..n.min(train_set.len()));
    }
    let model = c.args.model(train_set.shape)?;
    let names: Vec<String> = model.layers().into_iter().map(|l| l.name).collect();
    // `_mpi` finalizes MPI when dropped, after rank 0 has printed:
    // MPICH over UCX's TCP can hang in `MPI_Finalize` (openucx/ucx#8738),
    // and the rows are out by then.
    let (out, _mpi) = train_on(c, &runs, &train_set, &test_set)?;
    let Some((summaries, name)) = out else {
        return Ok(()); // not rank 0
    };
    let rows = output::rows(&summaries, &names);
    if let Some(dir) = &c.out {
        output::write(dir, &summaries, &rows)?;
    }
    if json {
        for r in &rows {
            bench::out!("{}", output::json(r, &rows, name));
        }
        return Ok(());
    }
    print_train(name, c, &model, &rows, train_set.len(), test_set.len());
    Ok(())
}

/// Runs `runs` on `c.transport` with a progress bar; on rank 0 returns the
/// summaries and the transport's name, elsewhere `None`.
/// Rank 0's summaries and the transport's name (`None` on other ranks),
/// and what must outlive the printing (MPI's universe: dropping it
/// finalizes MPI).
type TrainOut = (
    Option<(Vec<bench::train::run::Summary>, &'static str)>,
    Box<dyn std::any::Any>,
);

fn train_on(
    c: &TrainCli,
    runs: &[bench::train::Run],
    train_set: &bench::train::data::Set,
    test_set: &bench::train::data::Set,
) -> sparse_core::Result<TrainOut> {
    use bench::train::{self, run};
    let last = c.first_seed.checked_add(c.seeds - 1).ok_or_else(|| {
        sparse_core::Error::invalid("--first-seed, --seeds", "the last seed overflows u64")
    })?;
    let seeds: Vec<u64> = (c.first_seed..=last).collect();
    let ticks = runs.len() * seeds.len() * c.args.epochs;
    match c.transport {
        TransportKind::Threads => {
            let steps = train::steps_per_epoch(train_set.len() / c.ranks, c.args.batch);
            let bar = std::sync::Mutex::new(bench::Progress::new(
                (ticks * steps * c.ranks) as u64,
                "rank steps",
            ));
            let tick = || {
                bar.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .inc()
            };
            let s = run::run_threads(c.ranks, runs, &c.args, &seeds, train_set, test_set, &tick)?;
            bar.into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .finish();
            Ok((Some((s, "threads")), Box::new(())))
        }
        #[cfg(feature = "mpi")]
        TransportKind::Mpi => {
            let universe = mpi::initialize().ok_or_else(|| sparse_core::Error::Transport {
                rank: 0,
                detail: "MPI was already initialized".into(),
            })?;
            sparse_coll::MpiTransport::abort_on_panic();
            let mut t = sparse_coll::MpiTransport::new(universe.world())
                .with_wait(sparse_coll::MpiWait::from_env()?)?;
            let rank = sparse_coll::Transport::rank(&t);
            let p = sparse_coll::Transport::size(&t);
            let steps = train::steps_per_epoch(train_set.len() / p, c.args.batch);
            let total = if rank == 0 { ticks * steps } else { 0 };
            let bar = std::sync::Mutex::new(bench::Progress::new(total as u64, "steps"));
            let tick = || {
                if rank == 0 {
                    bar.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .inc();
                }
            };
            let s =
                match run::run_transport(&mut t, runs, &c.args, &seeds, train_set, test_set, &tick)
                {
                    // `--fail-rank` under MPI: this process dies as a lost rank
                    // would, without finalizing MPI (mpiexec then ends the job).
                    Err(e @ sparse_core::Error::Injected { .. }) => {
                        eprintln!("sparse-bench: {e}: this process exits as a lost rank");
                        std::process::exit(3);
                    }
                    s => s?,
                };
            bar.into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .finish();
            drop(t);
            Ok(((rank == 0).then_some((s, "mpi")), Box::new(universe)))
        }
    }
}

fn print_train(
    transport: &str,
    c: &TrainCli,
    model: &bench::train::model::Model,
    rows: &[bench::train::output::Row],
    train_len: usize,
    test_len: usize,
) {
    use bench::train::output;
    let ranks = rows.first().map_or(c.ranks, |r| r.ranks);
    bench::out!(
        "train: transport {transport}, {ranks} ranks, {} ({} parameters), {} {train_len} train / {test_len} test, batch {} per rank, {} epochs, lr {}, {} seed(s) from seed {}; accuracy is the mean over seeds after the last epoch, each row against its dense counterpart in this run",
        model.describe(),
        model.parameters(),
        c.args.data.name(),
        c.args.batch,
        c.args.epochs,
        c.args.lr,
        c.seeds,
        c.first_seed
    );
    print_table(&output::HEADER, &output::table(rows));
    bench::out!(
        "layers (dense and why, or the density each compressed layer got in the last epoch):"
    );
    for line in output::layer_lines(rows) {
        bench::out!("  {line}");
    }
    for r in rows {
        for (seed, resumed) in r.resumed.iter().enumerate() {
            if let Some((step, ranks)) = resumed {
                bench::out!(
                    "{} {} seed {}: resumed from the checkpoint of step {step} saved by {ranks} ranks; {} steps lost",
                    r.run.name(),
                    r.density,
                    c.first_seed + seed as u64,
                    r.lost_steps
                );
            }
        }
    }
    if rows.iter().any(|r| !r.identical) {
        bench::out!("WARNING: ranks held different weights in some run");
    }
}

fn run_step(a: &bench::step::StepArgs, json: bool) -> sparse_core::Result<()> {
    let rep = bench::step::run_named(a)?;
    bench::step::print(&rep, json);
    if let Some(path) = &a.timeline {
        bench::step::write_timeline(&rep, path)?;
    }
    Ok(())
}
