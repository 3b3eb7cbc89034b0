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
    // ---- your code: end ----
}
