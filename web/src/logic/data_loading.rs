//! Data loading: a timeline of the loader and the training step with prefetching off and
//! on, and documents packed into rows and balanced over ranks.
//!
//! The timeline is a simulation computed here, of the two ways `brrr-data` feeds the
//! trainer: without prefetching the trainer asks its source for the next batch and waits
//! while it is produced; with `brrr_data::Prefetcher` the source runs on a thread and
//! hands batches over a bounded channel of `depth` slots (`sync_channel`): the producer
//! makes batch `i` as soon as it has handed over batch `i - 1`, and the hand-over waits
//! until batch `i - depth` has left the channel. The times are the reader's, not measured.
//!
//! Packing and balance are `brrr_data::pack`'s own functions (`pack_documents`,
//! `balance`, `rank_costs`, `imbalance`, `long_tailed_lengths`) compiled to wasm32.

use brrr_data::pack::{
    balance, imbalance, long_tailed_lengths, pack_documents, rank_costs, round_robin,
};

/// An interval of a lane, in milliseconds, and the batch it belongs to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Span {
    /// Start, ms.
    pub start: f64,
    /// End, ms.
    pub end: f64,
    /// The batch (= step) index, from 0.
    pub batch: usize,
}

impl Span {
    /// Its length, ms.
    pub fn len(&self) -> f64 {
        self.end - self.start
    }

    /// Whether it has no length.
    pub fn is_empty(&self) -> bool {
        self.len() <= 0.0
    }
}

/// One run of the simulation: what the loader and the trainer did, and when.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// Producing each batch.
    pub loads: Vec<Span>,
    /// The producer blocked on a full channel (prefetch only).
    pub blocked: Vec<Span>,
    /// Each training step.
    pub steps: Vec<Span>,
    /// The trainer waiting for its batch before each step (non-empty ones only).
    pub waits: Vec<Span>,
    /// When the last step ends, ms.
    pub total_ms: f64,
    /// The trainer's total wait, ms.
    pub wait_ms: f64,
}

/// What the reader sets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoaderInput {
    /// Time to produce one batch (read, tokenize, assemble), ms.
    pub load_ms: f64,
    /// Time of one training step, ms.
    pub step_ms: f64,
    /// The prefetch channel's slots (`--prefetch N`) for the "on" timeline.
    pub depth: usize,
    /// Steps simulated.
    pub steps: usize,
}

impl Default for LoaderInput {
    /// A loader a little slower than half a step: without prefetching the trainer idles
    /// a third of the time, with it almost never.
    fn default() -> Self {
        LoaderInput {
            load_ms: 60.0,
            step_ms: 100.0,
            depth: 2,
            steps: 8,
        }
    }
}

/// The most steps the page draws.
pub const MAX_STEPS: usize = 64;

fn check(input: &LoaderInput) -> Result<(), String> {
    let ok = |t: f64| t.is_finite() && t >= 0.0;
    if !ok(input.load_ms) || !ok(input.step_ms) {
        return Err(format!(
            "times must be finite and non-negative, got load {} ms and step {} ms",
            input.load_ms, input.step_ms
        ));
    }
    if input.steps == 0 || input.steps > MAX_STEPS {
        return Err(format!(
            "steps must be in 1..={MAX_STEPS}, got {}",
            input.steps
        ));
    }
    Ok(())
}

fn finish(loads: Vec<Span>, blocked: Vec<Span>, steps: Vec<Span>, waits: Vec<Span>) -> Timeline {
    let total_ms = steps.last().map_or(0.0, |s| s.end);
    let wait_ms = waits.iter().map(Span::len).sum();
    let waits = waits.into_iter().filter(|w| !w.is_empty()).collect();
    let blocked = blocked.into_iter().filter(|w| !w.is_empty()).collect();
    Timeline {
        loads,
        blocked,
        steps,
        waits,
        total_ms,
        wait_ms,
    }
}

