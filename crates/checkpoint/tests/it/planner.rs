//! The planner: strategies produce valid schedules with the memory theory predicts, and
//! the dynamic program is optimal against brute force and never exceeds its budget.

use brrr_checkpoint::{
    Chain, GptShape, Mode, Op, PlanError, Schedule, Segment, Strategy, min_budget, optimal,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn seg(i: usize, f: f64, input: u64, stash: u64) -> Segment {
    Segment {
        name: format!("s{i}"),
        forward: f,
        backward: 2.0 * f,
        input,
        stash,
        selective_stash: None,
        selective_cost: 0.0,
        forward_extra: 0,
        backward_extra: 0,
    }
}

fn random_chain(rng: &mut ChaCha8Rng, n: usize) -> Chain {
    let segments = (0..n)
        .map(|i| {
            let mut s = seg(
                i,
                rng.random_range(1..6) as f64,
                rng.random_range(1..5),
                rng.random_range(0..12),
            );
            s.forward_extra = rng.random_range(0..3);
            s.backward_extra = rng.random_range(0..3);
            s
        })
        .collect();
    Chain {
        segments,
        output: rng.random_range(0..3),
    }
}

/// Every schedule of the dynamic program's form for `(s, t)`: `Fall_s (s+1,t) B_s`, or
/// `Fck_s F∅… (split,t) (s,split)` for every split, recursively.
fn all_schedules(s: usize, t: usize) -> Vec<Vec<Op>> {
    let fall = Op::Forward {
        seg: s,
        mode: Mode::SaveAll,
    };
    if t == s + 1 {
        return vec![vec![fall, Op::Backward { seg: s }]];
    }
    let mut out = Vec::new();
    for rest in all_schedules(s + 1, t) {
        let mut ops = vec![fall];
        ops.extend(rest);
        ops.push(Op::Backward { seg: s });
        out.push(ops);
    }
    for split in s + 1..t {
        let mut head = vec![Op::Forward {
            seg: s,
            mode: Mode::SaveInput,
        }];
        head.extend((s + 1..split).map(|k| Op::Forward {
            seg: k,
            mode: Mode::NoSave,
        }));
        let rights = all_schedules(split, t);
        let lefts = all_schedules(s, split);
        for r in &rights {
            for l in &lefts {
                let mut ops = head.clone();
                ops.extend(r);
                ops.extend(l);
                out.push(ops);
            }
        }
    }
    out
}

#[test]
fn dynamic_program_matches_brute_force_on_small_chains() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut checked = 0;
    for trial in 0..60 {
        let n = 1 + trial % 6;
        let chain = random_chain(&mut rng, n);
        let every: Vec<_> = all_schedules(0, n)
            .into_iter()
            .map(|ops| {
                let schedule = Schedule { ops };
                let curve = schedule
                    .simulate(&chain)
                    .expect("enumerated schedules are valid");
                (curve.total_cost, curve.peak)
            })
            .collect();
        let smallest = every.iter().map(|e| e.1).min().unwrap();
        assert_eq!(min_budget(&chain).unwrap(), smallest, "chain {chain:?}");
        let biggest = every.iter().map(|e| e.1).max().unwrap();
        for budget in smallest.saturating_sub(2)..=biggest + 1 {
            let best = every
                .iter()
                .filter(|e| e.1 <= budget)
                .map(|e| e.0)
                .fold(f64::INFINITY, f64::min);
            match optimal(&chain, budget) {
                Ok(schedule) => {
                    let curve = schedule.simulate(&chain).unwrap();
                    assert!(
                        curve.peak <= budget,
                        "peak {} > budget {budget}",
                        curve.peak
                    );
                    assert_eq!(curve.total_cost, best, "n {n} budget {budget}");
                    checked += 1;
                }
                Err(PlanError::BudgetTooSmall { smallest: s, .. }) => {
                    assert!(best.is_infinite());
                    assert_eq!(s, smallest);
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    assert!(checked > 200, "only {checked} feasible cases checked");
}

#[test]
fn impossible_budget_names_the_smallest_feasible_one() {
    let chain = GptShape {
        n_layer: 4,
        n_head: 4,
        n_embd: 128,
        vocab_size: 256,
        batch: 16,
        seq_len: 128,
        dtype_bytes: 4,
    }
    .chain();
    let smallest = min_budget(&chain).unwrap();
    let err = Strategy::Budget(smallest - 1).plan(&chain).unwrap_err();
    assert_eq!(
        err,
        PlanError::BudgetTooSmall {
            budget: smallest - 1,
            smallest
        }
    );
    assert!(
        err.to_string().contains(&format!("budget:{smallest}")),
        "{err}"
    );
    assert!(Strategy::Budget(smallest).plan(&chain).is_ok());
}

fn gpt(n_layer: usize) -> Chain {
    GptShape {
        n_layer,
        n_head: 4,
        n_embd: 128,
        vocab_size: 256,
        batch: 16,
        seq_len: 128,
        dtype_bytes: 4,
    }
    .chain()
}

#[test]
fn strategies_give_valid_schedules_with_the_expected_memory() {
    for n_layer in [1, 2, 4, 9, 16] {
        let chain = gpt(n_layer);
        let none = Strategy::None
            .plan(&chain)
            .unwrap()
            .simulate(&chain)
            .unwrap();
        assert_eq!(none.extra_cost, 0.0);
        let sqrt = Strategy::Sqrt
            .plan(&chain)
            .unwrap()
            .simulate(&chain)
            .unwrap();
        // Chen et al.: at most one extra forward.
        assert!(sqrt.extra_cost <= chain.forward_cost(), "{n_layer}");
        assert!(sqrt.peak <= none.peak);
        for k in 1..=n_layer + 1 {
            let c = Strategy::Every(k)
                .plan(&chain)
                .unwrap()
                .simulate(&chain)
                .unwrap();
            assert!(c.peak <= none.peak && c.extra_cost <= chain.forward_cost());
        }
        let sel = Strategy::Selective
            .plan(&chain)
            .unwrap()
            .simulate(&chain)
            .unwrap();
        // One block: its backward holds the recomputed scores at the same peak.
        assert!(sel.peak < none.peak || (n_layer == 1 && sel.peak == none.peak));
        // The budget's schedule is never worse than a fixed one that fits the same budget.
        let b = Strategy::Budget(sqrt.peak)
            .plan(&chain)
            .unwrap()
            .simulate(&chain)
            .unwrap();
        assert!(b.peak <= sqrt.peak && b.total_cost <= sqrt.total_cost);
    }
}

#[test]
fn sqrt_keeps_about_sqrt_n_stashes() {
    let chain = gpt(16); // 17 segments: groups of 4
    let schedule = Strategy::Sqrt.plan(&chain).unwrap();
    let (stashes, inputs) = schedule.kept_after_forward();
    assert_eq!(inputs.into_iter().collect::<Vec<_>>(), vec![0, 4, 8, 12]);
    assert_eq!(stashes.into_iter().collect::<Vec<_>>(), vec![16]);
}

#[test]
fn invalid_schedules_are_errors() {
    let chain = gpt(2);
    let bad = Schedule {
        ops: vec![Op::Backward { seg: 2 }],
    };
    assert!(matches!(
        bad.simulate(&chain),
        Err(PlanError::InvalidSchedule { op: 0, .. })
    ));
    let no_input = Schedule {
        ops: vec![Op::Forward {
            seg: 1,
            mode: Mode::SaveAll,
        }],
    };
    assert!(no_input.simulate(&chain).is_err());
    let unfinished = Schedule {
        ops: vec![Op::Forward {
            seg: 0,
            mode: Mode::SaveAll,
        }],
    };
    assert!(unfinished.simulate(&chain).is_err());
}

#[test]
fn strategies_parse_and_print() {
    for s in ["none", "every:3", "sqrt", "selective", "budget:1048576"] {
        assert_eq!(s.parse::<Strategy>().unwrap().to_string(), s);
    }
    assert_eq!(
        "budget:64M".parse::<Strategy>().unwrap(),
        Strategy::Budget(64 << 20)
    );
    for bad in ["", "every:0", "every:x", "budget:-1", "budget:", "all"] {
        assert!(bad.parse::<Strategy>().is_err(), "{bad}");
    }
}

#[test]
fn shapes_that_overflow_or_are_empty_are_errors() {
    let ok = GptShape {
        n_layer: 4,
        n_head: 4,
        n_embd: 128,
        vocab_size: 256,
        batch: 16,
        seq_len: 128,
        dtype_bytes: 4,
    };
    assert!(ok.check().is_ok());
    assert!(
        GptShape {
            batch: usize::MAX / 2,
            ..ok
        }
        .check()
        .is_err()
    );
    assert!(GptShape { n_layer: 0, ..ok }.check().is_err());
}
