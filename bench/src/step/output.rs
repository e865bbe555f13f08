//! The report of `sparse-bench step`: its table ([`HEADER`], [`table`]),
//! the bucketed table ([`BUCKET_HEADER`], [`bucket_table`]), their JSON
//! lines ([`json_rows`], [`bucket_json_rows`]) and all printed ([`print`]).

use super::{RunPlan, StepReport, device_note, rule_name};

/// The bucketed table's column names ([`bucket_table`]): every phase on
/// the device, communication simulated.
pub const BUCKET_HEADER: [&str; 13] = [
    "model",
    "P",
    "scheme",
    "mode",
    "calls",
    "compute ms (model)",
    "select ms (device)",
    "update ms (device)",
    "comm ms (sim)",
    "exposed comm ms",
    "step ms",
    "speedup (same mode)",
    "speedup over DDP",
];

/// The bucketed rows ([`super::bucket`]), in [`BUCKET_HEADER`]'s order.
pub fn bucket_table(rep: &StepReport) -> Vec<Vec<String>> {
    rep.bucket_rows
        .iter()
        .map(|r| {
            vec![
                rep.model.clone(),
                r.ranks.to_string(),
                r.scheme.clone(),
                r.mode.name().to_string(),
                r.calls.to_string(),
                format!("{:.1}", r.compute_ms),
                format!("{:.3}", r.select_ms),
                format!("{:.3}", r.update_ms),
                format!("{:.2}", r.comm_ms),
                format!("{:.2}", r.exposed_comm_ms),
                format!("{:.1}", r.step_ms),
                format!("{:.2}x", r.speedup),
                format!("{:.2}x", r.speedup_vs_ddp),
            ]
        })
        .collect()
}

/// One JSON object per bucketed row (`"kind": "bucket_step"`).
pub fn bucket_json_rows(rep: &StepReport) -> Vec<serde_json::Value> {
    rep.bucket_rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "kind": "bucket_step",
                "model": rep.model,
                "ranks": r.ranks,
                "scheme": r.scheme,
                "baseline": r.baseline,
                "mode": r.mode.name(),
                "bucket_mib": rep.bucket_mib,
                "backward_by": rep.backward_by,
                "calls": r.calls,
                "device": rep.device.name,
                "compute_ms": r.compute_ms,
                "device_select_ms": r.select_ms,
                "device_update_ms": r.update_ms,
                "comm_ms": r.comm_ms,
                "agree_ms": r.agree_ms,
                "agree_rounds": super::comm::AGREE_ROUNDS,
                "exposed_comm_ms": r.exposed_comm_ms,
                "step_ms": r.step_ms,
                "speedup": r.speedup,
                "speedup_vs_ddp": r.speedup_vs_ddp,
                "comm": rep.network,
            })
        })
        .collect()
}

/// Prints the bucketed table with its header lines.
fn print_buckets(rep: &StepReport) {
    crate::out!(
        "# bucketed step (as DDP runs it): buckets of at most {} MiB filled in backward \
         order, compressed layers and layers kept dense apart; per layer = the table above's \
         step (one call per compressed layer, the dense layers in one ring); fused = one call \
         per bucket, nothing overlapped; fused+overlap = each bucket's call started when its \
         last layer's backward (and its selection, on the device) is done, the calls one at a \
         time in that order; forward = compute / 3, backward = 2 compute / 3 shared among the \
         layers by {}; step = forward + max(backward and selections, last call) + \
         update, with the trainer's agreement rounds (comm includes them: 2 a step, the entry \
         round (after the forward pass in fused+overlap) and the commit round before the \
         update); speedup over DDP = the dense baseline's fused+overlap step over this one",
        rep.bucket_mib,
        rep.backward_by
    );
    crate::print_table(&BUCKET_HEADER, &bucket_table(rep));
}

/// The table's column names: the headline columns (device) first, then
/// this CPU's measured select and update and their speedup, labelled.
pub const HEADER: [&str; 17] = [
    "model",
    "P",
    "scheme",
    "density",
    "compute ms (model)",
    "select ms (device, modelled)",
    "update ms (device, modelled)",
    "comm ms (sim)",
    "step ms (device)",
    "speedup (device, modelled)",
    "speedup overlapped",
    "speedup compute+comm",
    "select ms (CPU, measured)",
    "update ms (CPU, measured)",
    "step ms (CPU phases)",
    "speedup (CPU phases)",
    "scaled",
];

/// The table's rows, in [`HEADER`]'s order.
pub fn table(rep: &StepReport) -> Vec<Vec<String>> {
    rep.rows
        .iter()
        .map(|r| {
            vec![
                rep.model.clone(),
                r.ranks.to_string(),
                r.scheme.clone(),
                format!("{}", r.density),
                format!("{:.1}", r.compute_ms),
                format!("{:.3}", r.device_select_ms),
                format!("{:.3}", r.device_update_ms),
                format!("{:.2}", r.comm_ms()),
                format!("{:.1}", r.step_ms),
                format!("{:.2}x", r.speedup),
                format!("{:.2}x", r.speedup_overlapped),
                format!("{:.2}x", r.speedup_comm),
                format!("{:.1}", r.cpu_select_ms),
                format!("{:.1}", r.cpu_update_ms),
                format!("{:.1}", r.cpu_step_ms),
                format!("{:.2}x", r.speedup_cpu),
                if r.scaled_calls == 0 {
                    "no".into()
                } else {
                    format!("{} calls, up to x{:.1}", r.scaled_calls, r.max_scale)
                },
            ]
        })
        .collect()
}

