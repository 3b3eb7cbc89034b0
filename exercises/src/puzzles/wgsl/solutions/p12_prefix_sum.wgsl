// Puzzle 12: prefix sum. out[i] = a[0] + a[1] + ... + a[i] (inclusive scan), SIZE = 8,
// one workgroup of 8. In log2(SIZE) rounds, each invocation adds the partial sum
// `offset` places to its left (offset = 1, 2, 4), with barriers between reads and writes.
const SIZE: u32 = 8u;
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
var<workgroup> cache: array<f32, 8>;

@compute @workgroup_size(8)
fn main(@builtin(local_invocation_id) local: vec3<u32>) {
    let i = local.x;
    // ---- your code: begin ----
    cache[i] = a[i];
    workgroupBarrier();
    for (var offset = 1u; offset < SIZE; offset = offset * 2u) {
        var v = cache[i];
        if (i >= offset) {
            v = v + cache[i - offset];
        }
        workgroupBarrier();
        cache[i] = v;
        workgroupBarrier();
    }
    out[i] = cache[i];
    // ---- your code: end ----
}
