//! A schedule: the exact sequence of forwards and backwards the executor runs, and its
//! memory curve under the chain's model.

use crate::PlanError;
use crate::chain::Chain;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;

/// What a forward of one segment keeps (Beaumont et al. 2019, §3: `F∅`, `Fck`, `Fall`,
/// plus Korthikanti et al.'s selective mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// Keeps nothing: the output moves on, the stash is dropped.
    NoSave,
    /// Keeps the segment's input `x_i`, so that it can be recomputed later.
    SaveInput,
    /// Keeps the whole stash: the backward of this segment can run.
    SaveAll,
    /// Keeps the stash without attention's scores, which the backward recomputes.
    SaveSelective,
}

/// One step of a schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Forward of segment `seg` from `x_seg` (kept, or the output of the previous op).
    Forward {
        /// Segment index.
        seg: usize,
        /// What it keeps.
        mode: Mode,
    },
    /// Backward of segment `seg`: consumes its stash and `δ_{seg+1}`, produces `δ_seg`,
    /// and frees `x_seg`.
    Backward {
        /// Segment index.
        seg: usize,
    },
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Forward { seg, mode } => {
                let m = match mode {
                    Mode::NoSave => "∅",
                    Mode::SaveInput => "ck",
                    Mode::SaveAll => "all",
                    Mode::SaveSelective => "sel",
                };
                write!(f, "F{m}{seg}")
            }
            Op::Backward { seg } => write!(f, "B{seg}"),
        }
    }
}

/// A whole forward-and-backward of a chain. The ops before the first backward are one
/// sweep `F0 … F(n-1)` (what a training step's forward runs); the rest is the backward,
/// with its recomputations.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// The ops in order.
    pub ops: Vec<Op>,
}

/// Memory after and during each op of a schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    /// Bytes held after each op (one entry per op).
    pub after: Vec<u64>,
    /// The most bytes alive during each op.
    pub during: Vec<u64>,
    /// The maximum of `during`.
    pub peak: u64,
    /// Total cost of the schedule's forwards and recomputations minus one forward of the
    /// chain: what recomputation adds.
    pub extra_cost: f64,
    /// Total cost of the schedule (forwards, backwards, selective recomputation).
    pub total_cost: f64,
}

impl Schedule {
    /// The length of the first forward sweep (ops before the first backward).
    pub fn forward_len(&self) -> usize {
        self.ops
            .iter()
            .position(|op| matches!(op, Op::Backward { .. }))
            .unwrap_or(self.ops.len())
    }

    /// Segments whose stash (whole or selective) the first sweep keeps, and inputs it
    /// keeps: what the forward leaves for the backward.
    pub fn kept_after_forward(&self) -> (BTreeSet<usize>, BTreeSet<usize>) {
        let (mut stashes, mut inputs) = (BTreeSet::new(), BTreeSet::new());
        for op in &self.ops[..self.forward_len()] {
            if let Op::Forward { seg, mode } = *op {
                match mode {
                    Mode::SaveAll | Mode::SaveSelective => {
                        stashes.insert(seg);
                    }
                    Mode::SaveInput => {
                        inputs.insert(seg);
                    }
                    Mode::NoSave => {}
                }
            }
        }
        (stashes, inputs)
    }

    /// A compact text form, `Fck0 F∅1 Fall2 B2 …`.
    pub fn to_text(&self) -> String {
        let ops: Vec<String> = self.ops.iter().map(|o| o.to_string()).collect();
        ops.join(" ")
    }

    /// Runs the schedule on the chain's memory model and checks that it is valid: every
    /// forward has its input, every backward its stash and gradient, each segment's
    /// backward runs once, and everything is freed at the end.
    ///
    /// The model: bytes held = `x_j` for every kept input, every stashed segment's input
    /// and the current forward output, plus the stashes, plus the current gradient.
    /// During a forward of `i` its stash, output and `forward_extra` are added (the
    /// executor stashes and then drops what the mode does not keep); during a backward,
    /// `δ_i` and `backward_extra`.
    pub fn simulate(&self, chain: &Chain) -> Result<Curve, PlanError> {
        let mut sim = Sim::new(chain);
        let mut curve = Curve {
            after: Vec::with_capacity(self.ops.len()),
            during: Vec::with_capacity(self.ops.len()),
            peak: 0,
            extra_cost: -chain.forward_cost(),
            total_cost: 0.0,
        };
        for (k, op) in self.ops.iter().enumerate() {
            let (during, cost, fwd) = sim
                .apply(*op)
                .map_err(|m| PlanError::InvalidSchedule { op: k, reason: m })?;
            curve.during.push(during);
            curve.after.push(sim.held());
            curve.peak = curve.peak.max(during);
            curve.total_cost += cost;
            curve.extra_cost += fwd;
        }
        if sim.done != chain.len() || sim.delta != Some(0) {
            return Err(PlanError::InvalidSchedule {
                op: self.ops.len(),
                reason: format!(
                    "the schedule ends after {} of {} backwards",
                    sim.done,
                    chain.len()
                ),
            });
        }
        Ok(curve)
    }
}

