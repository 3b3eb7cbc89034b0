//! A collective algorithm as data: a list of steps, each a set of transfers "rank `src`
//! sends `buf[src_range]` to rank `dst`, which adds it into (or copies it to)
//! `buf[dst_range]`". Every algorithm in [`crate::algorithms`] only *builds* a schedule;
//! one executor runs any schedule over a real transport ([`crate::Communicator`]) and
//! [`Simulation`] runs it over in-memory buffers, one step at a time, which is what the
//! browser page animates.
//!
//! Semantics of a step: every transfer reads its source as it was at the start of the
//! step, then all of them are applied (in list order). Transfers with `src == dst` are
//! local copies.

use crate::error::{CollError, Result};
use crate::reduce::ReduceOp;
use std::ops::Range;

/// One message of a schedule.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Transfer {
    /// The sending rank.
    pub src: usize,
    /// The receiving rank.
    pub dst: usize,
    /// Elements read from the sender's buffer.
    pub src_range: Range<usize>,
    /// Elements written in the receiver's buffer (same length).
    pub dst_range: Range<usize>,
    /// `true`: the receiver reduces the data into its elements; `false`: it overwrites them.
    pub reduce: bool,
}

impl Transfer {
    /// A transfer between the same range on both sides.
    pub fn same(src: usize, dst: usize, range: Range<usize>, reduce: bool) -> Self {
        Transfer {
            src,
            dst,
            src_range: range.clone(),
            dst_range: range,
            reduce,
        }
    }
}

/// Transfers that happen at the same time.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Step {
    /// The messages of this step.
    pub transfers: Vec<Transfer>,
}

/// An algorithm's complete plan for one call.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Schedule {
    /// Number of ranks.
    pub world: usize,
    /// Length of every rank's work buffer, in elements.
    pub len: usize,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

impl Schedule {
    /// An empty schedule over `world` ranks and buffers of `len`.
    pub fn new(world: usize, len: usize) -> Self {
        Schedule {
            world,
            len,
            steps: Vec::new(),
        }
    }

    /// Appends a step (skipping empty ones, so that world size 1 has no steps).
    pub fn push(&mut self, transfers: Vec<Transfer>) {
        if !transfers.is_empty() {
            self.steps.push(Step { transfers });
        }
    }

    /// Appends all steps of `other`.
    pub fn extend(&mut self, other: Schedule) {
        self.steps.extend(other.steps);
    }

    /// Checks every rank and range is in bounds and every transfer has equal-length
    /// ranges: a schedule that passes cannot index out of a buffer.
    pub fn validate(&self) -> Result<()> {
        for (i, step) in self.steps.iter().enumerate() {
            for t in &step.transfers {
                let ok = t.src < self.world
                    && t.dst < self.world
                    && t.src_range.start <= t.src_range.end
                    && t.src_range.end <= self.len
                    && t.dst_range.end <= self.len
                    && t.src_range.len() == t.dst_range.len();
                if !ok {
                    return Err(CollError::invalid(
                        "schedule",
                        format!(
                            "step {i}: bad transfer {t:?} (world {}, len {})",
                            self.world, self.len
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Messages between different ranks, and the elements they carry.
    pub fn message_count(&self) -> (usize, usize) {
        let remote = self
            .steps
            .iter()
            .flat_map(|s| &s.transfers)
            .filter(|t| t.src != t.dst);
        remote.fold((0, 0), |(m, e), t| (m + 1, e + t.src_range.len()))
    }
}

/// The elements of chunk `i` when `len` elements are split over `n` ranks as evenly as
/// possible: the first `len % n` chunks get one extra element. Lengths need not divide.
pub fn chunk_range(len: usize, n: usize, i: usize) -> Range<usize> {
    let base = len / n;
    let extra = len % n;
    let start = i * base + i.min(extra);
    start..start + base + usize::from(i < extra)
}

/// Runs a schedule over in-memory buffers (one per rank), step by step.
#[derive(Debug, Clone)]
pub struct Simulation {
    schedule: Schedule,
    buffers: Vec<Vec<f32>>,
    op: ReduceOp,
    next: usize,
}

impl Simulation {
    /// A simulation of `schedule` starting from `buffers` (one per rank, each of the
    /// schedule's length).
    pub fn new(schedule: Schedule, buffers: Vec<Vec<f32>>, op: ReduceOp) -> Result<Self> {
        schedule.validate()?;
        if buffers.len() != schedule.world || buffers.iter().any(|b| b.len() != schedule.len) {
            return Err(CollError::invalid(
                "simulation",
                format!(
                    "need {} buffers of {} elements",
                    schedule.world, schedule.len
                ),
            ));
        }
        Ok(Simulation {
            schedule,
            buffers,
            op,
            next: 0,
        })
    }

    /// The buffers now.
    pub fn buffers(&self) -> &[Vec<f32>] {
        &self.buffers
    }

    /// The schedule being run.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// Index of the next step to run (= steps done).
    pub fn steps_done(&self) -> usize {
        self.next
    }

    /// Whether every step has run.
    pub fn finished(&self) -> bool {
        self.next >= self.schedule.steps.len()
    }

    /// Runs the next step; returns its transfers, or `None` when finished.
    pub fn step(&mut self) -> Option<&Step> {
        let step = self.schedule.steps.get(self.next)?;
        // Read every source first: a step's transfers happen at the same time.
        let data: Vec<Vec<f32>> = step
            .transfers
            .iter()
            .map(|t| self.buffers[t.src][t.src_range.clone()].to_vec())
            .collect();
        for (t, d) in step.transfers.iter().zip(data) {
            let dst = &mut self.buffers[t.dst][t.dst_range.clone()];
            if t.reduce {
                self.op.combine_into(dst, &d);
            } else {
                dst.copy_from_slice(&d);
            }
        }
        self.next += 1;
        self.schedule.steps.get(self.next - 1)
    }

    /// Runs every remaining step and returns the buffers.
    pub fn run(mut self) -> Vec<Vec<f32>> {
        while self.step().is_some() {}
        self.buffers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_buffer_without_gaps() {
        for len in 0..20 {
            for n in 1..9 {
                let mut end = 0;
                for i in 0..n {
                    let r = chunk_range(len, n, i);
                    assert_eq!(r.start, end);
                    assert!(r.len() == len / n || r.len() == len / n + 1);
                    end = r.end;
                }
                assert_eq!(end, len);
            }
        }
    }
}
