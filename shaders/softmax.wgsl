// softmax.wgsl — row-wise softmax of scale * x, optionally causal, and its backward.
//
// One workgroup per row. Three passes over the row, each a strided loop of the 256
// invocations followed by a tree reduction in workgroup memory: the row maximum (so that
// exp never overflows: softmax(x) = softmax(x - max)), the sum of exponentials, and the
// normalised write. A fused "online softmax" (Milakov & Gimelshein 2018) would merge the
// first two passes; with rows that fit in cache the gain is small, and this is the
// version the explanation starts from.
//
// Causal: the matrix is a stack of cols×cols attention-score blocks, and row r may only
// attend to columns j <= r % cols. Masked entries get probability exactly 0, and no mask
// tensor is ever stored.

// ==== kernel: forward ====
struct Params {
    rows: u32,
    cols: u32,
    scale: f32,
    causal: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = group_id(wid, nwg);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    var valid = p.cols;
    if (p.causal != 0u) {
        valid = row % p.cols + 1u;
    }
    var mx = NEG_BIG;
    for (var j = lid; j < valid; j = j + WG) {
        mx = max(mx, p.scale * x[base + j]);
    }
    mx = wg_max(mx, lid);
    var s = 0.0;
    for (var j = lid; j < valid; j = j + WG) {
        s = s + exp(p.scale * x[base + j] - mx);
    }
    s = wg_sum(s, lid);
    let inv = 1.0 / s;
    for (var j = lid; j < p.cols; j = j + WG) {
        var v = 0.0;
        if (j < valid) {
            v = exp(p.scale * x[base + j] - mx) * inv;
        }
        y[base + j] = v;
    }
}

// ==== kernel: backward ====
// dx = scale * y * (dy - sum_j dy_j y_j). Masked entries have y = 0 and get 0.
struct Params {
    rows: u32,
    cols: u32,
    scale: f32,
    causal: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read> dy: array<f32>;
@group(0) @binding(3) var<storage, read_write> dx: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = group_id(wid, nwg);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    var valid = p.cols;
    if (p.causal != 0u) {
        valid = row % p.cols + 1u;
    }
    var s = 0.0;
    for (var j = lid; j < valid; j = j + WG) {
        s = s + dy[base + j] * y[base + j];
    }
    s = wg_sum(s, lid);
    for (var j = lid; j < p.cols; j = j + WG) {
        var v = 0.0;
        if (j < valid) {
            v = p.scale * y[base + j] * (dy[base + j] - s);
        }
        dx[base + j] = v;
    }
}

// ==== kernel: forward_segmented ====
// Causal softmax with a document mask (packed sequences): rows are [batch, heads, T]
// blocks of T columns; row r is query i = r % T of sequence b = r / T / heads, and sees
// column j only if j <= i and seg[b*T + j] == seg[b*T + i]. Masked entries get exactly 0;
// the [T, T] mask is computed from the T ids, never stored.
struct Params {
    rows: u32,
    cols: u32,
    scale: f32,
    heads: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> seg: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

fn seen(sb: u32, i: u32, j: u32) -> bool {
    return j <= i && seg[sb + j] == seg[sb + i];
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = group_id(wid, nwg);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    let i = row % p.cols;
    let sb = (row / p.cols / p.heads) * p.cols;
    var mx = NEG_BIG;
    for (var j = lid; j <= i; j = j + WG) {
        if (seen(sb, i, j)) {
            mx = max(mx, p.scale * x[base + j]);
        }
    }
    mx = wg_max(mx, lid);
    var s = 0.0;
    for (var j = lid; j <= i; j = j + WG) {
        if (seen(sb, i, j)) {
            s = s + exp(p.scale * x[base + j] - mx);
        }
    }
    s = wg_sum(s, lid);
    let inv = 1.0 / s;
    for (var j = lid; j < p.cols; j = j + WG) {
        var v = 0.0;
        if (seen(sb, i, j)) {
            v = exp(p.scale * x[base + j] - mx) * inv;
        }
        y[base + j] = v;
    }
}
