//! `Backend` for `WgpuBackend`: argument checks, then one or more kernel dispatches.

use crate::device::{BACKEND, Kernel, Params, STAGED_MAX_BYTES, UploadPath, WgpuBuffer};
use crate::shaders::Family;
use crate::{MatmulKernel, WgpuBackend};
use brrr_backend::quant8;
use brrr_backend::{
    AdamWParams, Backend, BackendInfo, BinaryOp, DType, DeviceLocation, EmbeddingSpec, Error,
    GemmSpec, HostData, LayerNormSpec, Layout, MAX_RANK, MemoryStats, QuantizedMoments, ReduceOp,
    Result, ScaleUpdateParams, SegmentMask, SoftmaxSpec, UnaryOp,
};
use half::{bf16, f16};

/// Invocations per workgroup of the kernels (`@workgroup_size(256)`, `WG` in common.wgsl).
pub(crate) const WG: usize = 256;

pub(crate) fn no_f64(op: &'static str) -> Error {
    Error::Unsupported {
        op,
        backend: BACKEND,
        dtype: DType::F64,
        why: "WGSL has no f64".into(),
    }
}

/// f32, f16 or bf16; f64 is unsupported, integers are the wrong dtype.
fn check_float(op: &'static str, d: DType) -> Result<()> {
    match d {
        DType::F32 | DType::F16 | DType::BF16 => Ok(()),
        DType::F64 => Err(no_f64(op)),
        other => Err(Error::DType {
            op,
            expected: DType::F32,
            got: other,
        }),
    }
}

fn check_f32(op: &'static str, b: &WgpuBuffer, what: &str, needed: usize) -> Result<()> {
    if b.dtype != DType::F32 {
        return Err(Error::invalid(
            op,
            format!("{what} must be f32, got {}", b.dtype),
        ));
    }
    Error::check_len(op, needed, b.len)
}

fn check_index(op: &'static str, b: &WgpuBuffer, what: &str) -> Result<()> {
    match b.dtype {
        DType::I32 | DType::U32 => Ok(()),
        other => Err(Error::invalid(
            op,
            format!("{what} must be i32 or u32, got {other}"),
        )),
    }
}

pub(crate) fn u32_of(v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::LimitExceeded {
        backend: BACKEND,
        limit: "u32 element index (WGSL indexes with u32)",
        requested: v as u64,
        max: u64::from(u32::MAX),
    })
}

fn groups(n: usize, per: usize) -> usize {
    n.div_ceil(per)
}

/// A float operand as f32: the buffer itself, or a widened temporary for f16/bf16.
pub(crate) struct Wide {
    pub(crate) buf: wgpu::Buffer,
    temp: Option<WgpuBuffer>,
}

fn load_expr(d: DType) -> &'static str {
    match d {
        DType::F32 => "return bitcast<f32>(src[i]);",
        DType::F16 => "return f16_to_f32((src[i >> 1u] >> ((i & 1u) * 16u)) & 0xffffu);",
        DType::BF16 => "return bf16_to_f32((src[i >> 1u] >> ((i & 1u) * 16u)) & 0xffffu);",
        DType::I32 => "return f32(bitcast<i32>(src[i]));",
        DType::U32 => "return f32(src[i]);",
        DType::F64 => unreachable!("f64 is rejected before any kernel"),
    }
}

fn store_expr(d: DType) -> &'static str {
    match d {
        DType::F32 => "return bitcast<u32>(v);",
        DType::F16 => "return f32_to_f16(v);",
        DType::BF16 => "return f32_to_bf16(v);",
        DType::I32 => "return bitcast<u32>(f32_to_i32_sat(v));",
        DType::U32 => "return f32_to_u32_sat(v);",
        DType::F64 => unreachable!("f64 is rejected before any kernel"),
    }
}

impl WgpuBackend {
    /// Whether `data` goes through the staging ring ([`UploadPath::Staged`], small).
    fn staged(&self, data: &HostData) -> bool {
        let bytes = (data.len() * data.dtype().size_in_bytes()) as u64;
        self.upload == UploadPath::Staged && bytes <= STAGED_MAX_BYTES
    }

    /// Converts the first `n` elements of `src` into `dst` (dtypes may be anything but f64).
    pub(crate) fn cast_raw(
        &self,
        src: &wgpu::Buffer,
        src_dtype: DType,
        dst: &wgpu::Buffer,
        dst_dtype: DType,
        n: usize,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        if src_dtype == dst_dtype {
            return self
                .inner
                .copy(src, dst, (n * src_dtype.size_in_bytes()) as u64);
        }
        let int_conv = match (src_dtype, dst_dtype) {
            (DType::I32, DType::U32) => Some("return u32(max(bitcast<i32>(w), 0));"),
            (DType::U32, DType::I32) => Some("return min(w, 0x7fffffffu);"),
            _ => None,
        };
        if let Some(conv) = int_conv {
            let subst = [("CONV", conv)];
            let k = Kernel {
                family: Family::Cast,
                name: "int",
                entry: "main",
                subst: &subst,
            };
            let grid = self.inner.grid(groups(n, WG))?;
            return self
                .inner
                .dispatch(&k, &Params::new().u(u32_of(n)?), &[src, dst], grid);
        }
        let to16 = dst_dtype.size_in_bytes() == 2;
        let subst = [
            ("LOAD", load_expr(src_dtype)),
            ("STORE", store_expr(dst_dtype)),
        ];
        let k = Kernel {
            family: Family::Cast,
            name: "cast",
            entry: if to16 { "to16" } else { "to32" },
            subst: &subst,
        };
        let items = if to16 { n.div_ceil(2) } else { n };
        let grid = self.inner.grid(groups(items, WG))?;
        self.inner
            .dispatch(&k, &Params::new().u(u32_of(n)?), &[src, dst], grid)
    }

    /// `b` as f32 for reading.
    pub(crate) fn widen(&self, op: &'static str, b: &WgpuBuffer) -> Result<Wide> {
        check_float(op, b.dtype)?;
        if b.dtype == DType::F32 {
            return Ok(Wide {
                buf: b.buf.clone(),
                temp: None,
            });
        }
        let t = self.inner.alloc(DType::F32, b.len)?;
        self.cast_raw(&b.buf, b.dtype, &t.buf, DType::F32, b.len)?;
        Ok(Wide {
            buf: t.buf.clone(),
            temp: Some(t),
        })
    }

    /// `b` as f32 for writing; `preserve` copies the current contents in (needed when the
    /// kernel accumulates or leaves part of the buffer untouched).
    pub(crate) fn widen_out(
        &self,
        op: &'static str,
        b: &WgpuBuffer,
        preserve: bool,
    ) -> Result<Wide> {
        check_float(op, b.dtype)?;
        if b.dtype == DType::F32 || preserve {
            return self.widen(op, b);
        }
        let t = self.inner.alloc(DType::F32, b.len)?;
        Ok(Wide {
            buf: t.buf.clone(),
            temp: Some(t),
        })
    }

