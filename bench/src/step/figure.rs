//! The timeline of `sparse-bench step --timeline FILE.svg`: one
//! `fused+overlap` step of every run at the largest rank count, two lanes
//! a run (the device: forward, backward, each bucket's selection, update;
//! the network: each bucket's call), time on a shared x axis in ms.
//!
//! Plain SVG written here (rectangles and labels need no plotting
//! library): every phase is one `<rect>` with the id `phase-R-I` (run `R`,
//! phase `I` of its [`Timeline`]) and a `<title>` saying what it is and
//! when; the legend's swatches have ids `legend-KIND`. `tests/step.rs`
//! parses it with `usvg` as `tests/scale.rs` does the scale plot, and
//! counts one rectangle per phase. The colours are the scale plot's
//! ([`crate::scale::figure::PALETTE`]); consecutive calls alternate two
//! greens so that queued calls read apart.

use super::StepReport;
use super::timeline::{Kind, Lane, Phase, Timeline};
use crate::scale::figure::{PALETTE, ms_label};
use sparse_core::{Error, Result};
use std::fmt::Write as _;

/// Width of the run labels, pixels.
const LABEL_W: f64 = 230.0;
/// Width of the time axis, pixels.
const CHART_W: f64 = 900.0;
/// Height of a lane, pixels.
const LANE_H: f64 = 18.0;
/// Space between two runs, pixels.
const RUN_GAP: f64 = 14.0;
/// Top of the first lane, pixels.
const TOP: f64 = 64.0;

/// The fill of a phase (RGB).
fn fill(p: &Phase) -> (u8, u8, u8) {
    match p.kind {
        Kind::Forward => PALETTE[15],
        Kind::Backward => PALETTE[0],
        Kind::Select => PALETTE[3],
        Kind::Comm if p.bucket.unwrap_or(0) % 2 == 1 => PALETTE[10],
        Kind::Comm => PALETTE[2],
        Kind::Update => PALETTE[4],
        Kind::Agree => PALETTE[7],
    }
}

/// `s` with the characters SVG text cannot hold escaped.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A tick spacing of 1, 2 or 5 times a power of ten giving about 8 ticks
/// up to `max` ms.
fn tick_step(max: f64) -> f64 {
    let raw = (max / 8.0).max(1e-9);
    let pow = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * pow)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * pow)
}

/// The timeline of `rep` as SVG text: per run a device lane and a network
/// lane, one `<rect>` per phase (forward, backward, each bucket's
/// selection and call, update), the layout of this module's doc.
pub fn timeline_svg(rep: &StepReport) -> String {
    let max = rep
        .timelines
        .iter()
        .map(Timeline::step_ms)
        .fold(0.0, f64::max)
        .max(1e-9);
    let x = |ms: f64| LABEL_W + ms / max * CHART_W;
    let run_h = 2.0 * LANE_H + 2.0 + RUN_GAP;
    let axis_y = TOP + run_h * rep.timelines.len() as f64;
    let (w, h) = (LABEL_W + CHART_W + 30.0, axis_y + 80.0);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>\n"
    );
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">one step of {} at P = {}, \
         fused+overlap, buckets of {} MiB, on the {}</text>\n<text x=\"{}\" y=\"42\" \
         text-anchor=\"middle\">communication {}; backward shared among the layers by {}</text>",
        w / 2.0,
        escape(&rep.model),
        rep.timeline_ranks,
        rep.bucket_mib,
        rep.device.name,
        w / 2.0,
        escape(&rep.network),
        rep.backward_by
    );
    for (r, (tl, plan)) in rep.timelines.iter().zip(&rep.plans).enumerate() {
        let y0 = TOP + run_h * r as f64;
        lanes(&mut s, r, tl, &plan.run.name(), y0, &x);
    }
    axis(&mut s, max, axis_y, &x);
    legend(&mut s, axis_y + 44.0);
    s.push_str("</svg>\n");
    s
}

