//! Every plot of the results page renders: each SVG that `bench/RESULTS.md`
//! links, and every SVG kept under `bench/`, is parsed and drawn to pixels
//! (`resvg`, without text), and the drawing holds lines, not a blank page.

mod svg;

use std::path::{Path, PathBuf};

/// The SVGs kept under `dir`, found by walking it.
fn svgs_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            svgs_under(&path, out);
        } else if path.extension().is_some_and(|e| e == "svg") {
            out.push(path);
        }
    }
}

/// The share of the drawing's pixels that are neither transparent nor
/// white, and its size.
fn drawn(path: &Path) -> (f64, (u32, u32)) {
    let svg = std::fs::read_to_string(path).unwrap();
    let pixmap = svg::render(&svg, &path.display().to_string());
    let inked = pixmap
        .pixels()
        .iter()
        .filter(|p| p.alpha() > 0 && (p.red(), p.green(), p.blue()) != (255, 255, 255))
        .count();
    (
        inked as f64 / pixmap.pixels().len() as f64,
        (pixmap.width(), pixmap.height()),
    )
}

#[test]
fn every_plot_of_the_results_page_renders() {
    let bench = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(bench.join("RESULTS.md")).unwrap();
    let mut linked = Vec::new();
    for (i, _) in page.match_indices(".svg)") {
        let start = page[..i].rfind("](").expect("an SVG link") + 2;
        linked.push(bench.join(&page[start..i + 4]));
    }
    let mut kept = Vec::new();
    svgs_under(bench, &mut kept);
    for path in &linked {
        assert!(
            path.is_file(),
            "RESULTS.md links {}, which is not kept",
            path.display()
        );
    }
    kept.extend(linked);
    kept.sort();
    kept.dedup();
    assert!(!kept.is_empty(), "no plot under bench/");
    for path in &kept {
        let (share, (w, h)) = drawn(path);
        assert!(w >= 100 && h >= 100, "{}: {w} x {h} pixels", path.display());
        // Axes, lines and markers: a plot inks a few percent of its
        // pixels; a blank or broken one none.
        assert!(
            share > 0.002,
            "{}: only {:.4}% of its pixels drawn",
            path.display(),
            100.0 * share
        );
    }
}
