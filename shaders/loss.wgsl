// loss.wgsl — cross-entropy of [rows, vocab] logits against integer targets.
//
//   loss[r] = logsumexp(logits[r]) - logits[r, t_r]           (0 where t_r < 0: padding)
//   dlogits[r] = (softmax(logits[r]) - onehot(t_r)) * dloss[r]  (0 where t_r < 0)
//
// One workgroup per row: a max reduction then a sum of exponentials, as in softmax.wgsl.
// The probabilities are never stored: the backward recomputes them, which costs one more
// read of the logits and saves a [rows, vocab] buffer (the biggest activation of a GPT).
// A target >= vocab cannot be an error inside a kernel; the loss is then NaN, so it shows.

// ==== kernel: forward ====
struct Params {
    rows: u32,
    vocab: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read> targets: array<i32>;
@group(0) @binding(3) var<storage, read_write> losses: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = group_id(wid, nwg);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.vocab;
    var mx = NEG_BIG;
    for (var j = lid; j < p.vocab; j = j + WG) {
        mx = max(mx, logits[base + j]);
    }
    mx = wg_max(mx, lid);
    var s = 0.0;
    for (var j = lid; j < p.vocab; j = j + WG) {
        s = s + exp(logits[base + j] - mx);
    }
    s = wg_sum(s, lid);
    if (lid == 0u) {
        let t = targets[row];
        var loss = 0.0;
        if (t >= 0) {
            if (u32(t) < p.vocab) {
                loss = mx + log(s) - logits[base + u32(t)];
            } else {
                loss = bitcast<f32>(0x7fc00000u | (p.rows & 0u)); // NaN, at run time
            }
        }
        losses[row] = loss;
    }
}

// ==== kernel: backward ====
struct Params {
    rows: u32,
    vocab: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read> targets: array<i32>;
@group(0) @binding(3) var<storage, read> dlosses: array<f32>;
@group(0) @binding(4) var<storage, read_write> dlogits: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = group_id(wid, nwg);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.vocab;
    let t = targets[row];
    var mx = NEG_BIG;
    for (var j = lid; j < p.vocab; j = j + WG) {
        mx = max(mx, logits[base + j]);
    }
    mx = wg_max(mx, lid);
    var s = 0.0;
    for (var j = lid; j < p.vocab; j = j + WG) {
        s = s + exp(logits[base + j] - mx);
    }
    s = wg_sum(s, lid);
    let inv = 1.0 / s;
    let dl = dlosses[row];
    for (var j = lid; j < p.vocab; j = j + WG) {
        var g = 0.0;
        if (t >= 0) {
            var prob = exp(logits[base + j] - mx) * inv;
            if (u32(t) == j) {
                prob = prob - 1.0;
            }
            g = prob * dl;
        }
        dlogits[base + j] = g;
    }
}
