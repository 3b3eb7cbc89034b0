//! [`CudaBackend`]: the [`Backend`] trait on a CUDA device (or on the CPU emulator).

use crate::alloc::{Allocator, AllocatorStats, Block};
use crate::device::{Arg, DevPtr, Device, DeviceInfo, LaunchCfg, Pattern};
use crate::gemm::GemmImpl;
use crate::kernels::Family;
use crate::ops::{
    Strided, adamw_args, binary_code, check_float, check_index, check_layout, check_master_dtypes,
    check_no_overlap, row_broadcast, suffix, unary_code, whole_packs,
};
use brrr_backend::{
    AdamWParams, AdamWTensors, Backend, BackendInfo, BinaryOp, DType, DeviceLocation, ElemRange,
    EmbeddingSpec, Error, GemmSpec, HostData, LayerNormSpec, Layout, MemoryStats, QuantizedMoments,
    ReduceOp, Result, ScaleUpdateParams, SegmentMask, SoftmaxSpec, UnaryOp, multi_tensor, quant8,
};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

/// Emulated devices opened so far: each has its own pretend memory, so each gets its
/// own ordinal.
static EMULATED_OPENED: AtomicUsize = AtomicUsize::new(0);

/// A device buffer: a block of the caching allocator, with its dtype and length.
/// Dropping it returns the block to the cache (no `cudaFree`).
pub struct CudaBuffer {
    dtype: DType,
    len: usize,
    block: Block,
    alloc: Arc<Allocator>,
}

impl CudaBuffer {
    /// The element type the buffer holds.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Number of elements (not bytes; see [`CudaBuffer::size_in_bytes`]).
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the buffer holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Size of the data in bytes.
    pub fn size_in_bytes(&self) -> usize {
        self.len * self.dtype.size_in_bytes()
    }
    /// The device address of the first element.
    pub fn device_ptr(&self) -> u64 {
        self.block.ptr
    }
    /// The device address of element `i`.
    pub(crate) fn ptr_at(&self, i: usize) -> DevPtr {
        self.block.ptr + (i * self.dtype.size_in_bytes()) as u64
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        let block = std::mem::replace(&mut self.block, Block { ptr: 0, size: 0 });
        self.alloc.release(block);
    }
}

impl std::fmt::Debug for CudaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaBuffer({} x {}, at {:#x})",
            self.len, self.dtype, self.block.ptr
        )
    }
}

pub(crate) struct Inner {
    pub dev: Arc<dyn Device>,
    pub alloc: Arc<Allocator>,
    pub info: DeviceInfo,
    /// The device ordinal (for the emulator: which emulated device, in opening order).
    ordinal: usize,
    gemm_impl: AtomicU8,
    tf32: AtomicBool,
    multi_tensor: AtomicBool,
}

/// The CUDA backend. Cheap to clone (a handle); all clones share one device context,
/// one compute stream, one allocator cache and one set of loaded kernels.
///
/// ```no_run
/// use brrr_backend::{Backend, DType};
/// let cuda = brrr_cuda::CudaBackend::new(0)?; // Err(NoDevice) where there is no GPU
/// let x = cuda.zeros(DType::BF16, 1 << 20)?;
/// # Ok::<(), brrr_backend::Error>(())
/// ```
#[derive(Clone)]
pub struct CudaBackend {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaBackend({})", self.inner.info.name)
    }
}

impl CudaBackend {
    /// Opens GPU `ordinal`. Returns [`Error::NoDevice`] (never panics) when the CUDA
    /// driver library is missing ("no CUDA driver (libcuda not found)"), when there is
    /// no such device, or when NVRTC or cuBLAS cannot be loaded.
    pub fn new(ordinal: usize) -> Result<Self> {
        let dev = crate::driver::CudaDevice::open(ordinal)?;
        Ok(Self::with_device(Arc::new(dev), ordinal))
    }

    /// Whether [`CudaBackend::new`] can find a CUDA driver and at least one device.
    pub fn is_available() -> bool {
        crate::driver::device_count().is_ok_and(|n| n > 0)
    }

    /// The backend on the CPU emulator of the kernels (see [`crate::emu`]): the same CUDA C
    /// kernels, run as OS threads, with 8 GiB of pretend device memory. For tests on
    /// machines without a GPU; very slow. Needs a C++20 compiler to build the emulator.
    pub fn emulated() -> Result<Self> {
        Self::emulated_with_capacity(8 << 30)
    }

    /// [`CudaBackend::emulated`] with `bytes` of pretend device memory.
    pub fn emulated_with_capacity(bytes: u64) -> Result<Self> {
        let lib = crate::emu::build_emulator(None)?;
        let dev = crate::emu::EmuDevice::load(&lib, bytes)?;
        let ordinal = EMULATED_OPENED.fetch_add(1, Ordering::Relaxed);
        Ok(Self::with_device(Arc::new(dev), ordinal))
    }

    pub(crate) fn with_device(dev: Arc<dyn Device>, ordinal: usize) -> Self {
        let info = dev.info();
        let alloc = Arc::new(Allocator::new(dev.clone()));
        CudaBackend {
            inner: Arc::new(Inner {
                dev,
                alloc,
                info,
                ordinal,
                gemm_impl: AtomicU8::new(GemmImpl::Cublas as u8),
                tf32: AtomicBool::new(false),
                multi_tensor: AtomicBool::new(multi_tensor_default()),
            }),
        }
    }

    /// Whether this backend runs on the CPU emulator rather than a GPU.
    pub fn is_emulated(&self) -> bool {
        self.inner.dev.kind() == "cuda-emu"
    }

    /// The device's name, as the driver reports it.
    pub fn device_name(&self) -> &str {
        &self.inner.info.name
    }

    /// Compute capability (major, minor), e.g. (9, 0) for H100/H200.
    pub fn compute_capability(&self) -> (u32, u32) {
        self.inner.info.cc
    }

    /// Number of streaming multiprocessors.
    pub fn sm_count(&self) -> u32 {
        self.inner.info.sm_count
    }

    /// Total device memory in bytes.
    pub fn total_memory(&self) -> u64 {
        self.inner.info.total_mem
    }

    /// (free, total) device memory in bytes, as the driver sees it (cached blocks count
    /// as used).
    pub fn memory_info(&self) -> Result<(u64, u64)> {
        self.inner.dev.mem_info()
    }

    /// Which GEMM implementation [`Backend::gemm`] uses (default: cuBLAS).
    pub fn gemm_impl(&self) -> GemmImpl {
        GemmImpl::from_u8(self.inner.gemm_impl.load(Ordering::Relaxed))
    }

    /// Routes [`Backend::gemm`] through another implementation, e.g. one of brrr's own
    /// kernels, so that a whole training run or the conformance suite exercises it.
    pub fn set_gemm_impl(&self, which: GemmImpl) {
        self.inner.gemm_impl.store(which as u8, Ordering::Relaxed);
    }

    /// Whether f32 GEMMs in cuBLAS may use TF32 tensor cores (10-bit mantissa inputs,
    /// f32 accumulation), PyTorch's `allow_tf32`. Off by default.
    pub fn allow_tf32(&self) -> bool {
        self.inner.tf32.load(Ordering::Relaxed)
    }

    /// Allows or forbids TF32 for f32 GEMMs in cuBLAS/cuBLASLt (see
    /// [`CudaBackend::allow_tf32`]); shared by all clones of this backend. brrr's own
    /// kernels ignore it.
    pub fn set_allow_tf32(&self, on: bool) {
        self.inner.tf32.store(on, Ordering::Relaxed);
    }

    /// Whether the multi-tensor ops ([`Backend::multi_tensor_adamw`] and its two
    /// siblings) take a whole list in one launch (the default), or loop over the
    /// one-buffer kernels as the trait's reference does. The environment variable
    /// `BRRR_CUDA_MULTI_TENSOR=0` turns it off for every backend created after it is
    /// set: `bench/cuda.sh` times a training step both ways in one run.
    pub fn multi_tensor(&self) -> bool {
        self.inner.multi_tensor.load(Ordering::Relaxed)
    }

