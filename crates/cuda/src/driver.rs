//! The [`Device`] of a real GPU, on cudarc (driver API, NVRTC, cuBLAS, cuBLASLt).
//!
//! - One context per device (the primary context), one **compute stream** for every
//!   kernel, GEMM and device-to-host copy, and one **copy stream** for host-to-device
//!   uploads, which go through a ring of pinned (page-locked) staging buffers so the DMA
//!   engine can read them while the host keeps working.
//! - Kernel files are compiled by NVRTC on first use, for the device's exact
//!   architecture (`sm_XY`, CUBIN) when this NVRTC knows it, else as PTX for the newest
//!   virtual architecture it knows (the driver finishes the compilation), and cached on
//!   disk ([`KernelCache`]).
//! - cudarc panics when a library is missing, so [`CudaDevice::open`] checks for libcuda,
//!   NVRTC and cuBLAS first and returns [`Error::NoDevice`] instead.

use crate::device::{
    AllocFail, Arg, BlasGemm, DevPtr, Device, DeviceInfo, EventId, LaunchCfg, LtMatmul, Pattern,
};
use crate::kernels::{Family, KernelCache, no_nvrtc, nvrtc_available, nvrtc_supported_archs};
use brrr_backend::{DType, Error, Result};
use cudarc::driver::result::DriverError;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, result, sys};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

fn drv(what: &str, e: DriverError) -> Error {
    Error::Backend {
        backend: "cuda",
        msg: format!("{what}: {e:?}"),
    }
}

fn no_device(reason: impl Into<String>) -> Error {
    Error::NoDevice {
        backend: "cuda",
        reason: reason.into(),
    }
}

/// Whether the CUDA driver library (libcuda) can be loaded. Never panics.
pub fn driver_present() -> bool {
    // SAFETY: dlopen of the driver library by name; it runs no user-visible code.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// The number of CUDA devices, or [`Error::NoDevice`] without a driver. Never panics.
pub fn device_count() -> Result<usize> {
    if !driver_present() {
        return Err(no_device("no CUDA driver (libcuda not found)"));
    }
    guard(|| {
        result::init().map_err(|e| no_device(format!("cuInit failed: {e:?}")))?;
        let n = result::device::get_count()
            .map_err(|e| no_device(format!("cuDeviceGetCount failed: {e:?}")))?;
        Ok(n.max(0) as usize)
    })
}

/// Runs `f`, turning a panic inside cudarc (a missing library or symbol) into an error.
fn guard<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(no_device(format!("CUDA library call panicked: {msg}")))
        }
    }
}

/// Pinned staging for uploads: SLOTS buffers of SLOT_BYTES used round-robin; a slot is
/// reused once the copy that last read it has finished (its event).
const SLOT_BYTES: usize = 4 << 20;
const SLOTS: usize = 4;

struct Slot {
    host: *mut u8,
    event: sys::CUevent,
    pending: bool,
}

struct Staging {
    slots: Vec<Slot>,
    next: usize,
    /// Recorded on the compute stream when a copy must wait for all compute work so far.
    compute_mark: sys::CUevent,
    /// Recorded on the copy stream after an upload; the compute stream waits for it.
    copy_done: sys::CUevent,
}

// SAFETY: the raw pointers are driver handles and pinned host memory owned by this
// struct, only used under the device's mutex.
unsafe impl Send for Staging {}

struct LtState {
    handle: cudarc::cublaslt::sys::cublasLtHandle_t,
    /// Best algorithm per problem, from cublasLtMatmulAlgoGetHeuristic.
    algos: HashMap<String, cudarc::cublaslt::sys::cublasLtMatmulAlgo_t>,
}

// SAFETY: the handle is only used under the device's mutex.
unsafe impl Send for LtState {}

struct Modules {
    modules: HashMap<Family, Arc<CudaModule>>,
    functions: HashMap<String, CudaFunction>,
}

