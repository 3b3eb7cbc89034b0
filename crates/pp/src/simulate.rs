//! Runs a schedule on a model of time: each compute action takes its cost, a message
//! arrives `comm` after its send, a receive waits for its message, and a stage runs its
//! actions strictly in order. Gives the timeline, the idle (bubble) fraction and the
//! micro-batches in flight per stage.

use crate::schedule::{Action, Schedule};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Times of one micro-batch through one chunk, in any unit.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    /// Forward.
    pub f: f64,
    /// Backward for the input gradient.
    pub b: f64,
    /// Backward for the weight gradient.
    pub w: f64,
    /// Latency of one message between stages.
    pub comm: f64,
}

impl Costs {
    /// F = B = W = 1, free messages: the unit costs zero-bubble schedules are drawn for.
    pub fn unit() -> Self {
        Costs {
            f: 1.0,
            b: 1.0,
            w: 1.0,
            comm: 0.0,
        }
    }

    /// These costs for one of `v` chunks (each chunk holds `1/v` of the stage's layers).
    pub fn per_chunk(self, v: usize) -> Self {
        let v = v.max(1) as f64;
        Costs {
            f: self.f / v,
            b: self.b / v,
            w: self.w / v,
            comm: self.comm,
        }
    }

    /// The time of `a` (zero for communication, whose cost is the arrival delay).
    pub fn of(&self, a: &Action) -> f64 {
        match a {
            Action::F { .. } => self.f,
            Action::B { .. } => self.b,
            Action::W { .. } => self.w,
            Action::BW { .. } => self.b + self.w,
            _ => 0.0,
        }
    }
}

/// One compute action placed in time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Span {
    /// The stage that ran it.
    pub stage: usize,
    /// The compute action (F, B, W or BW).
    pub action: Action,
    /// Start time, in the unit of the [`Costs`] (seconds for a measured run).
    pub start: f64,
    /// End time, same unit; `end - start` is the action's cost.
    pub end: f64,
}

/// What a simulation (or a measured run) gives.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// Stages.
    pub p: usize,
    /// Every compute action, stage by stage in execution order.
    pub spans: Vec<Span>,
    /// Time from the first start to the last end.
    pub makespan: f64,
    /// Busy time per stage.
    pub busy: Vec<f64>,
    /// Most micro-batch chunks between their F and their backward (B or BW) at once,
    /// per stage: how many activation stashes the stage holds at its peak.
    pub peak_in_flight: Vec<usize>,
    /// Most micro-batch chunks between their B and their W at once, per stage (the
    /// extra state a zero-bubble schedule keeps for its deferred W).
    pub peak_pending_w: Vec<usize>,
}

impl Timeline {
    /// Idle time over total time, all stages together: `1 − Σ busy / (p · makespan)`.
    pub fn bubble_fraction(&self) -> f64 {
        if self.makespan <= 0.0 || self.p == 0 {
            return 0.0;
        }
        1.0 - self.busy.iter().sum::<f64>() / (self.p as f64 * self.makespan)
    }

    /// Idle fraction of stage `r`.
    pub fn idle_fraction(&self, r: usize) -> f64 {
        match self.busy.get(r) {
            Some(b) if self.makespan > 0.0 => 1.0 - b / self.makespan,
            _ => 0.0,
        }
    }

    /// Idle time over the ideal (busiest stage's compute) time: `makespan / ideal − 1`,
    /// the form `(p − 1)/m` and `(p − 1)/(v·m)` are stated in.
    pub fn bubble_over_ideal(&self) -> f64 {
        let ideal = self.busy.iter().copied().fold(0.0, f64::max);
        if ideal <= 0.0 {
            0.0
        } else {
            self.makespan / ideal - 1.0
        }
    }

    /// The period when steps run back to back with no synchronisation between them
    /// (Qi et al. 2024 replace the optimizer step's all-reduce by a post-validation so
    /// that a stage starts the next step as soon as it is done): the longest time any
    /// one stage spends from its first start to its last end.
    pub fn period(&self) -> f64 {
        (0..self.p)
            .map(|r| {
                let mine = self.spans.iter().filter(|s| s.stage == r);
                let a = mine.clone().map(|s| s.start).fold(f64::INFINITY, f64::min);
                let b = mine.map(|s| s.end).fold(f64::NEG_INFINITY, f64::max);
                if b > a { b - a } else { 0.0 }
            })
            .fold(0.0, f64::max)
    }

    /// The bubble fraction in that steady state: `1 − Σ busy / (p · period)`. The
    /// same as [`Timeline::bubble_fraction`] for GPipe and 1F1B (their first stage is
    /// busy from the first start to the last end); near 0 for ZB-H2.
    pub fn steady_bubble_fraction(&self) -> f64 {
        let period = self.period();
        if period <= 0.0 || self.p == 0 {
            return 0.0;
        }
        1.0 - self.busy.iter().sum::<f64>() / (self.p as f64 * period)
    }

