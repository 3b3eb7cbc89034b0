//! The device, its buffers, the pipeline cache, dispatch and readback.

use crate::oneshot;
use crate::shaders::{Family, kernel_source};
use brrr_backend::{DType, Error, HostData, MemoryCounter, Result};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use wgpu::util::DeviceExt;

pub(crate) const BACKEND: &str = "wgpu";

/// Buffer allocations are rounded up to this many bytes: every buffer can then be bound
/// as `array<vec4<f32>>` (the vectorised matmul does) and copied (copies need 4).
const ALLOC_ALIGN: u64 = 16;

/// A device buffer that knows its dtype and length.
///
/// f16 and bf16 are stored packed, two per 32-bit word; f32, i32 and u32 one per word.
/// The allocation is rounded up to 16 bytes; the padding is never read as data.
/// Its allocated bytes count against its device's memory statistics until it drops.
#[derive(Debug)]
pub struct WgpuBuffer {
    pub(crate) buf: wgpu::Buffer,
    pub(crate) dtype: DType,
    pub(crate) len: usize,
    memory: Arc<MemoryCounter>,
}

impl WgpuBuffer {
    /// The underlying wgpu buffer (usage `STORAGE | COPY_SRC | COPY_DST`), for callers
    /// that want to bind it in their own pipelines. It is destroyed when this
    /// `WgpuBuffer` is dropped, clones of the handle included.
    pub fn raw(&self) -> &wgpu::Buffer {
        &self.buf
    }
    /// The element type the buffer holds.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Number of elements (not bytes, not 32-bit words: a 16-bit buffer of `len`
    /// elements occupies `len / 2` words, rounded up).
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the buffer holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Bytes of data (without the allocation's padding).
    pub fn size_in_bytes(&self) -> u64 {
        self.len as u64 * self.dtype.size_in_bytes() as u64
    }
}

/// Frees the device memory now rather than whenever the handle is collected: in the
/// browser, dropping a wgpu buffer only drops a JS reference, and the garbage collector
/// knows nothing of GPU memory. Every use of a buffer is submitted before the op that
/// uses it returns, and WebGPU's `destroy` lets submitted work finish first.
impl Drop for WgpuBuffer {
    fn drop(&mut self) {
        self.memory.on_free(self.buf.size());
        self.buf.destroy();
    }
}

/// What the adapter offers, as the backend uses it. All sizes in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceReport {
    /// Adapter name as the driver reports it (`llvmpipe (LLVM 15.0.6, 256 bits)` for lavapipe).
    pub adapter: String,
    /// `Vulkan`, `Metal`, `Dx12` or `BrowserWebGpu`.
    pub api: String,
    /// `DiscreteGpu`, `IntegratedGpu`, `Cpu`, ...
    pub device_type: String,
    /// Driver name and version info joined by a space; empty where the platform gives
    /// none (browsers).
    pub driver: String,
    /// Whether the adapter has the `shader-f16` feature. brrr does not need it: f16 and
    /// bf16 are packed in u32 words and converted bit-exactly in WGSL, so every adapter
    /// supports both as storage with f32 arithmetic.
    pub shader_f16: bool,
    /// Largest buffer the device may create; a larger allocation (after rounding up to
    /// 16 bytes) is [`Error::LimitExceeded`].
    pub max_buffer_size: u64,
    /// Largest range of a buffer one storage binding may cover; a larger operand is
    /// [`Error::LimitExceeded`].
    pub max_storage_buffer_binding_size: u64,
    /// Storage buffers one kernel may bind; brrr's kernels need at least 6.
    pub max_storage_buffers_per_shader_stage: u32,
    /// Workgroups per grid dimension; larger grids are split into 2-D grids, and one
    /// still too large is [`Error::LimitExceeded`].
    pub max_compute_workgroups_per_dimension: u32,
    /// Invocations in one workgroup; brrr's kernels need at least 256.
    pub max_compute_invocations_per_workgroup: u32,
    /// Workgroup (shared) memory per workgroup; brrr's kernels need at least 8192.
    pub max_compute_workgroup_storage_size: u32,
}

