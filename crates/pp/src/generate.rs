//! The generators: compute order per stage, then [`with_communication`] inserts the
//! sends and receives between neighbouring model pieces.

use crate::schedule::{Action, Schedule, ScheduleKind};
use crate::simulate::Costs;
use std::fmt;

/// Why a schedule cannot be generated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanError(pub String);

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PlanError {}

/// Builds the schedule `kind` for `p` stages and `m` micro-batches (zero-bubble ones
/// for equal F, B and W times, as Qi et al. 2024 assume for their handcrafted ones).
pub fn generate(kind: ScheduleKind, p: usize, m: usize) -> Result<Schedule, PlanError> {
    if p == 0 || m == 0 {
        return Err(PlanError(format!(
            "a pipeline needs at least one stage and one micro-batch (p = {p}, m = {m})"
        )));
    }
    if p > 1024 || m > 1 << 16 {
        return Err(PlanError(format!(
            "p = {p}, m = {m}: at most 1024 stages and 65536 micro-batches"
        )));
    }
    let compute = match kind {
        ScheduleKind::GPipe => gpipe(p, m),
        ScheduleKind::OneFOneB => one_f_one_b(p, m),
        ScheduleKind::Interleaved { v } => interleaved(p, m, v)?,
        ScheduleKind::ZbH1 => zero_bubble(p, m, &zb_h1_limits(p), &vec![p; p], Costs::unit()),
        ScheduleKind::ZbH2 => {
            zero_bubble(p, m, &zb_h2_limits(p), &vec![2 * p - 1; p], Costs::unit())
        }
        ScheduleKind::Custom => {
            return Err(PlanError(
                "a custom schedule is written by hand, not generated".into(),
            ));
        }
    };
    let v = kind.chunks();
    Ok(Schedule {
        kind,
        p,
        v,
        m,
        stages: with_communication(p, v, &compute),
    })
}

fn f(mb: usize, chunk: usize) -> Action {
    Action::F {
        mb: mb as u32,
        chunk: chunk as u32,
    }
}

fn bw(mb: usize, chunk: usize) -> Action {
    Action::BW {
        mb: mb as u32,
        chunk: chunk as u32,
    }
}

/// GPipe: every forward, then every backward in reverse order. Each stage holds all
/// `m` micro-batches' activations at the turn.
pub fn gpipe(p: usize, m: usize) -> Vec<Vec<Action>> {
    (0..p)
        .map(|_| {
            let mut v: Vec<Action> = (0..m).map(|i| f(i, 0)).collect();
            v.extend((0..m).rev().map(|i| bw(i, 0)));
            v
        })
        .collect()
}

/// 1F1B (PipeDream-Flush): stage `r` runs `p − r − 1` warm-up forwards, then
/// alternates one forward and one backward, then drains the backwards. At most
/// `p − r` micro-batches are in flight on stage `r`.
pub fn one_f_one_b(p: usize, m: usize) -> Vec<Vec<Action>> {
    (0..p)
        .map(|r| {
            let warmup = (p - r - 1).min(m);
            let mut v: Vec<Action> = (0..warmup).map(|i| f(i, 0)).collect();
            for i in 0..m - warmup {
                v.push(f(warmup + i, 0));
                v.push(bw(i, 0));
            }
            v.extend((m - warmup..m).map(|i| bw(i, 0)));
            v
        })
        .collect()
}

