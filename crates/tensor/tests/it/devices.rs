//! Tensors moving between CPU devices and between backends.
#![cfg(not(target_arch = "wasm32"))]

use brrr_backend::{Backend, DType, block_on};
use brrr_cpu::CpuBackend;
use brrr_tensor::Tensor;

#[test]
fn to_device_copies_the_view_and_counts_on_the_destination() {
    let (a, b) = (CpuBackend::new(), CpuBackend::device(1, 1).unwrap());
    let v: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let t = Tensor::from_f32(&a, &v, [4, 6], DType::F32).unwrap();
    // A transposed view of part of the buffer: only its 12 elements travel, dense.
    let view = t.narrow(1, 1, 3).unwrap().transpose(0, 1).unwrap();
    let on_b = block_on(view.to_device(&b)).unwrap();
    assert_eq!(on_b.dims(), &[3, 4]);
    assert!(on_b.is_dense());
    assert_eq!(on_b.backend().location().to_string(), "cpu:1");
    assert_eq!(on_b.to_vec_f32().unwrap(), view.to_vec_f32().unwrap());
    let s = b.memory_stats();
    assert_eq!((s.bytes_in_use, s.live_buffers), (12 * 4, 1));
    drop(on_b);
    assert_eq!(b.memory_stats().bytes_in_use, 0);
}

#[test]
fn to_backend_goes_through_the_host() {
    let a = CpuBackend::new();
    let t = Tensor::from_f32(&a, &[1.5, -2.0, 3.25], [3], DType::BF16).unwrap();
    let other = CpuBackend::device(2, 1).unwrap();
    let u = block_on(t.to_backend(&other)).unwrap();
    assert_eq!((u.dims(), u.dtype()), (&[3usize][..], DType::BF16));
    assert_eq!(u.to_vec_f32().unwrap(), vec![1.5, -2.0, 3.25]);
}
