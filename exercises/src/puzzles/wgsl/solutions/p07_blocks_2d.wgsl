// Puzzle 7: blocks in 2D. out = a + 10 for a SIZE x SIZE (5 x 5) matrix, row-major,
// with 3 x 3 workgroups in a 2 x 2 grid.
const SIZE: u32 = 5u;
const BLOCK: u32 = 3u;
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(3, 3)
fn main(@builtin(local_invocation_id) local: vec3<u32>,
        @builtin(workgroup_id) block: vec3<u32>) {
    // ---- your code: begin ----
    let row = block.y * BLOCK + local.y;
    let col = block.x * BLOCK + local.x;
    if (row < SIZE && col < SIZE) {
        out[row * SIZE + col] = a[row * SIZE + col] + 10.0;
    }
    // ---- your code: end ----
}