    /// Writes a widened output back into its 16-bit buffer (nothing to do for f32).
    pub(crate) fn narrow(&self, w: Wide, dst: &WgpuBuffer) -> Result<()> {
        match w.temp {
            None => Ok(()),
            Some(t) => self.cast_raw(&t.buf, DType::F32, &dst.buf, dst.dtype, dst.len),
        }
    }

    pub(crate) fn gemm_impl(
        &self,
        kernel: MatmulKernel,
        spec: &GemmSpec,
        a: &WgpuBuffer,
        b: &WgpuBuffer,
        c: &mut WgpuBuffer,
    ) -> Result<()> {
        let op = "gemm";
        check_float(op, a.dtype)?;
        Error::check_dtype(op, a.dtype, b.dtype)?;
        // Mixed precision (f16/bf16 operands, f32 C) needs nothing more than the usual
        // route: operands are widened to f32 and C is already f32, so it is neither
        // widened nor rounded back.
        let mixed = matches!(a.dtype, DType::F16 | DType::BF16) && c.dtype == DType::F32;
        if !mixed {
            Error::check_dtype(op, a.dtype, c.dtype)?;
        }
        let (la, lb, lc) = spec.required_lens()?;
        Error::check_len(op, la, a.len)?;
        Error::check_len(op, lb, b.len)?;
        Error::check_len(op, lc, c.len)?;
        if spec.batch == 0 || spec.m == 0 || spec.n == 0 {
            return Ok(());
        }
        if !kernel.supports(spec) {
            return Err(Error::invalid(
                op,
                format!(
                    "matmul kernel {kernel} needs the contiguous axis of A and B (and their batch strides \
                     and offsets) to be multiples of 4; got {spec:?}"
                ),
            ));
        }
        u32_of(la.max(lb).max(lc))?;
        let (m, n, k) = (spec.m, spec.n, spec.k);
        let (a_rs, a_cs) = if spec.trans_a { (1, m) } else { (k, 1) };
        let (b_rs, b_cs) = if spec.trans_b { (1, k) } else { (n, 1) };
        let tile = kernel.tile();
        let gx = u32_of(groups(n, tile))?;
        let gy = u32_of(groups(m, tile))?;
        let max_z = self.inner.limits.max_compute_workgroups_per_dimension as usize;
        self.inner.check_grid([gx, gy, 1])?;
        let wa = self.widen(op, a)?;
        let wb = self.widen(op, b)?;
        let wc = self.widen_out(op, c, true)?;
        let kern = Kernel::new(
            Family::Matmul,
            match kernel {
                MatmulKernel::V1Naive => "v1_naive",
                MatmulKernel::V2Tiled => "v2_tiled",
                MatmulKernel::V3RegisterBlocked => "v3_register_blocked",
                MatmulKernel::V4Vec4 => "v4_vec4",
            },
        );
        // C's matrices overlap (`stride_c < m n`, e.g. 0 for a gradient summed over the
        // batch): the spec applies the batch in order, while the workgroups of one
        // dispatch run concurrently, so each matrix gets its own dispatch. Dispatches are
        // ordered by the storage-buffer barriers between them.
        let overlapping = spec.batch > 1 && spec.stride_c < m * n;
        let mut base = 0;
        while base < spec.batch {
            let chunk = if overlapping {
                1
            } else {
                (spec.batch - base).min(max_z)
            };
            let p = Params::new()
                .u(u32_of(m)?)
                .u(u32_of(n)?)
                .u(u32_of(k)?)
                .u(u32_of(spec.batch)?)
                .u(u32_of(a_rs)?)
                .u(u32_of(a_cs)?)
                .u(u32_of(b_rs)?)
                .u(u32_of(b_cs)?)
                .u(u32_of(spec.stride_a)?)
                .u(u32_of(spec.stride_b)?)
                .u(u32_of(spec.stride_c)?)
                .u(u32_of(base)?)
                .f(spec.alpha)
                .f(spec.beta)
                .u(u32::from(spec.trans_a))
                .u(u32::from(spec.trans_b))
                .u(u32_of(spec.offset_a)?)
                .u(u32_of(spec.offset_b)?)
                .u(u32_of(spec.offset_c)?)
                .u(0);
            self.inner.dispatch(
                &kern,
                &p,
                &[&wa.buf, &wb.buf, &wc.buf],
                [gx, gy, chunk as u32],
            )?;
            base += chunk;
        }
        self.narrow(wc, c)
    }

    /// Runs `unary(Affine{1,0})`-like copies `dispatches` times on `n` f32 elements and
    /// returns nothing: the overhead benchmark times it around `synchronize`.
    /// With `one_submission`, all dispatches are recorded into one command buffer (what a
    /// graph-capturing runtime does); otherwise each is its own submission, as every
    /// `Backend` op is.
    pub fn enqueue_elementwise(
        &self,
        x: &WgpuBuffer,
        y: &mut WgpuBuffer,
        dispatches: usize,
        one_submission: bool,
    ) -> Result<()> {
        let op = "enqueue_elementwise";
        Error::check_dtype(op, DType::F32, x.dtype)?;
        Error::check_dtype(op, DType::F32, y.dtype)?;
        Error::check_len(op, y.len, x.len)?;
        let k = Kernel::new(Family::Elementwise, "unary");
        let p = Params::new().u(u32_of(y.len)?).u(11).f(1.0).f(0.0);
        let grid = self.inner.grid(groups(y.len, WG))?;
        if !one_submission {
            for _ in 0..dispatches {
                self.inner.dispatch(&k, &p, &[&x.buf, &y.buf], grid)?;
            }
            return Ok(());
        }
        let mut enc = self
            .inner
            .device
            .create_command_encoder(&Default::default());
        let mut uniforms = Vec::with_capacity(dispatches);
        for _ in 0..dispatches {
            uniforms.extend(
                self.inner
                    .encode(&mut enc, &k, &p, &[&x.buf, &y.buf], grid)?,
            );
        }
        self.inner.queue.submit([enc.finish()]);
        for u in uniforms {
            u.destroy();
        }
        self.inner.take_error(op)
    }

    fn row_kernel(
        &self,
        k: &Kernel<'_>,
        p: &Params,
        rows: usize,
        bufs: &[&wgpu::Buffer],
    ) -> Result<()> {
        let grid = self.inner.grid(rows)?;
        self.inner.dispatch(k, p, bufs, grid)
    }

    fn flat_kernel(
        &self,
        k: &Kernel<'_>,
        p: &Params,
        n: usize,
        bufs: &[&wgpu::Buffer],
    ) -> Result<()> {
        let grid = self.inner.grid(groups(n, WG))?;
        self.inner.dispatch(k, p, bufs, grid)
    }
}

