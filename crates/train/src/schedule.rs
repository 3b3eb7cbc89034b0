//! Micro-batch schedules: the order of forward and backward passes in one optimizer step.
//!
//! A step is a list of [`Action`]s that the [`Trainer`](crate::Trainer) executes in
//! order. Gradient accumulation is the simplest list, `F0 B0 F1 B1 …`: each micro-batch
//! runs forward and backward before the next one starts, so one set of saved
//! activations is alive at a time. Pipeline schedules (GPipe's all-forwards-then-all-
//! backwards, 1F1B) are other lists of the same two actions over the same micro-batch
//! indices; they need layers that keep one set of saved activations per micro-batch.

use brrr_backend::{Error, Result};
use std::fmt;

/// One pass over one micro-batch (its index within the step, from 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Draw micro-batch `mb`, run the forward pass and the loss, keep the activations.
    Forward(usize),
    /// Backward of micro-batch `mb`, accumulating into the parameter gradients.
    Backward(usize),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Forward(mb) => write!(f, "F{mb}"),
            Action::Backward(mb) => write!(f, "B{mb}"),
        }
    }
}

/// A checked list of actions over `micro_batches` micro-batches: each micro-batch is
/// run forward exactly once and backward exactly once, after its forward, and forwards
/// come in micro-batch order (so batches are drawn from the data in the same order
/// whatever the schedule).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MicroBatchSchedule {
    actions: Vec<Action>,
    micro_batches: usize,
}

impl MicroBatchSchedule {
    /// Gradient accumulation over `k` micro-batches: `F0 B0 F1 B1 … F(k-1) B(k-1)`.
    pub fn grad_accumulation(k: usize) -> Result<Self> {
        let actions = (0..k)
            .flat_map(|mb| [Action::Forward(mb), Action::Backward(mb)])
            .collect();
        Self::new(actions)
    }

    /// A schedule from an explicit list; errors name the first action that breaks a rule.
    pub fn new(actions: Vec<Action>) -> Result<Self> {
        let fail = |msg: String| Err(Error::invalid("MicroBatchSchedule", msg));
        let n = actions.len() / 2;
        if actions.is_empty() || !actions.len().is_multiple_of(2) {
            return fail(format!(
                "needs one forward and one backward per micro-batch, got {} actions",
                actions.len()
            ));
        }
        let (mut forwarded, mut backwarded) = (vec![false; n], vec![false; n]);
        let mut next_forward = 0;
        for (i, &a) in actions.iter().enumerate() {
            match a {
                Action::Forward(mb) if mb == next_forward && mb < n => {
                    forwarded[mb] = true;
                    next_forward += 1;
                }
                Action::Backward(mb) if mb < n && forwarded[mb] && !backwarded[mb] => {
                    backwarded[mb] = true;
                }
                _ => {
                    return fail(format!(
                        "action {i} ({a}) is out of order: forwards run 0, 1, … once each, \
                         and each backward follows its own forward, once"
                    ));
                }
            }
        }
        Ok(MicroBatchSchedule {
            actions,
            micro_batches: n,
        })
    }

    /// The actions, in execution order.
    pub fn actions(&self) -> &[Action] {
        &self.actions
    }

    /// Micro-batches per optimizer step.
    pub fn micro_batches(&self) -> usize {
        self.micro_batches
    }

    /// The most micro-batches whose activations are alive at once (forwarded, not yet
    /// backwarded): 1 for gradient accumulation, `k` for all-forwards-first.
    pub fn max_in_flight(&self) -> usize {
        let (mut live, mut most) = (0usize, 0usize);
        for a in &self.actions {
            match a {
                Action::Forward(_) => live += 1,
                Action::Backward(_) => live -= 1,
            }
            most = most.max(live);
        }
        most
    }
}

impl fmt::Display for MicroBatchSchedule {
    /// `F0 B0 F1 B1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, a) in self.actions.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{a}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Action::{Backward as B, Forward as F};

    #[test]
    fn grad_accumulation_alternates() {
        let s = MicroBatchSchedule::grad_accumulation(3).unwrap();
        assert_eq!(s.to_string(), "F0 B0 F1 B1 F2 B2");
        assert_eq!((s.micro_batches(), s.max_in_flight()), (3, 1));
        assert!(MicroBatchSchedule::grad_accumulation(0).is_err());
    }

    #[test]
    fn pipeline_orders_are_lists_of_the_same_actions() {
        let gpipe = MicroBatchSchedule::new(vec![F(0), F(1), B(1), B(0)]).unwrap();
        assert_eq!(gpipe.max_in_flight(), 2);
    }

    #[test]
    fn broken_lists_are_rejected_naming_the_action() {
        for (list, at) in [
            (vec![B(0), F(0)], "action 0 (B0)"),
            (vec![F(1), B(1)], "action 0 (F1)"),
            (vec![F(0), B(0), B(0), F(1)], "action 2 (B0)"),
            (vec![F(0), F(0)], "action 1 (F0)"),
            (vec![F(0), B(0), F(1)], "3 actions"),
        ] {
            let e = MicroBatchSchedule::new(list).unwrap_err().to_string();
            assert!(e.contains(at), "{e}");
        }
    }
}
