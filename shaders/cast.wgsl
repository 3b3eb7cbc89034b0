// cast.wgsl — dtype conversions, element by element, round to nearest even.
//
// Buffers are bound as raw u32 words. A 32-bit dtype (f32, i32, u32) is one element per
// word; a 16-bit dtype (f16, bf16) is two per word, element 2w in the low half of word w.
// The Rust side substitutes the two one-line conversion functions below
// (`{{LOAD}}`: element i of the source as f32; `{{STORE}}`: f32 to the destination's bits)
// and picks the entry point by destination width:
// - `to32`: one invocation per destination element.
// - `to16`: one invocation per destination *word*, writing both halves. Two invocations
//   must never write halves of the same word: storage writes are whole words, so the
//   second would overwrite the first's half (a data race). Owning whole words avoids it.
//
// Integers travel through f32 (exact up to 2^24). Float -> int truncates toward zero and
// saturates, NaN becoming 0, as Rust's `as` does (the helpers below spell it out: WGSL's
// own conversion leaves out-of-range values to the implementation). i32 <-> u32 has its
// own kernel, `int`, which saturates the same way without going through f32.

// ==== kernel: cast ====
fn f32_to_i32_sat(v: f32) -> i32 {
    if ((bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u) {
        return 0; // NaN
    }
    if (v >= 2147483648.0) {
        return 2147483647;
    }
    if (v <= -2147483648.0) {
        return -2147483647 - 1;
    }
    return i32(v);
}

fn f32_to_u32_sat(v: f32) -> u32 {
    if ((bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u || v <= 0.0) {
        return 0u; // NaN, negative (after truncation toward zero, -0.5 is 0 too)
    }
    if (v >= 4294967296.0) {
        return 0xffffffffu;
    }
    return u32(v);
}

struct Params {
    n: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

fn load(i: u32) -> f32 {
    {{LOAD}}
}

fn store(v: f32) -> u32 {
    {{STORE}}
}

@compute @workgroup_size(256)
fn to32(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= p.n) {
        return;
    }
    dst[i] = store(load(i));
}

@compute @workgroup_size(256)
fn to16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let w = flat_id(wid, nwg, lid);
    let i = 2u * w;
    if (i >= p.n) {
        return;
    }
    let lo = store(load(i)) & 0xffffu;
    var hi = dst[w] >> 16u; // past the end of an odd-length buffer: keep what is there
    if (i + 1u < p.n) {
        hi = store(load(i + 1u)) & 0xffffu;
    }
    dst[w] = lo | (hi << 16u);
}

// ==== kernel: int ====
// i32 <-> u32, saturating ({{CONV}}: one word in, one word out).
struct Params {
    n: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

fn conv(w: u32) -> u32 {
    {{CONV}}
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= p.n) {
        return;
    }
    dst[i] = conv(src[i]);
}
