/// Weights, gradients and moments, each divided by `world` from the stage that
/// shards it on (ZeRO, Rajbhandari et al. 2020, Figure 1, with f32 weights).
pub fn model_state_bytes(params: f64, stage: u8, world: u64) -> f64 {
    let n = world as f64;
    let split = |from: u8| if stage >= from { n } else { 1.0 };
    4.0 * params / split(3) + 4.0 * params / split(2) + 8.0 * params / split(1)
}