fn unary_code(op: UnaryOp) -> (u32, f32, f32) {
    match op {
        UnaryOp::Neg => (0, 0.0, 0.0),
        UnaryOp::Exp => (1, 0.0, 0.0),
        UnaryOp::Log => (2, 0.0, 0.0),
        UnaryOp::Sqrt => (3, 0.0, 0.0),
        UnaryOp::Rsqrt => (4, 0.0, 0.0),
        UnaryOp::Abs => (5, 0.0, 0.0),
        UnaryOp::Square => (6, 0.0, 0.0),
        UnaryOp::Recip => (7, 0.0, 0.0),
        UnaryOp::Relu => (8, 0.0, 0.0),
        UnaryOp::Tanh => (9, 0.0, 0.0),
        UnaryOp::Sigmoid => (10, 0.0, 0.0),
        UnaryOp::Affine { mul, add } => (11, mul, add),
        UnaryOp::Clamp { lo, hi } => (12, lo, hi),
    }
}

fn binary_code(op: BinaryOp) -> u32 {
    match op {
        BinaryOp::Add => 0,
        BinaryOp::Sub => 1,
        BinaryOp::Mul => 2,
        BinaryOp::Div => 3,
        BinaryOp::Max => 4,
        BinaryOp::Min => 5,
    }
}

pub(crate) fn reduce_code(op: ReduceOp) -> u32 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Mean => 1,
        ReduceOp::Max => 2,
        ReduceOp::Min => 3,
    }
}

/// Shape and strides padded to MAX_RANK (8 slots: two vec4<u32>) for a uniform.
fn push_dims(mut p: Params, v: &[usize]) -> Result<Params> {
    const { assert!(MAX_RANK <= 8) };
    for i in 0..8 {
        p = p.u(u32_of(v.get(i).copied().unwrap_or(0))?);
    }
    Ok(p)
}

fn check_layout(op: &'static str, l: &Layout, buf_len: usize) -> Result<()> {
    l.validate(op)?;
    Error::check_len(op, l.span(op)?, buf_len)
}

/// The bits of `value` in `dtype`, repeated to fill a 32-bit word.
fn fill_bits(dtype: DType, value: f64) -> Result<u32> {
    Ok(match dtype {
        DType::F32 => (value as f32).to_bits(),
        DType::F16 => {
            let h = u32::from(f16::from_f64(value).to_bits());
            h | (h << 16)
        }
        DType::BF16 => {
            let h = u32::from(bf16::from_f64(value).to_bits());
            h | (h << 16)
        }
        DType::I32 => (value as i32) as u32,
        DType::U32 => value as u32,
        DType::F64 => return Err(no_f64("fill")),
    })
}

/// The checks every AdamW kernel makes of its step: the one-element f32 inverse scale
/// and skip flag when given, and a step counted from 1.
fn check_step_scalars(
    name: &'static str,
    params: &AdamWParams,
    inv_scale: Option<&WgpuBuffer>,
    found_inf: Option<&WgpuBuffer>,
) -> Result<()> {
    if let Some(s) = inv_scale {
        check_f32(name, s, "inv_scale", 1)?;
    }
    if let Some(f) = found_inf {
        check_f32(name, f, "found_inf", 1)?;
    }
    if params.step == 0 {
        return Err(Error::invalid(name, "step counts from 1"));
    }
    Ok(())
}

/// The uniform of optimizer.wgsl's `adamw`, `adamw_master` and `adamw_8bit` kernels: bias corrections
/// from the host in f64, rounded to f32.
fn adamw_params(
    params: &AdamWParams,
    r: std::ops::Range<usize>,
    inv: bool,
    found: bool,
) -> Result<Params> {
    let step = i32::try_from(params.step).unwrap_or(i32::MAX);
    let bc1 = 1.0 - f64::from(params.beta1).powi(step);
    let bc2 = 1.0 - f64::from(params.beta2).powi(step);
    Ok(Params::new()
        .u(u32_of(r.len())?)
        .f(params.lr)
        .f(params.beta1)
        .f(params.beta2)
        .f(params.eps)
        .f(params.weight_decay)
        .f(bc1 as f32)
        .f(bc2 as f32)
        .f(params.grad_scale)
        .u(u32::from(inv))
        .u(u32::from(found))
        .u(u32_of(r.start)?))
}

/// optimizer.wgsl's `adamw_master` for a compute copy of dtype `copy`; `subst` holds its
/// `STORE` conversion.
fn adamw_master_kernel<'a>(copy: DType, subst: &'a [(&'a str, &'a str)]) -> Kernel<'a> {
    Kernel {
        family: Family::Optimizer,
        name: "adamw_master",
        entry: if copy == DType::F32 {
            "single"
        } else {
            "pairs"
        },
        subst,
    }
}

pub(crate) fn warm_up(b: &WgpuBackend) -> Result<()> {
    let i = &b.inner;
    for f in Family::ALL {
        if f == Family::Cast {
            continue;
        }
        for name in f.kernels() {
            if f == Family::Optimizer && name == "adamw_master" {
                continue; // takes a substitution; warmed below
            }
            i.pipeline(&Kernel::new(f, name))?;
        }
    }
    for copy in [DType::F16, DType::BF16, DType::F32] {
        let subst = [("STORE", store_expr(copy))];
        i.pipeline(&adamw_master_kernel(copy, &subst))?;
    }
    for (s, d) in [
        (DType::F16, DType::F32),
        (DType::F32, DType::F16),
        (DType::BF16, DType::F32),
        (DType::F32, DType::BF16),
    ] {
        let subst = [("LOAD", load_expr(s)), ("STORE", store_expr(d))];
        let entry = if d.size_in_bytes() == 2 {
            "to16"
        } else {
            "to32"
        };
        i.pipeline(&Kernel {
            family: Family::Cast,
            name: "cast",
            entry,
            subst: &subst,
        })?;
    }
    Ok(())
}

impl Backend for WgpuBackend {
    type Buffer = WgpuBuffer;

    fn info(&self) -> BackendInfo {
        BackendInfo {
            name: BACKEND,
            device: self.inner.report.to_string(),
            dtypes: vec![DType::F32, DType::F16, DType::BF16],
        }
    }

    /// The float dtypes kernels compute in. i32/u32 are accepted wherever an op takes
    /// indices or moves memory (fill, copy, cast), as the trait says.
    fn supports(&self, dtype: DType) -> bool {
        matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
    }

    fn dtype(&self, buf: &WgpuBuffer) -> DType {
        buf.dtype
    }

    fn len(&self, buf: &WgpuBuffer) -> usize {
        buf.len
    }

    fn location(&self) -> DeviceLocation {
        DeviceLocation::new("wgpu", self.inner.ordinal)
    }

    fn zeros(&self, dtype: DType, len: usize) -> Result<WgpuBuffer> {
        self.inner.alloc(dtype, len)
    }

    /// The same as [`Backend::zeros`]: WebGPU guarantees that a new buffer reads as
    /// zeros (wgpu clears it lazily, before its first use, unless it can see a full
    /// write first), so there is no cheaper buffer to hand out and none that is unsound.
    fn alloc(&self, dtype: DType, len: usize) -> Result<WgpuBuffer> {
        self.inner.alloc(dtype, len)
    }

