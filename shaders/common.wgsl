// common.wgsl — helpers prepended to every kernel at load time.
//
// WGSL has no `#include`, so the Rust side (brrr-wgpu's `shaders.rs`) builds each kernel's
// source as: this file + the chosen kernel section of its family file. Unused helpers cost
// nothing: only what an entry point reaches is compiled.
//
// Conventions shared by every kernel in shaders/:
// - binding 0 is a uniform `Params` struct, written fresh for each dispatch;
//   bindings 1.. are storage buffers, inputs first, outputs last.
// - Everything is computed in f32. f16 and bf16 are *storage* formats: two values packed
//   in one u32 word, converted with the bit-exact helpers below (round to nearest even),
//   so results agree with the `half` crate on every adapter, with or without shader-f16.
// - 1-D kernels run 256 invocations per workgroup on a 2-D grid of workgroups, because
//   one grid dimension holds at most 65535 workgroups (16.7M invocations).

const WG: u32 = 256u;

// Flat index of this invocation in a 2-D grid of 1-D workgroups of size WG.
fn flat_id(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

// Flat index of this workgroup in a 2-D grid (one workgroup per row kernels).
fn group_id(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

// ---- 16-bit float conversions (exact decode, round-to-nearest-even encode) ----------

fn f16_to_f32(h: u32) -> f32 {
    let s = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) {
        // zero or subnormal: m * 2^-24, exact in f32
        let v = f32(m) * 5.9604644775390625e-8;
        return bitcast<f32>(bitcast<u32>(v) | s);
    }
    if (e == 31u) {
        // inf or NaN (payload kept)
        return bitcast<f32>(s | 0x7f800000u | (m << 13u));
    }
    return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}

fn f32_to_f16(f: f32) -> u32 {
    let x = bitcast<u32>(f);
    let s = (x >> 16u) & 0x8000u;
    let e = (x >> 23u) & 0xffu;
    let m = x & 0x7fffffu;
    if (e == 255u) {
        // inf stays inf; NaN stays a (quiet) NaN
        return s | 0x7c00u | select(0u, 0x200u | (m >> 13u), m != 0u);
    }
    let ue = i32(e) - 127;
    if (ue > 15) {
        return s | 0x7c00u; // overflow: inf
    }
    if (ue >= -14) {
        // normal: keep 10 mantissa bits, round the 13 dropped ones to nearest even.
        // A carry out of the mantissa correctly bumps the exponent (possibly to inf).
        let hm = m >> 13u;
        let rest = m & 0x1fffu;
        var r = (u32(ue + 15) << 10u) | hm;
        if (rest > 0x1000u || (rest == 0x1000u && (hm & 1u) == 1u)) {
            r = r + 1u;
        }
        return s | r;
    }
    if (ue < -25) {
        return s; // below half the smallest subnormal: signed zero
    }
    // subnormal: the 24-bit significand in units of 2^-24 is full >> (-ue - 1)
    let full = m | 0x800000u;
    let shift = u32(-ue - 1);
    let q = full >> shift;
    let rem = full & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    var r = q;
    if (rem > half || (rem == half && (q & 1u) == 1u)) {
        r = r + 1u;
    }
    return s | r;
}

fn bf16_to_f32(h: u32) -> f32 {
    return bitcast<f32>(h << 16u);
}

fn f32_to_bf16(f: f32) -> u32 {
    let x = bitcast<u32>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return ((x >> 16u) | 0x40u) & 0xffffu; // NaN: keep it a quiet NaN
    }
    let lsb = (x >> 16u) & 1u;
    return ((x + 0x7fffu + lsb) >> 16u) & 0xffffu;
}

// Finiteness from the bits: WGSL lets implementations assume floats are finite, so
// `x != x` style tests may be optimised away. Integer tests on the bits may not.
fn bits_finite(b: u32) -> bool {
    return (b & 0x7f800000u) != 0x7f800000u;
}

// ---- workgroup reductions (call from uniform control flow, all WG invocations) --------

var<workgroup> wg_red: array<f32, 256>;

fn wg_sum(v: f32, lid: u32) -> f32 {
    wg_red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            wg_red[lid] = wg_red[lid] + wg_red[lid + s];
        }
        workgroupBarrier();
    }
    let r = wg_red[0];
    workgroupBarrier();
    return r;
}

fn wg_max(v: f32, lid: u32) -> f32 {
    wg_red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            wg_red[lid] = max(wg_red[lid], wg_red[lid + s]);
        }
        workgroupBarrier();
    }
    let r = wg_red[0];
    workgroupBarrier();
    return r;
}

fn wg_min(v: f32, lid: u32) -> f32 {
    wg_red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            wg_red[lid] = min(wg_red[lid], wg_red[lid + s]);
        }
        workgroupBarrier();
    }
    let r = wg_red[0];
    workgroupBarrier();
    return r;
}

// A large finite stand-in for -inf: WGSL constant expressions may not be infinite.
const NEG_BIG: f32 = -3.0e38;
const POS_BIG: f32 = 3.0e38;

// A sequential reduction's start and step for reduce.wgsl's op codes: 2 max, 3 min,
// anything else (0 sum, 1 mean) adds.
fn red_init(op: u32) -> f32 {
    if (op == 2u) {
        return NEG_BIG;
    }
    if (op == 3u) {
        return POS_BIG;
    }
    return 0.0;
}

fn red_combine(op: u32, acc: f32, v: f32) -> f32 {
    if (op == 2u) {
        return max(acc, v);
    }
    if (op == 3u) {
        return min(acc, v);
    }
    return acc + v;
}
