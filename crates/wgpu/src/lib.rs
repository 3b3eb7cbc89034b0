//! # brrr-wgpu
//!
//! brrr's GPU backend on [wgpu](https://wgpu.rs): the same WGSL kernels run natively on
//! Vulkan, Metal and DX12, and in the browser on WebGPU (this crate compiles for
//! `wasm32-unknown-unknown`). Every [`Backend`](brrr_backend::Backend) op is a kernel
//! in the repository's `shaders/` folder, one file per family (matmul, elementwise, cast,
//! reduce, softmax, layernorm, embed, loss, optimizer, amp), compiled into the crate with
//! `include_str!` and exposed through [`shaders`].
//!
//! - **Dtypes.** f32 everywhere. f16 and bf16 are *storage* formats: two values per u32
//!   word, converted in WGSL with bit-exact round-to-nearest-even helpers and computed in
//!   f32, so they work on every adapter (WebGPU has no bf16 at all, and `shader-f16` is
//!   optional; [`DeviceReport::shader_f16`] says whether this adapter has it). i32/u32 for
//!   ids and targets. f64 is [`Error::Unsupported`](brrr_backend::Error::Unsupported).
//!   Most kernels are written once, for f32: a 16-bit operand is widened into a
//!   temporary f32 buffer by the cast kernel, and narrowed back after. That costs two
//!   extra passes over 16-bit data, the honest price of a single source of truth.
//! - **Limits.** The device is created with the adapter's own limits. A buffer larger
//!   than `max_buffer_size`, a binding larger than `max_storage_buffer_binding_size` or a
//!   grid beyond `max_compute_workgroups_per_dimension` is an
//!   [`Error::LimitExceeded`](brrr_backend::Error::LimitExceeded) naming the limit, before
//!   wgpu sees it. Any other wgpu error is captured and returned as an `Err` by the next
//!   call, never a panic. [`WgpuBackend::report`] lists the limits.
//! - **Execution.** Pipelines are compiled once per kernel variant and cached. Each op
//!   writes a fresh uniform buffer with its parameters, records one dispatch and submits
//!   it; nothing waits except [`Backend::read`](brrr_backend::Backend::read) and
//!   [`Backend::synchronize`](brrr_backend::Backend::synchronize), which are `async`
//!   (natively they poll the device; in the browser they await the map callback).
//! - **Matmul as a lesson.** Four versions, from naive to vectorised register blocking,
//!   selectable with [`MatmulKernel`] and [`WgpuBackend::gemm_with`]; see
//!   `shaders/matmul.wgsl` and [`bench`](mod@bench).
//!
//! # Example
//!
//! A GEMM on the first adapter, read back and checked. Where there is no adapter (no
//! GPU, no Vulkan/Metal/DX12 driver) [`WgpuBackend::new_blocking`] returns an error and
//! the example says so instead of failing:
//!
//! ```rust
//! # #[cfg(not(target_arch = "wasm32"))] {
//! use brrr_backend::{Backend, GemmSpec, HostData, block_on};
//! let gpu = match brrr_wgpu::WgpuBackend::new_blocking() {
//!     Ok(gpu) => gpu,
//!     Err(e) => {
//!         println!("SKIPPED: {e}");
//!         return Ok(());
//!     }
//! };
//! let a = gpu.upload(&HostData::F32(vec![1.0; 6]))?; // 2×3
//! let b = gpu.upload(&HostData::F32(vec![1.0; 12]))?; // 3×4
//! let mut c = gpu.zeros(brrr_backend::DType::F32, 8)?;
//! gpu.gemm(&GemmSpec::new(2, 4, 3), &a, &b, &mut c)?;
//! assert_eq!(block_on(gpu.read(&c))?, HostData::F32(vec![3.0; 8]));
//! # }
//! # Ok::<(), brrr_backend::Error>(())
//! ```
#![warn(missing_docs)]

#[cfg(not(target_arch = "wasm32"))]
pub mod bench;
mod device;
mod oneshot;
mod ops;
mod reduce;
pub mod shaders;

pub use device::{DeviceReport, STAGED_MAX_BYTES, STAGING_CHUNK_BYTES, UploadPath, WgpuBuffer};
pub use shaders::{Family, kernel_source};

use brrr_backend::{GemmSpec, Result};
use std::fmt;
use std::sync::Arc;

/// The matmul kernel versions in `shaders/matmul.wgsl`, slowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatmulKernel {
    /// One invocation per output, operands straight from global memory.
    V1Naive,
    /// 16×16 tiles staged in workgroup (shared) memory.
    V2Tiled,
    /// 64×64 workgroup tiles, a 4×4 block of outputs in registers per invocation.
    V3RegisterBlocked,
    /// 128×128 tiles, 8×8 per invocation, vec4 loads and FMAs. Needs the contiguous axis
    /// of each operand to be a multiple of 4 (see [`MatmulKernel::supports`]).
    V4Vec4,
}

impl MatmulKernel {
    /// Every version, slowest first (the order of the lesson and of the benchmark).
    pub const ALL: [MatmulKernel; 4] = [
        MatmulKernel::V1Naive,
        MatmulKernel::V2Tiled,
        MatmulKernel::V3RegisterBlocked,
        MatmulKernel::V4Vec4,
    ];

