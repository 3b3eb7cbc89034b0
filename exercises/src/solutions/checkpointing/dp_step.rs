use super::SubProblem;
use brrr_checkpoint::Chain;

/// The two options of Beaumont et al.'s recurrence, the cheaper that fits.
pub fn dp_step(chain: &Chain, s: usize, t: usize, m: u64, opt: &mut SubProblem) -> Option<f64> {
    let (x, d) = (|i| chain.x_bytes(i), |i| chain.delta_bytes(i));
    let seg = &chain.segments[s];
    let first = x(s) + d(t) + seg.stash + x(s + 1) + seg.forward_extra;
    let back = x(s) + seg.stash + d(s + 1) + d(s) + seg.backward_extra;
    let fits = first.max(back) <= m;
    if t == s + 1 {
        return fits.then_some(seg.forward + seg.backward);
    }
    let mut best: Option<f64> = None;
    if fits
        && let Some(rest) = (m - x(s)).checked_sub(seg.stash)
        && let Some(c) = opt(s + 1, t, rest)
    {
        best = Some(seg.forward + c + seg.backward);
    }
    for split in s + 1..t {
        let sweep_fits = first <= m
            && (s + 1..split).all(|k| {
                let g = &chain.segments[k];
                x(s) + x(k) + d(t) + g.stash + x(k + 1) + g.forward_extra <= m
            });
        if !sweep_fits {
            continue;
        }
        let Some(right) = opt(split, t, m - x(s)) else {
            continue;
        };
        let Some(left) = opt(s, split, m) else {
            continue;
        };
        let sweep: f64 = chain.segments[s..split].iter().map(|g| g.forward).sum();
        let cost = sweep + right + left;
        if best.is_none_or(|b| cost < b) {
            best = Some(cost);
        }
    }
    best
}
