// Puzzle 11: 1D convolution. out[i] = sum over j < CONV of a[i + j] * b[j], where
// terms past the end of `a` count as 0. SIZE = 6, CONV = 3, a workgroup of 8.
const SIZE: u32 = 6u;
const CONV: u32 = 3u;
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(8)
fn main(@builtin(local_invocation_id) local: vec3<u32>) {
    let i = local.x;
    // ---- your code: begin ----
    if (i < SIZE) {
        var sum = 0.0;
        for (var j = 0u; j < CONV; j = j + 1u) {
            if (i + j < SIZE) {
                sum = sum + a[i + j] * b[j];
            }
        }
        out[i] = sum;
    }
    // ---- your code: end ----
}
