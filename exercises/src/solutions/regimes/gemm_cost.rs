use super::Cost;

/// `2mnk` FLOPs; `(mk + kn + mn)` elements moved.
pub fn gemm_cost(m: u64, n: u64, k: u64, bytes_per_element: f64) -> Cost {
    let (m, n, k) = (m as f64, n as f64, k as f64);
    Cost {
        flops: 2.0 * m * n * k,
        bytes: (m * k + k * n + m * n) * bytes_per_element,
    }
}
