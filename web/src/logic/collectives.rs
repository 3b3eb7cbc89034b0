//! What the collectives page animates: an all-reduce run step by step by
//! `brrr_collectives::Simulation` on small per-rank buffers, the same schedule the
//! in-process, socket and MPI transports execute. Each frame holds every rank's buffer
//! after a step and the chunks that moved in it; [`summary`] sets the run's step count
//! and bytes beside brrr-perf's alpha-beta model, and [`reference()`] is the crate's own
//! reference reduction that the last frame is checked against.

use brrr_collectives::{
    Algorithm, Collective, ReduceOp, Simulation, chunk_range, plan, reference_reduce,
};
use brrr_perf::comms;
use std::ops::Range;

/// Bytes per element: the page reduces `f32` buffers.
pub const ELEMENT_BYTES: usize = 4;

/// One message of a step, as the page draws it.
#[derive(Debug, Clone, PartialEq)]
pub struct Move {
    /// Sending rank.
    pub src: usize,
    /// Receiving rank.
    pub dst: usize,
    /// Elements written in the receiver's buffer.
    pub range: Range<usize>,
    /// Elements read from the sender's buffer (the same as `range` for every all-reduce
    /// here, kept apart because a schedule may move data between offsets).
    pub src_range: Range<usize>,
    /// The chunk those elements are, when they are exactly one chunk.
    pub chunk: Option<usize>,
    /// Added in (`true`) or copied over (`false`).
    pub reduce: bool,
}

/// Every rank's buffer after a step, and the moves of that step (none for the start).
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// Rank `r`'s buffer.
    pub buffers: Vec<Vec<f32>>,
    /// What moved to get here.
    pub moves: Vec<Move>,
}

/// The all-reduce algorithms the page offers (every one brrr-collectives implements).
pub const ALGORITHMS: [Algorithm; 5] = [
    Algorithm::Ring,
    Algorithm::Tree,
    Algorithm::DoubleTree,
    Algorithm::Rhd,
    Algorithm::Naive,
];

/// What the algorithm menu says about each.
pub fn algorithm_label(a: Algorithm) -> &'static str {
    match a {
        Algorithm::Ring => "ring (reduce-scatter + all-gather)",
        Algorithm::Tree => "binary tree (reduce + broadcast)",
        Algorithm::DoubleTree => "double binary tree (half the buffer each)",
        Algorithm::Rhd => "recursive halving-doubling",
        Algorithm::Naive => "naive (through rank 0)",
    }
}

/// Rank `r` starts with `r + 1` in every element, so a finished all-reduce shows
/// `n(n+1)/2` everywhere and partial sums are readable on the way.
pub fn initial(n: usize, len: usize) -> Vec<Vec<f32>> {
    (0..n).map(|r| vec![(r + 1) as f32; len]).collect()
}

/// The frames of an all-reduce (sum) by `algorithm` on `n` ranks of `len` elements.
pub fn frames(algorithm: Algorithm, n: usize, len: usize) -> Result<Vec<Frame>, String> {
    if !(1..=16).contains(&n) || len > 64 {
        return Err(format!(
            "{n} ranks of {len} elements: the page draws 1..=16 ranks of at most 64"
        ));
    }
    let schedule = plan(Collective::AllReduce, algorithm, n, len, 0).map_err(|e| e.to_string())?;
    let mut sim =
        Simulation::new(schedule, initial(n, len), ReduceOp::Sum).map_err(|e| e.to_string())?;
    let mut out = vec![Frame {
        buffers: sim.buffers().to_vec(),
        moves: Vec::new(),
    }];
    while let Some(step) = sim.step() {
        let moves = step
            .transfers
            .iter()
            .map(|t| Move {
                src: t.src,
                dst: t.dst,
                range: t.dst_range.clone(),
                src_range: t.src_range.clone(),
                chunk: (0..n).find(|&c| chunk_range(len, n, c) == t.dst_range),
                reduce: t.reduce,
            })
            .collect();
        out.push(Frame {
            buffers: sim.buffers().to_vec(),
            moves,
        });
    }
    Ok(out)
}

