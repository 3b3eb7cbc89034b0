// Puzzle 3: guards. out[i] = a[i] + 10, but there are more invocations (8) than
// elements (SIZE = 4): the extra ones must not touch memory.
const SIZE: u32 = 4u;
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(8)
fn main(@builtin(local_invocation_id) local: vec3<u32>) {
    let i = local.x;
    // ---- your code: begin ----
    if (i < SIZE) {
        out[i] = a[i] + 10.0;
    }
    // ---- your code: end ----
}
