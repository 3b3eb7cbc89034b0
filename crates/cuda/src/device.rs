//! The small set of device primitives the backend is written against.
//!
//! Two implementations: [`crate::driver`] (a real GPU through cudarc: streams, modules,
//! cuBLAS, cuBLASLt, pinned staging) and [`crate::emu`] (the CPU emulator of
//! `kernels/emu`, which runs the same CUDA C kernels as OS threads). Everything above
//! this trait (argument marshalling, launch geometry, the caching allocator, the
//! row-major-to-cuBLAS mapping) is therefore exercised by tests on machines without a
//! GPU.

use crate::kernels::Family;
use brrr_backend::{DType, Result};

/// A device address.
pub(crate) type DevPtr = u64;

/// One kernel argument, by value. Pointers are device addresses.
#[derive(Clone, Debug)]
pub(crate) enum Arg {
    Ptr(DevPtr),
    U64(u64),
    I32(i32),
    F32(f32),
    /// A `#[repr(C)]` struct passed by value (its bytes).
    Bytes(Vec<u8>),
}

impl Arg {
    /// A pointer to the argument's value, as cuLaunchKernel's `kernelParams` wants.
    pub(crate) fn as_param_ptr(&self) -> *mut std::ffi::c_void {
        match self {
            Arg::Ptr(v) | Arg::U64(v) => v as *const u64 as *mut _,
            Arg::I32(v) => v as *const i32 as *mut _,
            Arg::F32(v) => v as *const f32 as *mut _,
            Arg::Bytes(b) => b.as_ptr() as *mut _,
        }
    }

    /// The bytes of a plain-old-data struct.
    pub(crate) fn pod<T: bytemuck::Pod>(v: &T) -> Arg {
        Arg::Bytes(bytemuck::bytes_of(v).to_vec())
    }
}

/// Grid, block and dynamic shared memory of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LaunchCfg {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub smem: u32,
}

/// What a device reports about itself.
#[derive(Clone, Debug)]
pub(crate) struct DeviceInfo {
    pub name: String,
    /// Compute capability (major, minor).
    pub cc: (u32, u32),
    pub sm_count: u32,
    pub total_mem: u64,
}

/// An allocation failure: out of memory (the caller may free its cache and retry) or
/// anything else.
#[derive(Debug)]
pub(crate) enum AllocFail {
    OutOfMemory,
    Other(brrr_backend::Error),
}

/// A `cublasGemmStridedBatchedEx` call in cuBLAS's own column-major terms; see
/// [`crate::gemm`] for how a row-major [`brrr_backend::GemmSpec`] becomes one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct BlasGemm {
    /// The dtype of A and B (and of the scale factors' compute type).
    pub dtype: DType,
    /// The dtype of C: `dtype`, or f32 for f16/bf16 operands (mixed precision).
    pub c_dtype: DType,
    /// op(A) = A^T (cuBLAS `CUBLAS_OP_T`).
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub alpha: f32,
    pub beta: f32,
    pub a: DevPtr,
    pub lda: usize,
    pub stride_a: usize,
    pub b: DevPtr,
    pub ldb: usize,
    pub stride_b: usize,
    pub c: DevPtr,
    pub ldc: usize,
    pub stride_c: usize,
    pub batch: usize,
    /// f32 inputs multiplied on tensor cores in TF32 (10-bit mantissa) instead of full f32.
    pub tf32: bool,
}

/// A cuBLASLt matmul with an optional fused epilogue, column-major like [`BlasGemm`]
/// (no batching): `D = act(alpha * op(A) op(B) + beta * C + bias)`, where `bias` has one
/// value per row of D (`m` values).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct LtMatmul {
    pub gemm: BlasGemm,
    pub bias: Option<DevPtr>,
    pub gelu: bool,
}

/// A fill pattern for [`Device::memset`]: a 2-, 4- or 8-byte value repeated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pattern {
    B16(u16),
    B32(u32),
    B64(u64),
}

/// An opaque device event.
pub(crate) type EventId = u64;

/// Device primitives. All work goes to one compute stream in order; host-to-device copies
/// may use a second stream (see [`Device::copy_htod`]).
pub(crate) trait Device: Send + Sync + 'static {
    fn info(&self) -> DeviceInfo;
    /// Short name for messages: `cuda` or `cuda-emu`.
    fn kind(&self) -> &'static str;

    /// Raw allocation (no caching: the caller caches).
    fn malloc(&self, bytes: usize) -> std::result::Result<DevPtr, AllocFail>;
    fn free(&self, ptr: DevPtr);
    /// (free, total) device memory in bytes.
    fn mem_info(&self) -> Result<(u64, u64)>;

    /// Fills `count` elements of the pattern's width at `ptr`, in stream order.
    fn memset(&self, ptr: DevPtr, pattern: Pattern, count: usize) -> Result<()>;
    /// Copies host bytes to the device. Ordered after everything already enqueued on the
    /// compute stream that touches `dst`: when `after` is given, the copy waits only for
    /// that event (recorded on the compute stream when `dst`'s memory was last released);
    /// otherwise it waits for all compute work enqueued so far. Work enqueued on the compute
    /// stream after this call sees the data.
    fn copy_htod(&self, dst: DevPtr, src: &[u8], after: Option<EventId>) -> Result<()>;
    /// Copies device bytes to the host, waiting for the compute stream first.
    fn copy_dtoh(&self, dst: &mut [u8], src: DevPtr) -> Result<()>;
    fn copy_dtod(&self, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<()>;

    /// Launches kernel `name` of `family` on the compute stream.
    fn launch(&self, family: Family, name: &str, cfg: LaunchCfg, args: &[Arg]) -> Result<()>;
    fn blas_gemm(&self, g: &BlasGemm) -> Result<()>;
    fn lt_matmul(&self, g: &LtMatmul) -> Result<()>;

    /// A new event (reusable); `timing` events can measure elapsed time, others are
    /// cheaper to record (the allocator records one per freed block).
    fn event_create(&self, timing: bool) -> Result<EventId>;
    fn event_destroy(&self, ev: EventId);
    /// Records `ev` on the compute stream.
    fn event_record(&self, ev: EventId) -> Result<()>;
    /// Seconds between two recorded events (waits for the second).
    fn event_elapsed(&self, start: EventId, end: EventId) -> Result<f64>;

    /// Waits for all work on all streams.
    fn synchronize(&self) -> Result<()>;

    /// The allocator hands out the block at `ptr` (`size` bytes, rounded up) for a buffer
    /// of `used` bytes. The emulator guards the rest of the block so that an op writing
    /// past the buffer's end is an error; a GPU does nothing.
    fn block_in_use(&self, _ptr: DevPtr, _used: usize, _size: usize) {}
    /// The block at `ptr` went back to the allocator's cache.
    fn block_released(&self, _ptr: DevPtr) {}
}
