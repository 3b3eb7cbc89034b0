//! Schedules as data: for each pipeline stage (one rank, one device) the list of
//! actions it runs in order. A stage may hold several model chunks (`v > 1`, the
//! interleaved schedule); model chunk `c` of stage `r` is the model's piece
//! `c · p + r` (Megatron-LM's assignment: Narayanan et al., "Efficient Large-Scale
//! Language Model Training on GPU Clusters Using Megatron-LM", SC 2021, §2.2).

use serde::{Deserialize, Serialize};
use std::fmt;

/// One step of one stage.
///
/// `chunk` is always the chunk *on the stage that runs the action*: a send names the
/// chunk that produced the data, a receive the chunk that will consume it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Action {
    /// Forward of micro-batch `mb` through chunk `chunk` (stashes its activations).
    F {
        /// Micro-batch, in `0..m`.
        mb: u32,
        /// Chunk on this stage, in `0..v` (model piece `chunk · p + stage`).
        chunk: u32,
    },
    /// Backward for the input gradient only (the zero-bubble "B").
    B {
        /// Micro-batch, in `0..m`.
        mb: u32,
        /// Chunk on this stage, in `0..v` (model piece `chunk · p + stage`).
        chunk: u32,
    },
    /// Backward for the weight gradient only (the zero-bubble "W"), after `B`.
    W {
        /// Micro-batch, in `0..m`.
        mb: u32,
        /// Chunk on this stage, in `0..v` (model piece `chunk · p + stage`).
        chunk: u32,
    },
    /// The whole backward, `B` and `W` fused (GPipe, 1F1B, interleaved).
    BW {
        /// Micro-batch, in `0..m`.
        mb: u32,
        /// Chunk on this stage, in `0..v` (model piece `chunk · p + stage`).
        chunk: u32,
    },
    /// Sends the activation `chunk` produced for `mb` to the stage `to`.
    SendAct {
        /// Micro-batch, in `0..m`.
        mb: u32,
        /// Chunk on this stage that produced the data, in `0..v`.
        chunk: u32,
        /// Receiving stage (the next piece's stage).
        to: usize,
    },
    /// Receives the input activation of `chunk` for `mb` from the stage `from`.
    RecvAct {
        /// Micro-batch, in `0..m`.
        mb: u32,
        /// Chunk on this stage that will consume the data, in `0..v`.
        chunk: u32,
        /// Sending stage (the previous piece's stage).
        from: usize,
    },
    /// Sends the gradient of `chunk`'s input for `mb` to the stage `to`.
    SendGrad {
        /// Micro-batch, in `0..m`.
        mb: u32,
        /// Chunk on this stage that produced the data, in `0..v`.
        chunk: u32,
        /// Receiving stage (the previous piece's stage).
        to: usize,
    },
    /// Receives the gradient of `chunk`'s output for `mb` from the stage `from`.
    RecvGrad {
        /// Micro-batch, in `0..m`.
        mb: u32,
        /// Chunk on this stage that will consume the data, in `0..v`.
        chunk: u32,
        /// Sending stage (the next piece's stage).
        from: usize,
    },
}

impl Action {
    /// The micro-batch.
    pub fn mb(&self) -> u32 {
        match *self {
            Action::F { mb, .. }
            | Action::B { mb, .. }
            | Action::W { mb, .. }
            | Action::BW { mb, .. }
            | Action::SendAct { mb, .. }
            | Action::RecvAct { mb, .. }
            | Action::SendGrad { mb, .. }
            | Action::RecvGrad { mb, .. } => mb,
        }
    }

    /// The chunk on the stage running the action.
    pub fn chunk(&self) -> u32 {
        match *self {
            Action::F { chunk, .. }
            | Action::B { chunk, .. }
            | Action::W { chunk, .. }
            | Action::BW { chunk, .. }
            | Action::SendAct { chunk, .. }
            | Action::RecvAct { chunk, .. }
            | Action::SendGrad { chunk, .. }
            | Action::RecvGrad { chunk, .. } => chunk,
        }
    }

    /// Whether the action computes (F, B, W, BW) rather than communicates.
    pub fn is_compute(&self) -> bool {
        matches!(
            self,
            Action::F { .. } | Action::B { .. } | Action::W { .. } | Action::BW { .. }
        )
    }

    /// A short label for timelines: `F3`, `B3`, `W3`, `BW3`, with `.c` for chunk `c > 0`.
    pub fn label(&self) -> String {
        let kind = match self {
            Action::F { .. } => "F",
            Action::B { .. } => "B",
            Action::W { .. } => "W",
            Action::BW { .. } => "BW",
            Action::SendAct { .. } => "sA",
            Action::RecvAct { .. } => "rA",
            Action::SendGrad { .. } => "sG",
            Action::RecvGrad { .. } => "rG",
        };
        if self.chunk() == 0 {
            format!("{kind}{}", self.mb())
        } else {
            format!("{kind}{}.{}", self.mb(), self.chunk())
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Action::F { mb, chunk } => write!(f, "F(mb {mb}, chunk {chunk})"),
            Action::B { mb, chunk } => write!(f, "B(mb {mb}, chunk {chunk})"),
            Action::W { mb, chunk } => write!(f, "W(mb {mb}, chunk {chunk})"),
            Action::BW { mb, chunk } => write!(f, "BW(mb {mb}, chunk {chunk})"),
            Action::SendAct { mb, chunk, to } => {
                write!(f, "SendAct(mb {mb}, chunk {chunk}, to stage {to})")
            }
            Action::RecvAct { mb, chunk, from } => {
                write!(f, "RecvAct(mb {mb}, chunk {chunk}, from stage {from})")
            }
            Action::SendGrad { mb, chunk, to } => {
                write!(f, "SendGrad(mb {mb}, chunk {chunk}, to stage {to})")
            }
            Action::RecvGrad { mb, chunk, from } => {
                write!(f, "RecvGrad(mb {mb}, chunk {chunk}, from stage {from})")
            }
        }
    }
}