/// A GPU as a [`Device`].
pub(crate) struct CudaDevice {
    ctx: Arc<CudaContext>,
    compute: Arc<CudaStream>,
    copy: Arc<CudaStream>,
    info: DeviceInfo,
    /// NVRTC target: `sm_XY` or `compute_XY`.
    arch: String,
    cache: KernelCache,
    modules: Mutex<Modules>,
    blas: Mutex<cudarc::cublas::CudaBlas>,
    lt: Mutex<LtState>,
    /// Shared by cuBLAS and cuBLASLt (both run on the compute stream, one at a time).
    workspace: DevPtr,
    workspace_bytes: usize,
    staging: Mutex<Staging>,
}

// SAFETY: every raw handle inside is behind a Mutex or immutable after construction;
// cudarc's own types are Send + Sync.
unsafe impl Send for CudaDevice {}
unsafe impl Sync for CudaDevice {}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl CudaDevice {
    /// Opens device `ordinal`: [`Error::NoDevice`] when the driver, the device, NVRTC or
    /// cuBLAS is missing. Never panics.
    pub(crate) fn open(ordinal: usize) -> Result<CudaDevice> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(no_device(format!(
                "CUDA device {ordinal} requested, {count} present"
            )));
        }
        if !nvrtc_available() {
            return Err(no_nvrtc());
        }
        // SAFETY: dlopen by name, as above.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(no_device(
                "cuBLAS not found: looked for libcublas.so and libcublas.so.12 on the loader path \
                 (CUDA 13 names it libcublas.so.13: put the toolkit's lib64 on LD_LIBRARY_PATH or \
                 link it as libcublas.so, as bench/cuda.sh does)",
            ));
        }
        // SAFETY: as above.
        if !unsafe { cudarc::cublaslt::sys::is_culib_present() } {
            return Err(no_device(
                "cuBLASLt not found: looked for libcublasLt.so and libcublasLt.so.12 on the loader \
                 path (CUDA 13 names it libcublasLt.so.13: put the toolkit's lib64 on \
                 LD_LIBRARY_PATH or link it as libcublasLt.so, as bench/cuda.sh does)",
            ));
        }
        guard(|| Self::open_inner(ordinal))
    }

    fn open_inner(ordinal: usize) -> Result<CudaDevice> {
        let ctx = CudaContext::new(ordinal).map_err(|e| drv("creating the CUDA context", e))?;
        // brrr orders work itself (one compute stream, explicit events for the copy
        // stream); cudarc's per-slice event tracking is not used.
        // SAFETY: no CudaSlice of this context exists yet.
        unsafe { ctx.disable_event_tracking() };
        let compute = ctx
            .new_stream()
            .map_err(|e| drv("creating the compute stream", e))?;
        let copy = ctx
            .new_stream()
            .map_err(|e| drv("creating the copy stream", e))?;
        let name = ctx.name().map_err(|e| drv("cuDeviceGetName", e))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| drv("compute capability", e))?;
        let sm_count = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| drv("SM count", e))?;
        let total_mem = ctx.total_mem().map_err(|e| drv("total memory", e))?;
        let info = DeviceInfo {
            name,
            cc: (major as u32, minor as u32),
            sm_count: sm_count.max(1) as u32,
            total_mem: total_mem as u64,
        };
        let arch = pick_arch(major * 10 + minor)?;

        let blas = cudarc::cublas::CudaBlas::new(compute.clone())
            .map_err(|e| no_device(format!("cublasCreate failed: {e:?}")))?;
        // 32 MiB on Hopper and newer, 4 MiB before: NVIDIA's recommendation, as cudarc's
        // cuBLASLt wrapper and PyTorch use.
        let workspace_bytes: usize = if major >= 9 { 32 << 20 } else { 4 << 20 };
        // SAFETY: the context is current (CudaContext::new bound it).
        let workspace = unsafe { result::malloc_sync(workspace_bytes) }
            .map_err(|e| drv("cuBLAS workspace", e))?;
        // SAFETY: a valid handle and a device buffer that lives as long as the handle.
        unsafe {
            cudarc::cublas::sys::cublasSetWorkspace_v2(
                *blas.handle(),
                workspace as *mut c_void,
                workspace_bytes,
            )
            .result()
            .map_err(|e| no_device(format!("cublasSetWorkspace failed: {e:?}")))?;
        }
        let lt_handle = cudarc::cublaslt::result::create_handle()
            .map_err(|e| no_device(format!("cublasLtCreate failed: {e:?}")))?;

        let new_event = |flags| result::event::create(flags).map_err(|e| drv("cuEventCreate", e));
        let mut slots = Vec::with_capacity(SLOTS);
        for _ in 0..SLOTS {
            slots.push(Slot {
                host: std::ptr::null_mut(),
                event: new_event(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?,
                pending: false,
            });
        }
        let staging = Staging {
            slots,
            next: 0,
            compute_mark: new_event(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?,
            copy_done: new_event(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?,
        };
        Ok(CudaDevice {
            ctx,
            compute,
            copy,
            info,
            arch,
            cache: KernelCache::default(),
            modules: Mutex::new(Modules {
                modules: HashMap::new(),
                functions: HashMap::new(),
            }),
            blas: Mutex::new(blas),
            lt: Mutex::new(LtState {
                handle: lt_handle,
                algos: HashMap::new(),
            }),
            workspace,
            workspace_bytes,
            staging: Mutex::new(staging),
        })
    }

    fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| drv("binding the CUDA context", e))
    }

    /// The kernel `name` of `family`, compiling and loading the family on first use.
    fn function(&self, family: Family, name: &str, smem: u32) -> Result<CudaFunction> {
        let mut m = lock(&self.modules);
        if let Some(f) = m.functions.get(name) {
            return Ok(f.clone());
        }
        let module = match m.modules.get(&family) {
            Some(module) => module.clone(),
            None => {
                let image = self.cache.get(family, &self.arch)?;
                let ptx = if self.arch.starts_with("sm_") {
                    cudarc::nvrtc::Ptx::from_binary(image)
                } else {
                    cudarc::nvrtc::Ptx::from_src(String::from_utf8_lossy(&image).into_owned())
                };
                let module = self.ctx.load_module(ptx).map_err(|e| {
                    drv(
                        &format!(
                            "loading {} (compiled for {})",
                            family.file_name(),
                            self.arch
                        ),
                        e,
                    )
                })?;
                m.modules.insert(family, module.clone());
                module
            }
        };
        let f = module
            .load_function(name)
            .map_err(|e| drv(&format!("kernel {name} in {}", family.file_name()), e))?;
        if smem > 48 * 1024 {
            // Above 48 KiB a kernel must opt in to more dynamic shared memory.
            // SAFETY: a valid function handle.
            unsafe {
                result::function::set_function_attribute(
                    f.cu_function(),
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    smem as i32,
                )
            }
            .map_err(|e| {
                drv(
                    &format!("{name}: requesting {smem} bytes of shared memory"),
                    e,
                )
            })?;
        }
        m.functions.insert(name.to_string(), f.clone());
        Ok(f)
    }
}

