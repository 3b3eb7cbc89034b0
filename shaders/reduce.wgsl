// reduce.wgsl — out[o, i] = op over r of x[o, r, i], for a contiguous [outer, n, inner] view.
//
// Two shapes of parallelism:
// - `columns` (inner > 1): one invocation per output. Neighbouring invocations read
//   neighbouring i, so every step of the loop over r is one coalesced row read.
// - `rows` (inner == 1, e.g. a sum over the last axis): the n values of an output are
//   contiguous, so one workgroup of 256 invocations shares each output: each sums a strided
//   slice, then a tree in workgroup memory combines the 256 partial results.
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
    var acc = 0.0;
    if (p.op == 2u) {
        acc = NEG_BIG;
    } else if (p.op == 3u) {
        acc = POS_BIG;
    }
    for (var r = 0u; r < p.n; r = r + 1u) {
        let v = x[base + r * p.inner];
        if (p.op == 2u) {
            acc = max(acc, v);
        } else if (p.op == 3u) {
            acc = min(acc, v);
        } else {
            acc = acc + v;
        }
    }
    if (p.op == 1u) {
        acc = acc / f32(p.n);
    }
    out[idx] = acc;
}

// ==== kernel: rows ====
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
    let o = group_id(wid, nwg);
    if (o >= p.outer) {
        return; // uniform: the whole workgroup leaves together
    }
    let base = o * p.n;
    var r = 0.0;
    if (p.op == 2u) {
        var acc = NEG_BIG;
        for (var j = lid; j < p.n; j = j + WG) {
            acc = max(acc, x[base + j]);
        }
        r = wg_max(acc, lid);
    } else if (p.op == 3u) {
        var acc = POS_BIG;
        for (var j = lid; j < p.n; j = j + WG) {
            acc = min(acc, x[base + j]);
        }
        r = wg_min(acc, lid);
    } else {
        var acc = 0.0;
        for (var j = lid; j < p.n; j = j + WG) {
            acc = acc + x[base + j];
        }
        r = wg_sum(acc, lid);
        if (p.op == 1u) {
            r = r / f32(p.n);
        }
    }
    if (lid == 0u) {
        out[o] = r;
    }
}
