/// Per block `12h² + 13h` (QKV `3h² + 3h`, projection `h² + h`, MLP `8h² + 5h`,
/// LayerNorms `4h`); embeddings `(v + s)·h`; final LayerNorm `2h`.
pub fn gpt_params(layers: u64, h: u64, s: u64, v: u64) -> u64 {
    layers * (12 * h * h + 13 * h) + (v + s) * h + 2 * h
}
