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
//
// `off` is where the update starts in every buffer: invocation j updates element off + j,
// so one parameter inside flat buffers (a ZeRO shard's segment) is updated in place.

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
    off: u32,
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
    let j = flat_id(wid, nwg, lid);
    if (j >= p.n) {
        return;
    }
    if (p.has_found_inf != 0u && found_inf[0] != 0.0) {
        return;
    }
    let i = p.off + j;
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

// ==== kernel: adamw_master ====
// AdamW on an f32 master copy, writing the compute copy (f16, bf16 or f32) in the same
// pass, as llm.c's adamw_update does (rounded to nearest even here, not stochastically).
// The master's arithmetic is the `adamw` kernel's (moments named as PyTorch names
// them). The copy is bound as raw u32 words:
// the substituted STORE converts an f32 to the copy's bits. For a 16-bit copy (`pairs`) one
// invocation owns one word, i.e. two elements, because storage writes are whole words
// and two invocations writing halves of one word would race (see cast.wgsl); for an f32
// copy (`single`) one invocation owns one element.
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
    off: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read> inv_scale: array<f32>;
@group(0) @binding(3) var<storage, read> found_inf: array<f32>;
@group(0) @binding(4) var<storage, read_write> master: array<f32>;
@group(0) @binding(5) var<storage, read_write> exp_avg: array<f32>;
@group(0) @binding(6) var<storage, read_write> exp_avg_sq: array<f32>;
@group(0) @binding(7) var<storage, read_write> param_copy: array<u32>;

// `v` is the name the substituted conversion reads.
fn store(v: f32) -> u32 {
    {{STORE}}
}

fn skipped() -> bool {
    return p.has_found_inf != 0u && found_inf[0] != 0.0;
}

fn gscale() -> f32 {
    var gs = p.grad_scale;
    if (p.has_inv_scale != 0u) {
        gs = gs * inv_scale[0];
    }
    return gs;
}

// Updates element i of the master and its moments; returns the new master value.
fn update(i: u32, gs: f32) -> f32 {
    let g = grad[i] * gs;
    let mi = p.beta1 * exp_avg[i] + (1.0 - p.beta1) * g;
    let vi = p.beta2 * exp_avg_sq[i] + (1.0 - p.beta2) * g * g;
    exp_avg[i] = mi;
    exp_avg_sq[i] = vi;
    let mhat = mi / p.bc1;
    let vhat = vi / p.bc2;
    let w = master[i];
    let nw = w - p.lr * (mhat / (sqrt(vhat) + p.eps) + p.weight_decay * w);
    master[i] = nw;
    return nw;
}

@compute @workgroup_size(256)
fn single(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let j = flat_id(wid, nwg, lid);
    if (j >= p.n || skipped()) {
        return;
    }
    let i = p.off + j;
    param_copy[i] = store(update(i, gscale()));
}

@compute @workgroup_size(256)
fn pairs(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    // `off` is even (the host checks): word w of the range holds elements off + 2w and
    // off + 2w + 1.
    let j = 2u * flat_id(wid, nwg, lid);
    if (j >= p.n || skipped()) {
        return;
    }
    let i = p.off + j;
    let w = i / 2u;
    let gs = gscale();
    var word = store(update(i, gs)) & 0xffffu;
    if (j + 1u < p.n) {
        word = word | (store(update(i + 1u, gs)) << 16u);
    } else {
        // The range ends inside this word (an odd length): keep the upper half as it was.
        word = word | (param_copy[w] & 0xffff0000u);
    }
    param_copy[w] = word;
}

