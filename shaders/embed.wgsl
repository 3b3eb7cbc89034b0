// embed.wgsl — token embedding lookup, its gradient and its inverse (a row scatter).
//
// Ids are u32 or i32 (read as u32: a negative i32 becomes a huge u32 and so is out of
// range). An id >= rows cannot raise an error from inside a kernel: the forward writes
// zeros for it and the backward skips it; the tensor layer checks ids on upload.

// ==== kernel: forward ====
// out[i, d] = table[ids[i], d]: one invocation per output element, a pure gather.
struct Params {
    n: u32,
    dim: u32,
    rows: u32,
    off: u32, // the table (or its gradient) starts here in its buffer
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let e = flat_id(wid, nwg, lid);
    if (e >= p.n * p.dim) {
        return;
    }
    let i = e / p.dim;
    let d = e % p.dim;
    let id = ids[i];
    var v = 0.0;
    if (id < p.rows) {
        v = table[p.off + id * p.dim + d];
    }
    out[e] = v;
}

// ==== kernel: backward ====
// dtable[ids[i], d] += dout[i, d]. A scatter-add: the same id may appear many times, so
// two invocations handling two positions with one id would race on the same row.
// WGSL has no float atomics; instead each invocation owns one column d and walks the
// positions in order. No two invocations touch the same element, the result is
// deterministic and summed in the same order as the CPU reference, and consecutive
// invocations touch consecutive addresses. (llm.c's CUDA version sorts the ids instead
// to get parallelism over positions too; on a small model `dim` invocations suffice.)
struct Params {
    n: u32,
    dim: u32,
    rows: u32,
    off: u32, // the table (or its gradient) starts here in its buffer
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> dout: array<f32>;
@group(0) @binding(3) var<storage, read_write> dtable: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let d = flat_id(wid, nwg, lid);
    if (d >= p.dim) {
        return;
    }
    for (var i = 0u; i < p.n; i = i + 1u) {
        let id = ids[i];
        if (id < p.rows) {
            let t = p.off + id * p.dim + d;
            dtable[t] = dtable[t] + dout[i * p.dim + d];
        }
    }
}

// ==== kernel: scatter ====
// table[ids[i], d] = rows[i, d]: the forward's inverse (a paged KV cache stores a step's
// new keys and values this way). One invocation per element of `rows`; the ids are
// distinct (the caller's contract), so no two invocations write one element. An id >=
// rows writes nothing.
struct Params {
    n: u32,
    dim: u32,
    rows: u32,
    off: u32, // the table starts here in its buffer
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> src: array<f32>;
@group(0) @binding(3) var<storage, read_write> table: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let e = flat_id(wid, nwg, lid);
    if (e >= p.n * p.dim) {
        return;
    }
    let id = ids[e / p.dim];
    if (id < p.rows) {
        table[p.off + id * p.dim + e % p.dim] = src[e];
    }
}