/// Without prefetching: the trainer produces each batch itself, then steps on it.
pub fn synchronous(input: &LoaderInput) -> Result<Timeline, String> {
    check(input)?;
    let (mut loads, mut steps, mut waits) = (Vec::new(), Vec::new(), Vec::new());
    let mut t = 0.0;
    for batch in 0..input.steps {
        let load = Span {
            start: t,
            end: t + input.load_ms,
            batch,
        };
        loads.push(load);
        waits.push(load);
        let step = Span {
            start: load.end,
            end: load.end + input.step_ms,
            batch,
        };
        steps.push(step);
        t = step.end;
    }
    Ok(finish(loads, Vec::new(), steps, waits))
}

/// With a prefetch thread and a channel of `depth ≥ 1` slots, both starting at 0.
pub fn prefetched(input: &LoaderInput) -> Result<Timeline, String> {
    check(input)?;
    if input.depth == 0 {
        return Err("a prefetch channel has at least 1 slot".into());
    }
    let n = input.steps;
    let (mut loads, mut blocked, mut steps, mut waits) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // take[i]: when the trainer took batch i out of the channel.
    let mut take: Vec<f64> = Vec::with_capacity(n);
    let mut producer_free = 0.0;
    let mut trainer_free = 0.0;
    for batch in 0..n {
        let load = Span {
            start: producer_free,
            end: producer_free + input.load_ms,
            batch,
        };
        // The channel has room for batch i once batch i - depth has been taken. The
        // trainer took every earlier batch already in this loop (it takes in order).
        let room = batch.checked_sub(input.depth).map_or(0.0, |j| take[j]);
        let sent = load.end.max(room);
        blocked.push(Span {
            start: load.end,
            end: sent,
            batch,
        });
        loads.push(load);
        producer_free = sent;
        let taken = sent.max(trainer_free);
        waits.push(Span {
            start: trainer_free,
            end: taken,
            batch,
        });
        take.push(taken);
        let step = Span {
            start: taken,
            end: taken + input.step_ms,
            batch,
        };
        steps.push(step);
        trainer_free = step.end;
    }
    Ok(finish(loads, blocked, steps, waits))
}

/// Both timelines and what prefetching bought.
#[derive(Clone, Debug, PartialEq)]
pub struct LoaderView {
    /// Prefetching off.
    pub off: Timeline,
    /// Prefetching on.
    pub on: Timeline,
    /// `off.total / on.total`.
    pub speedup: f64,
    /// The trainer's wait per step once the pipeline is full: `load` without
    /// prefetching; `max(0, load - step)` with it.
    pub steady_wait_off_ms: f64,
    /// See `steady_wait_off_ms`.
    pub steady_wait_on_ms: f64,
}

/// Simulates both ways.
pub fn loader_view(input: &LoaderInput) -> Result<LoaderView, String> {
    let off = synchronous(input)?;
    let on = prefetched(input)?;
    let speedup = if on.total_ms > 0.0 {
        off.total_ms / on.total_ms
    } else {
        1.0
    };
    Ok(LoaderView {
        speedup,
        steady_wait_off_ms: input.load_ms,
        steady_wait_on_ms: (input.load_ms - input.step_ms).max(0.0),
        off,
        on,
    })
}

/// What the packing and balance part draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackInput {
    /// Documents drawn from `long_tailed_lengths`.
    pub docs: usize,
    /// Longest document, tokens.
    pub max_len: usize,
    /// Slots per packed row (the context).
    pub seq: usize,
    /// Ranks to balance over.
    pub world: usize,
    /// The lengths' seed.
    pub seed: u64,
}

impl Default for PackInput {
    fn default() -> Self {
        PackInput {
            docs: 48,
            max_len: 512,
            seq: 256,
            world: 4,
            seed: 7,
        }
    }
}

/// The largest inputs the page draws.
pub const MAX_DOCS: usize = 256;
/// The longest document the page draws.
pub const MAX_LEN: usize = 4096;

/// A document piece in a packed row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    /// Row.
    pub row: usize,
    /// First slot.
    pub start: usize,
    /// Slots (its tokens minus one: inputs and targets are shifted by one).
    pub len: usize,
    /// The piece's index (its colour).
    pub piece: usize,
}

