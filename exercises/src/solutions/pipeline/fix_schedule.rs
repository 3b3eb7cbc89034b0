use brrr_pp::Action;

/// Finish micro-batch 0 (backward, send its gradient) before asking for
/// micro-batch 1: the last stage of 1F1B alternates F and B.
pub fn stage1() -> Vec<Action> {
    use Action::*;
    vec![
        RecvAct {
            mb: 0,
            chunk: 0,
            from: 0,
        },
        F { mb: 0, chunk: 0 },
        BW { mb: 0, chunk: 0 },
        SendGrad {
            mb: 0,
            chunk: 0,
            to: 0,
        },
        RecvAct {
            mb: 1,
            chunk: 0,
            from: 0,
        },
        F { mb: 1, chunk: 0 },
        BW { mb: 1, chunk: 0 },
        SendGrad {
            mb: 1,
            chunk: 0,
            to: 0,
        },
    ]
}
