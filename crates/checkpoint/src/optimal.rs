//! The optimal schedule for a memory budget over a heterogeneous chain, by dynamic
//! programming (Beaumont, Herrmann, Pallez, Shilova 2019, "Optimal checkpointing for
//! heterogeneous chains: how to train deep neural networks with limited memory", §4).
//!
//! `opt(s, t, m)` is the least cost of back-propagating segments `s..t` — given `x_s`
//! held, `δ_t` held, nothing of `s..t` stashed — within `m` bytes for everything the
//! sub-problem holds (`x_s` and `δ_t` included). Its first op is a forward of `s`:
//! - **`Fall`**: stash `s`, solve `(s+1, t)` in `m − x_s − stash_s`, then `B_s`;
//! - **`Fck` then `F∅`**: keep `x_s`, run forward without keeping to some `s' ≤ t−1`,
//!   solve `(s', t)` in `m − x_s`, then solve `(s, s')` in `m` (recomputing from `x_s`).
//!
//! A single segment (`t = s + 1`) is `Fall_s B_s`. The memory each option needs while it
//! runs is exactly [`Schedule::simulate`]'s model, so the schedule found is within the
//! budget by construction, which the tests check, along with optimality against brute
//! force over every schedule of this form on small chains.

use crate::PlanError;
use crate::chain::Chain;
use crate::schedule::{Mode, Op, Schedule};
use std::collections::HashMap;

/// The first decision of a sub-problem.
#[derive(Clone, Copy, Debug)]
enum Choice {
    /// `Fall_s`, then `(s+1, t)`, then `B_s`.
    All,
    /// `Fck_s F∅ … ` up to `split`, then `(split, t)`, then `(s, split)`.
    Checkpoint { split: usize },
}

/// The solver: the chain and the memo tables.
pub(crate) struct Solver<'a> {
    chain: &'a Chain,
    min_mem: Vec<Vec<u64>>,
    memo: HashMap<(usize, usize, u64), Option<(f64, Choice)>>,
}

impl<'a> Solver<'a> {
    pub(crate) fn new(chain: &'a Chain) -> Self {
        let n = chain.len();
        let mut solver = Solver {
            chain,
            min_mem: vec![vec![0; n + 1]; n + 1],
            memo: HashMap::new(),
        };
        for len in 1..=n {
            for s in 0..=n - len {
                solver.min_mem[s][s + len] = solver.compute_min_mem(s, s + len);
            }
        }
        solver
    }

    fn x(&self, i: usize) -> u64 {
        self.chain.x_bytes(i)
    }

    fn d(&self, i: usize) -> u64 {
        self.chain.delta_bytes(i)
    }

    /// Bytes during `Fall_s` (also `Fck_s`): held `x_s`, `δ_t`, plus stash, output, extra.
    fn forward_first(&self, s: usize, t: usize) -> u64 {
        let seg = &self.chain.segments[s];
        self.x(s) + self.d(t) + seg.stash + self.x(s + 1) + seg.forward_extra
    }

    /// Bytes during `B_s` after `(s+1, t)` left `δ_{s+1}`.
    fn backward_peak(&self, s: usize) -> u64 {
        let seg = &self.chain.segments[s];
        self.x(s) + seg.stash + self.d(s + 1) + self.d(s) + seg.backward_extra
    }

    /// Bytes during the forward sweep `Fck_s F∅_{s+1} … F∅_{split−1}` (`δ_t` held).
    fn sweep_peak(&self, s: usize, t: usize, split: usize) -> u64 {
        let mut peak = self.forward_first(s, t);
        for k in s + 1..split {
            let seg = &self.chain.segments[k];
            let during =
                self.x(s) + self.x(k) + self.d(t) + seg.stash + self.x(k + 1) + seg.forward_extra;
            peak = peak.max(during);
        }
        peak
    }

    /// The least `m` for which `(s, t)` has a schedule.
    fn compute_min_mem(&self, s: usize, t: usize) -> u64 {
        let local = self.forward_first(s, t).max(self.backward_peak(s));
        if t == s + 1 {
            return local;
        }
        let seg = &self.chain.segments[s];
        let mut best = local.max(self.x(s) + seg.stash + self.min_mem[s + 1][t]);
        for split in s + 1..t {
            let need = self
                .sweep_peak(s, t, split)
                .max(self.x(s) + self.min_mem[split][t])
                .max(self.min_mem[s][split]);
            best = best.min(need);
        }
        best
    }

