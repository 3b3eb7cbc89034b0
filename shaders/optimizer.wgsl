// optimizer.wgsl — the fused AdamW step (Loshchilov & Hutter 2019, Algorithm 2).
//
// One invocation per parameter reads p, g, m, v once and writes p, m, v once: 7 floats of
// traffic per parameter, where an unfused chain of element-wise ops would take ~25.
// The optimizer step is purely bandwidth-bound; fusion is the whole optimisation.
//
//   g = grad * (grad_scale [* inv_scale[0]])
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g²
//   p = p - lr * (m/bc1 / (sqrt(v/bc2) + eps) + wd * p),   bc = 1 - beta^step (from the host)
//
// With AMP, `inv_scale` (the inverse loss scale) and `found_inf` live on the device, so the
// step needs no host round trip: when found_inf[0] != 0 every invocation returns without
// touching anything, which is GradScaler's "skip the step".

// ==== kernel: adamw ====
struct Params {
    n: u32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    bc1: f32,
    bc2: f32,
    grad_scale: f32,
    has_inv_scale: u32,
    has_found_inf: u32,
    _pad: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read> inv_scale: array<f32>;
@group(0) @binding(3) var<storage, read> found_inf: array<f32>;
@group(0) @binding(4) var<storage, read_write> param: array<f32>;
@group(0) @binding(5) var<storage, read_write> m: array<f32>;
@group(0) @binding(6) var<storage, read_write> v: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= p.n) {
        return;
    }
    if (p.has_found_inf != 0u && found_inf[0] != 0.0) {
        return;
    }
    var gs = p.grad_scale;
    if (p.has_inv_scale != 0u) {
        gs = gs * inv_scale[0];
    }
    let g = grad[i] * gs;
    let mi = p.beta1 * m[i] + (1.0 - p.beta1) * g;
    let vi = p.beta2 * v[i] + (1.0 - p.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    let mhat = mi / p.bc1;
    let vhat = vi / p.bc2;
    let w = param[i];
    param[i] = w - p.lr * (mhat / (sqrt(vhat) + p.eps) + p.weight_decay * w);
}