/// One JSON object per run and rank count (`"kind": "step"`).
pub fn json_rows(rep: &StepReport) -> Vec<serde_json::Value> {
    rep.rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "kind": "step",
                "model": rep.model,
                "ranks": r.ranks,
                "scheme": r.scheme,
                "collective": r.collective,
                "baseline": r.baseline,
                "density": r.density,
                "device": rep.device.name,
                "compute_ms": r.compute_ms,
                "compute": rep.compute.1,
                "device_select_ms": r.device_select_ms,
                "device_update_ms": r.device_update_ms,
                "device_phases": device_note(&rep.device),
                "cpu_select_ms": r.cpu_select_ms,
                "cpu_update_ms": r.cpu_update_ms,
                "cpu_phases": "measured on this machine's CPU (CPU backend, one rank)",
                "comm_ms": r.comm_ms(),
                "comm_sparse_ms": r.comm_sparse_ms,
                "comm_dense_ms": r.comm_dense_ms,
                "agree_ms": r.agree_ms,
                "agree_rounds": super::comm::AGREE_ROUNDS,
                "step_ms": r.step_ms,
                "overlapped_ms": r.overlapped_ms,
                "cpu_step_ms": r.cpu_step_ms,
                "speedup": r.speedup,
                "speedup_overlapped": r.speedup_overlapped,
                "speedup_compute_comm": r.speedup_comm,
                "speedup_cpu_phases": r.speedup_cpu,
                "scaled_calls": r.scaled_calls,
                "max_scale": r.max_scale,
                "comm": rep.network,
            })
        })
        .collect()
}

/// Prints the report: a table with its header lines, then the bucketed
/// table ([`bucket_table`]), or JSON lines (one object per run and rank
/// count, `"kind": "step"`, then one per run with the layers kept dense,
/// `"kind": "dense_layers"`, then one per bucketed row, `"kind":
/// "bucket_step"`).
pub fn print(rep: &StepReport, json: bool) {
    if json {
        for obj in json_rows(rep) {
            crate::out!("{obj}");
        }
        for p in &rep.plans {
            crate::out!("{}", dense_layers_json(rep, p));
        }
        for obj in bucket_json_rows(rep) {
            crate::out!("{obj}");
        }
        return;
    }
    crate::out!(
        "# step of {} ({} parameters) on the {}; communication {}; compute {:.1} ms ({}); \
         step = compute + select + update + comm (no overlap; comm includes the trainer's \
         2 agreement rounds a step); overlapped = \
         max(compute, comm without the rounds) + rounds + select + update; compute+comm leaves select and update \
         out; wall {:.1} s",
        rep.model,
        rep.params,
        rep.device.name,
        rep.network,
        rep.compute.0,
        rep.compute.1,
        rep.wall.as_secs_f64()
    );
    crate::out!("# device columns: {}", device_note(&rep.device));
    crate::out!(
        "# CPU columns: select and update measured on this machine's CPU (CPU backend, one \
         rank's real state), beside the device's compute: not like with like, for reference"
    );
    crate::print_table(&HEADER, &table(rep));
    crate::out!("# layers kept dense (fused into one ring allreduce), by rule:");
    for p in &rep.plans {
        let (tc, tb) = p.dense_by("threshold");
        let (dc, db) = p.dense_by("dims");
        let (bc, bb) = p.dense_by("dense");
        let compressed = p.layers.iter().filter(|l| l.kept_dense.is_none()).count();
        crate::out!(
            "#   {}: {compressed} compressed; RedSync's compress threshold {tc} layers \
             ({tb} bytes); DGC's one-dimension rule {dc} layers ({db} bytes){}",
            p.run.name(),
            if bc > 0 {
                format!("; dense baseline {bc} layers ({bb} bytes)")
            } else {
                String::new()
            }
        );
    }
    crate::out!(
        "# scaled: a layer above --max-dim is simulated at --max-dim and its bandwidth \
         part scaled by n / max-dim (the factor shown); the fused dense call likewise"
    );
    print_buckets(rep);
}

/// The layers `p` keeps dense, as a JSON object (`"kind": "dense_layers"`).
fn dense_layers_json(rep: &StepReport, p: &RunPlan) -> serde_json::Value {
    let layers: Vec<serde_json::Value> = p
        .layers
        .iter()
        .filter_map(|l| {
            let k = l.kept_dense?;
            Some(serde_json::json!({
                "layer": l.spec.name,
                "params": l.spec.len,
                "dims": l.spec.dims,
                "rule": rule_name(&k),
            }))
        })
        .collect();
    let by = |w: &str| {
        let (count, bytes) = p.dense_by(w);
        serde_json::json!({"count": count, "bytes": bytes})
    };
    serde_json::json!({
        "kind": "dense_layers",
        "model": rep.model,
        "scheme": p.run.name(),
        "threshold": by("threshold"),
        "dims": by("dims"),
        "layers": layers,
    })
}