/// What every rank must hold at the end: `brrr_collectives::reference_reduce` (sum, in
/// f64) over the same starting buffers.
pub fn reference(n: usize, len: usize) -> Vec<f32> {
    reference_reduce(&initial(n, len), ReduceOp::Sum)
}

/// Whether `buffer` equals `want` element by element. The algorithms add in other
/// orders than the reference, so sums are compared with a relative tolerance (the
/// page's small integers are exact either way).
pub fn matches(buffer: &[f32], want: &[f32]) -> bool {
    buffer.len() == want.len()
        && buffer
            .iter()
            .zip(want)
            .all(|(a, b)| (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0))
}

/// Bytes each rank sends over the whole run (local copies, `src == dst`, excluded).
pub fn bytes_sent(frames: &[Frame], n: usize) -> Vec<usize> {
    let mut sent = vec![0; n];
    for m in frames.iter().flat_map(|f| &f.moves) {
        if m.src != m.dst && m.src < n {
            sent[m.src] += m.src_range.len() * ELEMENT_BYTES;
        }
    }
    sent
}

/// brrr-perf's alpha-beta cost of an all-reduce, split into its two terms: `t = a·α +
/// b·S/B`. The page shows `a` (latency terms, comparable to the step count) and `b·S`
/// (bytes per rank, comparable to the bytes sent).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Model {
    /// Which of brrr-perf's algorithms (ring or tree) was used.
    pub name: &'static str,
    /// The number of α (latency) terms.
    pub latency_terms: f64,
    /// The bytes per rank of the bandwidth term.
    pub bytes_per_rank: f64,
}

/// brrr-perf models ring and (double binary) tree all-reduce; naive and recursive
/// halving-doubling have no model there.
fn perf_algorithm(a: Algorithm) -> Option<comms::Algorithm> {
    match a {
        Algorithm::Ring => Some(comms::Algorithm::Ring),
        Algorithm::Tree | Algorithm::DoubleTree => Some(comms::Algorithm::Tree),
        Algorithm::Naive | Algorithm::Rhd => None,
    }
}

/// The alpha-beta model of `algorithm` on `n` ranks of `bytes`, evaluated twice by
/// `brrr_perf::comms::collective_time`: once with α = 1 s and no bytes (the latency
/// terms), once with α = 0 and 1 byte/s (the bandwidth term in bytes).
pub fn model(algorithm: Algorithm, n: usize, bytes: f64) -> Result<Option<Model>, String> {
    let Some(alg) = perf_algorithm(algorithm) else {
        return Ok(None);
    };
    let err = |e: brrr_perf::error::PerfError| e.to_string();
    let latency = comms::Link::new(1.0, 1.0).map_err(err)?;
    let bandwidth = comms::Link::new(0.0, 1.0).map_err(err)?;
    let c = comms::Collective::AllReduce;
    Ok(Some(Model {
        name: alg_name(alg),
        latency_terms: comms::collective_time(c, alg, n as u64, 0.0, latency).map_err(err)?,
        bytes_per_rank: comms::collective_time(c, alg, n as u64, bytes, bandwidth).map_err(err)?,
    }))
}

fn alg_name(a: comms::Algorithm) -> &'static str {
    match a {
        comms::Algorithm::Ring => "ring",
        comms::Algorithm::Tree => "tree",
    }
}

/// The numbers beside the animation.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Steps of the schedule.
    pub steps: usize,
    /// Messages between ranks (local copies excluded).
    pub messages: usize,
    /// Bytes each rank sends.
    pub bytes_sent: Vec<usize>,
    /// The most any rank sends.
    pub max_bytes_sent: usize,
    /// brrr-perf's model, where it has one.
    pub model: Option<Model>,
}

/// The summary of a run drawn as `frames`, `n` ranks of `len` elements.
pub fn summary(
    algorithm: Algorithm,
    n: usize,
    len: usize,
    frames: &[Frame],
) -> Result<Summary, String> {
    let bytes_sent = bytes_sent(frames, n);
    Ok(Summary {
        steps: frames.len().saturating_sub(1),
        messages: frames
            .iter()
            .flat_map(|f| &f.moves)
            .filter(|m| m.src != m.dst)
            .count(),
        max_bytes_sent: bytes_sent.iter().copied().max().unwrap_or(0),
        bytes_sent,
        model: model(algorithm, n, (len * ELEMENT_BYTES) as f64)?,
    })
}