impl fmt::Display for DeviceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}, {}, driver {}); shader-f16: {}; max buffer {} B, max storage binding {} B, \
             {} storage buffers/stage, {} workgroups/dim, {} invocations/workgroup, {} B workgroup memory",
            self.adapter,
            self.api,
            self.device_type,
            if self.driver.is_empty() {
                "?"
            } else {
                &self.driver
            },
            if self.shader_f16 { "yes" } else { "no" },
            self.max_buffer_size,
            self.max_storage_buffer_binding_size,
            self.max_storage_buffers_per_shader_stage,
            self.max_compute_workgroups_per_dimension,
            self.max_compute_invocations_per_workgroup,
            self.max_compute_workgroup_storage_size,
        )
    }
}

pub(crate) struct Inner {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) report: DeviceReport,
    pub(crate) limits: wgpu::Limits,
    pipelines: Mutex<HashMap<String, wgpu::ComputePipeline>>,
    /// The first error wgpu reported outside an error scope (validation, out of memory),
    /// turned into an `Err` by the next call instead of a panic.
    error: Arc<Mutex<Option<String>>>,
    /// Stand-ins bound where an optional buffer is absent (AdamW's AMP inputs).
    pub(crate) dummy: [wgpu::Buffer; 2],
    /// Which device this is among those opened by this process, from 0.
    pub(crate) ordinal: usize,
    /// Bytes of live [`WgpuBuffer`]s (their allocated, padded size).
    pub(crate) memory: Arc<MemoryCounter>,
    /// The staging ring small uploads go through ([`UploadPath::Staged`]).
    belt: Mutex<wgpu::util::StagingBelt>,
}

/// How [`Backend::upload`](brrr_backend::Backend::upload) and
/// [`Backend::write`](brrr_backend::Backend::write) move data to the device
/// ([`WgpuBackend::with_upload_path`](crate::WgpuBackend::with_upload_path)).
///
/// WebGPU has one queue, so there is no copy engine running beside the kernels as
/// CUDA's copy stream is; what a program controls is the host side of an upload: how
/// many times the bytes are copied on the host, and whether staging memory is allocated
/// per upload or reused. Both paths write the caller's bytes once, straight into
/// host-visible memory, and queue one copy behind the work already submitted; the host
/// never waits for the GPU to upload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum UploadPath {
    /// wgpu's own staging: a new buffer mapped at creation, or
    /// `Queue::write_buffer_with` into an existing one. wgpu allocates the staging memory
    /// for each call (natively) and frees it after the copy; the copy rides along with
    /// the next submission.
    #[default]
    Direct,
    /// A ring of staging buffers that are reused (wgpu's `StagingBelt`), the equivalent
    /// of CUDA's pinned staging ring: a buffer is mapped again asynchronously once the GPU
    /// has read it. Uploads up to [`STAGED_MAX_BYTES`] (a batch of token ids, a mask) take
    /// it; larger ones (weights, once) go direct. Each upload is its own submission.
    /// On lavapipe it is slower than `Direct` at every batch size measured (a submission
    /// costs more there than the allocation it saves; `brrr-wgpu`'s `bench_upload`), so
    /// it is not the default; it is the path to measure on a GPU, where mapped staging
    /// memory is expensive to allocate.
    Staged,
}

/// Bytes of each staging buffer of the ring: a batch of ids and targets of a large
/// configuration fits (64 × 1024 × 4 bytes = 256 KiB each).
pub const STAGING_CHUNK_BYTES: u64 = 256 << 10;

/// Uploads larger than this go directly: a staging buffer of their size would stay in
/// the ring for good after a one-off upload.
pub const STAGED_MAX_BYTES: u64 = 4 * STAGING_CHUNK_BYTES;