/// Interleaved 1F1B with `v` chunks per stage, as Megatron-LM orders it: forwards go
/// through groups of `p` micro-batches chunk by chunk; stage `r` warms up with
/// `2(p − r − 1) + (v − 1)p` forwards. Needs `m` to be a multiple of `p`.
pub fn interleaved(p: usize, m: usize, v: usize) -> Result<Vec<Vec<Action>>, PlanError> {
    if v == 0 {
        return Err(PlanError(
            "interleaved needs v >= 1 chunks per stage".into(),
        ));
    }
    if !m.is_multiple_of(p) {
        return Err(PlanError(format!(
            "interleaved 1F1B needs the micro-batch count to be a multiple of the \
             stage count (m = {m}, p = {p}), as Megatron-LM requires"
        )));
    }
    let total = m * v;
    // Unit i of a stage's forward (or backward) sequence: which micro-batch and chunk.
    let mb_of = |i: usize| (i / (p * v)) * p + i % p;
    let fwd_chunk = |i: usize| (i / p) % v;
    let bwd_chunk = |i: usize| v - 1 - (i / p) % v;
    Ok((0..p)
        .map(|r| {
            let warmup = if v == 1 {
                p - r - 1
            } else {
                2 * (p - r - 1) + (v - 1) * p
            }
            .min(total);
            let mut out: Vec<Action> = (0..warmup).map(|i| f(mb_of(i), fwd_chunk(i))).collect();
            for j in 0..total - warmup {
                let i = warmup + j;
                out.push(f(mb_of(i), fwd_chunk(i)));
                out.push(bw(mb_of(j), bwd_chunk(j)));
            }
            for j in total - warmup..total {
                out.push(bw(mb_of(j), bwd_chunk(j)));
            }
            out
        })
        .collect())
}

/// ZB-H1's limit: stage `r` holds at most `p − r` micro-batches between F and B, as 1F1B.
pub fn zb_h1_limits(p: usize) -> Vec<usize> {
    (0..p).map(|r| p - r).collect()
}

/// ZB-H2's limit: `2(p − r) − 1`, the extra warm-up forwards that fill the start.
pub fn zb_h2_limits(p: usize) -> Vec<usize> {
    (0..p).map(|r| 2 * (p - r) - 1).collect()
}

/// A zero-bubble schedule by list scheduling on `costs` (Qi et al. 2024 split the
/// backward into B, the input gradient on the critical path, and W, the weight
/// gradient, which nothing waits for). Whenever a stage is free it runs, in order of
/// priority: a ready B, a ready F if fewer than `limits[r]` micro-batches are between
/// their F and their B, else the oldest pending W. The W passes fill what would have
/// been bubbles; a larger limit lets more forwards fill the start (ZB-H2).
pub fn zero_bubble(
    p: usize,
    m: usize,
    limits: &[usize],
    w_limits: &[usize],
    costs: Costs,
) -> Vec<Vec<Action>> {
    let mut st = ZbState::new(p, m);
    let mut free_at = vec![0.0f64; p];
    let mut t = 0.0f64;
    while st.done < 3 * p * m {
        for r in 0..p {
            if free_at[r] > t {
                continue;
            }
            if let Some((a, cost)) = st.pick(r, t, (limits[r], w_limits[r]), costs) {
                st.record(r, a, t + cost);
                free_at[r] = t + cost;
            }
        }
        // Readiness changes only when something ends: jump to the next end after t.
        let next = free_at
            .iter()
            .copied()
            .filter(|&x| x > t)
            .fold(f64::INFINITY, f64::min);
        if !next.is_finite() {
            break; // nothing running and nothing ready: cannot happen with limits >= 1
        }
        t = next;
    }
    st.order
}

struct ZbState {
    p: usize,
    m: usize,
    f_end: Vec<Vec<Option<f64>>>,
    b_end: Vec<Vec<Option<f64>>>,
    w_done: Vec<Vec<bool>>,
    order: Vec<Vec<Action>>,
    done: usize,
}

impl ZbState {
    fn new(p: usize, m: usize) -> Self {
        ZbState {
            p,
            m,
            f_end: vec![vec![None; m]; p],
            b_end: vec![vec![None; m]; p],
            w_done: vec![vec![false; m]; p],
            order: vec![Vec::new(); p],
            done: 0,
        }
    }

