//! A layer as the trainer and its settings see it: a name, a size and a
//! tensor's dimensions. It depends on nothing else in the crate, so that
//! the settings ([`crate::Config`]) and the trainer both build on it.

/// A layer: its name, its number of parameters, and its tensor's number of
/// dimensions (DGC's rule, [`crate::Config::compress_min_dims`], keeps
/// tensors of fewer dimensions dense; RedSync's quantized mode exempts the
/// last layer of more than one dimension).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerSpec {
    /// Name, for reports.
    pub name: String,
    /// Parameters.
    pub len: usize,
    /// Tensor dimensions (1 for a bias).
    pub dims: usize,
}

impl LayerSpec {
    /// Matrices (two dimensions, so DGC's rule compresses them) named
    /// `layer0`, `layer1`, ... of the given sizes.
    pub fn matrices(sizes: &[usize]) -> Vec<Self> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &len)| Self {
                name: format!("layer{i}"),
                len,
                dims: 2,
            })
            .collect()
    }
}
