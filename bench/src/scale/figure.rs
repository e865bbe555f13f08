//! The plot of `sparse-bench scale --svg FILE`: simulated time of one call
//! against the rank count, log-log, one line per algorithm asked for.
//!
//! What makes it readable, and what `tests/scale.rs` checks by rendering
//! it to pixels:
//! - every line has a colour of its own ([`PALETTE`], 16 colours, none of
//!   them black, white or grey, which the axes and grid use) and a marker
//!   of its own ([`MARKERS`] shapes, filled for the first 8 lines and
//!   hollow for the next 8);
//! - lossless algorithms are drawn solid, lossy ones dashed;
//! - the x axis has a tick at every P of the sweep, labelled with P (a
//!   label that would overlap the one before it is left out; its tick
//!   stays);
//! - the legend is beside the chart, not over it, one entry per algorithm
//!   asked for, as wide as the longest name.

use super::ScaleReport;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The line colours, in the order of the algorithms (RGB): distinct on
/// white, none black, white or grey. More than 16 lines reuse them, with
/// other markers.
pub const PALETTE: [(u8, u8, u8); 16] = [
    (31, 119, 180),  // blue
    (214, 39, 40),   // red
    (44, 160, 44),   // green
    (255, 127, 14),  // orange
    (148, 103, 189), // purple
    (140, 86, 75),   // brown
    (227, 119, 194), // pink
    (23, 190, 207),  // cyan
    (188, 189, 34),  // olive
    (26, 35, 126),   // navy
    (0, 137, 123),   // teal
    (197, 17, 98),   // magenta
    (128, 0, 0),     // maroon
    (100, 221, 23),  // lime
    (249, 168, 37),  // amber (after orange's line, far from it)
    (96, 125, 139),  // blue grey
];

/// The marker shapes: line `i` gets shape `i % 8`, filled for `i / 8`
/// even and hollow for odd (16 distinct markers).
pub const MARKERS: [&str; 8] = [
    "circle",
    "square",
    "triangle up",
    "diamond",
    "triangle down",
    "pentagon",
    "hexagon",
    "star",
];

/// Marker radius, pixels.
const MARKER_R: f64 = 5.0;

/// Pixels of a character of the tick and legend labels (13 px sans-serif,
/// a generous average), for their spacing.
const CHAR_PX: f64 = 7.5;

/// The colour of line `i`.
pub fn colour(i: usize) -> RGBColor {
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    RGBColor(r, g, b)
}

/// The marker of line `i`: its shape's name and whether it is filled.
pub fn marker(i: usize) -> (&'static str, bool) {
    (
        MARKERS[i % MARKERS.len()],
        (i / MARKERS.len()).is_multiple_of(2),
    )
}

/// The outline of shape `s` of [`MARKERS`] around the origin, pixels.
fn outline(s: usize) -> Vec<(i32, i32)> {
    let ring = |n: usize, turn: f64, r: &dyn Fn(usize) -> f64| -> Vec<(i32, i32)> {
        (0..n)
            .map(|j| {
                let a = turn + std::f64::consts::TAU * j as f64 / n as f64;
                let r = r(j);
                ((r * a.cos()).round() as i32, (r * a.sin()).round() as i32)
            })
            .collect()
    };
    let up = -std::f64::consts::FRAC_PI_2;
    let quarter = std::f64::consts::FRAC_PI_4;
    match s % MARKERS.len() {
        0 => ring(16, 0.0, &|_| MARKER_R),
        1 => ring(4, quarter, &|_| MARKER_R * 1.2),
        2 => ring(3, up, &|_| MARKER_R * 1.3),
        3 => ring(4, 0.0, &|_| MARKER_R * 1.3),
        4 => ring(3, -up, &|_| MARKER_R * 1.3),
        5 => ring(5, up, &|_| MARKER_R * 1.2),
        6 => ring(6, 0.0, &|_| MARKER_R * 1.2),
        _ => ring(10, up, &|j| {
            if j % 2 == 0 {
                MARKER_R * 1.4
            } else {
                MARKER_R * 0.6
            }
        }),
    }
}

/// Draws line `i`'s marker at `at` (pixels of `area`).
fn draw_marker(
    area: &DrawingArea<SVGBackend, Shift>,
    i: usize,
    at: (i32, i32),
) -> Result<(), Box<dyn std::error::Error>> {
    let (_, filled) = marker(i);
    let pts: Vec<(i32, i32)> = outline(i)
        .into_iter()
        .map(|(x, y)| (at.0 + x, at.1 + y))
        .collect();
    if filled {
        area.draw(&Polygon::new(pts, colour(i).filled()))?;
    } else {
        let mut closed = pts.clone();
        closed.push(pts[0]);
        // White inside, so that a hollow marker reads as hollow over a line.
        area.draw(&Polygon::new(pts, WHITE.filled()))?;
        area.draw(&PathElement::new(closed, colour(i).stroke_width(2)))?;
    }
    Ok(())
}