    /// On the same device, a buffer-to-buffer copy on the queue; between devices,
    /// through the host (wgpu devices share no memory).
    async fn copy_to_device(&self, src: &WgpuBuffer, dst: &Self) -> Result<WgpuBuffer> {
        if self.same_device(dst) {
            let out = self.inner.alloc(src.dtype, src.len)?;
            self.inner.copy(&src.buf, &out.buf, src.size_in_bytes())?;
            return Ok(out);
        }
        let host = self.inner.read(src).await?;
        dst.inner.upload(&host)
    }

    fn memory_stats(&self) -> MemoryStats {
        self.inner.memory.stats()
    }

    fn reset_peak_memory(&self) {
        self.inner.memory.reset_peak();
    }

    fn upload(&self, data: &HostData) -> Result<WgpuBuffer> {
        if self.staged(data) {
            self.inner.upload_staged(data)
        } else {
            self.inner.upload(data)
        }
    }

    fn write(&self, buf: &mut WgpuBuffer, data: &HostData) -> Result<()> {
        let op = "write";
        Error::check_dtype(op, buf.dtype, data.dtype())?;
        if data.len() != buf.len {
            return Err(Error::shape(
                op,
                format!("buffer has {} elements, data has {}", buf.len, data.len()),
            ));
        }
        if self.staged(data) {
            self.inner.write_staged(buf, data)
        } else {
            self.inner.write(buf, data)
        }
    }

    async fn read(&self, buf: &WgpuBuffer) -> Result<HostData> {
        self.inner.read(buf).await
    }

    async fn synchronize(&self) -> Result<()> {
        self.inner.synchronize().await
    }

    fn fill(&self, buf: &mut WgpuBuffer, value: f64) -> Result<()> {
        let bits = fill_bits(buf.dtype, value)?;
        let words = (buf.buf.size() / 4) as usize;
        let k = Kernel::new(Family::Elementwise, "fill");
        self.flat_kernel(
            &k,
            &Params::new().u(u32_of(words)?).u(bits),
            words,
            &[&buf.buf],
        )
    }

    fn copy_strided(
        &self,
        src: &WgpuBuffer,
        src_layout: &Layout,
        dst: &mut WgpuBuffer,
        dst_layout: &Layout,
    ) -> Result<()> {
        let op = "copy_strided";
        Error::check_dtype(op, src.dtype, dst.dtype)?;
        if src.dtype == DType::F64 {
            return Err(no_f64(op));
        }
        check_layout(op, src_layout, src.len)?;
        check_layout(op, dst_layout, dst.len)?;
        let n = src_layout.shape.elem_count();
        if dst_layout.shape.elem_count() != n {
            return Err(Error::shape(
                op,
                format!(
                    "source view {} and destination view {} differ in size",
                    src_layout.shape, dst_layout.shape
                ),
            ));
        }
        if n == 0 {
            return Ok(());
        }
        let p = Params::new()
            .u(u32_of(n)?)
            .u(src_layout.shape.rank() as u32)
            .u(dst_layout.shape.rank() as u32)
            .u(u32_of(src_layout.offset)?)
            .u(u32_of(dst_layout.offset)?)
            .align16();
        let p = push_dims(p, src_layout.shape.dims())?;
        let p = push_dims(p, &src_layout.strides)?;
        let p = push_dims(p, dst_layout.shape.dims())?;
        let p = push_dims(p, &dst_layout.strides)?;
        let k = Kernel::new(Family::Elementwise, "copy_strided");
        if src.dtype.size_in_bytes() == 4 {
            return self.flat_kernel(&k, &p, n, &[&src.buf, &dst.buf]);
        }
        // 16-bit: through f32, which is exact both ways.
        let ws = self.widen(op, src)?;
        let wd = self.widen_out(op, dst, true)?;
        self.flat_kernel(&k, &p, n, &[&ws.buf, &wd.buf])?;
        self.narrow(wd, dst)
    }

    fn cast(&self, src: &WgpuBuffer, dst: &mut WgpuBuffer) -> Result<()> {
        let op = "cast";
        if src.dtype == DType::F64 || dst.dtype == DType::F64 {
            return Err(no_f64(op));
        }
        Error::check_len(op, dst.len, src.len)?;
        self.cast_raw(&src.buf, src.dtype, &dst.buf, dst.dtype, dst.len)
    }

    fn gemm(
        &self,
        spec: &GemmSpec,
        a: &WgpuBuffer,
        b: &WgpuBuffer,
        c: &mut WgpuBuffer,
    ) -> Result<()> {
        let kernel = match self.matmul {
            Some(k) if k.supports(spec) => k,
            _ => MatmulKernel::best_for(spec),
        };
        self.gemm_impl(kernel, spec, a, b, c)
    }

    fn unary(&self, op: UnaryOp, x: &WgpuBuffer, out: &mut WgpuBuffer) -> Result<()> {
        let name = "unary";
        check_float(name, x.dtype)?;
        Error::check_dtype(name, x.dtype, out.dtype)?;
        let n = out.len;
        Error::check_len(name, n, x.len)?;
        if n == 0 {
            return Ok(());
        }
        let (code, a, b) = unary_code(op);
        let wx = self.widen(name, x)?;
        let wy = self.widen_out(name, out, false)?;
        let p = Params::new().u(u32_of(n)?).u(code).f(a).f(b);
        self.flat_kernel(
            &Kernel::new(Family::Elementwise, "unary"),
            &p,
            n,
            &[&wx.buf, &wy.buf],
        )?;
        self.narrow(wy, out)
    }

    fn binary(
        &self,
        op: BinaryOp,
        a: &WgpuBuffer,
        a_layout: &Layout,
        b: &WgpuBuffer,
        b_layout: &Layout,
        out: &mut WgpuBuffer,
    ) -> Result<()> {
        let name = "binary";
        check_float(name, a.dtype)?;
        Error::check_dtype(name, a.dtype, b.dtype)?;
        Error::check_dtype(name, a.dtype, out.dtype)?;
        check_layout(name, a_layout, a.len)?;
        check_layout(name, b_layout, b.len)?;
        if a_layout.shape != b_layout.shape {
            return Err(Error::shape(
                name,
                format!(
                    "layouts must have the output's shape: {} vs {}",
                    a_layout.shape, b_layout.shape
                ),
            ));
        }
        let n = a_layout.shape.elem_count();
        Error::check_len(name, n, out.len)?;
        if n == 0 {
            return Ok(());
        }
        let p = Params::new()
            .u(u32_of(n)?)
            .u(a_layout.shape.rank() as u32)
            .u(binary_code(op))
            .u(u32_of(a_layout.offset)?)
            .u(u32_of(b_layout.offset)?)
            .align16();
        let p = push_dims(p, a_layout.shape.dims())?;
        let p = push_dims(p, &a_layout.strides)?;
        let p = push_dims(p, &b_layout.strides)?;
        let wa = self.widen(name, a)?;
        let wb = self.widen(name, b)?;
        let wo = self.widen_out(name, out, n < out.len)?;
        self.flat_kernel(
            &Kernel::new(Family::Elementwise, "binary"),
            &p,
            n,
            &[&wa.buf, &wb.buf, &wo.buf],
        )?;
        self.narrow(wo, out)
    }

