// Puzzle 15: softmax's shift. out[i] = a[i] - max over j of a[j], SIZE = 8, one
// workgroup of 8: the step that keeps softmax's exponentials from overflowing (every
// shifted value is <= 0). Find the maximum with a tree in shared memory (`cache`), then
// every invocation reads it.
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
