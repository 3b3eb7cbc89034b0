// Puzzle 10: dot product. out[0] = sum over i of a[i] * b[i], SIZE = 8, one workgroup
// of 8. Each invocation multiplies one pair into shared memory (`cache`); then combine them.
const SIZE: u32 = 8u;
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
var<workgroup> cache: array<f32, 8>;

@compute @workgroup_size(8)
fn main(@builtin(local_invocation_id) local: vec3<u32>) {
    let i = local.x;
    // ---- your code: begin ----
    cache[i] = a[i] * b[i];
    workgroupBarrier();
    // A tree: 8 -> 4 -> 2 -> 1 partial sums, a barrier after each level.
    for (var stride = SIZE / 2u; stride > 0u; stride = stride / 2u) {
        if (i < stride) {
            cache[i] = cache[i] + cache[i + stride];
        }
        workgroupBarrier();
    }
    if (i == 0u) {
        out[0] = cache[0];
    }
    // ---- your code: end ----
}