    /// A timeline from measured spans (times in any unit, e.g. seconds); in-flight
    /// counts come from the order of the spans.
    pub fn from_spans(p: usize, mut spans: Vec<Span>) -> Timeline {
        spans.sort_by(|a, b| {
            (a.stage, a.start)
                .partial_cmp(&(b.stage, b.start))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        let t0 = spans.iter().map(|s| s.start).fold(f64::INFINITY, f64::min);
        let t1 = spans
            .iter()
            .map(|s| s.end)
            .fold(f64::NEG_INFINITY, f64::max);
        let mut busy = vec![0.0; p];
        let mut flight = vec![InFlight::default(); p];
        for s in &spans {
            if let Some(b) = busy.get_mut(s.stage) {
                *b += s.end - s.start;
                flight[s.stage].apply(&s.action);
            }
        }
        Timeline {
            p,
            makespan: if t1 > t0 { t1 - t0 } else { 0.0 },
            busy,
            peak_in_flight: flight.iter().map(|f| f.peak).collect(),
            peak_pending_w: flight.iter().map(|f| f.peak_w).collect(),
            spans,
        }
    }
}

/// Activation stashes and pending weight gradients held by one stage.
#[derive(Clone, Debug, Default)]
pub(crate) struct InFlight {
    pub now: usize,
    pub peak: usize,
    pub w_now: usize,
    pub peak_w: usize,
}

impl InFlight {
    pub(crate) fn apply(&mut self, a: &Action) {
        match a {
            Action::F { .. } => {
                self.now += 1;
                self.peak = self.peak.max(self.now);
            }
            Action::BW { .. } => self.now = self.now.saturating_sub(1),
            Action::B { .. } => {
                self.now = self.now.saturating_sub(1);
                self.w_now += 1;
                self.peak_w = self.peak_w.max(self.w_now);
            }
            Action::W { .. } => self.w_now = self.w_now.saturating_sub(1),
            _ => {}
        }
    }
}

/// Where a simulation stopped: each stuck stage, the index of its blocked action, and
/// the action.
#[derive(Clone, Debug, PartialEq)]
pub struct Deadlock {
    /// `(stage, index into the stage's actions, action)` for every stage that had not
    /// finished, each blocked on a receive whose message never comes.
    pub stuck: Vec<(usize, usize, Action)>,
}

impl std::fmt::Display for Deadlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the schedule deadlocks:")?;
        for (stage, i, action) in &self.stuck {
            write!(f, " stage {stage} waits at action {i} ({action})")?;
            f.write_str(";")?;
        }
        write!(f, " a message each waits for is never sent")
    }
}

impl std::error::Error for Deadlock {}

/// A message's identity: sender, receiver, whether it is a gradient, micro-batch, and
/// the receiving chunk.
type MsgKey = (usize, usize, bool, u32, u32);

/// Simulates `s` with `costs` (per chunk). `Err` if some stage waits forever for a
/// message (a deadlock or a missing send).
pub fn simulate(s: &Schedule, costs: Costs) -> Result<Timeline, Deadlock> {
    let p = s.stages.len();
    let mut idx = vec![0usize; p];
    let mut clock = vec![0.0f64; p];
    let mut arrivals: HashMap<MsgKey, f64> = HashMap::new();
    let mut spans = Vec::new();
    loop {
        let mut progress = false;
        for r in 0..p {
            while let Some(&a) = s.stages[r].get(idx[r]) {
                match a {
                    Action::RecvAct { mb, chunk, from } | Action::RecvGrad { mb, chunk, from } => {
                        let grad = matches!(a, Action::RecvGrad { .. });
                        match arrivals.remove(&(from, r, grad, mb, chunk)) {
                            Some(t) => clock[r] = clock[r].max(t),
                            None => break,
                        }
                    }
                    Action::SendAct { mb, chunk, to } | Action::SendGrad { mb, chunk, to } => {
                        let grad = matches!(a, Action::SendGrad { .. });
                        let piece = s.piece(r, chunk);
                        let dest = if grad {
                            piece.wrapping_sub(1)
                        } else {
                            piece + 1
                        };
                        let (_, dest_chunk) = s.place(dest);
                        arrivals.insert((r, to, grad, mb, dest_chunk), clock[r] + costs.comm);
                    }
                    _ => {
                        let start = clock[r];
                        clock[r] += costs.of(&a);
                        spans.push(Span {
                            stage: r,
                            action: a,
                            start,
                            end: clock[r],
                        });
                    }
                }
                idx[r] += 1;
                progress = true;
            }
        }
        if (0..p).all(|r| idx[r] == s.stages[r].len()) {
            break;
        }
        if !progress {
            let stuck = (0..p)
                .filter(|&r| idx[r] < s.stages[r].len())
                .map(|r| (r, idx[r], s.stages[r][idx[r]]))
                .collect();
            return Err(Deadlock { stuck });
        }
    }
    Ok(Timeline::from_spans(p, spans))
}
