// Puzzle 6: blocks. out[i] = a[i] + 10 for SIZE = 9 elements, with workgroups of 4
// invocations: 3 workgroups are dispatched. Which element is this invocation's?
const SIZE: u32 = 9u;
const BLOCK: u32 = 4u;
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(4)
fn main(@builtin(local_invocation_id) local: vec3<u32>,
        @builtin(workgroup_id) block: vec3<u32>) {
    // ---- your code: begin ----
    let i = block.x * BLOCK + local.x;
    if (i < SIZE) {
        out[i] = a[i] + 10.0;
    }
    // ---- your code: end ----
}
