use super::Waves;

/// Ceil-divide for tiles, then the two efficiencies multiplied.
pub fn waves(m: u64, n: u64, tile_m: u64, tile_n: u64, sm_count: u64, tiles_per_sm: u64) -> Waves {
    let tiles = m.div_ceil(tile_m) * n.div_ceil(tile_n);
    let waves = tiles as f64 / (sm_count * tiles_per_sm) as f64;
    let tile_eff = (m * n) as f64 / (tiles * tile_m * tile_n) as f64;
    Waves {
        tiles,
        waves,
        efficiency: tile_eff * waves / waves.ceil(),
    }
}