/// Which generator made a schedule (or `Custom` for one written by hand).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScheduleKind {
    /// All forwards, then all backwards (Huang et al., "GPipe", NeurIPS 2019).
    GPipe,
    /// One forward, one backward (PipeDream-Flush: Narayanan et al., "Memory-Efficient
    /// Pipeline-Parallel DNN Training", ICML 2021).
    OneFOneB,
    /// 1F1B over `v` model chunks per stage (Narayanan et al. 2021, SC).
    Interleaved {
        /// Model chunks per stage, at least 1.
        v: usize,
    },
    /// Zero bubble, 1F1B's memory (Qi et al., "Zero Bubble Pipeline Parallelism",
    /// ICLR 2024, §3.1).
    ZbH1,
    /// Zero bubble with about twice 1F1B's memory (Qi et al. 2024, §3.1).
    ZbH2,
    /// Written by hand.
    Custom,
}

impl ScheduleKind {
    /// Parses `gpipe`, `1f1b`, `interleaved:V`, `zb-h1`, `zb-h2`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let lower = s.trim().to_ascii_lowercase();
        match lower.as_str() {
            "gpipe" => Ok(ScheduleKind::GPipe),
            "1f1b" => Ok(ScheduleKind::OneFOneB),
            "zb-h1" | "zbh1" => Ok(ScheduleKind::ZbH1),
            "zb-h2" | "zbh2" => Ok(ScheduleKind::ZbH2),
            other => match other.strip_prefix("interleaved:") {
                Some(v) => match v.parse::<usize>() {
                    Ok(v) if v >= 1 => Ok(ScheduleKind::Interleaved { v }),
                    _ => Err(format!(
                        "interleaved needs a chunk count >= 1 (interleaved:2), got {v:?}"
                    )),
                },
                None => Err(format!(
                    "unknown schedule {s:?}: expected gpipe, 1f1b, interleaved:V, zb-h1 or zb-h2"
                )),
            },
        }
    }

    /// Model chunks per stage.
    pub fn chunks(&self) -> usize {
        match self {
            ScheduleKind::Interleaved { v } => *v,
            _ => 1,
        }
    }

    /// Every generated kind, with `v` chunks for the interleaved one.
    pub fn all(v: usize) -> Vec<ScheduleKind> {
        vec![
            ScheduleKind::GPipe,
            ScheduleKind::OneFOneB,
            ScheduleKind::Interleaved { v },
            ScheduleKind::ZbH1,
            ScheduleKind::ZbH2,
        ]
    }
}

impl fmt::Display for ScheduleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleKind::GPipe => write!(f, "gpipe"),
            ScheduleKind::OneFOneB => write!(f, "1f1b"),
            ScheduleKind::Interleaved { v } => write!(f, "interleaved:{v}"),
            ScheduleKind::ZbH1 => write!(f, "zb-h1"),
            ScheduleKind::ZbH2 => write!(f, "zb-h2"),
            ScheduleKind::Custom => write!(f, "custom"),
        }
    }
}

/// A pipeline schedule: `p` stages, `v` chunks per stage, `m` micro-batches, and each
/// stage's actions in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// The generator that made it, or [`ScheduleKind::Custom`].
    pub kind: ScheduleKind,
    /// Stages (ranks).
    pub p: usize,
    /// Model chunks per stage.
    pub v: usize,
    /// Micro-batches per optimizer step.
    pub m: usize,
    /// `stages[r]` is what stage `r` runs, in order.
    pub stages: Vec<Vec<Action>>,
}

impl Schedule {
    /// Model pieces in all: `p · v`.
    pub fn pieces(&self) -> usize {
        self.p * self.v
    }

    /// The model piece that chunk `chunk` of stage `rank` holds.
    pub fn piece(&self, rank: usize, chunk: u32) -> usize {
        chunk as usize * self.p + rank
    }

    /// The stage and chunk holding model piece `piece`.
    pub fn place(&self, piece: usize) -> (usize, u32) {
        (piece % self.p, (piece / self.p) as u32)
    }

    /// Only the compute actions of stage `rank`, in order.
    pub fn compute(&self, rank: usize) -> Vec<Action> {
        self.stages
            .get(rank)
            .map(|s| s.iter().copied().filter(Action::is_compute).collect())
            .unwrap_or_default()
    }

    /// A compact one-line view of stage `rank`'s compute: `F0 F1 BW0 F2 BW1 …`.
    pub fn compute_line(&self, rank: usize) -> String {
        self.compute(rank)
            .iter()
            .map(Action::label)
            .collect::<Vec<_>>()
            .join(" ")
    }
}
