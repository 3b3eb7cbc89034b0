//! The one error type of brrr-perf.

use thiserror::Error;

/// What was wrong with the input of a brrr-perf calculation.
///
/// Estimators never panic on bad input; they say which argument was bad and why.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum PerfError {
    /// A size, count or rate that must be positive (and finite) was not.
    #[error("{name} must be positive, got {value}")]
    NonPositive {
        /// The argument's name.
        name: &'static str,
        /// The value given.
        value: f64,
    },
    /// A value outside the range it must lie in (e.g. an MFU above 1).
    #[error("{name} = {value} is out of range: {expected}")]
    OutOfRange {
        /// The argument's name.
        name: &'static str,
        /// The value given.
        value: f64,
        /// What was expected, in words.
        expected: &'static str,
    },
    /// A parallel layout that does not divide the model (layers by PP, heads by TP, ...).
    #[error("{what} = {total} is not divisible by {by_name} = {by}")]
    NotDivisible {
        /// The quantity being split (e.g. "layers").
        what: &'static str,
        /// Its value.
        total: u64,
        /// The degree it is split by (e.g. "pipeline parallel degree").
        by_name: &'static str,
        /// The degree.
        by: u64,
    },
    /// A name that is not in a table (GPU, dtype, optimizer, ...).
    #[error("unknown {kind} '{name}'; known: {known}")]
    Unknown {
        /// What kind of thing was looked up.
        kind: &'static str,
        /// The name given.
        name: String,
        /// The known names, comma separated.
        known: String,
    },
    /// A combination of arguments that is not supported, with the reason.
    #[error("invalid configuration: {0}")]
    Invalid(String),
    /// The GPU spec lacks a figure the calculation needs (e.g. no FP8 tensor cores on V100).
    #[error("{gpu} has no published {what}")]
    MissingSpec {
        /// The GPU's name.
        gpu: String,
        /// The missing figure.
        what: String,
    },
    /// Writing a trace, plot or table failed.
    #[error("I/O error on {path}: {message}")]
    Io {
        /// The file involved.
        path: String,
        /// The underlying error, as text (kept as text so the error stays `Clone + PartialEq`).
        message: String,
    },
}

/// Shorthand for results in this crate.
pub type Result<T> = std::result::Result<T, PerfError>;

/// Checks that `value` is positive and finite.
pub(crate) fn positive(name: &'static str, value: f64) -> Result<f64> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(PerfError::NonPositive { name, value })
    }
}

/// Checks that an integer count is at least one.
pub(crate) fn at_least_one(name: &'static str, value: u64) -> Result<u64> {
    if value >= 1 {
        Ok(value)
    } else {
        Err(PerfError::NonPositive {
            name,
            value: value as f64,
        })
    }
}

/// Checks that `total` is divisible by `by` (and `by` is at least one).
pub(crate) fn divides(
    what: &'static str,
    total: u64,
    by_name: &'static str,
    by: u64,
) -> Result<()> {
    at_least_one(by_name, by)?;
    if total.is_multiple_of(by) {
        Ok(())
    } else {
        Err(PerfError::NotDivisible {
            what,
            total,
            by_name,
            by,
        })
    }
}
