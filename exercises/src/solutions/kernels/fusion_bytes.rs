use crate::regimes::gemm_cost::Cost;

/// `n·ops` FLOPs; `2n` element transfers fused, `2n` per op unfused.
pub fn chain_cost(n: u64, ops: u64, bytes_per_element: f64, fused: bool) -> Cost {
    let (n, ops) = (n as f64, ops as f64);
    let transfers = if fused { 2.0 * n } else { 2.0 * n * ops };
    Cost {
        flops: n * ops,
        bytes: transfers * bytes_per_element,
    }
}