/// Documents packed, against one document per row padded to the context.
#[derive(Clone, Debug, PartialEq)]
pub struct PackView {
    /// Document lengths, tokens.
    pub lens: Vec<usize>,
    /// Rows of the packed batch.
    pub rows: usize,
    /// Slots per row.
    pub seq: usize,
    /// Every piece, by row.
    pub placed: Vec<Placed>,
    /// Real targets over all slots when packed (`PackedBatch::fill`).
    pub fill: f64,
    /// Rows with one piece each, padded (pieces after cutting long documents).
    pub padded_rows: usize,
    /// Real targets over all slots when padded.
    pub padded_fill: f64,
}

/// Draws `docs` long-tailed lengths and packs documents of those lengths.
pub fn pack_view(input: &PackInput) -> Result<PackView, String> {
    if input.docs == 0 || input.docs > MAX_DOCS {
        return Err(format!(
            "documents must be in 1..={MAX_DOCS}, got {}",
            input.docs
        ));
    }
    if input.max_len < 2 || input.max_len > MAX_LEN {
        return Err(format!(
            "the longest document must be in 2..={MAX_LEN}, got {}",
            input.max_len
        ));
    }
    if input.seq == 0 || input.seq > MAX_LEN {
        return Err(format!(
            "the context must be in 1..={MAX_LEN}, got {}",
            input.seq
        ));
    }
    let lens = long_tailed_lengths(input.docs, input.max_len, input.seed);
    // Token values do not matter to packing; each document counts 0, 1, 2, ...
    let docs: Vec<Vec<u32>> = lens.iter().map(|&l| (0..l as u32).collect()).collect();
    let packed = pack_documents(&docs, input.seq).map_err(|e| e.to_string())?;
    let placed = packed
        .placements
        .iter()
        .enumerate()
        .map(|(piece, &(row, start, len))| Placed {
            row,
            start,
            len,
            piece,
        })
        .collect::<Vec<_>>();
    let slots: usize = placed.iter().map(|p| p.len).sum();
    let padded_rows = placed.len();
    Ok(PackView {
        lens,
        rows: packed.rows,
        seq: packed.seq,
        fill: packed.fill(),
        padded_rows,
        padded_fill: slots as f64 / (padded_rows * input.seq).max(1) as f64,
        placed,
    })
}

/// Per-rank attention cost `Σ len²` dealt round robin and balanced.
#[derive(Clone, Debug, PartialEq)]
pub struct BalanceView {
    /// Cost per rank, round robin.
    pub before: Vec<f64>,
    /// Cost per rank, `balance`d.
    pub after: Vec<f64>,
    /// `max / mean` before.
    pub imbalance_before: f64,
    /// `max / mean` after.
    pub imbalance_after: f64,
}

