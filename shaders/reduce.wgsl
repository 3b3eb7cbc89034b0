// reduce.wgsl — out[o, i] = op over r of x[o, r, i], for a contiguous [outer, n, inner] view.
//
// Two shapes of parallelism:
// - `columns` (inner > 1): one invocation per output. Neighbouring invocations read
//   neighbouring i, so every step of the loop over r is one coalesced row read.
// - `rows` (inner == 1, e.g. a sum over the last axis): the n values of an output are
//   contiguous, so one workgroup of 256 invocations shares each output: each sums a strided
//   slice, then a tree in workgroup memory combines the 256 partial results.
// When the outputs are few, both leave most of a GPU idle (a gradient's sum is one
// workgroup; a bias gradient, 768 columns down 8192 rows, is three). They are then split
// (crates/wgpu/src/reduce.rs): `rows` gives each row `splits` workgroups over consecutive
// chunks, `columns_partial` gives each chunk of rows its own invocations, and `final`
// combines each output's partial results in chunk order. The split depends on
// the sizes only, so the bits do not depend on the device.
// op: 0 sum, 1 mean, 2 max, 3 min. Partial results are f32, summed in a different order
// than a sequential CPU loop: expect rounding differences of a few ulps times log2(n).

// ==== kernel: columns ====
struct Params {
    outer: u32,
    n: u32,
    inner: u32,
    op: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let idx = flat_id(wid, nwg, lid);
    if (idx >= p.outer * p.inner) {
        return;
    }
    let o = idx / p.inner;
    let i = idx % p.inner;
    let base = o * p.n * p.inner + i;
    var acc = red_init(p.op);
    for (var r = 0u; r < p.n; r = r + 1u) {
        acc = red_combine(p.op, acc, x[base + r * p.inner]);
    }
    if (p.op == 1u) {
        acc = acc / f32(p.n);
    }
    out[idx] = acc;
}

// ==== kernel: rows ====
// Workgroup g reduces elements [s * chunk, (s + 1) * chunk) of row g / splits (s = g %
// splits) and writes out[g]. With splits = 1 that is the whole row, and a mean is divided
// here; otherwise `final` divides.
struct Params {
    outer: u32,
    n: u32,
    splits: u32,
    chunk: u32,
    op: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let g = group_id(wid, nwg);
    if (g >= p.outer * p.splits) {
        return; // uniform: the whole workgroup leaves together
    }
    let row = g / p.splits;
    let start = (g % p.splits) * p.chunk;
    let end = min(start + p.chunk, p.n);
    let base = row * p.n;
    var r = 0.0;
    if (p.op == 2u) {
        var acc = NEG_BIG;
        for (var j = start + lid; j < end; j = j + WG) {
            acc = max(acc, x[base + j]);
        }
        r = wg_max(acc, lid);
    } else if (p.op == 3u) {
        var acc = POS_BIG;
        for (var j = start + lid; j < end; j = j + WG) {
            acc = min(acc, x[base + j]);
        }
        r = wg_min(acc, lid);
    } else {
        var acc = 0.0;
        for (var j = start + lid; j < end; j = j + WG) {
            acc = acc + x[base + j];
        }
        r = wg_sum(acc, lid);
        if (p.op == 1u && p.splits == 1u) {
            r = r / f32(p.n);
        }
    }
    if (lid == 0u) {
        out[g] = r;
    }
}

// ==== kernel: columns_partial ====
// Invocation idx = k * cols + c reduces rows [k * rows_per_chunk, ...) of output column c
// (c = o * inner + i) into partial[idx]; no mean division (`final` does it).
struct Params {
    outer: u32,
    n: u32,
    inner: u32,
    op: u32,
    rows_per_chunk: u32,
    chunks: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> partial: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let idx = flat_id(wid, nwg, lid);
    let cols = p.outer * p.inner;
    if (idx >= p.chunks * cols) {
        return;
    }
    let k = idx / cols;
    let c = idx % cols;
    let base = (c / p.inner) * p.n * p.inner + c % p.inner;
    let r0 = k * p.rows_per_chunk;
    let r1 = min(r0 + p.rows_per_chunk, p.n);
    var acc = red_init(p.op);
    for (var r = r0; r < r1; r = r + 1u) {
        acc = red_combine(p.op, acc, x[base + r * p.inner]);
    }
    partial[idx] = acc;
}

// ==== kernel: final ====
// One invocation per output o combines its `parts` partial results in order: those at
// partial[o * first_mul + k * stride], k = 0, 1, ... (rows: first_mul = splits, stride =
// 1; columns: first_mul = 1, stride = the number of columns).
struct Params {
    outputs: u32,
    parts: u32,
    first_mul: u32,
    stride: u32,
    n: u32,
    op: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> partial: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let o = flat_id(wid, nwg, lid);
    if (o >= p.outputs) {
        return;
    }
    let first = o * p.first_mul;
    var acc = partial[first];
    for (var k = 1u; k < p.parts; k = k + 1u) {
        acc = red_combine(p.op, acc, partial[first + k * p.stride]);
    }
    if (p.op == 1u) {
        acc = acc / f32(p.n);
    }
    out[o] = acc;
}