/// The NVRTC target for compute capability `cc` (e.g. 90): the real architecture when
/// NVRTC supports it, else PTX for the newest virtual architecture below it.
fn pick_arch(cc: i32) -> Result<String> {
    let supported = nvrtc_supported_archs()?;
    if supported.contains(&cc) {
        return Ok(format!("sm_{cc}"));
    }
    supported
        .iter()
        .copied()
        .filter(|&a| a <= cc)
        .max()
        .map(|a| format!("compute_{a}"))
        .ok_or_else(|| {
            no_device(format!(
                "NVRTC supports none of the architectures up to sm_{cc} (it knows {supported:?})"
            ))
        })
}

fn blas_dtype(d: DType) -> cudarc::cublas::sys::cudaDataType {
    use cudarc::cublas::sys::cudaDataType as T;
    match d {
        DType::F16 => T::CUDA_R_16F,
        DType::BF16 => T::CUDA_R_16BF,
        DType::F64 => T::CUDA_R_64F,
        _ => T::CUDA_R_32F,
    }
}

fn lt_dtype(d: DType) -> cudarc::cublaslt::sys::cudaDataType {
    use cudarc::cublaslt::sys::cudaDataType as T;
    match d {
        DType::F16 => T::CUDA_R_16F,
        DType::BF16 => T::CUDA_R_16BF,
        DType::F64 => T::CUDA_R_64F,
        _ => T::CUDA_R_32F,
    }
}

