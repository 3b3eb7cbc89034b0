// Puzzle 9: pooling. out[i] = a[i - 2] + a[i - 1] + a[i], the sum of the last three
// elements (fewer at the start: out[0] = a[0], out[1] = a[0] + a[1]). Stage `a` in
// shared memory (`cache`) so each element is read from global memory once.
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
    var sum = cache[i];
    if (i >= 1u) {
        sum = sum + cache[i - 1u];
    }
    if (i >= 2u) {
        sum = sum + cache[i - 2u];
    }
    out[i] = sum;
    // ---- your code: end ----
}
