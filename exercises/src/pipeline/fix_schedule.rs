//! # Fix a schedule the validator rejects
//!
//! Two stages, two micro-batches. Stage 0's list is 1F1B's (below, fixed). The list
//! given for stage 1 deadlocks: stage 1 waits for micro-batch 1's activation before
//! running micro-batch 0's backward, while stage 0 waits for that backward's gradient
//! before it sends micro-batch 1. Rewrite stage 1's list (computes, receives, sends)
//! so that `brrr_pp::validate` accepts the schedule and stage 1 never holds more than
//! one micro-batch's activations (1F1B's memory).
//!
//! Run the check to see the validator's message for the broken list.
//!
//! About 27 lines.
//!
//! ## Hint
//!
//! Stage 1 must run micro-batch 0's backward and send its gradient before it waits for
//! micro-batch 1's activation. Write stage 1's list in 1F1B order: receive, forward,
//! backward, send, for each micro-batch in turn.

use crate::check::Outcome;
use brrr_pp::{Action, Schedule, ScheduleKind, validate, validate_memory};

/// Stage 0's list (do not change): F0, send, F1… in 1F1B order for p = 2, m = 2.
pub fn stage0() -> Vec<Action> {
    use Action::*;
    vec![
        F { mb: 0, chunk: 0 },
        SendAct {
            mb: 0,
            chunk: 0,
            to: 1,
        },
        RecvGrad {
            mb: 0,
            chunk: 0,
            from: 1,
        },
        BW { mb: 0, chunk: 0 },
        F { mb: 1, chunk: 0 },
        SendAct {
            mb: 1,
            chunk: 0,
            to: 1,
        },
        RecvGrad {
            mb: 1,
            chunk: 0,
            from: 1,
        },
        BW { mb: 1, chunk: 0 },
    ]
}

/// YOUR CODE: stage 1's list.
#[cfg(not(feature = "solutions"))]
pub fn stage1() -> Vec<Action> {
    use Action::*;
    vec![
        RecvAct {
            mb: 0,
            chunk: 0,
            from: 0,
        },
        F { mb: 0, chunk: 0 },
        RecvAct {
            mb: 1,
            chunk: 0,
            from: 0,
        },
        F { mb: 1, chunk: 0 },
        BW { mb: 0, chunk: 0 },
        SendGrad {
            mb: 0,
            chunk: 0,
            to: 0,
        },
        BW { mb: 1, chunk: 0 },
        SendGrad {
            mb: 1,
            chunk: 0,
            to: 0,
        },
    ]
}

#[cfg(feature = "solutions")]
pub use solution::stage1;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/pipeline/fix_schedule.rs"]
pub mod solution;

/// The schedule with your stage 1, validated, with stage 1 limited to one in flight.
pub fn check() -> Outcome {
    let s = Schedule {
        kind: ScheduleKind::Custom,
        p: 2,
        v: 1,
        m: 2,
        stages: vec![stage0(), stage1()],
    };
    validate(&s)
        .and_then(|()| validate_memory(&s, &[2, 1]))
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "an exercise: solve it, then `cargo run -p brrr-exercises`"
    )]
    fn check() {
        if let Err(e) = super::check() {
            panic!("{e}");
        }
    }
}
