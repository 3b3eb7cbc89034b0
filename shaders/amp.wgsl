// amp.wgsl — the two device-side kernels of dynamic loss scaling (mixed precision).
//
// Both keep the training step free of host round trips: the overflow flag and the scale
// stay on the GPU, and the AdamW kernel reads them there (see optimizer.wgsl).

// ==== kernel: unscale_check_finite ====
// grads *= inv_scale[0]; found_inf[0] = 1.0 if any unscaled gradient is inf or NaN (never
// cleared). PyTorch's _amp_foreach_non_finite_check_and_unscale_. The test is on the
// *bits*: WGSL lets a compiler assume floats are finite, so `x != x` could be folded away.
// Many invocations may find an overflow; all store the same word, atomically.
// `narrow` says which 16-bit dtype the f32 values go back to (0: none, 1: f16, 2: bf16):
// a product that fits f32 but overflows f16 is an inf all the same once stored.
struct Params {
    n: u32,
    narrow: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> inv_scale: array<f32>;
@group(0) @binding(2) var<storage, read_write> grads: array<u32>;
@group(0) @binding(3) var<storage, read_write> found_inf: array<atomic<u32>>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= p.n) {
        return;
    }
    let v = bitcast<f32>(grads[i]) * inv_scale[0];
    let bits = bitcast<u32>(v);
    var bad = !bits_finite(bits);
    if (p.narrow == 1u) {
        bad = bad || (f32_to_f16(v) & 0x7c00u) == 0x7c00u;
    } else if (p.narrow == 2u) {
        bad = bad || (f32_to_bf16(v) & 0x7f80u) == 0x7f80u;
    }
    if (bad) {
        atomicStore(&found_inf[0], 0x3f800000u); // 1.0f
    }
    grads[i] = bits;
}

// ==== kernel: update_scale ====
// PyTorch's _amp_update_scale_: on overflow scale *= backoff and the growth tracker resets;
// otherwise count the clean step and, after growth_interval of them, scale *= growth
// (unless that overflows f32). One invocation: it is a handful of scalar operations, and
// keeping it on the device is what avoids a synchronising readback every step.
// Megatron-LM's options: with hysteresis > 1, tracker[1] counts the overflows since the
// scale last grew and only the hysteresis-th backs off; a backoff never goes below
// min_scale.
struct Params {
    growth_factor: f32,
    backoff_factor: f32,
    growth_interval: i32,
    hysteresis: i32,
    min_scale: f32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> found_inf: array<f32>;
@group(0) @binding(2) var<storage, read_write> scale: array<f32>;
@group(0) @binding(3) var<storage, read_write> tracker: array<i32>;

@compute @workgroup_size(1)
fn main() {
    if (found_inf[0] != 0.0) {
        tracker[0] = 0;
        if (p.hysteresis > 1) {
            var infs = tracker[1];
            if (infs != 2147483647) {
                infs = infs + 1;
            }
            tracker[1] = infs;
            if (infs < p.hysteresis) {
                return;
            }
        }
        let backed_off = scale[0] * p.backoff_factor;
        if (backed_off < p.min_scale) {
            scale[0] = p.min_scale;
        } else {
            scale[0] = backed_off;
        }
    } else {
        let successful = tracker[0] + 1;
        if (successful == p.growth_interval) {
            let grown = scale[0] * p.growth_factor;
            if (bits_finite(bitcast<u32>(grown))) {
                scale[0] = grown;
            }
            tracker[0] = 0;
            if (p.hysteresis > 1) {
                tracker[1] = 0;
            }
        } else {
            tracker[0] = successful;
        }
    }
}
