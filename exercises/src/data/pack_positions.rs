//! # Positions and segment ids of a packed row
//!
//! A packed row of `seq` slots holds documents one after another: document `i` takes
//! `lens[i]` slots, in the given order, and the slots left at the end are padding.
//! Return `(positions, segments)`, each `seq` long:
//!
//! - `positions[s]`: the slot's position inside its document, restarting at 0 at every
//!   document (the position embedding each token gets);
//! - `segments[s]`: `i` for the slots of document `i`; the padding is one more segment of
//!   its own (`lens.len()`), with positions counting 0, 1, 2, … from its start.
//!
//! Attention then lets slot `s` see slot `j` only if `j <= s` and
//! `segments[j] == segments[s]`. Checked against `brrr_data::pack::pack_documents`.
//!
//! About 9 lines.
//!
//! ## Hint
//!
//! Walk the documents keeping the next free slot; each slot of document `i` gets its
//! offset inside the document and the id `i`. The padding that remains is one more
//! segment with positions from 0.

use crate::check::{Outcome, rng, with_seed};
use rand::Rng;

/// YOUR CODE: positions and segment ids of documents of `lens` slots packed into `seq`.
#[cfg(not(feature = "solutions"))]
pub fn positions_and_segments(lens: &[usize], seq: usize) -> (Vec<u32>, Vec<u32>) {
    let _ = (lens, seq);
    (Vec::new(), Vec::new())
}

#[cfg(feature = "solutions")]
pub use solution::positions_and_segments;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/data/pack_positions.rs"]
pub mod solution;

/// Random documents that fit one row, longest first (the order packing places them).
pub fn check() -> Outcome {
    let (mut g, seed) = rng();
    with_seed(run(&mut g), seed)
}

fn run(g: &mut impl Rng) -> Outcome {
    for _ in 0..500 {
        let seq = g.random_range(4..200usize);
        let mut lens = Vec::new();
        let mut used = 0;
        while used < seq && g.random_range(0..6) != 0 {
            let n = g.random_range(1..=seq - used);
            lens.push(n);
            used += n;
        }
        lens.sort_by(|a, b| b.cmp(a));
        // A document of n + 1 tokens fills n slots (inputs and next-token targets).
        let docs: Vec<Vec<u32>> = lens.iter().map(|&n| (0..=n as u32).collect()).collect();
        let p = brrr_data::pack::pack_documents(&docs, seq).map_err(|e| e.to_string())?;
        if p.rows > 1 {
            return Err(format!(
                "test set-up: {lens:?} did not fit one row of {seq}"
            ));
        }
        let (want_pos, want_seg) = if p.rows == 0 {
            ((0..seq as u32).collect(), vec![0; seq])
        } else {
            (p.positions.clone(), p.segments.clone())
        };
        let (pos, seg) = positions_and_segments(&lens, seq);
        if pos != want_pos || seg != want_seg {
            return Err(format!(
                "lens {lens:?} in {seq} slots: got positions {pos:?} segments {seg:?}, expected \
                 positions {want_pos:?} segments {want_seg:?}"
            ));
        }
    }
    Ok(())
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
