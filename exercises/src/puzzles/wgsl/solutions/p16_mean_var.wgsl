// Puzzle 16: LayerNorm's statistics. out[0] = the mean of a's SIZE = 8 values and
// out[1] = their variance (the mean of (a[i] - mean)^2, divided by SIZE as LayerNorm
// does), one workgroup of 8. Two reductions in shared memory (`cache`): the second needs
// the first's result.
const SIZE: u32 = 8u;
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
var<workgroup> cache: array<f32, 8>;

@compute @workgroup_size(8)
fn main(@builtin(local_invocation_id) local: vec3<u32>) {
    let i = local.x;
    // ---- your code: begin ----
    let x = a[i];
    cache[i] = x;
    workgroupBarrier();
    for (var stride = SIZE / 2u; stride > 0u; stride = stride / 2u) {
        if (i < stride) {
            cache[i] = cache[i] + cache[i + stride];
        }
        workgroupBarrier();
    }
    let mean = cache[0] / f32(SIZE);
    // Everyone must have read cache[0] before it is overwritten.
    workgroupBarrier();
    let d = x - mean;
    cache[i] = d * d;
    workgroupBarrier();
    for (var stride = SIZE / 2u; stride > 0u; stride = stride / 2u) {
        if (i < stride) {
            cache[i] = cache[i] + cache[i + stride];
        }
        workgroupBarrier();
    }
    if (i == 0u) {
        out[0] = mean;
        out[1] = cache[0] / f32(SIZE);
    }
    // ---- your code: end ----
}