    /// Turns one-launch multi-tensor ops on or off (see [`CudaBackend::multi_tensor`]);
    /// shared by all clones of this backend.
    pub fn set_multi_tensor(&self, on: bool) {
        self.inner.multi_tensor.store(on, Ordering::Relaxed);
    }

    /// Counters of the caching allocator.
    pub fn allocator_stats(&self) -> AllocatorStats {
        self.inner.alloc.stats()
    }

    /// Returns all cached free blocks to the driver (`torch.cuda.empty_cache()`).
    pub fn empty_cache(&self) -> Result<()> {
        self.inner.alloc.empty_cache()
    }

    /// Runs `f` (which enqueues work) between two CUDA events on the compute stream and
    /// returns the device time between them in seconds. Waits for the work.
    pub fn time<F: FnOnce() -> Result<()>>(&self, f: F) -> Result<f64> {
        let dev = &self.inner.dev;
        let start = dev.event_create(true)?;
        let end = match dev.event_create(true) {
            Ok(e) => e,
            Err(e) => {
                dev.event_destroy(start);
                return Err(e);
            }
        };
        let r = (|| {
            dev.event_record(start)?;
            f()?;
            dev.event_record(end)?;
            dev.event_elapsed(start, end)
        })();
        dev.event_destroy(start);
        dev.event_destroy(end);
        r
    }

    /// Waits for all enqueued work (blocking; [`Backend::synchronize`] is the async form).
    pub fn synchronize_blocking(&self) -> Result<()> {
        self.inner.dev.synchronize()
    }

    // ---- helpers --------------------------------------------------------------------

    pub(crate) fn dev(&self) -> &dyn Device {
        &*self.inner.dev
    }

    pub(crate) fn new_buffer(&self, dtype: DType, len: usize) -> Result<CudaBuffer> {
        let bytes = mul("alloc", len, dtype.size_in_bytes())?;
        let block = self.inner.alloc.alloc(bytes)?;
        Ok(CudaBuffer {
            dtype,
            len,
            block,
            alloc: self.inner.alloc.clone(),
        })
    }

    /// A new buffer on this device holding a copy of `src` (DtoD on the compute stream).
    fn copy_on_device(&self, src: &CudaBuffer) -> Result<CudaBuffer> {
        let out = self.new_buffer(src.dtype, src.len)?;
        if out.size_in_bytes() > 0 {
            self.dev()
                .copy_dtod(out.device_ptr(), src.device_ptr(), src.size_in_bytes())?;
        }
        Ok(out)
    }

    pub(crate) fn launch(
        &self,
        family: Family,
        name: &str,
        cfg: LaunchCfg,
        args: &[Arg],
    ) -> Result<()> {
        self.inner.dev.launch(family, name, cfg, args)
    }

    /// A grid-stride launch over `work` items: 256 threads per block, at most 16 blocks
    /// per SM (enough to fill the GPU; the kernels loop over the rest).
    pub(crate) fn flat_cfg(&self, work: usize) -> LaunchCfg {
        let threads = 256usize;
        let max_blocks = (self.inner.info.sm_count.max(1) as usize) * 16;
        let blocks = work.div_ceil(threads).clamp(1, max_blocks);
        LaunchCfg {
            grid: (blocks as u32, 1, 1),
            block: (threads as u32, 1, 1),
            smem: 0,
        }
    }

    /// A row kernel (`softmax`, `layernorm`, ...) and its launch: the packed version
    /// (`{base}_vec`), one 16-byte pack per thread, when a row is whole packs and every
    /// pointer in `aligned` (a parameter inside a flat buffer) is 16-byte aligned; the
    /// element version otherwise. Whole buffers are always aligned.
    fn packed_rows_kernel(
        &self,
        base: &str,
        dtype: DType,
        rows: usize,
        cols: usize,
        aligned: &[DevPtr],
    ) -> (String, LaunchCfg) {
        let s = suffix(dtype);
        if whole_packs(dtype, cols) && aligned.iter().all(|p| p.is_multiple_of(16)) {
            let packs = cols / (16 / dtype.size_in_bytes());
            (format!("{base}_vec_{s}"), self.rows_cfg(rows, packs * 4))
        } else {
            (format!("{base}_{s}"), self.rows_cfg(rows, cols))
        }
    }

    /// One block per row (grid-stride over rows), about 4 columns per thread, a multiple
    /// of 32 threads between 32 and 1024.
    pub(crate) fn rows_cfg(&self, rows: usize, cols: usize) -> LaunchCfg {
        let threads = cols.div_ceil(4).div_ceil(32).clamp(1, 32) * 32;
        let max_blocks = (self.inner.info.sm_count.max(1) as usize) * 32;
        LaunchCfg {
            grid: (rows.clamp(1, max_blocks) as u32, 1, 1),
            block: (threads as u32, 1, 1),
            smem: 0,
        }
    }
}

fn same_dtype(op: &'static str, expected: DType, got: DType) -> Result<()> {
    Error::check_dtype(op, expected, got)
}

fn mul(op: &'static str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b)
        .ok_or_else(|| Error::invalid(op, format!("size {a} x {b} overflows")))
}

/// Losses are f32, or f64 with f64 logits (kernel-name suffix `_l64`).
fn loss_suffix(op: &'static str, logits: DType, losses: DType) -> Result<&'static str> {
    match (logits, losses) {
        (_, DType::F32) => Ok(""),
        (DType::F64, DType::F64) => Ok("_l64"),
        (_, got) => Err(Error::DType {
            op,
            expected: DType::F32,
            got,
        }),
    }
}

/// The bit pattern of `value` in `dtype` (Rust `as` semantics for integers: truncation
/// toward zero, saturation, NaN to 0).
/// On unless `BRRR_CUDA_MULTI_TENSOR` is `0`.
fn multi_tensor_default() -> bool {
    std::env::var("BRRR_CUDA_MULTI_TENSOR").map_or(true, |v| v.trim() != "0")
}

pub(crate) fn fill_pattern(dtype: DType, value: f64) -> Pattern {
    match dtype {
        DType::F16 => Pattern::B16(half::f16::from_f64(value).to_bits()),
        DType::BF16 => Pattern::B16(half::bf16::from_f64(value).to_bits()),
        DType::F32 => Pattern::B32((value as f32).to_bits()),
        DType::F64 => Pattern::B64(value.to_bits()),
        DType::I32 => Pattern::B32((value as i32) as u32),
        DType::U32 => Pattern::B32(value as u32),
    }
}

impl CudaBackend {
    /// LayerNorm's parameter gradients, accumulated at the device addresses `dgamma`
    /// and `dbeta`: column sums in two deterministic passes, per-chunk partials, then a
    /// fixed-order sum per column (see layernorm.cu). `stats` holds the (mean, rstd)
    /// pairs that `layernorm_backward_dx` wrote.
    fn layernorm_param_grads(
        &self,
        (rows, cols): (usize, usize),
        acc: DType,
        [dy, x, stats]: [&CudaBuffer; 3],
        dgamma: DevPtr,
        dbeta: DevPtr,
    ) -> Result<()> {
        const OP: &str = "layernorm_backward";
        let s = suffix(x.dtype);
        let max_chunks = (self.inner.info.sm_count.max(1) as usize * 8).max(1);
        let rows_per_chunk = rows.div_ceil(rows.div_ceil(64).clamp(1, max_chunks)).max(1);
        let chunks = rows.div_ceil(rows_per_chunk);
        if chunks > 65535 {
            return Err(Error::invalid(
                OP,
                format!("{rows} rows need too many chunks"),
            ));
        }
        let partial = self.new_buffer(acc, 2 * chunks * cols)?;
        self.launch(
            Family::LayerNorm,
            &format!("layernorm_backward_partial_{s}"),
            LaunchCfg {
                grid: (cols.div_ceil(32) as u32, chunks as u32, 1),
                block: (32, 8, 1),
                smem: 0,
            },
            &[
                Arg::Ptr(partial.device_ptr()),
                Arg::Ptr(dy.device_ptr()),
                Arg::Ptr(x.device_ptr()),
                Arg::Ptr(stats.device_ptr()),
                Arg::U64(rows as u64),
                Arg::U64(cols as u64),
                Arg::U64(rows_per_chunk as u64),
            ],
        )?;
        self.launch(
            Family::LayerNorm,
            &format!("layernorm_backward_params_{s}"),
            self.flat_cfg(cols),
            &[
                Arg::Ptr(dgamma),
                Arg::Ptr(dbeta),
                Arg::Ptr(partial.device_ptr()),
                Arg::U64(chunks as u64),
                Arg::U64(cols as u64),
            ],
        )
    }
}

/// The kernels of `embedding_backward` (kernels/embedding.cu). The backend runs v3; the
/// benchmark times v1, v2 and v3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EmbeddingBackward {
    /// A block per bucket of rows, every thread scanning every id.
    V1Block,
    /// A warp per bucket, ids scanned 32 at a time with a ballot.
    V2Warp,
    /// v2, with each run of one row's ids added in registers, four dout rows loaded at
    /// once (text repeats a few ids many times).
    V3Runs,
}

