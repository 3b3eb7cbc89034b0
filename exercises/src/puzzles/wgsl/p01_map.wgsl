// Puzzle 1: map. Add 10 to each element of `a`: out[i] = a[i] + 10.
// One workgroup of SIZE invocations, one per element.
const SIZE: u32 = 4u;
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(4)
fn main(@builtin(local_invocation_id) local: vec3<u32>) {
    let i = local.x;
    // ---- your code: begin ----
    // ---- your code: end ----
}
