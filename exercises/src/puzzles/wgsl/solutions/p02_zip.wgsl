// Puzzle 2: zip. Add `a` and `b` element by element: out[i] = a[i] + b[i].
const SIZE: u32 = 4u;
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(4)
fn main(@builtin(local_invocation_id) local: vec3<u32>) {
    let i = local.x;
    // ---- your code: begin ----
    out[i] = a[i] + b[i];
    // ---- your code: end ----
}