/// Balances sequences of `lens` tokens over `world` ranks.
pub fn balance_view(lens: &[usize], world: usize) -> Result<BalanceView, String> {
    if world == 0 || world > 64 {
        return Err(format!("ranks must be in 1..=64, got {world}"));
    }
    let before = rank_costs(lens, &round_robin(lens.len(), world), world);
    let after = rank_costs(
        lens,
        &balance(lens, world).map_err(|e| e.to_string())?,
        world,
    );
    Ok(BalanceView {
        imbalance_before: imbalance(&before),
        imbalance_after: imbalance(&after),
        before,
        after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(load_ms: f64, step_ms: f64, depth: usize) -> LoaderInput {
        LoaderInput {
            load_ms,
            step_ms,
            depth,
            steps: 10,
        }
    }

    #[test]
    fn without_prefetching_every_step_waits_for_its_batch() {
        let t = synchronous(&input(60.0, 100.0, 2)).unwrap();
        assert_eq!(t.total_ms, 1600.0);
        assert_eq!(t.wait_ms, 600.0);
        assert_eq!(t.waits.len(), 10);
        assert_eq!(t.steps[3].start, 3.0 * 160.0 + 60.0);
    }

    #[test]
    fn a_fast_enough_loader_hides_behind_the_step() {
        let t = prefetched(&input(60.0, 100.0, 2)).unwrap();
        // Only the first batch is waited for; then each is ready before it is needed.
        assert_eq!(t.waits.len(), 1);
        assert_eq!(t.wait_ms, 60.0);
        assert_eq!(t.total_ms, 60.0 + 10.0 * 100.0);
        // The producer runs ahead until the channel is full, then blocks.
        assert!(!t.blocked.is_empty());
        for (l, s) in t.loads.iter().zip(&t.steps) {
            assert!(
                l.end <= s.start,
                "batch {} produced before its step",
                l.batch
            );
        }
        let v = loader_view(&input(60.0, 100.0, 2)).unwrap();
        assert!((v.speedup - 1600.0 / 1060.0).abs() < 1e-12);
        assert_eq!((v.steady_wait_off_ms, v.steady_wait_on_ms), (60.0, 0.0));
    }

    #[test]
    fn a_slow_loader_still_sets_the_pace() {
        let t = prefetched(&input(150.0, 100.0, 4)).unwrap();
        // The trainer waits load - step per step once the first batch is in.
        assert_eq!(t.total_ms, 10.0 * 150.0 + 100.0);
        assert!((t.wait_ms - (150.0 + 9.0 * 50.0)).abs() < 1e-9);
        assert!(t.blocked.is_empty(), "the channel never fills");
    }

    #[test]
    fn the_channel_bounds_how_far_the_producer_runs_ahead() {
        for depth in 1..4 {
            let t = prefetched(&input(10.0, 100.0, depth)).unwrap();
            for (i, l) in t.loads.iter().enumerate() {
                // Batch i is handed over only once batch i - depth has been taken.
                let sent = l.end
                    + t.blocked
                        .iter()
                        .find(|b| b.batch == i)
                        .map_or(0.0, Span::len);
                if i >= depth {
                    assert!(sent >= t.steps[i - depth].start, "depth {depth} batch {i}");
                }
            }
            assert_eq!(t.total_ms, 10.0 + 1000.0);
        }
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert!(prefetched(&input(1.0, 1.0, 0)).is_err());
        assert!(synchronous(&input(f64::NAN, 1.0, 1)).is_err());
        let too_many = LoaderInput {
            steps: MAX_STEPS + 1,
            ..LoaderInput::default()
        };
        assert!(loader_view(&too_many).unwrap_err().contains("steps"));
    }

    #[test]
    fn packing_fills_rows_that_padding_wastes() {
        let v = pack_view(&PackInput::default()).unwrap();
        assert_eq!(v.lens.len(), 48);
        assert!(
            v.rows < v.padded_rows,
            "{} packed rows, {} padded",
            v.rows,
            v.padded_rows
        );
        assert!(
            v.fill > v.padded_fill && v.fill > 0.8,
            "{} vs {}",
            v.fill,
            v.padded_fill
        );
        // No two pieces overlap in a row, and each fits in it.
        for a in &v.placed {
            assert!(a.start + a.len <= v.seq);
            for b in &v.placed {
                if a.piece != b.piece && a.row == b.row {
                    assert!(a.start + a.len <= b.start || b.start + b.len <= a.start);
                }
            }
        }
        assert!(
            pack_view(&PackInput {
                docs: 0,
                ..PackInput::default()
            })
            .is_err()
        );
    }

    #[test]
    fn balancing_lowers_the_imbalance() {
        let v = pack_view(&PackInput::default()).unwrap();
        let b = balance_view(&v.lens, 4).unwrap();
        assert!(b.imbalance_after < b.imbalance_before, "{b:?}");
        assert!(b.imbalance_after >= 1.0);
        let total = |c: &[f64]| c.iter().sum::<f64>();
        assert_eq!(total(&b.before), total(&b.after));
        assert!(balance_view(&v.lens, 0).is_err());
    }
}