// ==== kernel: clip_coefficient ====
// torch.nn.utils.clip_grad_norm_'s factor from the f32 sum of squared gradients, one
// invocation: norm = sqrt(sumsq), coef = min(1, max_norm / (norm + 1e-6)). WGSL has no
// f64, so this is f32 throughout, where brrr-cpu and CUDA compute in f64 and round once:
// results may differ from theirs in the last bits. `select` gives 1 for a NaN quotient
// (the comparison is false), as Rust's f64::min does; WGSL's `min` leaves NaN unspecified.
struct Params {
    max_norm: f32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> sumsq: array<f32>;
@group(0) @binding(2) var<storage, read_write> norm: array<f32>;
@group(0) @binding(3) var<storage, read_write> coef: array<f32>;

@compute @workgroup_size(1)
fn main() {
    let nrm = sqrt(sumsq[0]);
    let c = p.max_norm / (nrm + 1e-6);
    norm[0] = nrm;
    coef[0] = select(1.0, c, c < 1.0);
}

// ==== kernel: adamw_8bit ====
// AdamW with 8-bit block-wise quantised moments (Dettmers et al. 2022), one workgroup
// per block of 2048 values, 8 values (two code words) per invocation:
//   1. decode m and v (map[code] * the block's absmax), update them and the parameter
//      as the `adamw` kernel does, keeping the new moments in registers;
//   2. reduce the block's new absmax of each moment through workgroup memory;
//   3. encode each value to its nearest code against the new absmax.
// Each invocation reads and writes only its own two words of each moment's codes, and the
// old absmax is read by everyone before the barrier that precedes its overwrite.
// Layout (brrr_backend::QuantizedMoments): `codes` holds m's words then v's, `absmax`
// m's blocks then v's, `maps` m's 256-value map then v's. Nearest code: a binary search
// over products map[k] * absmax (multiplication is correctly rounded in WGSL, division is
// not), as brrr_backend::quant8::encode does.
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
    off: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read> inv_scale: array<f32>;
@group(0) @binding(3) var<storage, read> found_inf: array<f32>;
@group(0) @binding(4) var<storage, read> maps: array<f32>;
@group(0) @binding(5) var<storage, read_write> param: array<f32>;
@group(0) @binding(6) var<storage, read_write> codes: array<u32>;
@group(0) @binding(7) var<storage, read_write> absmax: array<f32>;

const BLOCK: u32 = 2048u;
const PER: u32 = 8u;
var<workgroup> red_m: array<f32, 256>;
var<workgroup> red_v: array<f32, 256>;

// The code of x against absmax a in the map starting at maps[base].
fn nearest(base: u32, x: f32, absmax_: f32) -> u32 {
    let a = select(1.0, absmax_, absmax_ > 0.0);
    var k = 0u;
    for (var step = 128u; step > 0u; step = step / 2u) {
        if (maps[base + k + step - 1u] * a < x) {
            k = k + step;
        }
    }
    if (k > 0u && x - maps[base + k - 1u] * a <= maps[base + k] * a - x) {
        return k - 1u;
    }
    return k;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let blk = group_id(wid, nwg);
    let nb = (p.n + BLOCK - 1u) / BLOCK;
    if (blk >= nb || (p.has_found_inf != 0u && found_inf[0] != 0.0)) {
        return;
    }
    let words = (p.n + 3u) / 4u;
    var gs = p.grad_scale;
    if (p.has_inv_scale != 0u) {
        gs = gs * inv_scale[0];
    }
    let ma_old = absmax[blk];
    let va_old = absmax[nb + blk];
    var mv: array<f32, 8>;
    var vv: array<f32, 8>;
    var mmax = 0.0;
    var vmax = 0.0;
    let j0 = blk * BLOCK + lid * PER;
    for (var t = 0u; t < PER; t = t + 1u) {
        let j = j0 + t;
        mv[t] = 0.0;
        vv[t] = 0.0;
        if (j < p.n) {
            let sh = 8u * (j % 4u);
            let cm = (codes[j / 4u] >> sh) & 0xffu;
            let cv = (codes[words + j / 4u] >> sh) & 0xffu;
            let i = p.off + j;
            let g = grad[i] * gs;
            let m = p.beta1 * (maps[cm] * ma_old) + (1.0 - p.beta1) * g;
            let v = p.beta2 * (maps[256u + cv] * va_old) + (1.0 - p.beta2) * g * g;
            let x = param[i];
            param[i] = x - p.lr * ((m / p.bc1) / (sqrt(v / p.bc2) + p.eps) + p.weight_decay * x);
            mv[t] = m;
            vv[t] = v;
            mmax = max(mmax, abs(m));
            vmax = max(vmax, abs(v));
        }
    }
    red_m[lid] = mmax;
    red_v[lid] = vmax;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s / 2u) {
        if (lid < s) {
            red_m[lid] = max(red_m[lid], red_m[lid + s]);
            red_v[lid] = max(red_v[lid], red_v[lid + s]);
        }
        workgroupBarrier();
    }
    let ma = red_m[0];
    let va = red_v[0];
    for (var q = 0u; q < 2u; q = q + 1u) {
        let w = j0 / 4u + q;
        if (w < words) {
            var pm = 0u;
            var pv = 0u;
            for (var b = 0u; b < 4u; b = b + 1u) {
                pm = pm | (nearest(0u, mv[q * 4u + b], ma) << (8u * b));
                pv = pv | (nearest(256u, vv[q * 4u + b], va) << (8u * b));
            }
            codes[w] = pm;
            codes[words + w] = pv;
        }
    }
    if (lid == 0u) {
        absmax[blk] = ma;
        absmax[nb + blk] = va;
    }
}
