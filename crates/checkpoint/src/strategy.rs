//! The strategies `brrr train --checkpoint` offers, each a schedule of the same kind.

use crate::PlanError;
use crate::chain::Chain;
use crate::optimal::optimal;
use crate::schedule::{Mode, Op, Schedule};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How much of the forward to keep for the backward.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Strategy {
    /// Keep every stash (no recomputation).
    #[default]
    None,
    /// Keep the input of every `k`-th segment and recompute the others during the
    /// backward; the last group runs without recomputation, since its backward comes
    /// first (as PyTorch's `checkpoint_sequential`).
    Every(usize),
    /// [`Strategy::Every`] with `k = round(√n)`: `√n` kept inputs and at most `√n`
    /// segments' stashes at once, for one extra forward at most (Chen et al. 2016,
    /// "Training Deep Nets with Sublinear Memory Cost", §4.1).
    Sqrt,
    /// Keep everything but attention's `[T, T]` scores, recomputed from q and k in the
    /// backward (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
    /// Transformer Models", §4.2).
    Selective,
    /// The least recomputation whose memory stays within this many bytes
    /// ([`crate::optimal`]).
    Budget(u64),
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Strategy::None => write!(f, "none"),
            Strategy::Every(k) => write!(f, "every:{k}"),
            Strategy::Sqrt => write!(f, "sqrt"),
            Strategy::Selective => write!(f, "selective"),
            Strategy::Budget(b) => write!(f, "budget:{b}"),
        }
    }
}

impl FromStr for Strategy {
    type Err = PlanError;
    /// `none`, `every:K`, `sqrt`, `selective` or `budget:BYTES` (BYTES may end in `K`,
    /// `M` or `G`, powers of 1024).
    fn from_str(s: &str) -> Result<Self, PlanError> {
        let bad = || PlanError::Parse(s.to_string());
        Ok(match s.trim() {
            "none" => Strategy::None,
            "sqrt" => Strategy::Sqrt,
            "selective" => Strategy::Selective,
            other => match other.split_once(':') {
                Some(("every", k)) => match k.parse::<usize>() {
                    Ok(k) if k >= 1 => Strategy::Every(k),
                    _ => return Err(bad()),
                },
                Some(("budget", b)) => Strategy::Budget(parse_bytes(b).ok_or_else(bad)?),
                _ => return Err(bad()),
            },
        })
    }
}

impl From<Strategy> for String {
    fn from(s: Strategy) -> String {
        s.to_string()
    }
}

impl TryFrom<String> for Strategy {
    type Error = PlanError;
    fn try_from(s: String) -> Result<Self, PlanError> {
        s.parse()
    }
}

/// `1234`, `64K`, `1.5M`, `2G` as bytes (powers of 1024).
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1u64 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult);
    }
    let x: f64 = num.parse().ok()?;
    (x.is_finite() && x >= 0.0 && x * (mult as f64) < u64::MAX as f64)
        .then(|| (x * mult as f64).round() as u64)
}

impl Strategy {
    /// The schedule this strategy runs on `chain`.
    pub fn plan(&self, chain: &Chain) -> Result<Schedule, PlanError> {
        let n = chain.len();
        if n == 0 {
            return Err(PlanError::EmptyChain);
        }
        match *self {
            Strategy::None => Ok(every_group(n, &[0], Mode::SaveAll)),
            Strategy::Selective => Ok(every_group(n, &[0], Mode::SaveSelective)),
            Strategy::Every(k) => Ok(every_group(n, &group_starts(n, k), Mode::SaveAll)),
            Strategy::Sqrt => Ok(every_group(
                n,
                &group_starts(n, sqrt_group(n)),
                Mode::SaveAll,
            )),
            Strategy::Budget(bytes) => optimal(chain, bytes),
        }
    }
}

/// Chen et al.'s group size for `n` segments: `round(√n)`, at least 1.
pub fn sqrt_group(n: usize) -> usize {
    ((n as f64).sqrt().round() as usize).max(1)
}

/// The first segment of each group of `k`: `0, k, 2k, …` below `n`.
pub fn group_starts(n: usize, k: usize) -> Vec<usize> {
    (0..n).step_by(k.max(1)).collect()
}

/// The schedule of groups starting at `starts` (the first is 0): the first sweep keeps
/// the input of each group but the last, whose segments keep `mode`'s stash; the
/// backward runs the last group's backwards, then for each earlier group (last first)
/// recomputes it with stashes from its kept input and runs its backwards.
fn every_group(n: usize, starts: &[usize], mode: Mode) -> Schedule {
    let last = *starts.last().unwrap_or(&0);
    let mut ops = Vec::new();
    for seg in 0..n {
        let mode = if seg >= last {
            mode
        } else if starts.contains(&seg) {
            Mode::SaveInput
        } else {
            Mode::NoSave
        };
        ops.push(Op::Forward { seg, mode });
    }
    let mut ends: Vec<usize> = starts[1..].to_vec();
    ends.push(n);
    for (g, &start) in starts.iter().enumerate().rev() {
        let end = ends[g];
        if start != last {
            ops.extend((start..end).map(|seg| Op::Forward { seg, mode }));
        }
        ops.extend((start..end).rev().map(|seg| Op::Backward { seg }));
    }
    Schedule { ops }
}