fn op(t: bool) -> cudarc::cublas::sys::cublasOperation_t {
    if t {
        cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T
    } else {
        cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N
    }
}

fn blas_err(what: &str, e: impl std::fmt::Debug) -> Error {
    Error::Backend {
        backend: "cuda",
        msg: format!("{what}: {e:?}"),
    }
}

impl Device for CudaDevice {
    fn info(&self) -> DeviceInfo {
        self.info.clone()
    }

    fn kind(&self) -> &'static str {
        "cuda"
    }

    fn malloc(&self, bytes: usize) -> std::result::Result<DevPtr, AllocFail> {
        self.bind().map_err(AllocFail::Other)?;
        // SAFETY: the context is current.
        match unsafe { result::malloc_sync(bytes) } {
            Ok(p) => Ok(p),
            Err(DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY)) => {
                Err(AllocFail::OutOfMemory)
            }
            Err(e) => Err(AllocFail::Other(drv(&format!("cuMemAlloc({bytes})"), e))),
        }
    }

    fn free(&self, ptr: DevPtr) {
        if self.bind().is_ok() {
            // SAFETY: ptr came from malloc above and is freed once.
            let _ = unsafe { result::free_sync(ptr) };
        }
    }

    fn mem_info(&self) -> Result<(u64, u64)> {
        self.bind()?;
        let (free, total) = result::mem_get_info().map_err(|e| drv("cuMemGetInfo", e))?;
        Ok((free as u64, total as u64))
    }

    fn memset(&self, ptr: DevPtr, pattern: Pattern, count: usize) -> Result<()> {
        self.bind()?;
        let s = self.compute.cu_stream();
        // SAFETY: the backend fills only inside its allocations.
        let r = unsafe {
            match pattern {
                Pattern::B16(v) => sys::cuMemsetD16Async(ptr, v, count, s).result(),
                Pattern::B32(v) => sys::cuMemsetD32Async(ptr, v, count, s).result(),
                Pattern::B64(v) => {
                    return self.launch(
                        Family::Elementwise,
                        "fill_b64",
                        LaunchCfg {
                            grid: (
                                (count.div_ceil(256)).clamp(1, self.info.sm_count as usize * 16)
                                    as u32,
                                1,
                                1,
                            ),
                            block: (256, 1, 1),
                            smem: 0,
                        },
                        &[Arg::Ptr(ptr), Arg::U64(count as u64), Arg::U64(v)],
                    );
                }
            }
        };
        r.map_err(|e| drv("cuMemsetAsync", e))
    }

    fn copy_htod(&self, dst: DevPtr, src: &[u8], after: Option<EventId>) -> Result<()> {
        self.bind()?;
        let mut st = lock(&self.staging);
        let copy = self.copy.cu_stream();
        let compute = self.compute.cu_stream();
        // SAFETY: events and streams belong to this context; the pinned slots hold
        // SLOT_BYTES each and are rewritten only after their previous copy finished.
        unsafe {
            let wait_on = match after {
                Some(ev) => ev as sys::CUevent,
                None => {
                    result::event::record(st.compute_mark, compute)
                        .map_err(|e| drv("cuEventRecord", e))?;
                    st.compute_mark
                }
            };
            sys::cuStreamWaitEvent(copy, wait_on, 0)
                .result()
                .map_err(|e| drv("cuStreamWaitEvent", e))?;
            let mut off = 0usize;
            while off < src.len() {
                let len = (src.len() - off).min(SLOT_BYTES);
                let i = st.next;
                st.next = (st.next + 1) % SLOTS;
                let slot = &mut st.slots[i];
                if slot.host.is_null() {
                    slot.host = result::malloc_host(SLOT_BYTES, 0)
                        .map_err(|e| drv("cuMemHostAlloc", e))?
                        as *mut u8;
                }
                if slot.pending {
                    result::event::synchronize(slot.event)
                        .map_err(|e| drv("cuEventSynchronize", e))?;
                }
                std::ptr::copy_nonoverlapping(src.as_ptr().add(off), slot.host, len);
                sys::cuMemcpyHtoDAsync_v2(dst + off as u64, slot.host as *const c_void, len, copy)
                    .result()
                    .map_err(|e| drv("cuMemcpyHtoDAsync", e))?;
                result::event::record(slot.event, copy).map_err(|e| drv("cuEventRecord", e))?;
                slot.pending = true;
                off += len;
            }
            result::event::record(st.copy_done, copy).map_err(|e| drv("cuEventRecord", e))?;
            sys::cuStreamWaitEvent(compute, st.copy_done, 0)
                .result()
                .map_err(|e| drv("cuStreamWaitEvent", e))?;
        }
        Ok(())
    }

    fn copy_dtoh(&self, dst: &mut [u8], src: DevPtr) -> Result<()> {
        self.bind()?;
        // SAFETY: src holds dst.len() bytes; the stream is synchronized before dst is
        // used.
        unsafe {
            result::memcpy_dtoh_async(dst, src, self.compute.cu_stream())
                .map_err(|e| drv("cuMemcpyDtoHAsync", e))?;
        }
        self.compute.synchronize().map_err(|e| {
            drv(
                "waiting for the compute stream (a kernel may have failed)",
                e,
            )
        })
    }

    fn copy_dtod(&self, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<()> {
        self.bind()?;
        // SAFETY: both ranges are inside allocations of at least `bytes`.
        unsafe { result::memcpy_dtod_async(dst, src, bytes, self.compute.cu_stream()) }
            .map_err(|e| drv("cuMemcpyDtoDAsync", e))
    }

    fn launch(&self, family: Family, name: &str, cfg: LaunchCfg, args: &[Arg]) -> Result<()> {
        self.bind()?;
        let f = self.function(family, name, cfg.smem)?;
        let mut params: Vec<*mut c_void> = args.iter().map(Arg::as_param_ptr).collect();
        // SAFETY: `args` match the kernel's parameter list (checked against the kernels by
        // the emulator tests, which use the same marshalling); the values outlive the
        // call, which copies them.
        unsafe {
            result::launch_kernel(
                f.cu_function(),
                cfg.grid,
                cfg.block,
                cfg.smem,
                self.compute.cu_stream(),
                &mut params,
            )
        }
        .map_err(|e| {
            drv(
                &format!(
                    "launching {name} (grid {:?}, block {:?})",
                    cfg.grid, cfg.block
                ),
                e,
            )
        })
    }

    fn blas_gemm(&self, g: &BlasGemm) -> Result<()> {
        use cudarc::cublas::sys::{cublasComputeType_t as C, cublasGemmAlgo_t};
        self.bind()?;
        let blas = lock(&self.blas);
        let (compute, wide) = match g.dtype {
            DType::F64 => (C::CUBLAS_COMPUTE_64F, true),
            DType::F32 if g.tf32 => (C::CUBLAS_COMPUTE_32F_FAST_TF32, false),
            _ => (C::CUBLAS_COMPUTE_32F, false),
        };
        let (alpha32, beta32) = (g.alpha, g.beta);
        let (alpha64, beta64) = (f64::from(g.alpha), f64::from(g.beta));
        let (pa, pb): (*const c_void, *const c_void) = if wide {
            (
                &alpha64 as *const f64 as *const _,
                &beta64 as *const f64 as *const _,
            )
        } else {
            (
                &alpha32 as *const f32 as *const _,
                &beta32 as *const f32 as *const _,
            )
        };
        let t = blas_dtype(g.dtype);
        // SAFETY: the operands were checked against the descriptor by the backend; alpha
        // and beta are host scalars of the compute type (host pointer mode, the default).
        unsafe {
            cudarc::cublas::result::gemm_strided_batched_ex(
                *blas.handle(),
                op(g.trans_a),
                op(g.trans_b),
                g.m as i32,
                g.n as i32,
                g.k as i32,
                pa,
                g.a as *const c_void,
                t,
                g.lda.max(1) as i32,
                g.stride_a as i64,
                g.b as *const c_void,
                t,
                g.ldb.max(1) as i32,
                g.stride_b as i64,
                pb,
                g.c as *mut c_void,
                // f32 for a mixed-precision product (16-bit A/B, compute 32F): one of
                // the combinations cublasGemmEx documents.
                blas_dtype(g.c_dtype),
                g.ldc.max(1) as i32,
                g.stride_c as i64,
                g.batch as i32,
                compute,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| blas_err("cublasGemmStridedBatchedEx", e))
    }

    fn lt_matmul(&self, l: &LtMatmul) -> Result<()> {
        guard(|| self.lt_matmul_inner(l))
    }

    fn event_create(&self, timing: bool) -> Result<EventId> {
        self.bind()?;
        let flags = if timing {
            sys::CUevent_flags::CU_EVENT_DEFAULT
        } else {
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING
        };
        let ev = result::event::create(flags).map_err(|e| drv("cuEventCreate", e))?;
        Ok(ev as EventId)
    }

    fn event_destroy(&self, ev: EventId) {
        if self.bind().is_ok() {
            // SAFETY: ev came from event_create and is destroyed once.
            let _ = unsafe { result::event::destroy(ev as sys::CUevent) };
        }
    }

    fn event_record(&self, ev: EventId) -> Result<()> {
        self.bind()?;
        // SAFETY: a live event of this context.
        unsafe { result::event::record(ev as sys::CUevent, self.compute.cu_stream()) }
            .map_err(|e| drv("cuEventRecord", e))
    }

    fn event_elapsed(&self, start: EventId, end: EventId) -> Result<f64> {
        // Symbol names of the event API changed in CUDA 13 (cuEventElapsedTime_v2); a
        // driver without the one cudarc asks for would make it panic.
        guard(|| self.event_elapsed_inner(start, end))
    }

    fn synchronize(&self) -> Result<()> {
        self.bind()?;
        self.ctx
            .synchronize()
            .map_err(|e| drv("synchronizing the device (a kernel may have failed)", e))
    }
}

impl CudaDevice {
    fn lt_matmul_inner(&self, l: &LtMatmul) -> Result<()> {
        use cudarc::cublaslt::result as lt;
        use cudarc::cublaslt::sys::{
            cublasComputeType_t as C, cublasLtEpilogue_t as E, cublasLtMatmulDescAttributes_t as D,
            cublasLtMatmulPreferenceAttributes_t as P,
        };
        self.bind()?;
        let g = &l.gemm;
        let mut st = lock(&self.lt);
        let (compute, scale, wide) = match g.dtype {
            DType::F64 => (C::CUBLAS_COMPUTE_64F, lt_dtype(DType::F64), true),
            DType::F32 if g.tf32 => (C::CUBLAS_COMPUTE_32F_FAST_TF32, lt_dtype(DType::F32), false),
            _ => (C::CUBLAS_COMPUTE_32F, lt_dtype(DType::F32), false),
        };
        let t = lt_dtype(g.dtype);
        let epilogue = match (l.bias.is_some(), l.gelu) {
            (false, false) => E::CUBLASLT_EPILOGUE_DEFAULT,
            (true, false) => E::CUBLASLT_EPILOGUE_BIAS,
            (false, true) => E::CUBLASLT_EPILOGUE_GELU,
            (true, true) => E::CUBLASLT_EPILOGUE_GELU_BIAS,
        };
        // cublasOperation_t as cuBLASLt stores it: an i32, CUBLAS_OP_N = 0, CUBLAS_OP_T = 1.
        let lt_op = |tr: bool| -> i32 { i32::from(tr) };
        // Descriptors owned here and destroyed on every path out.
        struct Descs {
            desc: cudarc::cublaslt::sys::cublasLtMatmulDesc_t,
            layouts: Vec<cudarc::cublaslt::sys::cublasLtMatrixLayout_t>,
            pref: cudarc::cublaslt::sys::cublasLtMatmulPreference_t,
        }
        impl Drop for Descs {
            fn drop(&mut self) {
                // SAFETY: each handle was created once and is destroyed once.
                unsafe {
                    for l in self.layouts.drain(..) {
                        let _ = lt::destroy_matrix_layout(l);
                    }
                    if !self.pref.is_null() {
                        let _ = lt::destroy_matmul_pref(self.pref);
                    }
                    if !self.desc.is_null() {
                        let _ = lt::destroy_matmul_desc(self.desc);
                    }
                }
            }
        }
        fn e(what: &'static str) -> impl Fn(cudarc::cublaslt::result::CublasError) -> Error {
            move |err| blas_err(what, err)
        }
        let mut d = Descs {
            desc: lt::create_matmul_desc(compute, scale).map_err(e("cublasLtMatmulDescCreate"))?,
            layouts: Vec::new(),
            pref: std::ptr::null_mut(),
        };
        // SAFETY: attribute buffers have the sizes and types the cuBLASLt documentation
        // gives for each attribute; pointers stay valid for the matmul call.
        unsafe {
            let set = |attr: D, ptr: *const c_void, size: usize| {
                lt::set_matmul_desc_attribute(d.desc, attr, ptr, size)
            };
            let ta = lt_op(g.trans_a);
            let tb = lt_op(g.trans_b);
            set(
                D::CUBLASLT_MATMUL_DESC_TRANSA,
                &ta as *const _ as *const c_void,
                std::mem::size_of_val(&ta),
            )
            .map_err(e("TRANSA"))?;
            set(
                D::CUBLASLT_MATMUL_DESC_TRANSB,
                &tb as *const _ as *const c_void,
                std::mem::size_of_val(&tb),
            )
            .map_err(e("TRANSB"))?;
            set(
                D::CUBLASLT_MATMUL_DESC_EPILOGUE,
                &epilogue as *const _ as *const c_void,
                std::mem::size_of_val(&epilogue),
            )
            .map_err(e("EPILOGUE"))?;
            if let Some(bias) = l.bias {
                let bp = bias as *const c_void;
                set(
                    D::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                    &bp as *const _ as *const c_void,
                    std::mem::size_of_val(&bp),
                )
                .map_err(e("BIAS_POINTER"))?;
                set(
                    D::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                    &t as *const _ as *const c_void,
                    std::mem::size_of_val(&t),
                )
                .map_err(e("BIAS_DATA_TYPE"))?;
            }
            // Layouts of the matrices as stored (before op): rows x cols, leading dim.
            let (a_rows, a_cols) = if g.trans_a { (g.k, g.m) } else { (g.m, g.k) };
            let (b_rows, b_cols) = if g.trans_b { (g.n, g.k) } else { (g.k, g.n) };
            for (r, c, ld) in [
                (a_rows, a_cols, g.lda),
                (b_rows, b_cols, g.ldb),
                (g.m, g.n, g.ldc),
            ] {
                d.layouts.push(
                    lt::create_matrix_layout(t, r as u64, c as u64, ld.max(1) as i64)
                        .map_err(e("cublasLtMatrixLayoutCreate"))?,
                );
            }
            d.pref = lt::create_matmul_pref().map_err(e("cublasLtMatmulPreferenceCreate"))?;
            let ws = self.workspace_bytes as u64;
            lt::set_matmul_pref_attribute(
                d.pref,
                P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws as *const u64 as *const c_void,
                std::mem::size_of::<u64>(),
            )
            .map_err(e("MAX_WORKSPACE_BYTES"))?;
            let key = format!(
                "{:?}/{}{}/{}x{}x{}/{}/{}/{}/{:?}",
                g.dtype, g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, epilogue
            ) + if g.tf32 { "/tf32" } else { "" };
            let algo = match st.algos.get(&key) {
                Some(a) => *a,
                None => {
                    let h = lt::get_matmul_algo_heuristic(
                        st.handle,
                        d.desc,
                        d.layouts[0],
                        d.layouts[1],
                        d.layouts[2],
                        d.layouts[2],
                        d.pref,
                    )
                    .map_err(e(
                        "cublasLtMatmulAlgoGetHeuristic (no algorithm for this problem)",
                    ))?;
                    st.algos.insert(key, h.algo);
                    h.algo
                }
            };
            let (a32, b32) = (g.alpha, g.beta);
            let (a64, b64) = (f64::from(g.alpha), f64::from(g.beta));
            let (pa, pb): (*const c_void, *const c_void) = if wide {
                (
                    &a64 as *const f64 as *const _,
                    &b64 as *const f64 as *const _,
                )
            } else {
                (
                    &a32 as *const f32 as *const _,
                    &b32 as *const f32 as *const _,
                )
            };
            lt::matmul(
                st.handle,
                d.desc,
                pa,
                pb,
                g.a as *const c_void,
                d.layouts[0],
                g.b as *const c_void,
                d.layouts[1],
                g.c as *const c_void,
                d.layouts[2],
                g.c as *mut c_void,
                d.layouts[2],
                &algo,
                self.workspace as *mut c_void,
                self.workspace_bytes,
                self.compute.cu_stream() as *mut _,
            )
            .map_err(e("cublasLtMatmul"))?;
        }
        drop(d);
        Ok(())
    }

    fn event_elapsed_inner(&self, start: EventId, end: EventId) -> Result<f64> {
        self.bind()?;
        // SAFETY: live timing events of this context.
        unsafe {
            result::event::synchronize(end as sys::CUevent)
                .map_err(|e| drv("cuEventSynchronize", e))?;
            let ms = result::event::elapsed(start as sys::CUevent, end as sys::CUevent)
                .map_err(|e| drv("cuEventElapsedTime", e))?;
            Ok(f64::from(ms) / 1e3)
        }
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        if self.bind().is_err() {
            return;
        }
        let _ = self.ctx.synchronize();
        let st = self.staging.get_mut().unwrap_or_else(|p| p.into_inner());
        // SAFETY: everything here was created by open_inner and is released once, after
        // the device finished all work.
        unsafe {
            for s in st.slots.drain(..) {
                if !s.host.is_null() {
                    let _ = result::free_host(s.host as *mut c_void);
                }
                let _ = result::event::destroy(s.event);
            }
            let _ = result::event::destroy(st.compute_mark);
            let _ = result::event::destroy(st.copy_done);
            let lt = self.lt.get_mut().unwrap_or_else(|p| p.into_inner());
            let _ = cudarc::cublaslt::result::destroy_handle(lt.handle);
            let _ = result::free_sync(self.workspace);
        }
    }
}