/// A value as a cell shows it: integers without a fraction.
pub fn cell_text(x: f32) -> String {
    if x.fract() == 0.0 && x.abs() < 1e7 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

/// "rank 0 → rank 1, chunk 3 (add)" or "…, elements 4..8 (copy)".
pub fn move_label(m: &Move) -> String {
    let what = match m.chunk {
        Some(c) => format!("chunk {c}"),
        None => format!("elements {}..{}", m.range.start, m.range.end),
    };
    let how = if m.reduce { "add" } else { "copy" };
    format!("rank {} → rank {}, {what} ({how})", m.src, m.dst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_algorithm_ends_with_the_sum_on_every_rank() {
        for alg in ALGORITHMS {
            for n in 1..=8 {
                let f = frames(alg, n, 7).unwrap();
                let want = (n * (n + 1) / 2) as f32;
                for b in &f.last().unwrap().buffers {
                    assert!(b.iter().all(|&x| x == want), "{} n={n}: {b:?}", alg.name());
                }
            }
        }
    }

    #[test]
    fn the_ring_moves_one_chunk_per_rank_per_step() {
        let f = frames(Algorithm::Ring, 4, 8).unwrap();
        assert_eq!(f.len(), 1 + 2 * 3);
        for frame in &f[1..] {
            assert_eq!(frame.moves.len(), 4);
            assert!(
                frame
                    .moves
                    .iter()
                    .all(|m| m.chunk.is_some() && m.dst == (m.src + 1) % 4)
            );
        }
        // Step 1 of the reduce-scatter: rank 0 sends chunk 3 (= 0 − 0 − 1 mod 4).
        assert_eq!(f[1].moves[0].chunk, Some(3));
        assert!(frames(Algorithm::Ring, 40, 8).is_err());
    }

    #[test]
    fn the_ring_steps_and_bytes_match_the_alpha_beta_model() {
        for n in 2..=8 {
            let len = 4 * n;
            let f = frames(Algorithm::Ring, n, len).unwrap();
            let s = summary(Algorithm::Ring, n, len, &f).unwrap();
            assert_eq!(s.steps, 2 * (n - 1));
            let m = s.model.unwrap();
            assert!(
                (m.latency_terms - s.steps as f64).abs() < 1e-9,
                "n={n}: {m:?}"
            );
            // 2(n−1)/n · S, S = 4·len bytes, every rank alike.
            let want = 2.0 * (n - 1) as f64 / n as f64 * (len * ELEMENT_BYTES) as f64;
            assert!((m.bytes_per_rank - want).abs() < 1e-6);
            assert!(s.bytes_sent.iter().all(|&b| b as f64 == want), "{s:?}");
        }
    }

    #[test]
    fn the_last_frame_matches_the_reference_and_earlier_ones_do_not() {
        for alg in ALGORITHMS {
            let (n, len) = (5, 9);
            let f = frames(alg, n, len).unwrap();
            let want = reference(n, len);
            assert_eq!(want, vec![15.0; len]);
            assert!(f.last().unwrap().buffers.iter().all(|b| matches(b, &want)));
            assert!(!f[0].buffers.iter().any(|b| matches(b, &want)));
        }
        assert!(!matches(&[1.0, 2.0], &[1.0]));
    }

    #[test]
    fn naive_and_rhd_have_no_model_and_labels_name_chunks() {
        assert_eq!(model(Algorithm::Naive, 4, 64.0).unwrap(), None);
        assert_eq!(model(Algorithm::Rhd, 4, 64.0).unwrap(), None);
        assert_eq!(
            model(Algorithm::DoubleTree, 4, 64.0).unwrap().unwrap().name,
            "tree"
        );
        let f = frames(Algorithm::Ring, 4, 8).unwrap();
        assert_eq!(move_label(&f[1].moves[0]), "rank 0 → rank 1, chunk 3 (add)");
        assert_eq!(cell_text(10.0), "10");
        assert_eq!(cell_text(2.5), "2.50");
    }
}
