//! The validator accepts every generated schedule and rejects broken ones with a
//! message naming the stage and the action.

use brrr_pp::{Action, Schedule, ScheduleKind, generate, validate, validate_memory};

fn one_f_one_b(p: usize, m: usize) -> Schedule {
    generate(ScheduleKind::OneFOneB, p, m).unwrap()
}

/// The validator's message for `s`, which must be rejected.
fn rejected(s: &Schedule) -> String {
    match validate(s) {
        Ok(()) => panic!("accepted a broken schedule: {s:?}"),
        Err(e) => e.to_string(),
    }
}

fn position(s: &Schedule, r: usize, a: Action) -> usize {
    s.stages[r].iter().position(|&x| x == a).unwrap()
}

#[test]
fn every_generated_schedule_is_valid() {
    for p in [1, 2, 3, 4, 8] {
        for m in [1, 2, 4, 8, 16] {
            for kind in ScheduleKind::all(2)
                .into_iter()
                .chain([ScheduleKind::Interleaved { v: 3 }])
            {
                match generate(kind, p, m) {
                    Ok(s) => validate(&s).unwrap_or_else(|e| panic!("{kind} p={p} m={m}: {e}")),
                    Err(e) => assert!(matches!(kind, ScheduleKind::Interleaved { .. }), "{e}"),
                }
            }
        }
    }
}

#[test]
fn a_missing_forward_is_named() {
    let mut s = one_f_one_b(2, 2);
    let i = position(&s, 1, Action::F { mb: 1, chunk: 0 });
    s.stages[1].remove(i);
    let msg = rejected(&s);
    assert!(
        msg.contains("stage 1: micro-batch 1, chunk 0: F appears 0 times"),
        "{msg}"
    );
}

#[test]
fn a_duplicated_backward_is_named() {
    let mut s = one_f_one_b(2, 2);
    s.stages[0].push(Action::BW { mb: 0, chunk: 0 });
    let msg = rejected(&s);
    assert!(
        msg.contains("stage 0: micro-batch 0, chunk 0: backward must be one BW"),
        "{msg}"
    );
}

#[test]
fn a_backward_before_its_forward_is_named() {
    let mut s = one_f_one_b(1, 2);
    s.stages[0] = vec![
        Action::BW { mb: 0, chunk: 0 },
        Action::F { mb: 0, chunk: 0 },
        Action::F { mb: 1, chunk: 0 },
        Action::BW { mb: 1, chunk: 0 },
    ];
    let msg = rejected(&s);
    assert!(
        msg.contains("stage 0, action #0 BW(mb 0, chunk 0): runs before the forward"),
        "{msg}"
    );
}

#[test]
fn a_w_before_its_b_is_named() {
    let mut s = generate(ScheduleKind::ZbH1, 2, 2).unwrap();
    let r = 1;
    let b = position(&s, r, Action::B { mb: 0, chunk: 0 });
    let w = position(&s, r, Action::W { mb: 0, chunk: 0 });
    s.stages[r].swap(b, w);
    let msg = rejected(&s);
    assert!(
        msg.contains("stage 1, action #") && msg.contains("W(mb 0, chunk 0): runs before the B"),
        "{msg}"
    );
}

#[test]
fn a_forward_without_its_input_is_named() {
    let mut s = one_f_one_b(2, 2);
    let i = position(
        &s,
        1,
        Action::RecvAct {
            mb: 0,
            chunk: 0,
            from: 0,
        },
    );
    s.stages[1].remove(i);
    let msg = rejected(&s);
    assert!(
        msg.contains(
            "stage 1, action #0 F(mb 0, chunk 0): runs before its input activation is received"
        ),
        "{msg}"
    );
    // …and the send it no longer matches.
    assert!(
        msg.contains("stage 0") && msg.contains("no matching receive on stage 1"),
        "{msg}"
    );
}

#[test]
fn a_send_to_the_wrong_stage_is_named() {
    let mut s = one_f_one_b(3, 2);
    let i = position(
        &s,
        0,
        Action::SendAct {
            mb: 1,
            chunk: 0,
            to: 1,
        },
    );
    s.stages[0][i] = Action::SendAct {
        mb: 1,
        chunk: 0,
        to: 2,
    };
    let msg = rejected(&s);
    assert!(
        msg.contains(&format!("stage 0, action #{i} SendAct(mb 1, chunk 0, to stage 2): the neighbouring piece lives on stage 1")),
        "{msg}"
    );
}

