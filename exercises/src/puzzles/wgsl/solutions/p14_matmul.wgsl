// Puzzle 14: matmul. out = a . b for SIZE x SIZE (5 x 5) matrices, row-major, with
// 3 x 3 workgroups in a 2 x 2 grid, each computing a 3 x 3 tile of out. Walk the
// cache dimension in tiles of 3: copy a 3 x 3 block of `a` and of `b` into
// `a_tile` and `b_tile` (0 outside the matrices), barrier, accumulate, barrier.
const SIZE: u32 = 5u;
const TILE: u32 = 3u;
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
var<workgroup> a_tile: array<f32, 9>;
var<workgroup> b_tile: array<f32, 9>;

@compute @workgroup_size(3, 3)
fn main(@builtin(local_invocation_id) local: vec3<u32>,
        @builtin(workgroup_id) block: vec3<u32>) {
    let row = block.y * TILE + local.y;
    let col = block.x * TILE + local.x;
    // ---- your code: begin ----
    var acc = 0.0;
    for (var t = 0u; t < (SIZE + TILE - 1u) / TILE; t = t + 1u) {
        let qa = t * TILE + local.x;
        var av = 0.0;
        if (row < SIZE && qa < SIZE) {
            av = a[row * SIZE + qa];
        }
        a_tile[local.y * TILE + local.x] = av;
        let qb = t * TILE + local.y;
        var bv = 0.0;
        if (qb < SIZE && col < SIZE) {
            bv = b[qb * SIZE + col];
        }
        b_tile[local.y * TILE + local.x] = bv;
        workgroupBarrier();
        for (var q = 0u; q < TILE; q = q + 1u) {
            acc = acc + a_tile[local.y * TILE + q] * b_tile[q * TILE + local.x];
        }
        workgroupBarrier();
    }
    if (row < SIZE && col < SIZE) {
        out[row * SIZE + col] = acc;
    }
    // ---- your code: end ----
}
