//! Memory statistics, allocation and copies between devices on every backend present:
//! brrr-cpu (two simulated devices), the CUDA kernel emulator (two emulated devices)
//! and wgpu (two devices on the adapter; lavapipe in CI). An absent backend is reported
//! as skipped, never passed.
#![cfg(not(target_arch = "wasm32"))]

use brrr_backend::{Backend, DType, HostData, block_on};
use brrr_conformance::{CpuBackend, backend_absent};
use brrr_cuda::CudaBackend;
use brrr_wgpu::WgpuBackend;

/// Counters rise by at least the data's bytes when buffers are created, fall by the
/// same amount when they drop, and the peak resets to what is in use.
fn stats_follow_buffers<B: Backend>(be: &B) {
    let name = be.location();
    let s0 = be.memory_stats();
    let a = be.zeros(DType::F32, 1000).unwrap();
    let s1 = be.memory_stats();
    let grew_a = s1.bytes_in_use - s0.bytes_in_use;
    assert!(grew_a >= 4000, "{name}: +{grew_a} B for 4000 B of data");
    assert!(grew_a < 8000, "{name}: +{grew_a} B for 4000 B of data");
    assert_eq!(s1.live_buffers, s0.live_buffers + 1, "{name}");
    let b = be
        .upload(&HostData::BF16(vec![half::bf16::ONE; 3000]))
        .unwrap();
    let s2 = be.memory_stats();
    assert!(s2.bytes_in_use >= s1.bytes_in_use + 6000, "{name}: {s2:?}");
    assert_eq!(s2.live_buffers, s0.live_buffers + 2, "{name}");
    assert!(s2.peak_bytes >= s2.bytes_in_use, "{name}: {s2:?}");
    drop(a);
    let s3 = be.memory_stats();
    assert_eq!(s3.bytes_in_use, s2.bytes_in_use - grew_a, "{name}");
    assert_eq!(s3.peak_bytes, s2.peak_bytes, "{name}: the peak stays");
    be.reset_peak_memory();
    assert_eq!(be.memory_stats().peak_bytes, s3.bytes_in_use, "{name}");
    drop(b);
    let s4 = be.memory_stats();
    assert_eq!(
        (s4.bytes_in_use, s4.live_buffers),
        (s0.bytes_in_use, s0.live_buffers),
        "{name}"
    );
}

/// `alloc` gives a buffer of the asked dtype and length that a write fills completely.
fn alloc_is_writable<B: Backend>(be: &B) {
    let mut buf = be.alloc(DType::F32, 33).unwrap();
    assert_eq!((be.dtype(&buf), be.len(&buf)), (DType::F32, 33));
    let data = HostData::F32((0..33).map(|i| i as f32 * 0.5).collect());
    be.write(&mut buf, &data).unwrap();
    assert_eq!(block_on(be.read(&buf)).unwrap(), data);
}

/// Copies to another device and to the same device carry the data exactly, and count
/// against the destination.
fn copies_between_devices<B: Backend>(a: &B, b: &B) {
    assert!(a.same_device(&a.clone()));
    assert!(!a.same_device(b), "{} vs {}", a.location(), b.location());
    let data = HostData::F16(
        (0..77)
            .map(|i| half::f16::from_f32(i as f32 - 30.0))
            .collect(),
    );
    let src = a.upload(&data).unwrap();
    let before_b = b.memory_stats();
    let on_b = block_on(a.copy_to_device(&src, b)).unwrap();
    assert_eq!(block_on(b.read(&on_b)).unwrap(), data);
    assert_eq!(b.memory_stats().live_buffers, before_b.live_buffers + 1);
    let back = block_on(b.copy_to_device(&on_b, a)).unwrap();
    assert_eq!(block_on(a.read(&back)).unwrap(), data);
    let same = block_on(a.copy_to_device(&src, a)).unwrap();
    assert_eq!(block_on(a.read(&same)).unwrap(), data);
}

fn all<B: Backend>(a: &B, b: &B) {
    stats_follow_buffers(a);
    stats_follow_buffers(b);
    alloc_is_writable(a);
    copies_between_devices(a, b);
}

#[test]
fn cpu_devices() {
    let (a, b) = (CpuBackend::new(), CpuBackend::device(1, 1).unwrap());
    assert_eq!(
        (a.location().to_string(), b.location().to_string()),
        ("cpu:0".into(), "cpu:1".into())
    );
    all(&a, &b);
}

#[test]
fn cuda_emulated_devices() {
    if !brrr_cuda::emu::compiler_available() {
        backend_absent(
            "cuda-emu",
            "no C++ compiler to build the kernel emulator",
            "BRRR_REQUIRE_CUDA_EMU",
        );
        return;
    }
    let a = CudaBackend::emulated_with_capacity(64 << 20).unwrap();
    let b = CudaBackend::emulated_with_capacity(64 << 20).unwrap();
    assert_ne!(a.location(), b.location());
    all(&a, &b);
}

#[test]
fn wgpu_devices() {
    let (a, b) = match (WgpuBackend::new_blocking(), WgpuBackend::new_blocking()) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            backend_absent("wgpu", e, "BRRR_REQUIRE_WGPU");
            return;
        }
    };
    assert_ne!(a.location(), b.location());
    all(&a, &b);
}
