//! # Tiles and waves
//!
//! A GEMM kernel computes its `m × n` output in `tile_m × tile_n` tiles, one thread
//! block each; `tiles_per_sm` blocks fit on each of `sm_count` SMs at once, so the
//! tiles run in *waves* of `sm_count × tiles_per_sm`. Return:
//!
//! - `tiles`: `ceil(m / tile_m) × ceil(n / tile_n)`;
//! - `waves`: `tiles / wave size`, as a fraction (2.08 waves is two full and a sliver);
//! - `efficiency`: the fraction of the launched tile-slots doing useful work: the
//!   useful part of the (possibly partial) edge tiles, `m·n / (tiles·tile_m·tile_n)`,
//!   times the busy part of the waves, `waves / ceil(waves)`.
//!
//! Checked against `brrr_perf::roofline::gemm_quantization` on random shapes.

use crate::check::{Outcome, close, rng, with_seed};
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

/// The reference solution.
pub mod solution {
    use super::Waves;

    /// Ceil-divide for tiles, then the two efficiencies multiplied.
    pub fn waves(
        m: u64,
        n: u64,
        tile_m: u64,
        tile_n: u64,
        sm_count: u64,
        tiles_per_sm: u64,
    ) -> Waves {
        let tiles = m.div_ceil(tile_m) * n.div_ceil(tile_n);
        let waves = tiles as f64 / (sm_count * tiles_per_sm) as f64;
        let tile_eff = (m * n) as f64 / (tiles * tile_m * tile_n) as f64;
        Waves {
            tiles,
            waves,
            efficiency: tile_eff * waves / waves.ceil(),
        }
    }
}

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
        if got.tiles != want.tiles {
            return Err(format!(
                "{what}: {} tiles, expected {}",
                got.tiles, want.tiles
            ));
        }
        close(&format!("{what}: waves"), got.waves, want.waves, 1e-12)?;
        close(
            &format!("{what}: efficiency"),
            got.efficiency,
            want.efficiency,
            1e-12,
        )?;
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
