/// `2Ψ + 2Ψ + 12Ψ`, each part divided by `dp` from the stage that shards it.
pub fn model_state_bytes_per_gpu(params: f64, zero_stage: u8, dp: u64) -> f64 {
    let shard = |from: u8| if zero_stage >= from { dp as f64 } else { 1.0 };
    2.0 * params / shard(3) + 2.0 * params / shard(2) + 12.0 * params / shard(1)
}
