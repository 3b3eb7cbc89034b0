// Puzzle 5: broadcast. `a` is a column (SIZE x 1), `b` a row (1 x SIZE);
// out[row][col] = a[row] + b[col], a SIZE x SIZE matrix, row-major.
const SIZE: u32 = 2u;
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(3, 3)
fn main(@builtin(local_invocation_id) local: vec3<u32>) {
    let row = local.y;
    let col = local.x;
    // ---- your code: begin ----
    if (row < SIZE && col < SIZE) {
        out[row * SIZE + col] = a[row] + b[col];
    }
    // ---- your code: end ----
}
