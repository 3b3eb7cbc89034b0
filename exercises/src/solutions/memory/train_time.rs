/// `6ND / (gpus · peak · mfu)`.
pub fn train_seconds(params: f64, tokens: f64, gpus: u64, peak_flops: f64, mfu: f64) -> f64 {
    6.0 * params * tokens / (gpus as f64 * peak_flops * mfu)
}
