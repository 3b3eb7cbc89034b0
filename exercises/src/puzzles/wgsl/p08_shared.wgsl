// Puzzle 8: shared memory. out[i] = a[i] + 10 for SIZE = 8, workgroups of 4. Each
// invocation first copies its element into the workgroup's `cache` array, waits at a
// barrier, and then reads it back from there (a warm-up for the puzzles that need it).
const SIZE: u32 = 8u;
const BLOCK: u32 = 4u;
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
var<workgroup> cache: array<f32, 4>;

@compute @workgroup_size(4)
fn main(@builtin(local_invocation_id) local: vec3<u32>,
        @builtin(workgroup_id) block: vec3<u32>) {
    let i = block.x * BLOCK + local.x;
    // ---- your code: begin ----
    // ---- your code: end ----
}