    fn axpy(
        &self,
        alpha: f32,
        x: &WgpuBuffer,
        y: &mut WgpuBuffer,
        y_offset: Option<usize>,
    ) -> Result<()> {
        let name = "axpy";
        check_float(name, x.dtype)?;
        Error::check_dtype(name, x.dtype, y.dtype)?;
        let r = brrr_backend::axpy_range(name, x.len, y.len, y_offset)?;
        let n = r.len();
        if n == 0 {
            return Ok(());
        }
        u32_of(r.end)?;
        let wx = self.widen(name, x)?;
        let wy = self.widen_out(name, y, true)?;
        let p = Params::new()
            .u(u32_of(n)?)
            .f(alpha)
            .u(u32_of(r.start)?)
            .u(0);
        self.flat_kernel(
            &Kernel::new(Family::Elementwise, "axpy"),
            &p,
            n,
            &[&wx.buf, &wy.buf],
        )?;
        self.narrow(wy, y)
    }

    fn reduce(
        &self,
        op: ReduceOp,
        x: &WgpuBuffer,
        outer: usize,
        n: usize,
        inner: usize,
        out: &mut WgpuBuffer,
    ) -> Result<()> {
        let name = "reduce";
        check_float(name, x.dtype)?;
        Error::check_dtype(name, x.dtype, out.dtype)?;
        Error::check_len(name, outer * n * inner, x.len)?;
        let outs = outer * inner;
        Error::check_len(name, outs, out.len)?;
        if outs == 0 {
            return Ok(());
        }
        u32_of(outer * n * inner)?;
        let wx = self.widen(name, x)?;
        let wo = self.widen_out(name, out, outs < out.len)?;
        self.reduce_f32(reduce_code(op), &wx.buf, [outer, n, inner], &wo.buf)?;
        self.narrow(wo, out)
    }

    fn softmax(&self, spec: &SoftmaxSpec, x: &WgpuBuffer, y: &mut WgpuBuffer) -> Result<()> {
        let name = "softmax";
        check_float(name, x.dtype)?;
        Error::check_dtype(name, x.dtype, y.dtype)?;
        let total = spec.rows * spec.cols;
        Error::check_len(name, total, x.len)?;
        Error::check_len(name, total, y.len)?;
        if total == 0 {
            return Ok(());
        }
        u32_of(total)?;
        let p = Params::new()
            .u(u32_of(spec.rows)?)
            .u(u32_of(spec.cols)?)
            .f(spec.scale)
            .u(u32::from(spec.causal));
        let wx = self.widen(name, x)?;
        let wy = self.widen_out(name, y, total < y.len)?;
        self.row_kernel(
            &Kernel::new(Family::Softmax, "forward"),
            &p,
            spec.rows,
            &[&wx.buf, &wy.buf],
        )?;
        self.narrow(wy, y)
    }

    fn softmax_segmented(
        &self,
        spec: &SoftmaxSpec,
        mask: &SegmentMask,
        segments: &WgpuBuffer,
        x: &WgpuBuffer,
        y: &mut WgpuBuffer,
    ) -> Result<()> {
        let name = "softmax_segmented";
        let seqs = mask.sequences(spec)?;
        check_float(name, x.dtype)?;
        Error::check_dtype(name, x.dtype, y.dtype)?;
        Error::check_dtype(name, DType::U32, segments.dtype)?;
        let total = spec.rows * spec.cols;
        Error::check_len(name, total, x.len)?;
        Error::check_len(name, total, y.len)?;
        Error::check_len(name, seqs * spec.cols, segments.len)?;
        u32_of(total)?;
        let p = Params::new()
            .u(u32_of(spec.rows)?)
            .u(u32_of(spec.cols)?)
            .f(spec.scale)
            .u(u32_of(mask.heads)?);
        let wx = self.widen(name, x)?;
        let wy = self.widen_out(name, y, total < y.len)?;
        self.row_kernel(
            &Kernel::new(Family::Softmax, "forward_segmented"),
            &p,
            spec.rows,
            &[&segments.buf, &wx.buf, &wy.buf],
        )?;
        self.narrow(wy, y)
    }

    fn softmax_backward(
        &self,
        spec: &SoftmaxSpec,
        y: &WgpuBuffer,
        dy: &WgpuBuffer,
        dx: &mut WgpuBuffer,
    ) -> Result<()> {
        let name = "softmax_backward";
        check_float(name, y.dtype)?;
        Error::check_dtype(name, y.dtype, dy.dtype)?;
        Error::check_dtype(name, y.dtype, dx.dtype)?;
        let total = spec.rows * spec.cols;
        Error::check_len(name, total, y.len)?;
        Error::check_len(name, total, dy.len)?;
        Error::check_len(name, total, dx.len)?;
        if total == 0 {
            return Ok(());
        }
        u32_of(total)?;
        let p = Params::new()
            .u(u32_of(spec.rows)?)
            .u(u32_of(spec.cols)?)
            .f(spec.scale)
            .u(u32::from(spec.causal));
        let wy = self.widen(name, y)?;
        let wdy = self.widen(name, dy)?;
        let wdx = self.widen_out(name, dx, total < dx.len)?;
        self.row_kernel(
            &Kernel::new(Family::Softmax, "backward"),
            &p,
            spec.rows,
            &[&wy.buf, &wdy.buf, &wdx.buf],
        )?;
        self.narrow(wdx, dx)
    }

    fn layernorm(
        &self,
        spec: &LayerNormSpec,
        x: &WgpuBuffer,
        gamma: &WgpuBuffer,
        beta: &WgpuBuffer,
        y: &mut WgpuBuffer,
        mean: &mut WgpuBuffer,
        rstd: &mut WgpuBuffer,
    ) -> Result<()> {
        let name = "layernorm";
        check_float(name, x.dtype)?;
        for b in [gamma, beta, &*y] {
            Error::check_dtype(name, x.dtype, b.dtype)?;
        }
        let total = spec.rows * spec.cols;
        Error::check_len(name, total, x.len)?;
        Error::check_len(name, total, y.len)?;
        let (g_at, b_at) = spec.param_ranges(name)?;
        Error::check_len(name, g_at.end, gamma.len)?;
        Error::check_len(name, b_at.end, beta.len)?;
        check_f32(name, mean, "mean", spec.rows)?;
        check_f32(name, rstd, "rstd", spec.rows)?;
        if total == 0 {
            return Ok(());
        }
        u32_of(total)?;
        let p = layernorm_params(spec, &g_at, &b_at)?;
        let wx = self.widen(name, x)?;
        let wg = self.widen(name, gamma)?;
        let wb = self.widen(name, beta)?;
        let wy = self.widen_out(name, y, total < y.len)?;
        self.row_kernel(
            &Kernel::new(Family::LayerNorm, "forward"),
            &p,
            spec.rows,
            &[&wx.buf, &wg.buf, &wb.buf, &wy.buf, &mean.buf, &rstd.buf],
        )?;
        self.narrow(wy, y)
    }

