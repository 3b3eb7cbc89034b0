use brrr_checkpoint::{Chain, Mode, Op};
use std::collections::{BTreeMap, BTreeSet};

/// Replays the ops on sets of kept inputs and stashes.
pub fn schedule_peak(chain: &Chain, ops: &[Op]) -> u64 {
    let n = chain.len();
    let mut inputs = BTreeSet::from([0usize]);
    let mut stashes: BTreeMap<usize, (u64, u64)> = BTreeMap::new(); // bytes, refill
    let mut front: Option<usize> = None;
    let mut delta: Option<usize> = None;
    let held = |inputs: &BTreeSet<usize>,
                stashes: &BTreeMap<usize, (u64, u64)>,
                front: Option<usize>,
                delta: Option<usize>| {
        let xs: BTreeSet<usize> = inputs
            .iter()
            .copied()
            .chain(stashes.keys().copied())
            .chain(front)
            .collect();
        xs.iter().map(|&j| chain.x_bytes(j)).sum::<u64>()
            + stashes.values().map(|v| v.0).sum::<u64>()
            + delta.map_or(0, |i| chain.delta_bytes(i))
    };
    let mut peak = 0;
    for op in ops {
        match *op {
            Op::Forward { seg, mode } => {
                let s = &chain.segments[seg];
                let during = held(&inputs, &stashes, front, delta)
                    + s.stash
                    + chain.x_bytes(seg + 1)
                    + s.forward_extra;
                peak = peak.max(during);
                match mode {
                    Mode::SaveInput => {
                        inputs.insert(seg);
                    }
                    Mode::SaveAll => {
                        stashes.insert(seg, (s.stash, 0));
                    }
                    Mode::SaveSelective => {
                        let kept = s.selective_stash.unwrap_or(s.stash);
                        stashes.insert(seg, (kept, s.stash - kept));
                    }
                    Mode::NoSave => {}
                }
                front = (seg + 1 < n).then_some(seg + 1);
            }
            Op::Backward { seg } => {
                let s = &chain.segments[seg];
                front = None;
                let refill = stashes.get(&seg).map_or(0, |v| v.1);
                let during = held(&inputs, &stashes, front, delta)
                    + chain.delta_bytes(seg)
                    + s.backward_extra
                    + refill;
                peak = peak.max(during);
                stashes.remove(&seg);
                inputs.remove(&seg);
                delta = Some(seg);
            }
        }
    }
    peak
}
