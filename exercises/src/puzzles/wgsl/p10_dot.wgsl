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
    // ---- your code: end ----
}