    fn layernorm_backward(
        &self,
        spec: &LayerNormSpec,
        dy: &WgpuBuffer,
        x: &WgpuBuffer,
        gamma: &WgpuBuffer,
        mean: &WgpuBuffer,
        rstd: &WgpuBuffer,
        dx: &mut WgpuBuffer,
        dgamma: &mut WgpuBuffer,
        dbeta: &mut WgpuBuffer,
    ) -> Result<()> {
        let name = "layernorm_backward";
        check_float(name, x.dtype)?;
        for b in [dy, gamma, &*dx, &*dgamma, &*dbeta] {
            Error::check_dtype(name, x.dtype, b.dtype)?;
        }
        let total = spec.rows * spec.cols;
        Error::check_len(name, total, x.len)?;
        Error::check_len(name, total, dy.len)?;
        Error::check_len(name, total, dx.len)?;
        let (g_at, b_at) = spec.param_ranges(name)?;
        Error::check_len(name, g_at.end, gamma.len)?;
        Error::check_len(name, g_at.end, dgamma.len)?;
        Error::check_len(name, b_at.end, dbeta.len)?;
        check_f32(name, mean, "mean", spec.rows)?;
        check_f32(name, rstd, "rstd", spec.rows)?;
        if total == 0 {
            return Ok(());
        }
        u32_of(total)?;
        let p = layernorm_params(spec, &g_at, &b_at)?;
        let wdy = self.widen(name, dy)?;
        let wx = self.widen(name, x)?;
        let wg = self.widen(name, gamma)?;
        let wdx = self.widen_out(name, dx, total < dx.len)?;
        self.row_kernel(
            &Kernel::new(Family::LayerNorm, "backward_dx"),
            &p,
            spec.rows,
            &[&wdy.buf, &wx.buf, &wg.buf, &mean.buf, &rstd.buf, &wdx.buf],
        )?;
        self.narrow(wdx, dx)?;
        let wdg = self.widen_out(name, dgamma, true)?;
        let wdb = self.widen_out(name, dbeta, true)?;
        self.flat_kernel(
            &Kernel::new(Family::LayerNorm, "backward_params"),
            &p,
            spec.cols,
            &[&wdy.buf, &wx.buf, &mean.buf, &rstd.buf, &wdg.buf, &wdb.buf],
        )?;
        self.narrow(wdg, dgamma)?;
        self.narrow(wdb, dbeta)
    }

    fn gelu(&self, x: &WgpuBuffer, y: &mut WgpuBuffer) -> Result<()> {
        let name = "gelu";
        check_float(name, x.dtype)?;
        Error::check_dtype(name, x.dtype, y.dtype)?;
        let n = y.len;
        Error::check_len(name, n, x.len)?;
        if n == 0 {
            return Ok(());
        }
        let wx = self.widen(name, x)?;
        let wy = self.widen_out(name, y, false)?;
        self.flat_kernel(
            &Kernel::new(Family::Elementwise, "gelu"),
            &Params::new().u(u32_of(n)?),
            n,
            &[&wx.buf, &wy.buf],
        )?;
        self.narrow(wy, y)
    }

    fn gelu_backward(&self, x: &WgpuBuffer, dy: &WgpuBuffer, dx: &mut WgpuBuffer) -> Result<()> {
        let name = "gelu_backward";
        check_float(name, x.dtype)?;
        Error::check_dtype(name, x.dtype, dy.dtype)?;
        Error::check_dtype(name, x.dtype, dx.dtype)?;
        let n = dx.len;
        Error::check_len(name, n, x.len)?;
        Error::check_len(name, n, dy.len)?;
        if n == 0 {
            return Ok(());
        }
        let wx = self.widen(name, x)?;
        let wdy = self.widen(name, dy)?;
        let wdx = self.widen_out(name, dx, false)?;
        self.flat_kernel(
            &Kernel::new(Family::Elementwise, "gelu_backward"),
            &Params::new().u(u32_of(n)?),
            n,
            &[&wx.buf, &wdy.buf, &wdx.buf],
        )?;
        self.narrow(wdx, dx)
    }

    fn embedding(
        &self,
        spec: &EmbeddingSpec,
        ids: &WgpuBuffer,
        table: &WgpuBuffer,
        out: &mut WgpuBuffer,
    ) -> Result<()> {
        let name = "embedding";
        check_index(name, ids, "ids")?;
        check_float(name, table.dtype)?;
        Error::check_dtype(name, table.dtype, out.dtype)?;
        let Some((p, total)) = embedding_params(name, spec, ids.len, table.len, out.len)? else {
            return Ok(());
        };
        let wt = self.widen(name, table)?;
        let wo = self.widen_out(name, out, total < out.len)?;
        self.flat_kernel(
            &Kernel::new(Family::Embed, "forward"),
            &p,
            total,
            &[&ids.buf, &wt.buf, &wo.buf],
        )?;
        self.narrow(wo, out)
    }

    fn scatter_rows(
        &self,
        spec: &EmbeddingSpec,
        ids: &WgpuBuffer,
        rows: &WgpuBuffer,
        table: &mut WgpuBuffer,
    ) -> Result<()> {
        let name = "scatter_rows";
        check_index(name, ids, "ids")?;
        check_float(name, rows.dtype)?;
        Error::check_dtype(name, rows.dtype, table.dtype)?;
        let Some((p, total)) = embedding_params(name, spec, ids.len, table.len, rows.len)? else {
            return Ok(());
        };
        let wr = self.widen(name, rows)?;
        // A 16-bit table is widened with its contents: the rows no id names stay.
        let wt = self.widen_out(name, table, true)?;
        self.flat_kernel(
            &Kernel::new(Family::Embed, "scatter"),
            &p,
            total,
            &[&ids.buf, &wr.buf, &wt.buf],
        )?;
        self.narrow(wt, table)
    }

    fn embedding_backward(
        &self,
        spec: &EmbeddingSpec,
        ids: &WgpuBuffer,
        dout: &WgpuBuffer,
        dtable: &mut WgpuBuffer,
    ) -> Result<()> {
        let name = "embedding_backward";
        check_index(name, ids, "ids")?;
        check_float(name, dout.dtype)?;
        Error::check_dtype(name, dout.dtype, dtable.dtype)?;
        let Some((p, _)) = embedding_params(name, spec, ids.len, dtable.len, dout.len)? else {
            return Ok(());
        };
        let wd = self.widen(name, dout)?;
        let wt = self.widen_out(name, dtable, true)?;
        self.flat_kernel(
            &Kernel::new(Family::Embed, "backward"),
            &p,
            spec.dim,
            &[&ids.buf, &wd.buf, &wt.buf],
        )?;
        self.narrow(wt, dtable)
    }

