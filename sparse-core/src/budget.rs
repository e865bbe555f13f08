//! How much of a vector a lossy step keeps: a [`Density`] (a share of the
//! dimension) or a [`Budget`] (a count or a density). Both are checked when
//! made and only then, so a training configuration, a selector and every
//! collective that shares one value cannot disagree on what is valid:
//! `residual-sgd`'s `Config`, `sparse-select`'s selectors and
//! `sparse-coll`'s lossy collectives all take these types.

use std::fmt;

use crate::{Error, Result};

/// A density in `(0, 1]`: the share of an input's dimension a lossy step
/// keeps. Valid by construction ([`Density::new`]); [`Density::k_for`]
/// resolves it for a dimension without a second check.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Density(f64);

impl Density {
    /// The whole input (`1.0`).
    pub const ONE: Self = Self(1.0);

    /// `density`, checked.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `density` unless
    /// `0 < density <= 1` (NaN included).
    pub fn new(density: f64) -> Result<Self> {
        if !(density > 0.0 && density <= 1.0) {
            return Err(Error::invalid(
                "density",
                format!("{density} not in (0, 1]"),
            ));
        }
        Ok(Self(density))
    }

    /// The density as a number.
    pub fn get(self) -> f64 {
        self.0
    }

    /// The number of elements this density keeps of `n`: `round(density
    /// n)`, at least 1 when `n > 0` and at most `n`.
    pub fn k_for(self, n: usize) -> usize {
        ((self.0 * n as f64).round() as usize).clamp(n.min(1), n)
    }
}

impl fmt::Display for Density {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl TryFrom<f64> for Density {
    type Error = Error;
    fn try_from(density: f64) -> Result<Self> {
        Self::new(density)
    }
}

/// The number of elements a density keeps of `n`: [`Density::k_for`] of
/// [`Density::new`]`(density)`, for callers holding a plain number.
/// `sparse-select`'s selectors and the lossy collectives of `sparse-coll`
/// resolve a density with it (through [`Density`]).
///
/// # Errors
/// [`Error::InvalidParameter`] unless `0 < density <= 1`.
pub fn k_for_density(n: usize, density: f64) -> Result<usize> {
    Ok(Density::new(density)?.k_for(n))
}

/// The budget of a lossy step: the entries its result keeps, a count
/// `k >= 1` or a [`Density`] of the input's dimension, resolved at each
/// call ([`Budget::k_for`]). Validated when made, so a budget never keeps
/// nothing: `k = 0` is an error, not "drop everything".
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget(BudgetKind);

#[derive(Debug, Clone, Copy, PartialEq)]
enum BudgetKind {
    K(usize),
    Density(Density),
}

impl Budget {
    /// Keep `k` entries.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for `k = 0`.
    pub fn k(k: usize) -> Result<Self> {
        if k == 0 {
            return Err(Error::invalid(
                "k",
                "0 keeps nothing: give k >= 1, or a density",
            ));
        }
        Ok(Self(BudgetKind::K(k)))
    }

    /// Keep `round(density dim)` entries of an input of dimension `dim`,
    /// at least one ([`Density::k_for`]).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] unless `0 < density <= 1`.
    pub fn density(density: f64) -> Result<Self> {
        Ok(Self::from(Density::new(density)?))
    }

    /// The entries kept of an input of dimension `dim`: `k`, or the
    /// density's share of `dim` (at least 1 for `dim > 0`).
    pub fn k_for(&self, dim: usize) -> usize {
        match self.0 {
            BudgetKind::K(k) => k,
            BudgetKind::Density(d) => d.k_for(dim),
        }
    }

    /// The density, where the budget is one.
    pub fn as_density(&self) -> Option<Density> {
        match self.0 {
            BudgetKind::K(_) => None,
            BudgetKind::Density(d) => Some(d),
        }
    }

    /// The parameter as a registry spec writes it: `k=40` or
    /// `density=0.01`.
    pub fn param(&self) -> String {
        match self.0 {
            BudgetKind::K(k) => format!("k={k}"),
            BudgetKind::Density(d) => format!("density={d}"),
        }
    }
}

impl From<Density> for Budget {
    fn from(d: Density) -> Self {
        Self(BudgetKind::Density(d))
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.param())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn density_is_checked_once_and_resolves_by_rounding() {
        for bad in [0.0, -0.1, 1.0 + 1e-12, f64::NAN, f64::INFINITY] {
            let e = Density::new(bad).unwrap_err();
            assert!(e.to_string().contains("density"), "{e}");
            assert!(Budget::density(bad).is_err());
            assert!(k_for_density(10, bad).is_err());
        }
        let d = Density::new(0.25).unwrap();
        // round(0.25 n), at least one of a non-empty input, at most n.
        for (n, k) in [(0, 0), (1, 1), (2, 1), (3, 1), (6, 2), (10, 3), (100, 25)] {
            assert_eq!(d.k_for(n), k, "n = {n}");
            assert_eq!(k_for_density(n, 0.25).unwrap(), k);
            assert_eq!(Budget::from(d).k_for(n), k);
        }
        assert_eq!(Density::ONE.k_for(7), 7);
        assert_eq!(Density::new(1e-9).unwrap().k_for(5), 1);
    }

    #[test]
    fn budget_prints_as_a_registry_parameter() {
        assert_eq!(Budget::k(40).unwrap().to_string(), "k=40");
        assert_eq!(Budget::density(0.01).unwrap().to_string(), "density=0.01");
        assert_eq!(Budget::k(7).unwrap().k_for(3), 7);
        assert!(Budget::k(0).is_err());
        assert_eq!(Budget::k(3).unwrap().as_density(), None);
        assert_eq!(
            Budget::density(0.5).unwrap().as_density(),
            Some(Density::new(0.5).unwrap())
        );
    }
}
