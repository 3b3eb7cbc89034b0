use brrr_amp::OpClass;
use brrr_backend::DType;

/// Low precision where the matmuls are; f32 for everything that sums or updates.
pub fn autocast_dtype(class: OpClass, low: DType) -> DType {
    match class {
        OpClass::Gemm | OpClass::AttentionCore | OpClass::Elementwise => low,
        OpClass::LayerNormStatistics
        | OpClass::SoftmaxStatistics
        | OpClass::Loss
        | OpClass::Reduction
        | OpClass::Optimizer => DType::F32,
    }
}