    fn pick(
        &self,
        r: usize,
        t: f64,
        (limit, w_limit): (usize, usize),
        c: Costs,
    ) -> Option<(Action, f64)> {
        let ready = |x: Option<f64>| x.is_some_and(|e| e <= t);
        let next_b = (0..self.m).find(|&i| self.b_end[r][i].is_none());
        if let Some(i) = next_b {
            let upstream = if r + 1 == self.p {
                self.f_end[r][i]
            } else {
                self.b_end[r + 1][i]
            };
            if ready(self.f_end[r][i]) && ready(upstream) {
                return Some((
                    Action::B {
                        mb: i as u32,
                        chunk: 0,
                    },
                    c.b,
                ));
            }
        }
        // Deferred W passes keep their inputs alive: once `limit` of them wait, the
        // oldest goes before any new forward (Qi et al. bound it the same way).
        let w = (0..self.m).find(|&i| ready(self.b_end[r][i]) && !self.w_done[r][i]);
        let pending_w = (0..self.m)
            .filter(|&i| self.b_end[r][i].is_some() && !self.w_done[r][i])
            .count();
        if pending_w >= w_limit
            && let Some(i) = w
        {
            return Some((
                Action::W {
                    mb: i as u32,
                    chunk: 0,
                },
                c.w,
            ));
        }
        let next_f = (0..self.m).find(|&i| self.f_end[r][i].is_none());
        let in_flight = (0..self.m)
            .filter(|&i| self.f_end[r][i].is_some() && self.b_end[r][i].is_none())
            .count();
        if let Some(i) = next_f {
            let input_ready = r == 0 || ready(self.f_end[r - 1][i]);
            if input_ready && in_flight < limit {
                return Some((
                    Action::F {
                        mb: i as u32,
                        chunk: 0,
                    },
                    c.f,
                ));
            }
        }
        w.map(|i| {
            (
                Action::W {
                    mb: i as u32,
                    chunk: 0,
                },
                c.w,
            )
        })
    }

    fn record(&mut self, r: usize, a: Action, end: f64) {
        let i = a.mb() as usize;
        match a {
            Action::F { .. } => self.f_end[r][i] = Some(end),
            Action::B { .. } => self.b_end[r][i] = Some(end),
            _ => self.w_done[r][i] = true,
        }
        self.order[r].push(a);
        self.done += 1;
    }
}

/// Inserts the communication into per-stage compute orders: a receive just before
/// each F (B, BW) whose input (output gradient) comes from another stage, a send just
/// after each F (B, BW) whose output (input gradient) another stage needs. Sends never
/// wait, so a compute order that cannot deadlock stays deadlock-free.
pub fn with_communication(p: usize, v: usize, compute: &[Vec<Action>]) -> Vec<Vec<Action>> {
    let pieces = p * v;
    let place = |piece: usize| (piece % p, (piece / p) as u32);
    compute
        .iter()
        .enumerate()
        .map(|(r, acts)| {
            let mut out = Vec::with_capacity(acts.len() * 3);
            for &a in acts {
                let (mb, chunk) = (a.mb(), a.chunk());
                let piece = chunk as usize * p + r;
                let prev = (piece > 0)
                    .then(|| place(piece - 1))
                    .filter(|&(s, _)| s != r);
                let next = (piece + 1 < pieces)
                    .then(|| place(piece + 1))
                    .filter(|&(s, _)| s != r);
                match a {
                    Action::F { .. } => {
                        if let Some((from, _)) = prev {
                            out.push(Action::RecvAct { mb, chunk, from });
                        }
                        out.push(a);
                        if let Some((to, _)) = next {
                            out.push(Action::SendAct { mb, chunk, to });
                        }
                    }
                    Action::B { .. } | Action::BW { .. } => {
                        if let Some((from, _)) = next {
                            out.push(Action::RecvGrad { mb, chunk, from });
                        }
                        out.push(a);
                        if let Some((to, _)) = prev {
                            out.push(Action::SendGrad { mb, chunk, to });
                        }
                    }
                    _ => out.push(a),
                }
            }
            out
        })
        .collect()
}
