// Puzzle 13: axis sum. `a` is BATCH x SIZE (4 x 6), row-major; out[r] is the sum of
// row r. One workgroup of 8 per row (the grid is 1 x BATCH): workgroup_id.y is the row.
const BATCH: u32 = 4u;
const SIZE: u32 = 6u;
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
var<workgroup> cache: array<f32, 8>;

@compute @workgroup_size(8)
fn main(@builtin(local_invocation_id) local: vec3<u32>,
        @builtin(workgroup_id) block: vec3<u32>) {
    let row = block.y;
    let i = local.x;
    // ---- your code: begin ----
    var v = 0.0;
    if (i < SIZE) {
        v = a[row * SIZE + i];
    }
    cache[i] = v;
    workgroupBarrier();
    for (var stride = 4u; stride > 0u; stride = stride / 2u) {
        if (i < stride) {
            cache[i] = cache[i] + cache[i + stride];
        }
        workgroupBarrier();
    }
    if (i == 0u) {
        out[row] = cache[0];
    }
    // ---- your code: end ----
}