/// The simulator's state: what is held between ops.
struct Sim<'a> {
    chain: &'a Chain,
    /// Inputs kept as checkpoints (`x_0` from the start).
    inputs: BTreeSet<usize>,
    /// Stashed segments, with the bytes their stash holds and whether it is selective.
    stashes: std::collections::BTreeMap<usize, (u64, bool)>,
    /// Index of the last forward's output, if it is still the current one.
    front: Option<usize>,
    /// Index of the current gradient `δ_i`.
    delta: Option<usize>,
    /// Backwards run.
    done: usize,
}

impl<'a> Sim<'a> {
    fn new(chain: &'a Chain) -> Self {
        Sim {
            chain,
            inputs: BTreeSet::from([0]),
            stashes: Default::default(),
            front: None,
            delta: None,
            done: 0,
        }
    }

    fn held(&self) -> u64 {
        let xs: BTreeSet<usize> = self
            .inputs
            .iter()
            .copied()
            .chain(self.stashes.keys().copied())
            .chain(self.front)
            .collect();
        let x: u64 = xs.iter().map(|&i| self.chain.x_bytes(i)).sum();
        let s: u64 = self.stashes.values().map(|v| v.0).sum();
        x + s + self.delta.map_or(0, |i| self.chain.delta_bytes(i))
    }

    /// Applies `op`; returns (bytes during it, its cost, its cost that counts towards one
    /// forward plus recomputation: a forward's cost, or the selective recomputation).
    fn apply(&mut self, op: Op) -> Result<(u64, f64, f64), String> {
        let n = self.chain.len();
        match op {
            Op::Forward { seg, mode } => {
                let s = self.chain.segments.get(seg).ok_or("no such segment")?;
                if !(self.inputs.contains(&seg) || self.front == Some(seg)) {
                    return Err(format!("forward of {seg} without its input"));
                }
                if self.stashes.contains_key(&seg) || self.done >= n - seg {
                    return Err(format!("forward of {seg} whose stash or backward exists"));
                }
                let during = self.held() + s.stash + self.chain.x_bytes(seg + 1) + s.forward_extra;
                match mode {
                    Mode::SaveInput => {
                        self.inputs.insert(seg);
                    }
                    Mode::SaveAll => {
                        self.stashes.insert(seg, (s.stash, false));
                    }
                    Mode::SaveSelective => {
                        let kept = s.selective_stash.unwrap_or(s.stash);
                        self.stashes
                            .insert(seg, (kept, s.selective_stash.is_some()));
                    }
                    Mode::NoSave => {}
                }
                self.front = (seg + 1 < n).then_some(seg + 1);
                Ok((during, s.forward, s.forward))
            }
            Op::Backward { seg } => {
                let s = self.chain.segments.get(seg).ok_or("no such segment")?;
                let want = (seg + 1 < n).then_some(seg + 1);
                if self.delta != want {
                    return Err(format!("backward of {seg} without δ_{}", seg + 1));
                }
                let (_, selective) = self
                    .stashes
                    .get(&seg)
                    .copied()
                    .ok_or(format!("backward of {seg} without its stash"))?;
                self.front = None;
                // A selective backward holds the recomputed scores again while it runs
                // (an upper bound: measured, the gap is 0 to 1.4% of the peak).
                let refill = if selective {
                    s.stash.saturating_sub(s.selective_stash.unwrap_or(s.stash))
                } else {
                    0
                };
                let during = self.held() + self.chain.delta_bytes(seg) + s.backward_extra + refill;
                self.stashes.remove(&seg);
                self.inputs.remove(&seg);
                self.delta = Some(seg);
                self.done += 1;
                let recompute = if selective { s.selective_cost } else { 0.0 };
                Ok((during, s.backward + recompute, recompute))
            }
        }
    }
}