/// Bytes a copy of `bytes` moves: copies move whole 4-byte words (allocations are padded
/// to 16 bytes, so the rounded-up tail fits). `None` for nothing to copy.
fn copy_size(bytes: &[u8]) -> Option<wgpu::BufferSize> {
    wgpu::BufferSize::new(bytes.len().div_ceil(4) as u64 * 4)
}

/// Devices opened so far in this process: each [`Inner::create`] opens a new wgpu
/// device whose buffers no other device can use, so each gets its own ordinal.
static DEVICES_OPENED: AtomicUsize = AtomicUsize::new(0);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A kernel: a section of a family file, an entry point and placeholder values.
pub(crate) struct Kernel<'a> {
    pub family: Family,
    pub name: &'static str,
    pub entry: &'static str,
    pub subst: &'a [(&'a str, &'a str)],
}

impl<'a> Kernel<'a> {
    pub(crate) const fn new(family: Family, name: &'static str) -> Self {
        Kernel {
            family,
            name,
            entry: "main",
            subst: &[],
        }
    }
}

/// Uniform parameters of one dispatch, built field by field in WGSL declaration order
/// (every field here is 4 bytes; arrays of `vec4<u32>` start on a 16-byte boundary).
#[derive(Default, Clone, Debug)]
pub(crate) struct Params(Vec<u32>);

/// One dispatch of [`Inner::dispatch_seq`]: a kernel, its uniform, its storage
/// buffers (after the uniform, in binding order) and its workgroup grid.
pub(crate) struct Dispatch<'a> {
    pub kernel: &'a Kernel<'a>,
    pub params: Params,
    pub bufs: &'a [&'a wgpu::Buffer],
    pub groups: [u32; 3],
}

impl Params {
    pub(crate) fn new() -> Self {
        Params(Vec::with_capacity(16))
    }
    pub(crate) fn u(mut self, v: u32) -> Self {
        self.0.push(v);
        self
    }
    pub(crate) fn f(mut self, v: f32) -> Self {
        self.0.push(v.to_bits());
        self
    }
    pub(crate) fn i(mut self, v: i32) -> Self {
        self.0.push(v as u32);
        self
    }
    /// Pads with zeros to a multiple of 4 words (16 bytes).
    pub(crate) fn align16(mut self) -> Self {
        while !self.0.len().is_multiple_of(4) {
            self.0.push(0);
        }
        self
    }
    fn bytes(&self) -> Vec<u8> {
        let p = self.clone().align16();
        let mut v = p.0;
        if v.is_empty() {
            v.resize(4, 0);
        }
        bytemuck::cast_slice(&v).to_vec()
    }
}