impl CudaBackend {
    /// `dtable[ids[i]] += dout[i]` with the chosen kernel. v2 and v3 fall back to v1 for a
    /// table of more than `u32::MAX` rows (they compute buckets in 32 bits); all give the
    /// same bits, since each adds every row's contributions in the order of i.
    pub(crate) fn embedding_backward_with(
        &self,
        which: EmbeddingBackward,
        spec: &EmbeddingSpec,
        ids: &CudaBuffer,
        dout: &CudaBuffer,
        dtable: &mut CudaBuffer,
    ) -> Result<()> {
        const OP: &str = "embedding_backward";
        check_index(OP, ids.dtype)?;
        check_float(OP, dtable.dtype)?;
        same_dtype(OP, dtable.dtype, dout.dtype)?;
        let (at, rows) = spec.table_range(OP, dtable.len)?;
        let (n, dim) = (ids.len, spec.dim);
        Error::check_len(OP, mul(OP, n, dim)?, dout.len)?;
        if n == 0 || rows == 0 {
            return Ok(());
        }
        let sms = self.inner.info.sm_count.max(1) as usize;
        let warp_kernel = match which {
            EmbeddingBackward::V1Block => None,
            _ if u32::try_from(rows).is_err() => None,
            EmbeddingBackward::V2Warp => Some("v2_"),
            EmbeddingBackward::V3Runs => Some("v3_"),
        };
        let (version, buckets, cfg) = if let Some(version) = warp_kernel {
            // A warp per bucket, 8 warps per block. Every warp scans all n ids (n / 32
            // ballots), so the scan costs buckets * n / 32 warp steps in all: more buckets
            // cost more scanning. Fewer buckets leave fewer warps to share the n * dim
            // additions, and each warp handles its ids one after another, a few memory
            // round trips each: too few warps cannot keep enough loads in flight.
            // sm_count * 32 warps (4 blocks per SM, half of an H100 SM's 64 warps) balance
            // the two at GPT-2's shapes (8192 ids, 50304 rows): 256 ballots per warp, a few
            // microseconds, against about 2 ids per warp with random ids. (A frequent
            // token's ids all fall to one warp, which adds them one after another: real
            // text is slower than random ids, but no element ever has two writers.)
            let buckets = rows.min(sms * 32);
            let cfg = LaunchCfg {
                grid: (buckets.div_ceil(8) as u32, 1, 1),
                block: (256, 1, 1),
                smem: 0,
            };
            (version, buckets, cfg)
        } else {
            let buckets = rows.min(sms * 8);
            let cfg = LaunchCfg {
                grid: (buckets as u32, 1, 1),
                block: (self.rows_cfg(1, dim).block.0.min(256), 1, 1),
                smem: 0,
            };
            ("v1_", buckets, cfg)
        };
        let (s, is) = (suffix(dtable.dtype), suffix(ids.dtype));
        self.launch(
            Family::Embedding,
            &format!("embedding_backward_{version}{s}_{is}"),
            cfg,
            &[
                Arg::Ptr(dtable.ptr_at(at.start)),
                Arg::Ptr(ids.device_ptr()),
                Arg::Ptr(dout.device_ptr()),
                Arg::U64(n as u64),
                Arg::U64(dim as u64),
                Arg::U64(rows as u64),
                Arg::U64(buckets as u64),
            ],
        )
    }
}

impl Backend for CudaBackend {
    type Buffer = CudaBuffer;

    fn info(&self) -> BackendInfo {
        let i = &self.inner.info;
        BackendInfo {
            name: "cuda",
            device: format!(
                "{} (sm_{}{}, {} SMs, {:.1} GiB){}",
                i.name,
                i.cc.0,
                i.cc.1,
                i.sm_count,
                i.total_mem as f64 / f64::from(1u32 << 30),
                if self.is_emulated() {
                    " [CPU emulator]"
                } else {
                    ""
                }
            ),
            dtypes: vec![DType::F16, DType::BF16, DType::F32, DType::F64],
        }
    }

    fn supports(&self, dtype: DType) -> bool {
        dtype.is_float()
    }

    fn dtype(&self, buf: &CudaBuffer) -> DType {
        buf.dtype
    }

    fn len(&self, buf: &CudaBuffer) -> usize {
        buf.len
    }

    fn location(&self) -> DeviceLocation {
        DeviceLocation::new("cuda", self.inner.ordinal)
    }

