// layernorm.wgsl — LayerNorm over the last axis (Ba et al. 2016), forward and backward.
//
//   mean = Σx / C,  var = Σ(x - mean)² / C (biased, as PyTorch),  rstd = 1/sqrt(var + eps)
//   y = (x - mean) * rstd * gamma + beta
//
// Forward: one workgroup per row, two reductions (mean, then the variance around it: the
// two-pass form, which does not lose digits the way E[x²] - E[x]² does). Per-row mean and
// rstd are saved (f32) for the backward, as llm.c does.
//
// Backward, with xhat = (x - mean) * rstd and g = dy * gamma:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))        one workgroup per row
//   dgamma[c] += Σ_rows dy * xhat,  dbeta[c] += Σ_rows dy     one invocation per column
// gamma, beta and their gradients sit at offsets off_g and off_b of their buffers (views
// into flat parameter and gradient buffers). The parameter gradients are a reduction over rows; giving each column one invocation
// that walks the rows keeps it deterministic (no float atomics, which WGSL lacks anyway)
// and coalesced (neighbouring invocations read neighbouring columns).

// ==== kernel: forward ====
struct Params {
    rows: u32,
    cols: u32,
    eps: f32,
    off_g: u32, // gamma (and dgamma) start here in their buffers
    off_b: u32, // beta (and dbeta)
    _p0: u32,
    _p1: u32,
    _p2: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> gamma: array<f32>;
@group(0) @binding(3) var<storage, read> beta: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read_write> mean_out: array<f32>;
@group(0) @binding(6) var<storage, read_write> rstd_out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = group_id(wid, nwg);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    let inv_c = 1.0 / f32(p.cols);
    var s = 0.0;
    for (var j = lid; j < p.cols; j = j + WG) {
        s = s + x[base + j];
    }
    let mean = wg_sum(s, lid) * inv_c;
    var v = 0.0;
    for (var j = lid; j < p.cols; j = j + WG) {
        let d = x[base + j] - mean;
        v = v + d * d;
    }
    let rstd = 1.0 / sqrt(wg_sum(v, lid) * inv_c + p.eps);
    for (var j = lid; j < p.cols; j = j + WG) {
        y[base + j] = (x[base + j] - mean) * rstd * gamma[p.off_g + j] + beta[p.off_b + j];
    }
    if (lid == 0u) {
        mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}

// ==== kernel: backward_dx ====
struct Params {
    rows: u32,
    cols: u32,
    eps: f32,
    off_g: u32, // gamma (and dgamma) start here in their buffers
    off_b: u32, // beta (and dbeta)
    _p0: u32,
    _p1: u32,
    _p2: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> dy: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> gamma: array<f32>;
@group(0) @binding(4) var<storage, read> mean_in: array<f32>;
@group(0) @binding(5) var<storage, read> rstd_in: array<f32>;
@group(0) @binding(6) var<storage, read_write> dx: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = group_id(wid, nwg);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    let mean = mean_in[row];
    let rstd = rstd_in[row];
    var sg = 0.0;
    var sgx = 0.0;
    for (var j = lid; j < p.cols; j = j + WG) {
        let g = dy[base + j] * gamma[p.off_g + j];
        let xhat = (x[base + j] - mean) * rstd;
        sg = sg + g;
        sgx = sgx + g * xhat;
    }
    let inv_c = 1.0 / f32(p.cols);
    let mg = wg_sum(sg, lid) * inv_c;
    let mgx = wg_sum(sgx, lid) * inv_c;
    for (var j = lid; j < p.cols; j = j + WG) {
        let g = dy[base + j] * gamma[p.off_g + j];
        let xhat = (x[base + j] - mean) * rstd;
        dx[base + j] = rstd * (g - mg - xhat * mgx);
    }
}

// ==== kernel: backward_params ====
struct Params {
    rows: u32,
    cols: u32,
    eps: f32,
    off_g: u32, // gamma (and dgamma) start here in their buffers
    off_b: u32, // beta (and dbeta)
    _p0: u32,
    _p1: u32,
    _p2: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> dy: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> mean_in: array<f32>;
@group(0) @binding(4) var<storage, read> rstd_in: array<f32>;
@group(0) @binding(5) var<storage, read_write> dgamma: array<f32>;
@group(0) @binding(6) var<storage, read_write> dbeta: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let col = flat_id(wid, nwg, lid);
    if (col >= p.cols) {
        return;
    }
    var sg = 0.0;
    var sb = 0.0;
    for (var r = 0u; r < p.rows; r = r + 1u) {
        let i = r * p.cols + col;
        let xhat = (x[i] - mean_in[r]) * rstd_in[r];
        sg = sg + dy[i] * xhat;
        sb = sb + dy[i];
    }
    dgamma[p.off_g + col] = dgamma[p.off_g + col] + sg;
    dbeta[p.off_b + col] = dbeta[p.off_b + col] + sb;
}