impl Inner {
    pub(crate) async fn create() -> Result<Inner> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        // Vulkan/Metal/DX12 natively, WebGPU in the browser. `WGPU_BACKEND` overrides.
        desc.backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY);
        let instance = wgpu::Instance::new(desc);
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::from_env()
                    .unwrap_or(wgpu::PowerPreference::HighPerformance),
                force_fallback_adapter: false,
                compatible_surface: None,
                apply_limit_buckets: false,
            })
            .await
            .map_err(|e| Error::NoDevice {
                backend: BACKEND,
                reason: format!("no wgpu adapter: {e}"),
            })?;
        let info = adapter.get_info();
        // Ask for everything the adapter has: WebGPU's defaults (128 MiB bindings,
        // 256 MiB buffers) are far below what real GPUs allow.
        let limits = adapter.limits();
        let shader_f16 = adapter.features().contains(wgpu::Features::SHADER_F16);
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("brrr"),
                required_features: wgpu::Features::empty(),
                required_limits: limits.clone(),
                experimental_features: wgpu::ExperimentalFeatures::disabled(),
                memory_hints: wgpu::MemoryHints::Performance,
                trace: wgpu::Trace::Off,
            })
            .await
            .map_err(|e| Error::NoDevice {
                backend: BACKEND,
                reason: format!("adapter '{}' refused a device: {e}", info.name),
            })?;
        let error = Arc::new(Mutex::new(None::<String>));
        let slot = error.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut s = lock(&slot);
            if s.is_none() {
                *s = Some(e.to_string());
            }
        }));
        let report = DeviceReport {
            // Browsers do not name the adapter (fingerprinting).
            adapter: if info.name.is_empty() {
                "unnamed adapter".to_string()
            } else {
                info.name.clone()
            },
            api: format!("{:?}", info.backend),
            device_type: format!("{:?}", info.device_type),
            driver: [info.driver.as_str(), info.driver_info.as_str()]
                .iter()
                .filter(|s| !s.is_empty())
                .copied()
                .collect::<Vec<_>>()
                .join(" "),
            shader_f16,
            max_buffer_size: limits.max_buffer_size,
            max_storage_buffer_binding_size: limits.max_storage_buffer_binding_size,
            max_storage_buffers_per_shader_stage: limits.max_storage_buffers_per_shader_stage,
            max_compute_workgroups_per_dimension: limits.max_compute_workgroups_per_dimension,
            max_compute_invocations_per_workgroup: limits.max_compute_invocations_per_workgroup,
            max_compute_workgroup_storage_size: limits.max_compute_workgroup_storage_size,
        };
        let mk_dummy = || {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("brrr dummy"),
                size: ALLOC_ALIGN,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            })
        };
        let dummy = [mk_dummy(), mk_dummy()];
        let belt = Mutex::new(wgpu::util::StagingBelt::new(
            device.clone(),
            STAGING_CHUNK_BYTES,
        ));
        let inner = Inner {
            device,
            queue,
            report,
            limits,
            pipelines: Mutex::new(HashMap::new()),
            error,
            dummy,
            ordinal: DEVICES_OPENED.fetch_add(1, Ordering::Relaxed),
            memory: Arc::new(MemoryCounter::new()),
            belt,
        };
        inner.check_limits_we_need()?;
        Ok(inner)
    }

    /// The kernels assume WebGPU's guaranteed minimums for workgroups; say so clearly if
    /// an adapter has less.
    fn check_limits_we_need(&self) -> Result<()> {
        let l = &self.limits;
        let need = [
            (
                "max_compute_invocations_per_workgroup",
                u64::from(l.max_compute_invocations_per_workgroup),
                256,
            ),
            (
                "max_compute_workgroup_size_x",
                u64::from(l.max_compute_workgroup_size_x),
                256,
            ),
            (
                "max_compute_workgroup_size_y",
                u64::from(l.max_compute_workgroup_size_y),
                16,
            ),
            (
                "max_compute_workgroup_storage_size",
                u64::from(l.max_compute_workgroup_storage_size),
                8192,
            ),
            (
                "max_storage_buffers_per_shader_stage",
                u64::from(l.max_storage_buffers_per_shader_stage),
                6,
            ),
        ];
        for (limit, have, want) in need {
            if have < want {
                return Err(Error::NoDevice {
                    backend: BACKEND,
                    reason: format!(
                        "adapter '{}' has {limit} = {have}; brrr's kernels need at least {want}",
                        self.report.adapter
                    ),
                });
            }
        }
        Ok(())
    }

    /// Turns an error wgpu reported since the last check into an `Err`.
    pub(crate) fn take_error(&self, what: &str) -> Result<()> {
        match lock(&self.error).take() {
            None => Ok(()),
            Some(msg) => Err(Error::Backend {
                backend: BACKEND,
                msg: format!("{what}: {msg}"),
            }),
        }
    }

    fn limit(limit: &'static str, requested: u64, max: u64) -> Result<()> {
        if requested > max {
            Err(Error::LimitExceeded {
                backend: BACKEND,
                limit,
                requested,
                max,
            })
        } else {
            Ok(())
        }
    }

    fn alloc_size(&self, dtype: DType, len: usize) -> Result<u64> {
        if dtype == DType::F64 {
            return Err(crate::ops::no_f64("alloc"));
        }
        // Kernels index elements with u32.
        Self::limit(
            "u32 element index (WGSL indexes with u32)",
            len as u64,
            u64::from(u32::MAX),
        )?;
        let bytes = (len as u64) * dtype.size_in_bytes() as u64;
        let size = bytes.max(1).div_ceil(ALLOC_ALIGN) * ALLOC_ALIGN;
        Self::limit("max_buffer_size", size, self.limits.max_buffer_size)?;
        Ok(size)
    }

    const USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
        .union(wgpu::BufferUsages::COPY_SRC)
        .union(wgpu::BufferUsages::COPY_DST);

    /// A new zero-filled buffer (wgpu zero-initialises every buffer).
    pub(crate) fn alloc(&self, dtype: DType, len: usize) -> Result<WgpuBuffer> {
        let size = self.alloc_size(dtype, len)?;
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage: Self::USAGE,
            mapped_at_creation: false,
        });
        self.take_error("allocating a buffer")?;
        Ok(self.counted(buf, dtype, len))
    }

    /// Wraps a new wgpu buffer, counting it against this device.
    fn counted(&self, buf: wgpu::Buffer, dtype: DType, len: usize) -> WgpuBuffer {
        self.memory.on_alloc(buf.size());
        WgpuBuffer {
            buf,
            dtype,
            len,
            memory: self.memory.clone(),
        }
    }

    /// [`UploadPath::Direct`]: a new buffer mapped at creation, `data` written straight
    /// into the mapping (no intermediate copy on the host), then unmapped.
    pub(crate) fn upload(&self, data: &HostData) -> Result<WgpuBuffer> {
        let size = self.alloc_size(data.dtype(), data.len())?;
        let bytes = data.as_bytes();
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage: Self::USAGE,
            mapped_at_creation: true,
        });
        self.take_error("uploading a buffer")?;
        {
            let mut view = buf
                .slice(..)
                .get_mapped_range_mut()
                .map_err(|e| Error::Backend {
                    backend: BACKEND,
                    msg: format!("mapping a new buffer for an upload: {e}"),
                })?;
            view.slice(..bytes.len()).copy_from_slice(bytes);
            view.slice(bytes.len()..).fill(0);
        }
        buf.unmap();
        Ok(self.counted(buf, data.dtype(), data.len()))
    }

    /// [`UploadPath::Staged`]: a new buffer, its contents copied from the staging ring.
    pub(crate) fn upload_staged(&self, data: &HostData) -> Result<WgpuBuffer> {
        let buf = self.alloc(data.dtype(), data.len())?;
        self.write_staged(&buf, data)?;
        Ok(buf)
    }

    /// [`UploadPath::Staged`]: `data` written into a mapped staging buffer of the ring,
    /// then copied into `buf` by a command queued behind everything submitted so far.
    pub(crate) fn write_staged(&self, buf: &WgpuBuffer, data: &HostData) -> Result<()> {
        let bytes = data.as_bytes();
        let Some(size) = copy_size(bytes) else {
            return Ok(());
        };
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        // Held from the write to the recall: another thread's recall must not re-map a
        // staging buffer whose copy this thread has not submitted yet.
        let mut belt = lock(&self.belt);
        {
            let mut view = belt.write_buffer(&mut enc, &buf.buf, 0, size);
            // Write-only: mapped staging memory may be write-combined, slow to read.
            view.slice(..bytes.len()).copy_from_slice(bytes);
            view.slice(bytes.len()..).fill(0);
        }
        belt.finish();
        self.queue.submit([enc.finish()]);
        belt.recall();
        drop(belt);
        self.take_error("uploading through the staging ring")
    }

    /// [`UploadPath::Direct`]: `data` written straight into a staging buffer wgpu
    /// allocates (`Queue::write_buffer_with`: no intermediate copy on the host), copied
    /// into `buf` at the next submission, after all work submitted so far (every op
    /// submits before returning).
    pub(crate) fn write(&self, buf: &WgpuBuffer, data: &HostData) -> Result<()> {
        let bytes = data.as_bytes();
        let Some(size) = copy_size(bytes) else {
            return Ok(());
        };
        let Some(mut view) = self.queue.write_buffer_with(&buf.buf, 0, size) else {
            // wgpu's own report, when it made one, says more than ours.
            self.take_error("writing a buffer")?;
            return Err(Error::Backend {
                backend: BACKEND,
                msg: format!("writing {size} bytes into a buffer of {}", buf.buf.size()),
            });
        };
        view.slice(..bytes.len()).copy_from_slice(bytes);
        view.slice(bytes.len()..).fill(0);
        drop(view);
        self.take_error("writing a buffer")
    }

    /// Returns the cached pipeline, compiling it on first use.
    pub(crate) fn pipeline(&self, k: &Kernel<'_>) -> Result<wgpu::ComputePipeline> {
        let key = format!(
            "{}/{}/{}/{:?}",
            k.family.file_name(),
            k.name,
            k.entry,
            k.subst
        );
        if let Some(p) = lock(&self.pipelines).get(&key) {
            return Ok(p.clone());
        }
        let src = kernel_source(k.family, k.name, k.subst)?;
        let label = format!("{}:{}", k.family.file_name(), k.name);
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(&label),
                source: wgpu::ShaderSource::Wgsl(src.into()),
            });
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&label),
                layout: None,
                module: &module,
                entry_point: Some(k.entry),
                compilation_options: Default::default(),
                cache: None,
            });
        self.take_error(&format!("compiling kernel {label} ({})", k.entry))?;
        lock(&self.pipelines).insert(key, pipeline.clone());
        Ok(pipeline)
    }

    /// Checks a grid against the per-dimension limit.
    pub(crate) fn check_grid(&self, groups: [u32; 3]) -> Result<()> {
        for g in groups {
            Self::limit(
                "max_compute_workgroups_per_dimension",
                u64::from(g),
                u64::from(self.limits.max_compute_workgroups_per_dimension),
            )?;
        }
        Ok(())
    }

    /// A 2-D grid of `groups` workgroups (kernels linearise it with `flat_id`/`group_id`).
    pub(crate) fn grid(&self, groups: usize) -> Result<[u32; 3]> {
        let max = self.limits.max_compute_workgroups_per_dimension as usize;
        if groups == 0 {
            return Ok([0, 1, 1]);
        }
        let x = groups.min(max);
        let y = groups.div_ceil(x);
        Self::limit(
            "max_compute_workgroups_per_dimension (2-D grid)",
            y as u64,
            max as u64,
        )?;
        Ok([x as u32, y as u32, 1])
    }

    /// Builds the bind group and records one dispatch into `enc`. Returns the uniform
    /// buffer, to be destroyed once the command buffer is submitted.
    pub(crate) fn encode(
        &self,
        enc: &mut wgpu::CommandEncoder,
        k: &Kernel<'_>,
        params: &Params,
        bufs: &[&wgpu::Buffer],
        groups: [u32; 3],
    ) -> Result<Option<wgpu::Buffer>> {
        if groups.contains(&0) {
            return Ok(None);
        }
        self.check_grid(groups)?;
        for b in bufs {
            Self::limit(
                "max_storage_buffer_binding_size",
                b.size(),
                self.limits.max_storage_buffer_binding_size,
            )?;
        }
        let pipeline = self.pipeline(k)?;
        let ubuf = self
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: None,
                contents: &params.bytes(),
                usage: wgpu::BufferUsages::UNIFORM,
            });
        let mut entries = Vec::with_capacity(bufs.len() + 1);
        entries.push(wgpu::BindGroupEntry {
            binding: 0,
            resource: ubuf.as_entire_binding(),
        });
        for (i, b) in bufs.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry {
                binding: i as u32 + 1,
                resource: b.as_entire_binding(),
            });
        }
        let bg = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(k.name),
            timestamp_writes: None,
        });
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bg, &[]);
        pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
        Ok(Some(ubuf))
    }

    /// One dispatch, submitted at once.
    pub(crate) fn dispatch(
        &self,
        k: &Kernel<'_>,
        params: &Params,
        bufs: &[&wgpu::Buffer],
        groups: [u32; 3],
    ) -> Result<()> {
        if groups.contains(&0) {
            return Ok(());
        }
        let mut enc = self.device.create_command_encoder(&Default::default());
        let uniform = self.encode(&mut enc, k, params, bufs, groups)?;
        self.queue.submit([enc.finish()]);
        if let Some(u) = uniform {
            u.destroy();
        }
        self.take_error(&format!("{}:{}", k.family.file_name(), k.name))
    }

    /// Dispatches recorded in order into one command buffer and submitted once, for an op
    /// made of several passes: it then pays one submission, like a one-pass op. wgpu
    /// orders a pass that reads a buffer after the pass that wrote it.
    pub(crate) fn dispatch_seq(&self, steps: &[Dispatch<'_>]) -> Result<()> {
        let mut enc = self.device.create_command_encoder(&Default::default());
        let mut uniforms = Vec::with_capacity(steps.len());
        for d in steps {
            uniforms.extend(self.encode(&mut enc, d.kernel, &d.params, d.bufs, d.groups)?);
        }
        self.queue.submit([enc.finish()]);
        for u in uniforms {
            u.destroy();
        }
        let names: Vec<&str> = steps.iter().map(|d| d.kernel.name).collect();
        self.take_error(&names.join("+"))
    }

    pub(crate) fn copy(&self, src: &wgpu::Buffer, dst: &wgpu::Buffer, bytes: u64) -> Result<()> {
        let bytes = bytes.div_ceil(4) * 4;
        if bytes == 0 {
            return Ok(());
        }
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(src, 0, dst, 0, bytes);
        self.queue.submit([enc.finish()]);
        self.take_error("copy")
    }

    /// Copies a buffer to a mappable staging buffer and waits for the map.
    pub(crate) async fn read(&self, buf: &WgpuBuffer) -> Result<HostData> {
        let bytes = buf.size_in_bytes();
        if bytes == 0 {
            return Ok(HostData::zeros(buf.dtype, 0));
        }
        let copy = bytes.div_ceil(4) * 4;
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("brrr readback"),
            size: copy,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&buf.buf, 0, &staging, 0, copy);
        self.queue.submit([enc.finish()]);
        self.take_error("readback copy")?;
        let (tx, rx) = oneshot::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| tx.send(r));
        self.wait()?;
        rx.await.map_err(|e| Error::Backend {
            backend: BACKEND,
            msg: format!("mapping the readback buffer failed: {e}"),
        })?;
        let data = {
            let view = staging.get_mapped_range(..).map_err(|e| Error::Backend {
                backend: BACKEND,
                msg: format!("reading the mapped buffer failed: {e}"),
            })?;
            HostData::from_bytes(buf.dtype, &view[..bytes as usize])?
        };
        staging.unmap();
        staging.destroy();
        self.take_error("readback")?;
        Ok(data)
    }

    /// Native: block until the queue is idle (this is what drives map callbacks).
    /// Browser: nothing to do here; the awaited callback is what waits.
    fn wait(&self) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Backend {
                backend: BACKEND,
                msg: format!("waiting for the device failed: {e}"),
            })?;
        Ok(())
    }

    pub(crate) async fn synchronize(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.queue.on_submitted_work_done(move || tx.send(()));
        self.wait()?;
        rx.await;
        self.take_error("synchronize")
    }
}
