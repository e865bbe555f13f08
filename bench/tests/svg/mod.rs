//! SVGs drawn to pixels for the tests (`resvg`, without text: the checks
//! are on lines and markers).

/// `svg` rendered at its own size; `what` names it in a panic.
pub fn render(svg: &str, what: &str) -> resvg::tiny_skia::Pixmap {
    let tree = resvg::usvg::Tree::from_str(svg, &resvg::usvg::Options::default())
        .unwrap_or_else(|e| panic!("{what}: not an SVG resvg reads: {e}"));
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height()).unwrap();
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    pixmap
}
