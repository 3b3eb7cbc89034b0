//! # Tiles and waves
//!
//! A GEMM kernel computes its `m × n` output in `tile_m × tile_n` tiles, one thread block
//! each; `tiles_per_sm` blocks fit on each of `sm_count` SMs at once, so the tiles run in
//! *waves*: as many as fit, then the next lot. Edge tiles that overhang the output compute
//! padding; a last, partial wave leaves SMs idle. How much of what the launch occupies is
//! useful work?
//!
//! Return
//! - `tiles`: the tiles that cover the output (an edge tile counts whole);
//! - `waves`: that many tiles in waves, as a fraction (2.08 waves is two full waves and a
//!   sliver);
//! - `efficiency`: the fraction of the launched tile-slots doing useful work, counting
//!   both losses, the padding and the idle end of the last wave.
//!
//! About 10 lines. Checked against `brrr_perf::roofline::gemm_quantization` on random
//! shapes.
//!
//! ## Hint
//!
//! Tiles along each side round up. The launch pays for whole tiles in whole waves: 2.08
//! waves take as long as 3. The two losses multiply.

use crate::check::{Outcome, close, every, hint_if, rel_diff, rng, with_seed};
use brrr_perf::roofline::gemm_quantization;
use rand::Rng;

/// Tile and wave counts of a GEMM launch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Waves {
    /// Output tiles (thread blocks).
    pub tiles: u64,
    /// Tiles divided by the tiles that run at once.
    pub waves: f64,
    /// Useful fraction of the tile-slots launched.
    pub efficiency: f64,
}

/// YOUR CODE: tiles, waves and efficiency of an `m × n` output.
#[cfg(not(feature = "solutions"))]
pub fn waves(m: u64, n: u64, tile_m: u64, tile_n: u64, sm_count: u64, tiles_per_sm: u64) -> Waves {
    let _ = (m, n, tile_m, tile_n, sm_count, tiles_per_sm);
    Waves {
        tiles: 0,
        waves: 0.0,
        efficiency: 1.0,
    }
}

#[cfg(feature = "solutions")]
pub use solution::waves;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/gpu/wave_quantization.rs"]
pub mod solution;

/// Compares [`waves`] with brrr-perf on random shapes, tiles and SM counts.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..40 {
        let (m, n) = (rng.random_range(1..20000u64), rng.random_range(1..20000u64));
        let tile = [64u64, 128, 256];
        let (tm, tn) = (tile[rng.random_range(0..3)], tile[rng.random_range(0..3)]);
        let sms = [80u64, 108, 132, 148][rng.random_range(0..4)];
        let per_sm = rng.random_range(1..4u64);
        let want = gemm_quantization(m, n, tm, tn, sms, per_sm).map_err(|e| e.to_string())?;
        let got = waves(m, n, tm, tn, sms, per_sm);
        let what = format!("{m}x{n} in {tm}x{tn} tiles, {sms} SMs x {per_sm}");
        let tiles = if got.tiles == want.tiles {
            Ok(())
        } else {
            Err(format!(
                "{what}: {} tiles, expected {}",
                got.tiles, want.tiles
            ))
        };
        // Only the padding of the edge tiles, or only the idle end of the last wave.
        let one_loss = [
            (m * n) as f64 / (want.tiles * tm * tn) as f64,
            want.waves / want.waves.ceil(),
        ];
        every([
            tiles,
            close(&format!("{what}: waves"), got.waves, want.waves, 1e-12),
            hint_if(
                close(
                    &format!("{what}: efficiency"),
                    got.efficiency,
                    want.efficiency,
                    1e-12,
                ),
                one_loss
                    .iter()
                    .any(|&x| rel_diff(got.efficiency, x, 1e-300) < 1e-9),
                "that counts one of the two losses; the launch loses to both",
            ),
        ])?;
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
