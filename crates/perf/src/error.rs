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
    /// A size or count too large to compute with: an integer product (GPUs = DP × TP × PP,
    /// tokens per step, ...) beyond `u64`, or a result beyond the largest finite `f64`.
    #[error("{what} is too large: {detail}")]
    TooLarge {
        /// The quantity being computed.
        what: &'static str,
        /// The inputs that made it overflow, in words.
        detail: String,
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

/// The product of integer `factors` (name, value), or [`PerfError::TooLarge`] naming them when
/// it does not fit in a `u64` (a wrapped product would silently print "0 GPUs").
pub(crate) fn checked_product(what: &'static str, factors: &[(&'static str, u64)]) -> Result<u64> {
    factors
        .iter()
        .try_fold(1u64, |acc, &(_, v)| acc.checked_mul(v))
        .ok_or_else(|| {
            let terms: Vec<String> = factors.iter().map(|(n, v)| format!("{n} {v}")).collect();
            PerfError::TooLarge {
                what,
                detail: format!("{} exceeds {}", terms.join(" × "), u64::MAX),
            }
        })
}

/// Checks that a computed `value` is finite: inputs near `f64::MAX` overflow to infinity,
/// which must become an error naming the quantity, never an `inf` in a report.
pub(crate) fn finite(what: &'static str, value: f64) -> Result<f64> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(PerfError::TooLarge {
            what,
            detail: format!("the result is {value}; the inputs are too large"),
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