    /// Handles on one opened device (clones of one `CudaBackend`). Two separate
    /// [`CudaBackend::new`] calls on one ordinal have separate streams and allocators,
    /// so they count as different devices here.
    fn same_device(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner.dev, &other.inner.dev)
    }

    /// On the same device, a device-to-device copy on the compute stream (ordered after
    /// the kernels that wrote `src`). Between devices, through the host: a read that
    /// waits for `src`'s device, then an upload to `dst` (peer-to-peer copies are not
    /// used yet).
    fn copy_to_device(
        &self,
        src: &CudaBuffer,
        dst: &Self,
    ) -> impl Future<Output = Result<CudaBuffer>> {
        let direct = if self.same_device(dst) {
            Some(self.copy_on_device(src))
        } else {
            None
        };
        async move {
            match direct {
                Some(r) => r,
                None => {
                    let host = self.read(src).await?;
                    dst.upload(&host)
                }
            }
        }
    }

    /// Bytes of the caching allocator's blocks that live buffers hold (sizes rounded up
    /// as the allocator rounds them), not the cache of freed blocks.
    fn memory_stats(&self) -> MemoryStats {
        let s = self.inner.alloc.stats();
        MemoryStats {
            bytes_in_use: s.in_use_bytes,
            peak_bytes: s.peak_in_use_bytes,
            live_buffers: s.live_blocks,
        }
    }

    fn reset_peak_memory(&self) {
        self.inner.alloc.reset_peak();
    }

    /// A block from the caching allocator as it is: no memset.
    fn alloc(&self, dtype: DType, len: usize) -> Result<CudaBuffer> {
        self.new_buffer(dtype, len)
    }

    fn zeros(&self, dtype: DType, len: usize) -> Result<CudaBuffer> {
        let buf = self.new_buffer(dtype, len)?;
        let bytes = buf.size_in_bytes();
        if bytes > 0 {
            // The block is a multiple of 512 bytes, so rounding up to 4-byte words stays
            // inside it.
            self.dev()
                .memset(buf.device_ptr(), Pattern::B32(0), bytes.div_ceil(4))?;
        }
        Ok(buf)
    }

    fn upload(&self, data: &HostData) -> Result<CudaBuffer> {
        let bytes = data.as_bytes();
        let (block, after) = self.inner.alloc.alloc_for_copy(bytes.len())?;
        let buf = CudaBuffer {
            dtype: data.dtype(),
            len: data.len(),
            block,
            alloc: self.inner.alloc.clone(),
        };
        let r = if bytes.is_empty() {
            Ok(())
        } else {
            self.dev().copy_htod(buf.device_ptr(), bytes, after)
        };
        if let Some(ev) = after {
            self.inner.alloc.recycle_event(ev);
        }
        r.map(|_| buf)
    }

    fn write(&self, buf: &mut CudaBuffer, data: &HostData) -> Result<()> {
        same_dtype("write", buf.dtype, data.dtype())?;
        if data.len() != buf.len {
            return Err(Error::shape(
                "write",
                format!("buffer has {} elements, data has {}", buf.len, data.len()),
            ));
        }
        if data.is_empty() {
            return Ok(());
        }
        self.dev()
            .copy_htod(buf.device_ptr(), data.as_bytes(), None)
    }

    fn read(&self, buf: &CudaBuffer) -> impl Future<Output = Result<HostData>> {
        let r = (|| {
            let mut bytes = vec![0u8; buf.size_in_bytes()];
            if !bytes.is_empty() {
                self.dev().copy_dtoh(&mut bytes, buf.device_ptr())?;
            }
            HostData::from_bytes(buf.dtype, &bytes)
        })();
        async move { r }
    }

    fn synchronize(&self) -> impl Future<Output = Result<()>> {
        let r = self.dev().synchronize();
        async move { r }
    }

    fn fill(&self, buf: &mut CudaBuffer, value: f64) -> Result<()> {
        if buf.len == 0 {
            return Ok(());
        }
        match fill_pattern(buf.dtype, value) {
            Pattern::B64(bits) => {
                let n = buf.len as u64;
                self.launch(
                    Family::Elementwise,
                    "fill_b64",
                    self.flat_cfg(buf.len),
                    &[Arg::Ptr(buf.device_ptr()), Arg::U64(n), Arg::U64(bits)],
                )
            }
            p => self.dev().memset(buf.device_ptr(), p, buf.len),
        }
    }

    fn copy_strided(
        &self,
        src: &CudaBuffer,
        src_layout: &Layout,
        dst: &mut CudaBuffer,
        dst_layout: &Layout,
    ) -> Result<()> {
        const OP: &str = "copy_strided";
        same_dtype(OP, dst.dtype, src.dtype)?;
        let shape = src_layout.shape.dims().to_vec();
        let src_span = check_layout(OP, "source view", src_layout, &shape, src.len)?;
        let dst_span = check_layout(OP, "destination view", dst_layout, &shape, dst.len)?;
        check_no_overlap(OP, dst_layout)?;
        let n = src_layout.shape.elem_count();
        if n == 0 {
            return Ok(());
        }
        let es = src.dtype.size_in_bytes();
        let (ps, pd) = (src.ptr_at(src_layout.offset), dst.ptr_at(dst_layout.offset));
        if src_layout.is_contiguous() && dst_layout.is_contiguous() {
            return self.dev().copy_dtod(pd, ps, n * es);
        }
        let desc = Strided::new(src_layout, dst_layout);
        let small = src_span <= u32::MAX as usize
            && dst_span <= u32::MAX as usize
            && n <= u32::MAX as usize;
        // Rows of whole 16-byte packs on both sides (an attention head split's rows of
        // 64): a thread per pack, the index math once per 16 bytes. `small` holds for
        // packs too: their counts and spans are smaller than the elements'.
        let (width, items, desc) = match desc.in_packs(es, ps, pd) {
            Some(packed) => ("b128", n / (16 / es), packed),
            None => (
                match es {
                    2 => "b16",
                    4 => "b32",
                    _ => "b64",
                },
                n,
                desc,
            ),
        };
        let name = format!("copy_strided{}_{width}", if small { "32" } else { "" });
        self.launch(
            Family::Elementwise,
            &name,
            self.flat_cfg(items),
            &[
                Arg::Ptr(pd),
                Arg::Ptr(ps),
                Arg::U64(items as u64),
                Arg::pod(&desc),
            ],
        )
    }

    fn cast(&self, src: &CudaBuffer, dst: &mut CudaBuffer) -> Result<()> {
        const OP: &str = "cast";
        let n = dst.len;
        Error::check_len(OP, n, src.len)?;
        if n == 0 {
            return Ok(());
        }
        if src.dtype == dst.dtype {
            return self.dev().copy_dtod(
                dst.device_ptr(),
                src.device_ptr(),
                n * src.dtype.size_in_bytes(),
            );
        }
        let name = format!("cast_{}_{}", suffix(src.dtype), suffix(dst.dtype));
        self.launch(
            Family::Elementwise,
            &name,
            self.flat_cfg(n),
            &[
                Arg::Ptr(dst.device_ptr()),
                Arg::Ptr(src.device_ptr()),
                Arg::U64(n as u64),
            ],
        )
    }

    fn gemm(
        &self,
        spec: &GemmSpec,
        a: &CudaBuffer,
        b: &CudaBuffer,
        c: &mut CudaBuffer,
    ) -> Result<()> {
        self.gemm_with(self.gemm_impl(), spec, a, b, c).map(|_| ())
    }

    fn unary(&self, op: UnaryOp, x: &CudaBuffer, out: &mut CudaBuffer) -> Result<()> {
        const OP: &str = "unary";
        check_float(OP, x.dtype)?;
        same_dtype(OP, x.dtype, out.dtype)?;
        let n = out.len;
        Error::check_len(OP, n, x.len)?;
        if n == 0 {
            return Ok(());
        }
        let (code, p0, p1) = unary_code(op);
        self.launch(
            Family::Elementwise,
            &format!("unary_{}", suffix(x.dtype)),
            self.flat_cfg(n.div_ceil(16 / x.dtype.size_in_bytes())),
            &[
                Arg::Ptr(out.device_ptr()),
                Arg::Ptr(x.device_ptr()),
                Arg::U64(n as u64),
                Arg::I32(code),
                Arg::F32(p0),
                Arg::F32(p1),
            ],
        )
    }

    fn binary(
        &self,
        op: BinaryOp,
        a: &CudaBuffer,
        a_layout: &Layout,
        b: &CudaBuffer,
        b_layout: &Layout,
        out: &mut CudaBuffer,
    ) -> Result<()> {
        const OP: &str = "binary";
        check_float(OP, a.dtype)?;
        same_dtype(OP, a.dtype, b.dtype)?;
        same_dtype(OP, a.dtype, out.dtype)?;
        let shape = a_layout.shape.dims().to_vec();
        let a_span = check_layout(OP, "a", a_layout, &shape, a.len)?;
        let b_span = check_layout(OP, "b", b_layout, &shape, b.len)?;
        let n = a_layout.shape.elem_count();
        Error::check_len(OP, n, out.len)?;
        if n == 0 {
            return Ok(());
        }
        let es = a.dtype.size_in_bytes();
        let code = binary_code(op);
        let s = suffix(a.dtype);
        let pa = a.ptr_at(a_layout.offset);
        let pb = b.ptr_at(b_layout.offset);
        if a_layout.is_contiguous()
            && b_layout.is_contiguous()
            && pa.is_multiple_of(16)
            && pb.is_multiple_of(16)
        {
            return self.launch(
                Family::Elementwise,
                &format!("binary_vec_{s}"),
                self.flat_cfg(n.div_ceil(16 / es)),
                &[
                    Arg::Ptr(out.device_ptr()),
                    Arg::Ptr(pa),
                    Arg::Ptr(pb),
                    Arg::U64(n as u64),
                    Arg::I32(code),
                ],
            );
        }
        if let Some((full, row, cols, row_first)) = row_broadcast(a_layout, pa, b_layout, pb, es) {
            return self.launch(
                Family::Elementwise,
                &format!("binary_row_{s}"),
                self.flat_cfg(n / (16 / es)),
                &[
                    Arg::Ptr(out.device_ptr()),
                    Arg::Ptr(full),
                    Arg::Ptr(row),
                    Arg::U64(n as u64),
                    Arg::U64(cols as u64),
                    Arg::I32(code),
                    Arg::I32(row_first as i32),
                ],
            );
        }
        let desc = Strided::new(a_layout, b_layout);
        let small =
            n <= u32::MAX as usize && a_span <= u32::MAX as usize && b_span <= u32::MAX as usize;
        let name = format!("binary_strided{}_{s}", if small { "32" } else { "" });
        self.launch(
            Family::Elementwise,
            &name,
            self.flat_cfg(n),
            &[
                Arg::Ptr(out.device_ptr()),
                Arg::Ptr(pa),
                Arg::Ptr(pb),
                Arg::U64(n as u64),
                Arg::I32(code),
                Arg::pod(&desc),
            ],
        )
    }

    fn axpy(
        &self,
        alpha: f32,
        x: &CudaBuffer,
        y: &mut CudaBuffer,
        y_offset: Option<usize>,
    ) -> Result<()> {
        const OP: &str = "axpy";
        check_float(OP, y.dtype)?;
        same_dtype(OP, y.dtype, x.dtype)?;
        let r = brrr_backend::axpy_range(OP, x.len, y.len, y_offset)?;
        let n = r.len();
        if n == 0 {
            return Ok(());
        }
        // The vectorized kernel moves whole 16-byte packs: y's part must start on one
        // (x is a whole buffer, 256-byte aligned).
        let es = y.dtype.size_in_bytes();
        let (kernel, cfg) = if (r.start * es).is_multiple_of(16) {
            ("axpy", self.flat_cfg(n.div_ceil(16 / es)))
        } else {
            ("axpy_unaligned", self.flat_cfg(n))
        };
        self.launch(
            Family::Elementwise,
            &format!("{kernel}_{}", suffix(y.dtype)),
            cfg,
            &[
                Arg::Ptr(y.ptr_at(r.start)),
                Arg::Ptr(x.device_ptr()),
                Arg::U64(n as u64),
                Arg::F32(alpha),
            ],
        )
    }

    fn reduce(
        &self,
        op: ReduceOp,
        x: &CudaBuffer,
        outer: usize,
        n: usize,
        inner: usize,
        out: &mut CudaBuffer,
    ) -> Result<()> {
        const OP: &str = "reduce";
        check_float(OP, x.dtype)?;
        same_dtype(OP, x.dtype, out.dtype)?;
        let total_out = mul(OP, outer, inner)?;
        Error::check_len(OP, mul(OP, total_out, n)?, x.len)?;
        Error::check_len(OP, total_out, out.len)?;
        if total_out == 0 {
            return Ok(());
        }
        if n == 0 && op != ReduceOp::Sum {
            return Err(Error::invalid(
                OP,
                format!("{op:?} over an empty axis (n = 0) is undefined"),
            ));
        }
        if inner == 1 {
            self.reduce_rows(op, x.dtype, x.device_ptr(), outer, n, out.device_ptr())
        } else {
            self.reduce_cols(
                op,
                x.dtype,
                x.device_ptr(),
                outer,
                n,
                inner,
                out.device_ptr(),
            )
        }
    }

    /// Fused: squares are summed as they are read (`reduce_rows_partial` with its
    /// `square` flag), in the order and split of squaring into a temporary and reducing
    /// it, so bitwise that composite without the temporary.
    fn has_fused_sum_squares(&self) -> bool {
        true
    }

    fn sum_squares(
        &self,
        x: &CudaBuffer,
        offset: usize,
        len: usize,
        out: &mut CudaBuffer,
    ) -> Result<()> {
        const OP: &str = "sum_squares";
        let end = ElemRange::new(offset, len).end(OP)?;
        if end > x.len {
            return Err(Error::shape(
                OP,
                format!("range {offset}..{end} is outside x's {} elements", x.len),
            ));
        }
        if !matches!(x.dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::invalid(
                OP,
                format!("x must be f32, f16 or bf16, got {:?}", x.dtype),
            ));
        }
        same_dtype(OP, DType::F32, out.dtype)?;
        if out.len == 0 {
            return Err(Error::shape(OP, "out has no element to hold the sum"));
        }
        self.sum_squares_into(x.dtype, x.ptr_at(offset), len, out.device_ptr())
    }

    fn softmax(&self, spec: &SoftmaxSpec, x: &CudaBuffer, y: &mut CudaBuffer) -> Result<()> {
        const OP: &str = "softmax";
        check_float(OP, x.dtype)?;
        same_dtype(OP, x.dtype, y.dtype)?;
        let total = mul(OP, spec.rows, spec.cols)?;
        Error::check_len(OP, total, x.len)?;
        Error::check_len(OP, total, y.len)?;
        if total == 0 {
            return Ok(());
        }
        let (name, cfg) = self.packed_rows_kernel("softmax", x.dtype, spec.rows, spec.cols, &[]);
        self.launch(
            Family::Softmax,
            &name,
            cfg,
            &[
                Arg::Ptr(y.device_ptr()),
                Arg::Ptr(x.device_ptr()),
                Arg::U64(spec.rows as u64),
                Arg::U64(spec.cols as u64),
                Arg::F32(spec.scale),
                Arg::I32(i32::from(spec.causal)),
            ],
        )
    }

    fn softmax_segmented(
        &self,
        spec: &SoftmaxSpec,
        mask: &SegmentMask,
        segments: &CudaBuffer,
        x: &CudaBuffer,
        y: &mut CudaBuffer,
    ) -> Result<()> {
        const OP: &str = "softmax_segmented";
        let seqs = mask.sequences(spec)?;
        check_float(OP, x.dtype)?;
        same_dtype(OP, x.dtype, y.dtype)?;
        same_dtype(OP, DType::U32, segments.dtype)?;
        let total = mul(OP, spec.rows, spec.cols)?;
        Error::check_len(OP, total, x.len)?;
        Error::check_len(OP, total, y.len)?;
        Error::check_len(OP, mul(OP, seqs, spec.cols)?, segments.len)?;
        self.launch(
            Family::Softmax,
            &format!("softmax_segmented_{}", suffix(x.dtype)),
            self.rows_cfg(spec.rows, spec.cols),
            &[
                Arg::Ptr(y.device_ptr()),
                Arg::Ptr(x.device_ptr()),
                Arg::Ptr(segments.device_ptr()),
                Arg::U64(spec.rows as u64),
                Arg::U64(spec.cols as u64),
                Arg::U64(mask.heads as u64),
                Arg::F32(spec.scale),
            ],
        )
    }

    fn softmax_backward(
        &self,
        spec: &SoftmaxSpec,
        y: &CudaBuffer,
        dy: &CudaBuffer,
        dx: &mut CudaBuffer,
    ) -> Result<()> {
        const OP: &str = "softmax_backward";
        check_float(OP, y.dtype)?;
        same_dtype(OP, y.dtype, dy.dtype)?;
        same_dtype(OP, y.dtype, dx.dtype)?;
        let total = mul(OP, spec.rows, spec.cols)?;
        Error::check_len(OP, total, y.len)?;
        Error::check_len(OP, total, dy.len)?;
        Error::check_len(OP, total, dx.len)?;
        if total == 0 {
            return Ok(());
        }
        let (name, cfg) =
            self.packed_rows_kernel("softmax_backward", y.dtype, spec.rows, spec.cols, &[]);
        self.launch(
            Family::Softmax,
            &name,
            cfg,
            &[
                Arg::Ptr(dx.device_ptr()),
                Arg::Ptr(y.device_ptr()),
                Arg::Ptr(dy.device_ptr()),
                Arg::U64(spec.rows as u64),
                Arg::U64(spec.cols as u64),
                Arg::F32(spec.scale),
                Arg::I32(i32::from(spec.causal)),
            ],
        )
    }

    fn layernorm(
        &self,
        spec: &LayerNormSpec,
        x: &CudaBuffer,
        gamma: &CudaBuffer,
        beta: &CudaBuffer,
        y: &mut CudaBuffer,
        mean: &mut CudaBuffer,
        rstd: &mut CudaBuffer,
    ) -> Result<()> {
        const OP: &str = "layernorm";
        check_float(OP, x.dtype)?;
        for d in [gamma.dtype, beta.dtype, y.dtype] {
            same_dtype(OP, x.dtype, d)?;
        }
        same_dtype(OP, DType::F32, mean.dtype)?;
        same_dtype(OP, DType::F32, rstd.dtype)?;
        let total = mul(OP, spec.rows, spec.cols)?;
        Error::check_len(OP, total, x.len)?;
        Error::check_len(OP, total, y.len)?;
        let (g_at, b_at) = spec.param_ranges(OP)?;
        Error::check_len(OP, g_at.end, gamma.len)?;
        Error::check_len(OP, b_at.end, beta.len)?;
        Error::check_len(OP, spec.rows, mean.len)?;
        Error::check_len(OP, spec.rows, rstd.len)?;
        if spec.rows == 0 {
            return Ok(());
        }
        if spec.cols == 0 {
            return Err(Error::invalid(OP, "cols must be positive"));
        }
        let (g, b) = (gamma.ptr_at(g_at.start), beta.ptr_at(b_at.start));
        let (name, cfg) =
            self.packed_rows_kernel("layernorm", x.dtype, spec.rows, spec.cols, &[g, b]);
        self.launch(
            Family::LayerNorm,
            &name,
            cfg,
            &[
                Arg::Ptr(y.device_ptr()),
                Arg::Ptr(mean.device_ptr()),
                Arg::Ptr(rstd.device_ptr()),
                Arg::Ptr(x.device_ptr()),
                Arg::Ptr(g),
                Arg::Ptr(b),
                Arg::U64(spec.rows as u64),
                Arg::U64(spec.cols as u64),
                Arg::F32(spec.eps),
            ],
        )
    }

    fn layernorm_backward(
        &self,
        spec: &LayerNormSpec,
        dy: &CudaBuffer,
        x: &CudaBuffer,
        gamma: &CudaBuffer,
        mean: &CudaBuffer,
        rstd: &CudaBuffer,
        dx: &mut CudaBuffer,
        dgamma: &mut CudaBuffer,
        dbeta: &mut CudaBuffer,
    ) -> Result<()> {
        const OP: &str = "layernorm_backward";
        check_float(OP, x.dtype)?;
        for d in [dy.dtype, gamma.dtype, dx.dtype, dgamma.dtype, dbeta.dtype] {
            same_dtype(OP, x.dtype, d)?;
        }
        same_dtype(OP, DType::F32, mean.dtype)?;
        same_dtype(OP, DType::F32, rstd.dtype)?;
        let (rows, cols) = (spec.rows, spec.cols);
        let total = mul(OP, rows, cols)?;
        for len in [dy.len, x.len, dx.len] {
            Error::check_len(OP, total, len)?;
        }
        let (g_at, b_at) = spec.param_ranges(OP)?;
        for len in [gamma.len, dgamma.len] {
            Error::check_len(OP, g_at.end, len)?;
        }
        Error::check_len(OP, b_at.end, dbeta.len)?;
        Error::check_len(OP, rows, mean.len)?;
        Error::check_len(OP, rows, rstd.len)?;
        if rows == 0 || cols == 0 {
            return Ok(());
        }
        let acc = if x.dtype == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        // The (mean, rstd) pairs the backward uses, per row (see layernorm.cu).
        let stats = self.new_buffer(acc, 2 * rows)?;
        let g = gamma.ptr_at(g_at.start);
        let (name, cfg) =
            self.packed_rows_kernel("layernorm_backward_dx", x.dtype, rows, cols, &[g]);
        self.launch(
            Family::LayerNorm,
            &name,
            cfg,
            &[
                Arg::Ptr(dx.device_ptr()),
                Arg::Ptr(stats.device_ptr()),
                Arg::Ptr(dy.device_ptr()),
                Arg::Ptr(x.device_ptr()),
                Arg::Ptr(g),
                Arg::Ptr(mean.device_ptr()),
                Arg::Ptr(rstd.device_ptr()),
                Arg::U64(rows as u64),
                Arg::U64(cols as u64),
                Arg::F32(spec.eps),
            ],
        )?;
        // dgamma and dbeta: column sums of dy·x̂ and dy over the rows.
        self.layernorm_param_grads(
            (rows, cols),
            acc,
            [dy, x, &stats],
            dgamma.ptr_at(g_at.start),
            dbeta.ptr_at(b_at.start),
        )
    }

    fn gelu(&self, x: &CudaBuffer, y: &mut CudaBuffer) -> Result<()> {
        const OP: &str = "gelu";
        check_float(OP, x.dtype)?;
        same_dtype(OP, x.dtype, y.dtype)?;
        let n = y.len;
        Error::check_len(OP, n, x.len)?;
        if n == 0 {
            return Ok(());
        }
        self.launch(
            Family::Elementwise,
            &format!("gelu_{}", suffix(x.dtype)),
            self.flat_cfg(n.div_ceil(16 / x.dtype.size_in_bytes())),
            &[
                Arg::Ptr(y.device_ptr()),
                Arg::Ptr(x.device_ptr()),
                Arg::U64(n as u64),
            ],
        )
    }

    fn gelu_backward(&self, x: &CudaBuffer, dy: &CudaBuffer, dx: &mut CudaBuffer) -> Result<()> {
        const OP: &str = "gelu_backward";
        check_float(OP, x.dtype)?;
        same_dtype(OP, x.dtype, dy.dtype)?;
        same_dtype(OP, x.dtype, dx.dtype)?;
        let n = dx.len;
        Error::check_len(OP, n, x.len)?;
        Error::check_len(OP, n, dy.len)?;
        if n == 0 {
            return Ok(());
        }
        self.launch(
            Family::Elementwise,
            &format!("gelu_backward_{}", suffix(x.dtype)),
            self.flat_cfg(n.div_ceil(16 / x.dtype.size_in_bytes())),
            &[
                Arg::Ptr(dx.device_ptr()),
                Arg::Ptr(x.device_ptr()),
                Arg::Ptr(dy.device_ptr()),
                Arg::U64(n as u64),
            ],
        )
    }

    fn embedding(
        &self,
        spec: &EmbeddingSpec,
        ids: &CudaBuffer,
        table: &CudaBuffer,
        out: &mut CudaBuffer,
    ) -> Result<()> {
        const OP: &str = "embedding";
        check_index(OP, ids.dtype)?;
        check_float(OP, table.dtype)?;
        same_dtype(OP, table.dtype, out.dtype)?;
        let (at, rows) = spec.table_range(OP, table.len)?;
        let (n, dim) = (ids.len, spec.dim);
        Error::check_len(OP, mul(OP, n, dim)?, out.len)?;
        if n == 0 {
            return Ok(());
        }
        self.launch(
            Family::Embedding,
            &format!("embedding_{}_{}", suffix(table.dtype), suffix(ids.dtype)),
            self.rows_cfg(n, dim),
            &[
                Arg::Ptr(out.device_ptr()),
                Arg::Ptr(ids.device_ptr()),
                Arg::Ptr(table.ptr_at(at.start)),
                Arg::U64(n as u64),
                Arg::U64(dim as u64),
                Arg::U64(rows as u64),
            ],
        )
    }

    fn scatter_rows(
        &self,
        spec: &EmbeddingSpec,
        ids: &CudaBuffer,
        rows: &CudaBuffer,
        table: &mut CudaBuffer,
    ) -> Result<()> {
        const OP: &str = "scatter_rows";
        check_index(OP, ids.dtype)?;
        check_float(OP, table.dtype)?;
        same_dtype(OP, table.dtype, rows.dtype)?;
        let (at, table_rows) = spec.table_range(OP, table.len)?;
        let (n, dim) = (ids.len, spec.dim);
        Error::check_len(OP, mul(OP, n, dim)?, rows.len)?;
        if n == 0 {
            return Ok(());
        }
        self.launch(
            Family::Embedding,
            &format!("scatter_rows_{}_{}", suffix(table.dtype), suffix(ids.dtype)),
            self.rows_cfg(n, dim),
            &[
                Arg::Ptr(table.ptr_at(at.start)),
                Arg::Ptr(ids.device_ptr()),
                Arg::Ptr(rows.device_ptr()),
                Arg::U64(n as u64),
                Arg::U64(dim as u64),
                Arg::U64(table_rows as u64),
            ],
        )
    }

    fn embedding_backward(
        &self,
        spec: &EmbeddingSpec,
        ids: &CudaBuffer,
        dout: &CudaBuffer,
        dtable: &mut CudaBuffer,
    ) -> Result<()> {
        // v3: on an H100 (`cuda_bench embedding`, 8192 x 768 into 50304 rows) the
        // fastest of the three in f32 and bf16, on uniform and on Zipf ids.
        self.embedding_backward_with(EmbeddingBackward::V3Runs, spec, ids, dout, dtable)
    }

    fn cross_entropy(
        &self,
        logits: &CudaBuffer,
        targets: &CudaBuffer,
        vocab: usize,
        losses: &mut CudaBuffer,
    ) -> Result<()> {
        const OP: &str = "cross_entropy";
        check_float(OP, logits.dtype)?;
        check_index(OP, targets.dtype)?;
        let loss_suffix = loss_suffix(OP, logits.dtype, losses.dtype)?;
        if vocab == 0 {
            return Err(Error::invalid(OP, "vocab must be positive"));
        }
        let rows = targets.len;
        Error::check_len(OP, mul(OP, rows, vocab)?, logits.len)?;
        Error::check_len(OP, rows, losses.len)?;
        if rows == 0 {
            return Ok(());
        }
        let vec = if whole_packs(logits.dtype, vocab) {
            "_vec"
        } else {
            ""
        };
        self.launch(
            Family::CrossEntropy,
            &format!(
                "cross_entropy{vec}_{}_{}{loss_suffix}",
                suffix(logits.dtype),
                suffix(targets.dtype)
            ),
            self.rows_cfg(rows, vocab),
            &[
                Arg::Ptr(losses.device_ptr()),
                Arg::Ptr(logits.device_ptr()),
                Arg::Ptr(targets.device_ptr()),
                Arg::U64(rows as u64),
                Arg::U64(vocab as u64),
            ],
        )
    }

    fn cross_entropy_backward(
        &self,
        logits: &CudaBuffer,
        targets: &CudaBuffer,
        dlosses: &CudaBuffer,
        vocab: usize,
        dlogits: &mut CudaBuffer,
    ) -> Result<()> {
        const OP: &str = "cross_entropy_backward";
        check_float(OP, logits.dtype)?;
        check_index(OP, targets.dtype)?;
        let loss_suffix = loss_suffix(OP, logits.dtype, dlosses.dtype)?;
        same_dtype(OP, logits.dtype, dlogits.dtype)?;
        if vocab == 0 {
            return Err(Error::invalid(OP, "vocab must be positive"));
        }
        let rows = targets.len;
        let total = mul(OP, rows, vocab)?;
        Error::check_len(OP, total, logits.len)?;
        Error::check_len(OP, total, dlogits.len)?;
        Error::check_len(OP, rows, dlosses.len)?;
        if rows == 0 {
            return Ok(());
        }
        let vec = if whole_packs(logits.dtype, vocab) {
            "_vec"
        } else {
            ""
        };
        self.launch(
            Family::CrossEntropy,
            &format!(
                "cross_entropy_backward{vec}_{}_{}{loss_suffix}",
                suffix(logits.dtype),
                suffix(targets.dtype)
            ),
            self.rows_cfg(rows, vocab),
            &[
                Arg::Ptr(dlogits.device_ptr()),
                Arg::Ptr(logits.device_ptr()),
                Arg::Ptr(targets.device_ptr()),
                Arg::Ptr(dlosses.device_ptr()),
                Arg::U64(rows as u64),
                Arg::U64(vocab as u64),
            ],
        )
    }

    fn adamw(
        &self,
        params: &AdamWParams,
        param: &mut CudaBuffer,
        grad: &CudaBuffer,
        m: &mut CudaBuffer,
        v: &mut CudaBuffer,
        inv_scale: Option<&CudaBuffer>,
        found_inf: Option<&CudaBuffer>,
    ) -> Result<()> {
        const OP: &str = "adamw";
        check_float(OP, param.dtype)?;
        check_float(OP, grad.dtype)?;
        same_dtype(OP, DType::F32, m.dtype)?;
        same_dtype(OP, DType::F32, v.dtype)?;
        if params.step == 0 {
            return Err(Error::invalid(OP, "step counts from 1"));
        }
        // One parameter's segment of flat buffers, or all of `param`.
        let r = params.elements(OP, param.len)?;
        let n = r.len();
        for len in [param.len, grad.len, m.len, v.len] {
            Error::check_len(OP, r.end, len)?;
        }
        for b in [inv_scale, found_inf].into_iter().flatten() {
            same_dtype(OP, DType::F32, b.dtype)?;
            Error::check_len(OP, 1, b.len)?;
        }
        if n == 0 {
            return Ok(());
        }
        let args = adamw_args(params);
        self.launch(
            Family::Optim,
            &format!("adamw_{}_{}", suffix(param.dtype), suffix(grad.dtype)),
            self.flat_cfg(n),
            &[
                // In range: `r.start` is below the checked `r.end`.
                Arg::Ptr(param.ptr_at(r.start)),
                Arg::Ptr(grad.ptr_at(r.start)),
                Arg::Ptr(m.ptr_at(r.start)),
                Arg::Ptr(v.ptr_at(r.start)),
                Arg::U64(n as u64),
                Arg::pod(&args),
                Arg::Ptr(inv_scale.map_or(0, CudaBuffer::device_ptr)),
                Arg::Ptr(found_inf.map_or(0, CudaBuffer::device_ptr)),
            ],
        )
    }

    fn adamw_8bit(
        &self,
        params: &AdamWParams,
        param: &mut CudaBuffer,
        grad: &CudaBuffer,
        state: &mut QuantizedMoments<'_, CudaBuffer>,
        inv_scale: Option<&CudaBuffer>,
        found_inf: Option<&CudaBuffer>,
    ) -> Result<()> {
        const OP: &str = "adamw_8bit";
        if !matches!(param.dtype, DType::F16 | DType::BF16 | DType::F32) {
            return Err(Error::invalid(
                OP,
                format!("param must be f16, bf16 or f32, got {}", param.dtype),
            ));
        }
        same_dtype(OP, param.dtype, grad.dtype)?;
        same_dtype(OP, DType::U32, state.codes.dtype)?;
        same_dtype(OP, DType::F32, state.absmax.dtype)?;
        same_dtype(OP, DType::F32, state.maps.dtype)?;
        if params.step == 0 {
            return Err(Error::invalid(OP, "step counts from 1"));
        }
        let r = params.elements(OP, param.len)?;
        let n = r.len();
        Error::check_len(OP, r.end, param.len)?;
        Error::check_len(OP, r.end, grad.len)?;
        Error::check_len(OP, 2 * quant8::code_words(n), state.codes.len)?;
        Error::check_len(OP, 2 * quant8::blocks(n), state.absmax.len)?;
        Error::check_len(OP, 512, state.maps.len)?;
        for b in [inv_scale, found_inf].into_iter().flatten() {
            same_dtype(OP, DType::F32, b.dtype)?;
            Error::check_len(OP, 1, b.len)?;
        }
        if n == 0 {
            return Ok(());
        }
        // One block of 256 threads per quantisation block (grid-stride beyond 65535).
        let cfg = LaunchCfg {
            grid: (quant8::blocks(n).min(65535) as u32, 1, 1),
            block: (256, 1, 1),
            smem: 0,
        };
        self.launch(
            Family::Optim,
            &format!("adamw_8bit_{}", suffix(param.dtype)),
            cfg,
            &[
                // In range: `r.start` is below the checked `r.end`.
                Arg::Ptr(param.ptr_at(r.start)),
                Arg::Ptr(grad.ptr_at(r.start)),
                Arg::Ptr(state.codes.device_ptr()),
                Arg::Ptr(state.absmax.device_ptr()),
                Arg::Ptr(state.maps.device_ptr()),
                Arg::U64(n as u64),
                Arg::pod(&adamw_args(params)),
                Arg::Ptr(inv_scale.map_or(0, CudaBuffer::device_ptr)),
                Arg::Ptr(found_inf.map_or(0, CudaBuffer::device_ptr)),
            ],
        )
    }

    fn adamw_master(
        &self,
        params: &AdamWParams,
        master: &mut CudaBuffer,
        param_copy: &mut CudaBuffer,
        grad: &CudaBuffer,
        m: &mut CudaBuffer,
        v: &mut CudaBuffer,
        inv_scale: Option<&CudaBuffer>,
        found_inf: Option<&CudaBuffer>,
    ) -> Result<()> {
        const OP: &str = "adamw_master";
        for b in [&*master, &*m, &*v] {
            same_dtype(OP, DType::F32, b.dtype)?;
        }
        let copy_dt = param_copy.dtype;
        check_master_dtypes(OP, copy_dt, grad.dtype)?;
        if params.step == 0 {
            return Err(Error::invalid(OP, "step counts from 1"));
        }
        let r = params.elements(OP, master.len)?;
        let n = r.len();
        for len in [master.len, param_copy.len, grad.len, m.len, v.len] {
            Error::check_len(OP, r.end, len)?;
        }
        for b in [inv_scale, found_inf].into_iter().flatten() {
            same_dtype(OP, DType::F32, b.dtype)?;
            Error::check_len(OP, 1, b.len)?;
        }
        if n == 0 {
            return Ok(());
        }
        self.launch(
            Family::Optim,
            &format!("adamw_master_{}_{}", suffix(copy_dt), suffix(grad.dtype)),
            self.flat_cfg(n),
            &[
                Arg::Ptr(master.ptr_at(r.start)),
                Arg::Ptr(param_copy.ptr_at(r.start)),
                Arg::Ptr(grad.ptr_at(r.start)),
                Arg::Ptr(m.ptr_at(r.start)),
                Arg::Ptr(v.ptr_at(r.start)),
                Arg::U64(n as u64),
                Arg::pod(&adamw_args(params)),
                Arg::Ptr(inv_scale.map_or(0, CudaBuffer::device_ptr)),
                Arg::Ptr(found_inf.map_or(0, CudaBuffer::device_ptr)),
            ],
        )
    }

    fn clip_coefficient(
        &self,
        sumsq: &CudaBuffer,
        max_norm: f64,
        norm: &mut CudaBuffer,
        coef: &mut CudaBuffer,
    ) -> Result<()> {
        const OP: &str = "clip_coefficient";
        if max_norm.is_nan() || max_norm <= 0.0 {
            return Err(Error::invalid(
                OP,
                format!("max_norm must be positive, got {max_norm}"),
            ));
        }
        for b in [sumsq, &*norm, &*coef] {
            same_dtype(OP, DType::F32, b.dtype)?;
            Error::check_len(OP, 1, b.len)?;
        }
        self.launch(
            Family::Optim,
            "clip_coefficient",
            LaunchCfg {
                grid: (1, 1, 1),
                block: (32, 1, 1),
                smem: 0,
            },
            &[
                Arg::Ptr(sumsq.device_ptr()),
                Arg::pod(&max_norm),
                Arg::Ptr(norm.device_ptr()),
                Arg::Ptr(coef.device_ptr()),
            ],
        )
    }

    fn multi_tensor_fill(&self, bufs: &mut [&mut CudaBuffer], value: f64) -> Result<()> {
        if !self.multi_tensor() {
            return multi_tensor::fill_each(self, bufs, value);
        }
        self.multi_fill(bufs, value)
    }

    fn multi_tensor_sum_squares(&self, xs: &[&CudaBuffer], out: &mut CudaBuffer) -> Result<()> {
        if !self.multi_tensor() {
            return multi_tensor::sum_squares_each(self, xs, out);
        }
        self.multi_sum_squares(xs, out)
    }

    fn multi_tensor_adamw(
        &self,
        params: &AdamWParams,
        tensors: &mut [AdamWTensors<'_, CudaBuffer>],
        inv_scale: Option<&CudaBuffer>,
        found_inf: Option<&CudaBuffer>,
    ) -> Result<()> {
        if !self.multi_tensor() {
            return multi_tensor::adamw_each(self, params, tensors, inv_scale, found_inf);
        }
        self.multi_adamw(params, tensors, inv_scale, found_inf)
    }

    fn unscale_check_finite(
        &self,
        grads: &mut CudaBuffer,
        inv_scale: &CudaBuffer,
        found_inf: &mut CudaBuffer,
    ) -> Result<()> {
        const OP: &str = "unscale_check_finite";
        check_float(OP, grads.dtype)?;
        same_dtype(OP, DType::F32, inv_scale.dtype)?;
        same_dtype(OP, DType::F32, found_inf.dtype)?;
        Error::check_len(OP, 1, inv_scale.len)?;
        Error::check_len(OP, 1, found_inf.len)?;
        if grads.len == 0 {
            return Ok(());
        }
        self.launch(
            Family::Optim,
            &format!("unscale_check_finite_{}", suffix(grads.dtype)),
            self.flat_cfg(grads.len),
            &[
                Arg::Ptr(grads.device_ptr()),
                Arg::U64(grads.len as u64),
                Arg::Ptr(inv_scale.device_ptr()),
                Arg::Ptr(found_inf.device_ptr()),
            ],
        )
    }

    fn update_loss_scale(
        &self,
        params: &ScaleUpdateParams,
        scale: &mut CudaBuffer,
        growth_tracker: &mut CudaBuffer,
        found_inf: &CudaBuffer,
    ) -> Result<()> {
        const OP: &str = "update_loss_scale";
        same_dtype(OP, DType::F32, scale.dtype)?;
        same_dtype(OP, DType::I32, growth_tracker.dtype)?;
        same_dtype(OP, DType::F32, found_inf.dtype)?;
        Error::check_len(OP, 1, scale.len)?;
        Error::check_len(OP, params.tracker_len(), growth_tracker.len)?;
        Error::check_len(OP, 1, found_inf.len)?;
        let interval = i32::try_from(params.growth_interval)
            .map_err(|_| Error::invalid(OP, "growth_interval exceeds i32::MAX"))?;
        let hysteresis = i32::try_from(params.hysteresis)
            .map_err(|_| Error::invalid(OP, "hysteresis exceeds i32::MAX"))?;
        self.launch(
            Family::Optim,
            "update_loss_scale",
            LaunchCfg {
                grid: (1, 1, 1),
                block: (32, 1, 1),
                smem: 0,
            },
            &[
                Arg::Ptr(scale.device_ptr()),
                Arg::Ptr(growth_tracker.device_ptr()),
                Arg::Ptr(found_inf.device_ptr()),
                Arg::F32(params.growth_factor),
                Arg::F32(params.backoff_factor),
                Arg::I32(interval),
                Arg::I32(hysteresis),
                Arg::F32(params.min_scale),
            ],
        )
    }
}