#[test]
fn a_send_before_its_compute_is_named() {
    let mut s = one_f_one_b(2, 1);
    // Stage 1: RecvGrad never needed; stage 0: F, SendAct → swap them.
    let f = position(&s, 0, Action::F { mb: 0, chunk: 0 });
    s.stages[0].swap(f, f + 1);
    let msg = rejected(&s);
    assert!(msg.contains("stage 0, action #0 SendAct(mb 0, chunk 0, to stage 1): sends an activation its F has not computed"), "{msg}");
}

#[test]
fn a_deadlock_is_named() {
    // Stage 1 runs F1 before F0, stage 0 sends F0 first: fine (sends don't wait). But
    // stage 0 wanting BW1 before BW0 while stage 1 sends BW0 first is fine too; a
    // real deadlock needs a cycle: stage 0 waits for BW0's gradient before its F1,
    // stage 1 waits for F1 before its BW0.
    let mut s = one_f_one_b(2, 2);
    s.stages[0] = vec![
        Action::F { mb: 0, chunk: 0 },
        Action::SendAct {
            mb: 0,
            chunk: 0,
            to: 1,
        },
        Action::RecvGrad {
            mb: 0,
            chunk: 0,
            from: 1,
        },
        Action::BW { mb: 0, chunk: 0 },
        Action::F { mb: 1, chunk: 0 },
        Action::SendAct {
            mb: 1,
            chunk: 0,
            to: 1,
        },
        Action::RecvGrad {
            mb: 1,
            chunk: 0,
            from: 1,
        },
        Action::BW { mb: 1, chunk: 0 },
    ];
    s.stages[1] = vec![
        Action::RecvAct {
            mb: 0,
            chunk: 0,
            from: 0,
        },
        Action::F { mb: 0, chunk: 0 },
        Action::RecvAct {
            mb: 1,
            chunk: 0,
            from: 0,
        },
        Action::F { mb: 1, chunk: 0 },
        Action::BW { mb: 0, chunk: 0 },
        Action::SendGrad {
            mb: 0,
            chunk: 0,
            to: 0,
        },
        Action::BW { mb: 1, chunk: 0 },
        Action::SendGrad {
            mb: 1,
            chunk: 0,
            to: 0,
        },
    ];
    let msg = rejected(&s);
    assert!(
        msg.contains("stage 0, action #2 RecvGrad(mb 0, chunk 0, from stage 1): waits forever"),
        "{msg}"
    );
    assert!(
        msg.contains("stage 1, action #2 RecvAct(mb 1, chunk 0, from stage 0): waits forever"),
        "{msg}"
    );
    // The simulator's error is a std error saying the same, so `?` can pass it on.
    let e: Box<dyn std::error::Error> =
        Box::new(brrr_pp::simulate(&s, brrr_pp::Costs::unit()).unwrap_err());
    let text = e.to_string();
    assert!(
        text.contains("deadlocks") && text.contains("stage 0 waits at action 2 (RecvGrad"),
        "{text}"
    );
}

#[test]
fn out_of_range_micro_batch_is_named() {
    let mut s = one_f_one_b(1, 2);
    s.stages[0].push(Action::F { mb: 7, chunk: 0 });
    let msg = rejected(&s);
    assert!(
        msg.contains("stage 0, action #4 F(mb 7, chunk 0): out of range (m = 2, v = 1)"),
        "{msg}"
    );
}

#[test]
fn a_wrong_stage_count_is_named() {
    let mut s = one_f_one_b(2, 2);
    s.stages.pop();
    assert!(rejected(&s).contains("need p, v, m >= 1 and p lists"));
}

#[test]
fn gpipe_breaks_a_1f1b_memory_limit() {
    let g = generate(ScheduleKind::GPipe, 4, 8).unwrap();
    let limits: Vec<usize> = (0..4).map(|r| 4 - r).collect();
    let e = validate_memory(&g, &limits).unwrap_err().to_string();
    assert!(
        e.contains(
            "stage 0, action #8 F(mb 4, chunk 0): 5 micro-batches in flight, the limit is 4"
        ),
        "{e}"
    );
    validate_memory(&generate(ScheduleKind::OneFOneB, 4, 8).unwrap(), &limits).unwrap();
    validate_memory(&generate(ScheduleKind::ZbH1, 4, 8).unwrap(), &limits).unwrap();
}
