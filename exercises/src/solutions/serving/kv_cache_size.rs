/// Keys and values (2) of every layer, `n_embd` numbers each.
pub fn kv_cache_tokens(
    n_layer: usize,
    n_embd: usize,
    dtype_bytes: usize,
    budget_bytes: usize,
) -> (usize, usize) {
    let per_token = 2 * n_layer * n_embd * dtype_bytes;
    (per_token, budget_bytes / per_token.max(1))
}
