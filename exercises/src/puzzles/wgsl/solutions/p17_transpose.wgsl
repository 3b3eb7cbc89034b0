// Puzzle 17: transpose. `a` is N x N (4 x 4), row-major; out = a's transpose. One
// workgroup of 4 x 4. Reading a[r][c] and writing out[c][r] directly makes one of the
// two walk down columns; on a GPU, neighbouring invocations should touch neighbouring
// addresses (coalescing), in the read and in the write. Stage the tile in shared memory
// (`tile`) so that both global accesses go along rows.
const N: u32 = 4u;
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
var<workgroup> tile: array<f32, 16>;

@compute @workgroup_size(4, 4)
fn main(@builtin(local_invocation_id) local: vec3<u32>) {
    // Invocation (x, y): x varies fastest, so neighbours differ in x.
    let x = local.x;
    let y = local.y;
    // ---- your code: begin ----
    // Read along row y of a (neighbours read neighbours), keep it as the tile's row y.
    tile[y * N + x] = a[y * N + x];
    workgroupBarrier();
    // Write along row y of out: out[y][x] = a[x][y], which the tile holds at row x.
    out[y * N + x] = tile[x * N + y];
    // ---- your code: end ----
}