    fn cross_entropy(
        &self,
        logits: &WgpuBuffer,
        targets: &WgpuBuffer,
        vocab: usize,
        losses: &mut WgpuBuffer,
    ) -> Result<()> {
        let name = "cross_entropy";
        check_float(name, logits.dtype)?;
        check_index(name, targets, "targets")?;
        let rows = targets.len;
        Error::check_len(name, rows * vocab, logits.len)?;
        check_f32(name, losses, "losses", rows)?;
        if rows == 0 {
            return Ok(());
        }
        if vocab == 0 {
            return Err(Error::invalid(name, "vocab must be positive"));
        }
        u32_of(rows * vocab)?;
        let p = Params::new().u(u32_of(rows)?).u(u32_of(vocab)?);
        let wl = self.widen(name, logits)?;
        self.row_kernel(
            &Kernel::new(Family::Loss, "forward"),
            &p,
            rows,
            &[&wl.buf, &targets.buf, &losses.buf],
        )
    }

    fn cross_entropy_backward(
        &self,
        logits: &WgpuBuffer,
        targets: &WgpuBuffer,
        dlosses: &WgpuBuffer,
        vocab: usize,
        dlogits: &mut WgpuBuffer,
    ) -> Result<()> {
        let name = "cross_entropy_backward";
        check_float(name, logits.dtype)?;
        Error::check_dtype(name, logits.dtype, dlogits.dtype)?;
        check_index(name, targets, "targets")?;
        let rows = targets.len;
        Error::check_len(name, rows * vocab, logits.len)?;
        Error::check_len(name, rows * vocab, dlogits.len)?;
        check_f32(name, dlosses, "dlosses", rows)?;
        if rows == 0 {
            return Ok(());
        }
        if vocab == 0 {
            return Err(Error::invalid(name, "vocab must be positive"));
        }
        u32_of(rows * vocab)?;
        let p = Params::new().u(u32_of(rows)?).u(u32_of(vocab)?);
        let wl = self.widen(name, logits)?;
        let wd = self.widen_out(name, dlogits, rows * vocab < dlogits.len)?;
        self.row_kernel(
            &Kernel::new(Family::Loss, "backward"),
            &p,
            rows,
            &[&wl.buf, &targets.buf, &dlosses.buf, &wd.buf],
        )?;
        self.narrow(wd, dlogits)
    }

    fn adamw(
        &self,
        params: &AdamWParams,
        param: &mut WgpuBuffer,
        grad: &WgpuBuffer,
        m: &mut WgpuBuffer,
        v: &mut WgpuBuffer,
        inv_scale: Option<&WgpuBuffer>,
        found_inf: Option<&WgpuBuffer>,
    ) -> Result<()> {
        let name = "adamw";
        check_float(name, param.dtype)?;
        check_float(name, grad.dtype)?;
        let r = params.elements(name, param.len)?;
        let (n, end) = (r.len(), r.end);
        Error::check_len(name, end, param.len)?;
        Error::check_len(name, end, grad.len)?;
        check_f32(name, m, "m", end)?;
        check_f32(name, v, "v", end)?;
        check_step_scalars(name, params, inv_scale, found_inf)?;
        if n == 0 {
            return Ok(());
        }
        u32_of(end)?;
        let p = adamw_params(params, r, inv_scale.is_some(), found_inf.is_some())?;
        let wg = self.widen(name, grad)?;
        let wp = self.widen_out(name, param, true)?;
        let s = inv_scale.map_or(&self.inner.dummy[0], |b| &b.buf);
        let f = found_inf.map_or(&self.inner.dummy[1], |b| &b.buf);
        self.flat_kernel(
            &Kernel::new(Family::Optimizer, "adamw"),
            &p,
            n,
            &[&wg.buf, s, f, &wp.buf, &m.buf, &v.buf],
        )?;
        self.narrow(wp, param)
    }

    fn adamw_8bit(
        &self,
        params: &AdamWParams,
        param: &mut WgpuBuffer,
        grad: &WgpuBuffer,
        state: &mut QuantizedMoments<'_, WgpuBuffer>,
        inv_scale: Option<&WgpuBuffer>,
        found_inf: Option<&WgpuBuffer>,
    ) -> Result<()> {
        let name = "adamw_8bit";
        check_float(name, param.dtype)?;
        if param.dtype != grad.dtype {
            return Err(Error::invalid(
                name,
                format!("param {} and grad {} differ", param.dtype, grad.dtype),
            ));
        }
        let r = params.elements(name, param.len)?;
        let (n, end) = (r.len(), r.end);
        Error::check_len(name, end, param.len)?;
        Error::check_len(name, end, grad.len)?;
        if state.codes.dtype != DType::U32 {
            return Err(Error::invalid(
                name,
                format!("codes must be u32, got {}", state.codes.dtype),
            ));
        }
        Error::check_len(name, 2 * quant8::code_words(n), state.codes.len)?;
        check_f32(name, state.absmax, "absmax", 2 * quant8::blocks(n))?;
        check_f32(name, state.maps, "maps", 512)?;
        check_step_scalars(name, params, inv_scale, found_inf)?;
        if n == 0 {
            return Ok(());
        }
        u32_of(end)?;
        let p = adamw_params(params, r, inv_scale.is_some(), found_inf.is_some())?;
        let wg = self.widen(name, grad)?;
        let wp = self.widen_out(name, param, true)?;
        let s = inv_scale.map_or(&self.inner.dummy[0], |b| &b.buf);
        let f = found_inf.map_or(&self.inner.dummy[1], |b| &b.buf);
        // One workgroup per block of `Q8_BLOCK` values.
        let grid = self.inner.grid(quant8::blocks(n))?;
        self.inner.dispatch(
            &Kernel::new(Family::Optimizer, "adamw_8bit"),
            &p,
            &[
                &wg.buf,
                s,
                f,
                &state.maps.buf,
                &wp.buf,
                &state.codes.buf,
                &state.absmax.buf,
            ],
            grid,
        )?;
        self.narrow(wp, param)
    }

