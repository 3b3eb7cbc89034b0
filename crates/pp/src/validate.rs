//! Checks any schedule, generated or written by hand, and says what is wrong with it:
//! each violation names the stage, the index of the action in that stage's list, and
//! the action.

use crate::schedule::{Action, Schedule};
use crate::simulate::{Costs, InFlight, simulate};
use std::collections::HashMap;
use std::fmt;

/// One thing wrong with a schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    /// The stage (rank) whose list holds the offending action.
    pub stage: usize,
    /// The action's index in that list, where one action is at fault.
    pub index: Option<usize>,
    /// The action, where one is at fault.
    pub action: Option<Action>,
    /// What is wrong.
    pub what: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.index, self.action) {
            (Some(i), Some(a)) => write!(f, "stage {}, action #{i} {a}: {}", self.stage, self.what),
            _ => write!(f, "stage {}: {}", self.stage, self.what),
        }
    }
}

/// All violations of a schedule, in the order found.
#[derive(Clone, Debug, PartialEq)]
pub struct Invalid(pub Vec<Violation>);

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "the schedule is invalid ({} problems):", self.0.len())?;
        for v in &self.0 {
            writeln!(f, "  {v}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Invalid {}

/// Checks `s`: sizes and peers, every micro-batch's F, B and W exactly once per chunk
/// (a BW counts as both B and W), F before B before W on the stage, each input
/// received (or produced on the stage) before it is used, each send after what it
/// sends and matched by exactly one receive, and no deadlock.
pub fn validate(s: &Schedule) -> Result<(), Invalid> {
    let mut out = Vec::new();
    if s.p == 0 || s.v == 0 || s.m == 0 || s.stages.len() != s.p {
        out.push(Violation {
            stage: 0,
            index: None,
            action: None,
            what: format!(
                "p = {}, v = {}, m = {} with {} stage lists: need p, v, m >= 1 and p lists",
                s.p,
                s.v,
                s.m,
                s.stages.len()
            ),
        });
        return Err(Invalid(out));
    }
    for r in 0..s.p {
        check_stage(s, r, &mut out);
    }
    check_matching(s, &mut out);
    if out.is_empty()
        && let Err(d) = simulate(s, Costs::unit())
    {
        for (stage, i, a) in d.stuck {
            out.push(at(
                stage,
                i,
                a,
                "waits forever: no stage can move (deadlock)".into(),
            ));
        }
    }
    if out.is_empty() {
        Ok(())
    } else {
        Err(Invalid(out))
    }
}

/// [`validate`] plus a memory check: stage `r` may hold at most `limits[r]` micro-batch
/// chunks between their F and their backward.
pub fn validate_memory(s: &Schedule, limits: &[usize]) -> Result<(), Invalid> {
    validate(s)?;
    let mut out = Vec::new();
    for (r, acts) in s.stages.iter().enumerate() {
        let limit = limits.get(r).copied().unwrap_or(usize::MAX);
        let mut f = InFlight::default();
        for (i, a) in acts.iter().enumerate() {
            f.apply(a);
            if f.now > limit {
                out.push(at(
                    r,
                    i,
                    *a,
                    format!("{} micro-batches in flight, the limit is {limit}", f.now),
                ));
                break;
            }
        }
    }
    if out.is_empty() {
        Ok(())
    } else {
        Err(Invalid(out))
    }
}

fn at(stage: usize, i: usize, a: Action, what: String) -> Violation {
    Violation {
        stage,
        index: Some(i),
        action: Some(a),
        what,
    }
}

/// Per (micro-batch, chunk): where F, B, W, BW and the receives sit in one stage's list.
#[derive(Default, Clone)]
struct Seen {
    f: Vec<usize>,
    b: Vec<usize>,
    w: Vec<usize>,
    bw: Vec<usize>,
    recv_act: Option<usize>,
    recv_grad: Option<usize>,
}

fn check_stage(s: &Schedule, r: usize, out: &mut Vec<Violation>) {
    let acts = &s.stages[r];
    let mut seen: HashMap<(u32, u32), Seen> = HashMap::new();
    for (i, &a) in acts.iter().enumerate() {
        let (mb, c) = (a.mb(), a.chunk());
        if mb as usize >= s.m || c as usize >= s.v {
            out.push(at(
                r,
                i,
                a,
                format!("out of range (m = {}, v = {})", s.m, s.v),
            ));
            continue;
        }
        let e = seen.entry((mb, c)).or_default();
        let piece = s.piece(r, c);
        match a {
            Action::F { .. } => {
                if piece > 0 && !input_ready(s, r, i, piece, e.recv_act, acts, false) {
                    out.push(at(
                        r,
                        i,
                        a,
                        "runs before its input activation is received".into(),
                    ));
                }
                e.f.push(i);
            }
            Action::B { .. } | Action::BW { .. } => {
                if e.f.is_empty() {
                    out.push(at(
                        r,
                        i,
                        a,
                        "runs before the forward of the same micro-batch".into(),
                    ));
                }
                if piece + 1 < s.pieces() && !input_ready(s, r, i, piece, e.recv_grad, acts, true) {
                    out.push(at(
                        r,
                        i,
                        a,
                        "runs before its output gradient is received".into(),
                    ));
                }
                if matches!(a, Action::B { .. }) {
                    e.b.push(i)
                } else {
                    e.bw.push(i)
                }
            }
            Action::W { .. } => {
                if e.b.is_empty() {
                    out.push(at(
                        r,
                        i,
                        a,
                        "runs before the B of the same micro-batch".into(),
                    ));
                }
                e.w.push(i);
            }
            Action::SendAct { to, .. } => {
                check_peer(s, r, i, a, to, piece + 1, out);
                if e.f.is_empty() {
                    out.push(at(
                        r,
                        i,
                        a,
                        "sends an activation its F has not computed yet".into(),
                    ));
                }
            }
            Action::SendGrad { to, .. } => {
                check_peer(s, r, i, a, to, piece.wrapping_sub(1), out);
                if e.b.is_empty() && e.bw.is_empty() {
                    out.push(at(
                        r,
                        i,
                        a,
                        "sends a gradient its backward has not computed yet".into(),
                    ));
                }
            }
            Action::RecvAct { from, .. } => {
                check_peer(s, r, i, a, from, piece.wrapping_sub(1), out);
                e.recv_act = Some(i);
            }
            Action::RecvGrad { from, .. } => {
                check_peer(s, r, i, a, from, piece + 1, out);
                e.recv_grad = Some(i);
            }
        }
    }
    check_counts(s, r, &seen, out);
}

/// Whether the input of the action at `i` (piece `piece`) is available: received
/// earlier on this stage, or computed earlier on this stage when the neighbouring
/// piece lives here too.
fn input_ready(
    s: &Schedule,
    r: usize,
    i: usize,
    piece: usize,
    received: Option<usize>,
    acts: &[Action],
    grad: bool,
) -> bool {
    let neighbour = if grad { piece + 1 } else { piece - 1 };
    let (stage, chunk) = s.place(neighbour);
    if stage != r {
        return received.is_some();
    }
    let mb = acts[i].mb();
    acts[..i].iter().any(|a| {
        a.mb() == mb
            && a.chunk() == chunk
            && if grad {
                matches!(a, Action::B { .. } | Action::BW { .. })
            } else {
                matches!(a, Action::F { .. })
            }
    })
}

fn check_peer(
    s: &Schedule,
    r: usize,
    i: usize,
    a: Action,
    peer: usize,
    neighbour: usize,
    out: &mut Vec<Violation>,
) {
    if neighbour >= s.pieces() {
        out.push(at(
            r,
            i,
            a,
            "there is no neighbouring model piece on that side".into(),
        ));
        return;
    }
    let (expected, _) = s.place(neighbour);
    if peer != expected {
        out.push(at(
            r,
            i,
            a,
            format!("the neighbouring piece lives on stage {expected}, not stage {peer}"),
        ));
    }
}

fn check_counts(
    s: &Schedule,
    r: usize,
    seen: &HashMap<(u32, u32), Seen>,
    out: &mut Vec<Violation>,
) {
    let empty = Seen::default();
    for c in 0..s.v as u32 {
        for mb in 0..s.m as u32 {
            let e = seen.get(&(mb, c)).unwrap_or(&empty);
            let mut say = |what: String| {
                out.push(Violation {
                    stage: r,
                    index: None,
                    action: None,
                    what: format!("micro-batch {mb}, chunk {c}: {what}"),
                })
            };
            if e.f.len() != 1 {
                say(format!(
                    "F appears {} times (at {:?}), must appear once",
                    e.f.len(),
                    e.f
                ));
            }
            let fused = e.bw.len();
            let split = (e.b.len(), e.w.len());
            match (fused, split) {
                (1, (0, 0)) | (0, (1, 1)) => {}
                _ => say(format!(
                    "backward must be one BW, or one B and one W; found {} BW at {:?}, {} B at {:?}, {} W at {:?}",
                    fused, e.bw, split.0, e.b, split.1, e.w
                )),
            }
        }
    }
}

/// A message: sender, receiver, gradient or not, micro-batch, receiving chunk.
type MsgKey = (usize, usize, bool, u32, u32);
/// Stage, index, action.
type Located = (usize, usize, Action);

fn check_matching(s: &Schedule, out: &mut Vec<Violation>) {
    // (sender, receiver, grad, mb, receiving chunk) → (stage, index, action) of each end
    let mut sends: HashMap<MsgKey, Vec<Located>> = HashMap::new();
    let mut recvs = sends.clone();
    for (r, acts) in s.stages.iter().enumerate() {
        for (i, &a) in acts.iter().enumerate() {
            let piece = s.piece(r, a.chunk());
            match a {
                Action::SendAct { mb, to, .. } | Action::SendGrad { mb, to, .. } => {
                    let grad = matches!(a, Action::SendGrad { .. });
                    let dest = if grad {
                        piece.wrapping_sub(1)
                    } else {
                        piece + 1
                    };
                    if dest < s.pieces() {
                        let (_, dc) = s.place(dest);
                        sends
                            .entry((r, to, grad, mb, dc))
                            .or_default()
                            .push((r, i, a));
                    }
                }
                Action::RecvAct { mb, chunk, from } | Action::RecvGrad { mb, chunk, from } => {
                    let grad = matches!(a, Action::RecvGrad { .. });
                    recvs
                        .entry((from, r, grad, mb, chunk))
                        .or_default()
                        .push((r, i, a));
                }
                _ => {}
            }
        }
    }
    for (k, list) in &sends {
        let n = recvs.get(k).map_or(0, Vec::len);
        for &(r, i, a) in list.iter().skip(n.min(list.len())) {
            out.push(at(r, i, a, format!("no matching receive on stage {}", k.1)));
        }
    }
    for (k, list) in &recvs {
        let n = sends.get(k).map_or(0, Vec::len);
        for &(r, i, a) in list.iter().skip(n.min(list.len())) {
            out.push(at(r, i, a, format!("no matching send from stage {}", k.0)));
        }
    }
    out.sort_by_key(|v| (v.stage, v.index));
}