    /// The smallest budget any schedule of the whole chain fits in.
    pub(crate) fn min_budget(&self) -> u64 {
        self.min_mem[0][self.chain.len()]
    }

    /// Least cost of `(s, t)` within `m`, and the first choice; `None` if nothing fits.
    fn opt(&mut self, s: usize, t: usize, m: u64) -> Option<(f64, Choice)> {
        if m < self.min_mem[s][t] {
            return None;
        }
        if let Some(hit) = self.memo.get(&(s, t, m)) {
            return *hit;
        }
        let seg = &self.chain.segments[s];
        let (f, b) = (seg.forward, seg.backward);
        let result = if t == s + 1 {
            Some((f + b, Choice::All))
        } else {
            let mut best: Option<(f64, Choice)> = None;
            let local = self.forward_first(s, t).max(self.backward_peak(s));
            if local <= m
                && let Some((c, _)) = self.opt(s + 1, t, m - self.x(s) - seg.stash)
            {
                best = Some((f + c + b, Choice::All));
            }
            for split in s + 1..t {
                if self.sweep_peak(s, t, split) > m {
                    continue;
                }
                let Some((right, _)) = self.opt(split, t, m - self.x(s)) else {
                    continue;
                };
                let Some((left, _)) = self.opt(s, split, m) else {
                    continue;
                };
                let sweep: f64 = self.chain.segments[s..split]
                    .iter()
                    .map(|g| g.forward)
                    .sum();
                let cost = sweep + right + left;
                // Strictly better only: ties keep the earlier (less recomputing) choice.
                if best.is_none_or(|(c, _)| cost < c) {
                    best = Some((cost, Choice::Checkpoint { split }));
                }
            }
            best
        };
        self.memo.insert((s, t, m), result);
        result
    }

    /// Appends the ops of `(s, t)` within `m` (which must be feasible).
    fn emit(&mut self, s: usize, t: usize, m: u64, ops: &mut Vec<Op>) {
        let Some((_, choice)) = self.opt(s, t, m) else {
            return;
        };
        match choice {
            Choice::All => {
                ops.push(Op::Forward {
                    seg: s,
                    mode: Mode::SaveAll,
                });
                if t > s + 1 {
                    let seg = &self.chain.segments[s];
                    let rest = m - self.x(s) - seg.stash;
                    self.emit(s + 1, t, rest, ops);
                }
                ops.push(Op::Backward { seg: s });
            }
            Choice::Checkpoint { split } => {
                ops.push(Op::Forward {
                    seg: s,
                    mode: Mode::SaveInput,
                });
                for k in s + 1..split {
                    ops.push(Op::Forward {
                        seg: k,
                        mode: Mode::NoSave,
                    });
                }
                self.emit(split, t, m - self.x(s), ops);
                self.emit(s, split, m, ops);
            }
        }
    }
}

/// The least-cost schedule of `chain` whose memory (as [`Schedule::simulate`] counts
/// it) never exceeds `budget` bytes. An error names the smallest feasible budget when
/// `budget` is below it.
pub fn optimal(chain: &Chain, budget: u64) -> Result<Schedule, PlanError> {
    if chain.is_empty() {
        return Err(PlanError::EmptyChain);
    }
    let mut solver = Solver::new(chain);
    let min = solver.min_budget();
    if budget < min {
        return Err(PlanError::BudgetTooSmall {
            budget,
            smallest: min,
        });
    }
    let mut ops = Vec::new();
    solver.emit(0, chain.len(), budget, &mut ops);
    Ok(Schedule { ops })
}

/// The smallest budget any schedule of `chain` fits in (the cheapest such schedule is
/// then `optimal(chain, min_budget(chain))`).
pub fn min_budget(chain: &Chain) -> Result<u64, PlanError> {
    if chain.is_empty() {
        return Err(PlanError::EmptyChain);
    }
    Ok(Solver::new(chain).min_budget())
}
