use brrr_perf::{DType, GpuSpec, Unit};

/// Tensor cores for matmuls where present; vector units otherwise, f32 as fallback.
pub fn compute_ceiling(gpu: &GpuSpec, dtype: DType, matmul: bool) -> Result<f64, String> {
    if matmul {
        return gpu
            .peak(dtype, Unit::Tensor)
            .or_else(|_| gpu.peak(dtype, Unit::Vector))
            .map_err(|e| e.to_string());
    }
    gpu.peak(dtype, Unit::Vector)
        .or_else(|e| gpu.peak(DType::F32, Unit::Vector).map_err(|_| e))
        .map_err(|e| e.to_string())
}