/// A time in milliseconds as an axis label: as few digits as it needs.
pub fn ms_label(v: f64) -> String {
    if !(v.is_finite() && v > 0.0) {
        return format!("{v}");
    }
    let digits = (-v.log10().floor()).max(0.0) as usize + 1;
    let s = format!("{v:.digits$}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// The algorithms of `r` in the order of their first row, each with
/// whether it is lossless.
fn algorithms(r: &ScaleReport) -> Vec<(&str, bool)> {
    let mut out: Vec<(&str, bool)> = Vec::new();
    for row in &r.rows {
        if !out.iter().any(|(a, _)| *a == row.algo) {
            out.push((&row.algo, row.lossless));
        }
    }
    out
}

/// Writes the plot of `r` to `path` as SVG.
///
/// # Errors
/// The file cannot be written.
pub fn write(r: &ScaleReport, path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let algos = algorithms(r);
    let longest = algos
        .iter()
        .map(|(a, _)| a.chars().count())
        .max()
        .unwrap_or(0);
    let legend_w = (70.0 + CHAR_PX * longest as f64).max(220.0) as u32;
    // Room for every legend entry below the heading.
    let h = (52 + 64 + 24 * algos.len() as u32).max(620);
    let chart_w = 760u32;
    let root = SVGBackend::new(path, (chart_w + legend_w, h)).into_drawing_area();
    root.fill(&WHITE)?;
    let (head, body) = root.split_vertically(52);
    let centre = Pos::new(HPos::Center, VPos::Top);
    let mid = (chart_w + legend_w) as i32 / 2;
    head.draw(&Text::new(
        "simulated time of one call against ranks",
        (mid, 8),
        ("sans-serif", 18).into_font().color(&BLACK).pos(centre),
    ))?;
    head.draw(&Text::new(
        r.network.clone(),
        (mid, 32),
        ("sans-serif", 13).into_font().color(&BLACK).pos(centre),
    ))?;
    let (left, right) = body.split_horizontally(chart_w);
    chart(r, &algos, &left)?;
    legend(&algos, &right)?;
    root.present()?;
    Ok(())
}

/// The chart: log2 P on x with a tick at every P, log10 ms on y.
fn chart(
    r: &ScaleReport,
    algos: &[(&str, bool)],
    area: &DrawingArea<SVGBackend, Shift>,
) -> Result<(), Box<dyn std::error::Error>> {
    let pts = |a: &str| -> Vec<(f64, f64)> {
        r.rows
            .iter()
            .filter(|row| row.algo == a && row.sim_s > 0.0)
            .map(|row| ((row.ranks as f64).log2(), row.sim_s * 1e3))
            .collect()
    };
    let mut ranks: Vec<usize> = r.rows.iter().map(|row| row.ranks).collect();
    ranks.sort_unstable();
    ranks.dedup();
    let xs: Vec<f64> = ranks.iter().map(|&p| (p as f64).log2()).collect();
    let (x0, x1) = match (xs.first(), xs.last()) {
        (Some(&a), Some(&b)) if a < b => (a - 0.04 * (b - a), b + 0.04 * (b - a)),
        (Some(&a), _) => (a - 1.0, a + 1.0),
        _ => (0.0, 1.0),
    };
    let ys: Vec<f64> = algos
        .iter()
        .flat_map(|(a, _)| pts(a))
        .map(|p| p.1)
        .collect();
    let (y0, y1) = ys
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), &y| (l.min(y), h.max(y)));
    let (y0, y1) = if y0 < y1 {
        (y0 / 1.5, y1 * 1.5)
    } else if y0 == y1 {
        (y0 / 2.0, y0 * 2.0)
    } else {
        (1e-3, 1.0)
    };
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(52)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, (y0..y1).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .x_desc("ranks P (log scale)")
        .y_desc("simulated ms of one call, slowest rank (log scale)")
        .y_label_formatter(&|v| ms_label(*v))
        .label_style(("sans-serif", 13))
        .draw()?;
    // A grid line and a tick at every P of the sweep, labelled where the
    // label clears the one before it.
    let grid = RGBColor(220, 220, 220);
    let mut last_right = i32::MIN;
    for (&p, &x) in ranks.iter().zip(&xs) {
        chart.draw_series(LineSeries::new([(x, y0), (x, y1)], grid.stroke_width(1)))?;
        let (px, py) = chart.backend_coord(&(x, y0));
        let base = area.get_base_pixel();
        let (px, py) = (px - base.0, py - base.1);
        area.draw(&PathElement::new([(px, py), (px, py + 6)], BLACK))?;
        let label = p.to_string();
        let half = (CHAR_PX * label.len() as f64 / 2.0).ceil() as i32;
        if px - half > last_right + 4 {
            area.draw(&Text::new(
                label,
                (px, py + 9),
                ("sans-serif", 13)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Center, VPos::Top)),
            ))?;
            last_right = px + half;
        }
    }
    for (i, (a, lossless)) in algos.iter().enumerate() {
        let series = pts(a);
        let style = colour(i).stroke_width(2);
        if *lossless {
            chart.draw_series(LineSeries::new(series.clone(), style))?;
        } else {
            chart.draw_series(DashedLineSeries::new(series.clone(), 9, 5, style))?;
        }
        let base = area.get_base_pixel();
        for p in series {
            let (px, py) = chart.backend_coord(&p);
            draw_marker(area, i, (px - base.0, py - base.1))?;
        }
    }
    Ok(())
}

/// The legend: one entry per algorithm (a line sample, solid or dashed,
/// its marker, its name), under a line saying what solid and dashed mean.
fn legend(
    algos: &[(&str, bool)],
    area: &DrawingArea<SVGBackend, Shift>,
) -> Result<(), Box<dyn std::error::Error>> {
    let left = Pos::new(HPos::Left, VPos::Center);
    let font = ("sans-serif", 13).into_font().color(&BLACK).pos(left);
    area.draw(&Text::new(
        "solid: lossless, dashed: lossy",
        (8, 24),
        font.clone(),
    ))?;
    for (i, (a, lossless)) in algos.iter().enumerate() {
        let y = 52 + 24 * i as i32;
        let line = [(8, y), (48, y)];
        let style = colour(i).stroke_width(3);
        if *lossless {
            area.draw(&PathElement::new(line, style))?;
        } else {
            area.draw(&DashedPathElement::new(line, 9, 5, style))?;
        }
        draw_marker(area, i, (28, y))?;
        area.draw(&Text::new(a.to_string(), (58, y), font.clone()))?;
    }
    Ok(())
}