    /// Short name, as the benchmark prints it.
    pub fn name(self) -> &'static str {
        match self {
            MatmulKernel::V1Naive => "v1_naive",
            MatmulKernel::V2Tiled => "v2_tiled",
            MatmulKernel::V3RegisterBlocked => "v3_register_blocked",
            MatmulKernel::V4Vec4 => "v4_vec4",
        }
    }

    /// Output tile of one workgroup (square).
    pub fn tile(self) -> usize {
        match self {
            MatmulKernel::V1Naive | MatmulKernel::V2Tiled => 16,
            MatmulKernel::V3RegisterBlocked => 64,
            MatmulKernel::V4Vec4 => 128,
        }
    }

    /// Whether this version can run `spec` (only [`MatmulKernel::V4Vec4`] has
    /// conditions: 16-byte loads need the contiguous axis of A and of B, and their batch
    /// strides and offsets, to be multiples of 4).
    pub fn supports(self, spec: &GemmSpec) -> bool {
        match self {
            MatmulKernel::V4Vec4 => {
                let a_axis = if spec.trans_a { spec.m } else { spec.k };
                let b_axis = if spec.trans_b { spec.k } else { spec.n };
                a_axis.is_multiple_of(4)
                    && b_axis.is_multiple_of(4)
                    && spec.offset_a.is_multiple_of(4)
                    && spec.offset_b.is_multiple_of(4)
                    && (spec.batch <= 1
                        || (spec.stride_a.is_multiple_of(4) && spec.stride_b.is_multiple_of(4)))
            }
            _ => true,
        }
    }

    /// The version [`Backend::gemm`](brrr_backend::Backend::gemm) uses for `spec`.
    pub fn best_for(spec: &GemmSpec) -> MatmulKernel {
        if MatmulKernel::V4Vec4.supports(spec) {
            MatmulKernel::V4Vec4
        } else {
            MatmulKernel::V3RegisterBlocked
        }
    }
}

impl fmt::Display for MatmulKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for MatmulKernel {
    type Err = brrr_backend::Error;
    fn from_str(s: &str) -> Result<Self> {
        MatmulKernel::ALL
            .into_iter()
            .find(|k| k.name() == s || k.name().split('_').next() == Some(s))
            .ok_or_else(|| {
                brrr_backend::Error::Parse(format!(
                    "unknown matmul kernel '{s}' (expected one of v1_naive, v2_tiled, v3_register_blocked, v4_vec4)"
                ))
            })
    }
}

/// The wgpu backend. Cloning is cheap (an `Arc` to the device, queue and pipeline cache).
#[derive(Clone)]
pub struct WgpuBackend {
    pub(crate) inner: Arc<device::Inner>,
    /// `Some(k)`: [`Backend::gemm`](brrr_backend::Backend::gemm) uses version `k`
    /// where it applies (see [`WgpuBackend::with_matmul_kernel`]).
    pub(crate) matmul: Option<MatmulKernel>,
    /// How uploads and writes reach the device (see [`UploadPath`]).
    pub(crate) upload: UploadPath,
}

impl fmt::Debug for WgpuBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WgpuBackend")
            .field("device", &self.inner.report.adapter)
            .field("api", &self.inner.report.api)
            .field("matmul", &self.matmul)
            .field("upload", &self.upload)
            .finish()
    }
}

impl WgpuBackend {
    /// Finds an adapter (Vulkan/Metal/DX12 natively, WebGPU in the browser; the
    /// `WGPU_BACKEND` and `WGPU_POWER_PREF` environment variables override) and opens a
    /// device with the adapter's full limits. No adapter is [`Error::NoDevice`].
    ///
    /// [`Error::NoDevice`]: brrr_backend::Error::NoDevice
    pub async fn new() -> Result<Self> {
        // On wasm32, wgpu's handles are neither Send nor Sync (JS objects on one thread);
        // an Arc there is a plain shared pointer and keeps one code path for both targets.
        #[allow(clippy::arc_with_non_send_sync)]
        Ok(WgpuBackend {
            inner: Arc::new(device::Inner::create().await?),
            matmul: None,
            upload: UploadPath::default(),
        })
    }

    /// [`WgpuBackend::new`], blocking (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new_blocking() -> Result<Self> {
        pollster::block_on(Self::new())
    }

    /// The adapter, its `shader-f16` feature and the limits the backend enforces.
    pub fn report(&self) -> &DeviceReport {
        &self.inner.report
    }

    /// The wgpu device and queue, for callers that run their own kernels on brrr buffers.
    pub fn device(&self) -> (&wgpu::Device, &wgpu::Queue) {
        (&self.inner.device, &self.inner.queue)
    }

    /// A handle on the same device whose [`Backend::gemm`](brrr_backend::Backend::gemm)
    /// (and so everything built on it) uses matmul version `kernel` wherever that version
    /// supports the shape, falling back to the default otherwise. The conformance suite
    /// runs once per version this way.
    pub fn with_matmul_kernel(&self, kernel: MatmulKernel) -> Self {
        WgpuBackend {
            matmul: Some(kernel),
            ..self.clone()
        }
    }

    /// The same device, with uploads and writes taking `path` ([`UploadPath::Direct`]
    /// by default); `bench::bench_upload` (native) measures both in one run.
    pub fn with_upload_path(&self, path: UploadPath) -> Self {
        WgpuBackend {
            upload: path,
            ..self.clone()
        }
    }

    /// GEMM with an explicit kernel version; an `Err` if the version cannot run `spec`
    /// (see [`MatmulKernel::supports`]).
    pub fn gemm_with(
        &self,
        kernel: MatmulKernel,
        spec: &GemmSpec,
        a: &WgpuBuffer,
        b: &WgpuBuffer,
        c: &mut WgpuBuffer,
    ) -> Result<()> {
        self.gemm_impl(kernel, spec, a, b, c)
    }

    /// Compiles every kernel's f32 variant now, so the first training step (or the first
    /// benchmark repetition) does not pay for shader compilation.
    pub fn warm_up(&self) -> Result<()> {
        ops::warm_up(self)
    }
}

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