    fn adamw_master(
        &self,
        params: &AdamWParams,
        master: &mut WgpuBuffer,
        param_copy: &mut WgpuBuffer,
        grad: &WgpuBuffer,
        m: &mut WgpuBuffer,
        v: &mut WgpuBuffer,
        inv_scale: Option<&WgpuBuffer>,
        found_inf: Option<&WgpuBuffer>,
    ) -> Result<()> {
        let name = "adamw_master";
        let r = params.elements(name, master.len)?;
        let (n, end) = (r.len(), r.end);
        check_f32(name, master, "master", end)?;
        check_f32(name, m, "m", end)?;
        check_f32(name, v, "v", end)?;
        let copy_dt = param_copy.dtype;
        if !matches!(copy_dt, DType::F16 | DType::BF16 | DType::F32)
            || !(grad.dtype == DType::F32 || grad.dtype == copy_dt)
        {
            return Err(Error::invalid(
                name,
                format!(
                    "the compute copy must be f16, bf16 or f32 and the gradient f32 or the \
                     copy's dtype; got copy {copy_dt} and gradient {}",
                    grad.dtype
                ),
            ));
        }
        Error::check_len(name, end, param_copy.len)?;
        Error::check_len(name, end, grad.len)?;
        if copy_dt != DType::F32 && !r.start.is_multiple_of(2) {
            // A 16-bit copy is written a u32 word (two elements) per invocation.
            return Err(Error::invalid(
                name,
                format!(
                    "a {copy_dt} compute copy's range must start at an even element on wgpu, \
                     got offset {}",
                    r.start
                ),
            ));
        }
        check_step_scalars(name, params, inv_scale, found_inf)?;
        if n == 0 {
            return Ok(());
        }
        u32_of(end)?;
        let p = adamw_params(params, r, inv_scale.is_some(), found_inf.is_some())?;
        let wg = self.widen(name, grad)?;
        let s = inv_scale.map_or(&self.inner.dummy[0], |b| &b.buf);
        let f = found_inf.map_or(&self.inner.dummy[1], |b| &b.buf);
        let subst = [("STORE", store_expr(copy_dt))];
        let items = if copy_dt == DType::F32 {
            n
        } else {
            n.div_ceil(2)
        };
        self.flat_kernel(
            &adamw_master_kernel(copy_dt, &subst),
            &p,
            items,
            &[&wg.buf, s, f, &master.buf, &m.buf, &v.buf, &param_copy.buf],
        )
    }

    fn clip_coefficient(
        &self,
        sumsq: &WgpuBuffer,
        max_norm: f64,
        norm: &mut WgpuBuffer,
        coef: &mut WgpuBuffer,
    ) -> Result<()> {
        let name = "clip_coefficient";
        if max_norm.is_nan() || max_norm <= 0.0 {
            return Err(Error::invalid(
                name,
                format!("max_norm must be positive, got {max_norm}"),
            ));
        }
        check_f32(name, sumsq, "sumsq", 1)?;
        check_f32(name, norm, "norm", 1)?;
        check_f32(name, coef, "coef", 1)?;
        // WGSL has no f64: the kernel computes in f32 (see optimizer.wgsl).
        let p = Params::new().f(max_norm as f32).u(0).u(0).u(0);
        self.inner.dispatch(
            &Kernel::new(Family::Optimizer, "clip_coefficient"),
            &p,
            &[&sumsq.buf, &norm.buf, &coef.buf],
            [1, 1, 1],
        )
    }

    fn unscale_check_finite(
        &self,
        grads: &mut WgpuBuffer,
        inv_scale: &WgpuBuffer,
        found_inf: &mut WgpuBuffer,
    ) -> Result<()> {
        let name = "unscale_check_finite";
        check_float(name, grads.dtype)?;
        check_f32(name, inv_scale, "inv_scale", 1)?;
        check_f32(name, found_inf, "found_inf", 1)?;
        let n = grads.len;
        if n == 0 {
            return Ok(());
        }
        let narrow = match grads.dtype {
            DType::F16 => 1,
            DType::BF16 => 2,
            _ => 0,
        };
        let wg = self.widen_out(name, grads, true)?;
        self.flat_kernel(
            &Kernel::new(Family::Amp, "unscale_check_finite"),
            &Params::new().u(u32_of(n)?).u(narrow),
            n,
            &[&inv_scale.buf, &wg.buf, &found_inf.buf],
        )?;
        self.narrow(wg, grads)
    }

    fn update_loss_scale(
        &self,
        params: &ScaleUpdateParams,
        scale: &mut WgpuBuffer,
        growth_tracker: &mut WgpuBuffer,
        found_inf: &WgpuBuffer,
    ) -> Result<()> {
        let name = "update_loss_scale";
        check_f32(name, scale, "scale", 1)?;
        check_f32(name, found_inf, "found_inf", 1)?;
        if growth_tracker.dtype != DType::I32 {
            return Err(Error::invalid(
                name,
                format!("growth_tracker must be i32, got {}", growth_tracker.dtype),
            ));
        }
        Error::check_len(name, params.tracker_len(), growth_tracker.len)?;
        let interval = i32::try_from(params.growth_interval).unwrap_or(i32::MAX);
        let hysteresis = i32::try_from(params.hysteresis).unwrap_or(i32::MAX);
        let p = Params::new()
            .f(params.growth_factor)
            .f(params.backoff_factor)
            .i(interval)
            .i(hysteresis)
            .f(params.min_scale)
            .u(0)
            .u(0)
            .u(0);
        self.inner.dispatch(
            &Kernel::new(Family::Amp, "update_scale"),
            &p,
            &[&found_inf.buf, &scale.buf, &growth_tracker.buf],
            [1, 1, 1],
        )
    }
}

/// The layernorm kernels' uniform: sizes, eps and where gamma and beta (and their
/// gradients) start; padded to 32 bytes.
fn layernorm_params(
    spec: &LayerNormSpec,
    gamma: &std::ops::Range<usize>,
    beta: &std::ops::Range<usize>,
) -> Result<Params> {
    u32_of(gamma.end)?;
    u32_of(beta.end)?;
    Ok(Params::new()
        .u(u32_of(spec.rows)?)
        .u(u32_of(spec.cols)?)
        .f(spec.eps)
        .u(u32_of(gamma.start)?)
        .u(u32_of(beta.start)?)
        .u(0)
        .u(0)
        .u(0))
}

/// The embedding kernels' uniform (ids, dim, the table's rows and where it starts),
/// after checking the table's range in a buffer of `table_len` elements and that the
/// `[ids, dim]` rows fit in `rows_len` (the output, or the incoming gradient). Also
/// returns `ids × dim`; `None` when there is nothing to do.
fn embedding_params(
    name: &'static str,
    spec: &EmbeddingSpec,
    ids: usize,
    table_len: usize,
    rows_len: usize,
) -> Result<Option<(Params, usize)>> {
    let (at, rows) = spec.table_range(name, table_len)?;
    let total = ids
        .checked_mul(spec.dim)
        .ok_or_else(|| Error::invalid(name, "ids × dim overflows usize"))?;
    Error::check_len(name, total, rows_len)?;
    if total == 0 {
        return Ok(None);
    }
    u32_of(total)?;
    u32_of(at.end)?;
    let p = Params::new()
        .u(u32_of(ids)?)
        .u(u32_of(spec.dim)?)
        .u(u32_of(rows)?)
        .u(u32_of(at.start)?);
    Ok(Some((p, total)))
}