/// Run `r`'s two lanes at `y0`: its labels and one rectangle per phase.
fn lanes(s: &mut String, r: usize, tl: &Timeline, name: &str, y0: f64, x: &dyn Fn(f64) -> f64) {
    let lane_y = |lane: Lane| match lane {
        Lane::Device => y0,
        Lane::Network => y0 + LANE_H + 2.0,
    };
    for (lane, what) in [(Lane::Device, "device"), (Lane::Network, "network")] {
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{} {what}</text>",
            LABEL_W - 6.0,
            lane_y(lane) + LANE_H - 5.0,
            escape(name)
        );
    }
    for (i, p) in tl.phases.iter().enumerate() {
        let (cr, cg, cb) = fill(p);
        let bucket = p
            .bucket
            .map_or(String::new(), |b| format!(" of bucket {b}"));
        let _ = writeln!(
            s,
            "<rect id=\"phase-{r}-{i}\" x=\"{:.2}\" y=\"{}\" width=\"{:.2}\" height=\"{LANE_H}\" \
             fill=\"rgb({cr},{cg},{cb})\" stroke=\"white\" stroke-width=\"0.5\"><title>{}: {}{bucket}, \
             {:.3} to {:.3} ms</title></rect>",
            x(p.start),
            lane_y(p.lane),
            (x(p.end) - x(p.start)).max(0.5),
            escape(name),
            p.kind.name(),
            p.start,
            p.end
        );
    }
}

/// The time axis at `y`: a line and a labelled tick every [`tick_step`].
fn axis(s: &mut String, max: f64, y: f64, x: &dyn Fn(f64) -> f64) {
    let _ = writeln!(
        s,
        "<line x1=\"{LABEL_W}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"black\"/>",
        LABEL_W + CHART_W
    );
    let step = tick_step(max);
    let mut t = 0.0;
    while t <= max * (1.0 + 1e-9) {
        let _ = writeln!(
            s,
            "<line x1=\"{0:.2}\" y1=\"{y}\" x2=\"{0:.2}\" y2=\"{1}\" stroke=\"black\"/>\
             <text x=\"{0:.2}\" y=\"{2}\" text-anchor=\"middle\">{3}</text>",
            x(t),
            y + 5.0,
            y + 18.0,
            if t == 0.0 { "0".into() } else { ms_label(t) }
        );
        t += step;
    }
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">ms from the step's start</text>",
        LABEL_W + CHART_W / 2.0,
        y + 34.0
    );
}

/// The legend at `y`: a swatch and a name per kind of phase.
fn legend(s: &mut String, y: f64) {
    let kinds = [
        Kind::Forward,
        Kind::Backward,
        Kind::Select,
        Kind::Comm,
        Kind::Update,
        Kind::Agree,
    ];
    for (i, k) in kinds.into_iter().enumerate() {
        let (r, g, b) = fill(&Phase {
            lane: Lane::Device,
            kind: k,
            bucket: None,
            start: 0.0,
            end: 0.0,
        });
        let x0 = LABEL_W + 150.0 * i as f64;
        let _ = writeln!(
            s,
            "<rect id=\"legend-{0}\" x=\"{x0}\" y=\"{y}\" width=\"14\" height=\"14\" \
             fill=\"rgb({r},{g},{b})\"/><text x=\"{1}\" y=\"{2}\">{0}</text>",
            k.name(),
            x0 + 20.0,
            y + 12.0
        );
    }
}

/// Writes [`timeline_svg`] of `rep` to `path`.
///
/// # Errors
/// [`Error::InvalidParameter`] naming the file when it cannot be written.
pub fn write_timeline(rep: &StepReport, path: &std::path::Path) -> Result<()> {
    std::fs::write(path, timeline_svg(rep)).map_err(|e| {
        Error::invalid(
            "timeline",
            format!(
                "cannot write {}: {e}; give a path in a writable directory",
                path.display()
            ),
        )
    })
}
