use brrr_pp::Action;

/// Warm-up forwards, the steady 1F1B pairs, then the drain.
pub fn one_f_one_b_stage(p: usize, m: usize, r: usize) -> Vec<Action> {
    let f = |i: usize| Action::F {
        mb: i as u32,
        chunk: 0,
    };
    let b = |i: usize| Action::BW {
        mb: i as u32,
        chunk: 0,
    };
    let warmup = (p - r - 1).min(m);
    let mut out: Vec<Action> = (0..warmup).map(f).collect();
    for i in 0..m - warmup {
        out.push(f(warmup + i));
        out.push(b(i));
    }
    out.extend((m - warmup..m).map(b));
    out
}
