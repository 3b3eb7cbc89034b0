// Puzzle 4: map in 2D. `a` is a SIZE x SIZE matrix, row-major; out = a + 10. The
// workgroup is 3 x 3: local.y is the row, local.x the column; guard the extras.
const SIZE: u32 = 2u;
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(3, 3)
fn main(@builtin(local_invocation_id) local: vec3<u32>) {
    let row = local.y;
    let col = local.x;
    // ---- your code: begin ----
    if (row < SIZE && col < SIZE) {
        out[row * SIZE + col] = a[row * SIZE + col] + 10.0;
    }
    // ---- your code: end ----
}
