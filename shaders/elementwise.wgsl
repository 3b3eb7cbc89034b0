// elementwise.wgsl — one invocation per output element.
//
// Element-wise kernels move every byte once and do a handful of flops on it: their
// arithmetic intensity is below 1 flop/byte, so on any GPU they are bound by memory
// bandwidth once the tensor is big, and by launch overhead while it is small (the
// `brrr bench overhead` table shows where one regime turns into the other). Fusing them
// into their neighbours (GELU into the matmul epilogue, say) is what removes that cost.
//
// Each `// ==== kernel: NAME ====` section below is a complete shader once `common.wgsl`
// is prepended; the Rust side picks a section by name.

// ==== kernel: unary ====
// y[i] = op(x[i]). The op is a uniform, so every invocation takes the same branch and the
// switch costs nothing but a few instructions.
struct Params {
    n: u32,
    op: u32,
    a: f32,
    b: f32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

// tanh through exp overflows for |v| > 44; tanh(±9) is already ±1 in f32.
fn tanh_safe(v: f32) -> f32 {
    return tanh(clamp(v, -9.0, 9.0));
}

fn sigmoid(v: f32) -> f32 {
    if (v >= 0.0) {
        return 1.0 / (1.0 + exp(-v));
    }
    let e = exp(v);
    return e / (1.0 + e);
}

fn apply(v: f32) -> f32 {
    switch p.op {
        case 0u: { return -v; }
        case 1u: { return exp(v); }
        case 2u: { return log(v); }
        case 3u: { return sqrt(v); }
        case 4u: { return 1.0 / sqrt(v); }
        case 5u: { return abs(v); }
        case 6u: { return v * v; }
        case 7u: { return 1.0 / v; }
        case 8u: { return max(v, 0.0); }
        case 9u: { return tanh_safe(v); }
        case 10u: { return sigmoid(v); }
        case 11u: { return v * p.a + p.b; }
        default: { return min(max(v, p.a), p.b); }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= p.n) {
        return;
    }
    y[i] = apply(x[i]);
}

// ==== kernel: binary ====
// out[i] = a[..] op b[..] where a and b are strided views with out's shape. Broadcasting
// is a stride of 0: the same element is read again, no copy is made. The flat index is
// unravelled into coordinates, innermost dimension first.
struct Params {
    n: u32,
    rank: u32,
    op: u32,
    a_off: u32,
    b_off: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    shape: array<vec4<u32>, 2>,
    a_strides: array<vec4<u32>, 2>,
    b_strides: array<vec4<u32>, 2>,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

fn apply(u: f32, v: f32) -> f32 {
    switch p.op {
        case 0u: { return u + v; }
        case 1u: { return u - v; }
        case 2u: { return u * v; }
        case 3u: { return u / v; }
        case 4u: { return max(u, v); }
        default: { return min(u, v); }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= p.n) {
        return;
    }
    var rem = i;
    var ia = p.a_off;
    var ib = p.b_off;
    for (var d = i32(p.rank) - 1; d >= 0; d = d - 1) {
        let du = u32(d);
        let size = p.shape[du >> 2u][du & 3u];
        let c = rem % size;
        rem = rem / size;
        ia = ia + c * p.a_strides[du >> 2u][du & 3u];
        ib = ib + c * p.b_strides[du >> 2u][du & 3u];
    }
    out[i] = apply(a[ia], b[ib]);
}

// ==== kernel: axpy ====
// y[off + i] += alpha * x[i]: the accumulate that gradient accumulation is made of
// (off > 0 when y is one part of a flat gradient buffer).
struct Params {
    n: u32,
    alpha: f32,
    off: u32,
    _pad: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= p.n) {
        return;
    }
    y[p.off + i] = y[p.off + i] + p.alpha * x[i];
}

// ==== kernel: gelu ====
// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
// Computed as x * sigmoid(2u), the same function since (1 + tanh u) / 2 = sigmoid(2u):
// for negative x, 1 + tanh(u) cancels catastrophically (tanh(u) is close to -1 and its
// rounding error becomes the whole answer), while sigmoid(2u) = e / (1 + e), e = exp(2u),
// keeps full relative precision.
struct Params {
    n: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

const GELU_C: f32 = 0.7978845608028654; // sqrt(2/pi)

fn sigmoid(v: f32) -> f32 {
    if (v >= 0.0) {
        return 1.0 / (1.0 + exp(-v));
    }
    let e = exp(v);
    return e / (1.0 + e);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= p.n) {
        return;
    }
    let v = x[i];
    let u = GELU_C * (v + 0.044715 * v * v * v);
    y[i] = v * sigmoid(2.0 * u);
}

// ==== kernel: gelu_backward ====
// dx = dy * gelu'(x), gelu'(x) = s + 2 x s (1 - s) u'(x), with s = sigmoid(2u) and
// u'(x) = sqrt(2/pi) (1 + 3 * 0.044715 x^2) (the derivative of x * sigmoid(2u)).
struct Params {
    n: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> dy: array<f32>;
@group(0) @binding(3) var<storage, read_write> dx: array<f32>;

const GELU_C: f32 = 0.7978845608028654;

fn sigmoid(v: f32) -> f32 {
    if (v >= 0.0) {
        return 1.0 / (1.0 + exp(-v));
    }
    let e = exp(v);
    return e / (1.0 + e);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= p.n) {
        return;
    }
    let v = x[i];
    let u = GELU_C * (v + 0.044715 * v * v * v);
    let s = sigmoid(2.0 * u);
    let du = GELU_C * (1.0 + 3.0 * 0.044715 * v * v);
    dx[i] = dy[i] * (s + 2.0 * v * s * (1.0 - s) * du);
}

// ==== kernel: fill ====
// Every 32-bit word gets the same bit pattern (for 16-bit dtypes, the value twice).
struct Params {
    n: u32,
    bits: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= p.n) {
        return;
    }
    out[i] = p.bits;
}

// ==== kernel: copy_strided ====
// Copies a strided view of src into a strided view of dst, 32 bits at a time (f32, i32,
// u32; 16-bit data goes through the f32 path, which is exact). The flat index i is the
// element's position in row-major order; it is unravelled once with src's shape and
// strides and once with dst's. With a contiguous dst this makes a transpose or a
// broadcast real; with a strided dst it writes into part of a larger tensor.
struct Params {
    n: u32,
    src_rank: u32,
    dst_rank: u32,
    src_off: u32,
    dst_off: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    src_shape: array<vec4<u32>, 2>,
    src_strides: array<vec4<u32>, 2>,
    dst_shape: array<vec4<u32>, 2>,
    dst_strides: array<vec4<u32>, 2>,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= p.n) {
        return;
    }
    var rem = i;
    var so = p.src_off;
    for (var d = i32(p.src_rank) - 1; d >= 0; d = d - 1) {
        let du = u32(d);
        let size = p.src_shape[du >> 2u][du & 3u];
        so = so + (rem % size) * p.src_strides[du >> 2u][du & 3u];
        rem = rem / size;
    }
    rem = i;
    var o = p.dst_off;
    for (var d = i32(p.dst_rank) - 1; d >= 0; d = d - 1) {
        let du = u32(d);
        let size = p.dst_shape[du >> 2u][du & 3u];
        o = o + (rem % size) * p.dst_strides[du >> 2u][du & 3u];
        rem = rem / size;
    }
    dst[o] = src[so];
}
