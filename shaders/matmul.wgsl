// matmul.wgsl — batched GEMM, C[b] = alpha * op(A[b]) op(B[b]) + beta * C[b], in versions.
//
// A lesson in the style of llm.c's dev/cuda kernels and Simon Boehm's "How to optimize a
// CUDA matmul": each version fixes the bottleneck of the one before. All versions take the
// same Params and bindings, so the Rust side can run any of them on the same data
// (`WgpuBackend::gemm_with(MatmulKernel::..)`), check each against the CPU reference, and
// benchmark them (`brrr bench gemm --backend wgpu`).
//
// Operands are addressed through strides, which is how transposes cost nothing:
//   op(A)(i, q) = a[off_a + batch*stride_a + i*a_rs + q*a_cs]  (row-major A: a_rs = k,
//                                                   a_cs = 1; Aᵀ stored k×m: a_rs = 1, a_cs = m)
//   op(B)(q, j) = b[off_b + batch*stride_b + q*b_rs + j*b_cs]
//   C(i, j)     = c[off_c + batch*stride_c + i*n + j]
// The offsets let an operand live part-way into a larger buffer (a flat parameter buffer).
// The batch index is the grid's z (plus `batch_base` when the batch is split into several
// dispatches because one grid dimension holds at most 65535 workgroups).
//
// When beta == 0, C is never read: it may hold garbage (NaN), as BLAS allows.
//
// Arithmetic intensity tells which regime each version is in. An m=n=k=N GEMM does 2N³
// flops on 3N² floats: intensity grows with N, so a good GEMM is compute-bound. A naive
// kernel re-reads its operands from global memory for every output, which makes its
// *achieved* intensity 2 flops per 8 bytes: bandwidth-bound, hundreds of times below peak.
// Every version below raises the flops done per byte fetched from global memory.

// ==== kernel: v1_naive ====
// Version 1 — naive. One invocation per C element; each loops over k, reading a row of A
// and a column of B straight from global memory. Neighbouring invocations (along x) take
// neighbouring columns, so B reads are coalesced and A reads are broadcasts; still, every
// operand is fetched k times from DRAM/L2 (2 flops per 8 bytes loaded).
struct Params {
    m: u32, n: u32, k: u32, batch: u32,
    a_rs: u32, a_cs: u32, b_rs: u32, b_cs: u32,
    stride_a: u32, stride_b: u32, stride_c: u32, batch_base: u32,
    alpha: f32, beta: f32, trans_a: u32, trans_b: u32,
    off_a: u32, off_b: u32, off_c: u32, _pad: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

fn store_c(idx: u32, acc: f32) {
    if (p.beta == 0.0) {
        c[idx] = p.alpha * acc;
    } else {
        c[idx] = p.alpha * acc + p.beta * c[idx];
    }
}

@compute @workgroup_size(16, 16)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let col = gid.x;
    let row = gid.y;
    let bat = gid.z + p.batch_base;
    if (row >= p.m || col >= p.n) {
        return;
    }
    let a0 = p.off_a + bat * p.stride_a + row * p.a_rs;
    let b0 = p.off_b + bat * p.stride_b + col * p.b_cs;
    var acc = 0.0;
    for (var q = 0u; q < p.k; q = q + 1u) {
        acc = acc + a[a0 + q * p.a_cs] * b[b0 + q * p.b_rs];
    }
    store_c(p.off_c + bat * p.stride_c + row * p.n + col, acc);
}

// ==== kernel: v2_tiled ====
// Version 2 — shared-memory (workgroup) tiling. A 16×16 workgroup computes a 16×16 tile
// of C. It walks k in steps of 16: all 256 invocations cooperatively copy a 16×16 tile of
// A and of B into workgroup memory (one element each), wait at a barrier, and then every
// invocation reads its row and column from fast on-chip memory. Each global element is
// now fetched once per tile instead of once per output: 16× less global traffic (per
// 16-step tile, an invocation loads 2 floats and does 16 FMAs: 32 flops per 8 bytes,
// against the naive kernel's 2). Out-of-range tile elements are loaded as 0, which is
// how sizes that are not multiples of 16 work.
struct Params {
    m: u32, n: u32, k: u32, batch: u32,
    a_rs: u32, a_cs: u32, b_rs: u32, b_cs: u32,
    stride_a: u32, stride_b: u32, stride_c: u32, batch_base: u32,
    alpha: f32, beta: f32, trans_a: u32, trans_b: u32,
    off_a: u32, off_b: u32, off_c: u32, _pad: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

fn store_c(idx: u32, acc: f32) {
    if (p.beta == 0.0) {
        c[idx] = p.alpha * acc;
    } else {
        c[idx] = p.alpha * acc + p.beta * c[idx];
    }
}

const T: u32 = 16u;
var<workgroup> As: array<f32, 256>; // [row][q]
var<workgroup> Bs: array<f32, 256>; // [q][col]

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let row = wid.y * T + lid.y;
    let col = wid.x * T + lid.x;
    let bat = wid.z + p.batch_base;
    let abase = p.off_a + bat * p.stride_a;
    let bbase = p.off_b + bat * p.stride_b;
    var acc = 0.0;
    let tiles = (p.k + T - 1u) / T;
    for (var t = 0u; t < tiles; t = t + 1u) {
        let qa = t * T + lid.x;
        var av = 0.0;
        if (row < p.m && qa < p.k) {
            av = a[abase + row * p.a_rs + qa * p.a_cs];
        }
        As[lid.y * T + lid.x] = av;
        let qb = t * T + lid.y;
        var bv = 0.0;
        if (qb < p.k && col < p.n) {
            bv = b[bbase + qb * p.b_rs + col * p.b_cs];
        }
        Bs[lid.y * T + lid.x] = bv;
        workgroupBarrier();
        for (var q = 0u; q < T; q = q + 1u) {
            acc = acc + As[lid.y * T + q] * Bs[q * T + lid.x];
        }
        workgroupBarrier();
    }
    if (row < p.m && col < p.n) {
        store_c(p.off_c + bat * p.stride_c + row * p.n + col, acc);
    }
}

// ==== kernel: v3_register_blocked ====
// Version 3 — 2-D register blocking. V2 still does one shared-memory load per FMA, and
// shared memory, though fast, is not free. Here a 16×16 workgroup computes a 64×64 tile of
// C and each invocation a 4×4 block of it, held in 16 registers. Per step of q it loads 4
// values of A and 4 of B from workgroup memory into registers and does 16 FMAs: 2 FMAs
// per shared load instead of 0.5. The global-to-shared copy (64×16 of A, 16×64 of B per
// k-step) reuses each global element 64 times.
// The 4×4 block is strided (rows ty, ty+16, ty+32, ty+48): neighbouring invocations read
// neighbouring shared-memory words (no bank conflicts) and write neighbouring columns of
// C (coalesced). Tile loads pick the element order that walks the operand's contiguous
// axis, so transposed operands stay coalesced too.
struct Params {
    m: u32, n: u32, k: u32, batch: u32,
    a_rs: u32, a_cs: u32, b_rs: u32, b_cs: u32,
    stride_a: u32, stride_b: u32, stride_c: u32, batch_base: u32,
    alpha: f32, beta: f32, trans_a: u32, trans_b: u32,
    off_a: u32, off_b: u32, off_c: u32, _pad: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

fn store_c(idx: u32, acc: f32) {
    if (p.beta == 0.0) {
        c[idx] = p.alpha * acc;
    } else {
        c[idx] = p.alpha * acc + p.beta * c[idx];
    }
}

const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 16u;
var<workgroup> As: array<f32, 1024>; // [BK][BM]
var<workgroup> Bs: array<f32, 1024>; // [BK][BN]

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let row0 = wid.y * BM;
    let col0 = wid.x * BN;
    let bat = wid.z + p.batch_base;
    let abase = p.off_a + bat * p.stride_a;
    let bbase = p.off_b + bat * p.stride_b;
    var acc: array<f32, 16>;
    let tiles = (p.k + BK - 1u) / BK;
    for (var t = 0u; t < tiles; t = t + 1u) {
        for (var j = 0u; j < 4u; j = j + 1u) {
            let e = li + 256u * j;
            // A tile (BM rows x BK q): walk q fastest unless A is transposed.
            var r = e / BK;
            var q = e % BK;
            if (p.trans_a != 0u) {
                q = e / BM;
                r = e % BM;
            }
            let gr = row0 + r;
            let gq = t * BK + q;
            var av = 0.0;
            if (gr < p.m && gq < p.k) {
                av = a[abase + gr * p.a_rs + gq * p.a_cs];
            }
            As[q * BM + r] = av;
            // B tile (BK q x BN cols): walk cols fastest unless B is transposed.
            var qb = e / BN;
            var cb = e % BN;
            if (p.trans_b != 0u) {
                cb = e / BK;
                qb = e % BK;
            }
            let gqb = t * BK + qb;
            let gc = col0 + cb;
            var bv = 0.0;
            if (gqb < p.k && gc < p.n) {
                bv = b[bbase + gqb * p.b_rs + gc * p.b_cs];
            }
            Bs[qb * BN + cb] = bv;
        }
        workgroupBarrier();
        for (var q = 0u; q < BK; q = q + 1u) {
            var ar: array<f32, 4>;
            var br: array<f32, 4>;
            for (var r = 0u; r < 4u; r = r + 1u) {
                ar[r] = As[q * BM + lid.y + 16u * r];
                br[r] = Bs[q * BN + lid.x + 16u * r];
            }
            for (var r = 0u; r < 4u; r = r + 1u) {
                for (var cc = 0u; cc < 4u; cc = cc + 1u) {
                    acc[r * 4u + cc] = acc[r * 4u + cc] + ar[r] * br[cc];
                }
            }
        }
        workgroupBarrier();
    }
    for (var r = 0u; r < 4u; r = r + 1u) {
        let row = row0 + lid.y + 16u * r;
        for (var cc = 0u; cc < 4u; cc = cc + 1u) {
            let col = col0 + lid.x + 16u * cc;
            if (row < p.m && col < p.n) {
                store_c(p.off_c + bat * p.stride_c + row * p.n + col, acc[r * 4u + cc]);
            }
        }
    }
}

// ==== kernel: v4_vec4 ====
// Version 4 — bigger register blocks, vectorised. Each invocation computes an 8×8 block
// (64 accumulators as 16 vec4s) of a 128×128 workgroup tile, so every value brought into
// registers feeds 8 FMAs. Global loads are 16-byte vec4 loads (one per invocation per
// operand per k-step), workgroup memory is read as vec4, and the FMAs run on vec4s, which
// is what lets a compiler issue wide loads and keep the ALUs busy.
// The price is alignment: the contiguous axis of each operand must be a multiple of 4
// (and so must its batch stride). `gemm` falls back to version 3 when it is not.
struct Params {
    m: u32, n: u32, k: u32, batch: u32,
    a_rs: u32, a_cs: u32, b_rs: u32, b_cs: u32,
    stride_a: u32, stride_b: u32, stride_c: u32, batch_base: u32,
    alpha: f32, beta: f32, trans_a: u32, trans_b: u32,
    off_a: u32, off_b: u32, off_c: u32, _pad: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> b: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

fn store_c(idx: u32, acc: f32) {
    if (p.beta == 0.0) {
        c[idx] = p.alpha * acc;
    } else {
        c[idx] = p.alpha * acc + p.beta * c[idx];
    }
}

const BM: u32 = 128u;
const BN: u32 = 128u;
const BK: u32 = 8u;
var<workgroup> As: array<vec4<f32>, 256>; // [BK][BM/4]: 4 consecutive rows per vec4
var<workgroup> Bs: array<vec4<f32>, 256>; // [BK][BN/4]: 4 consecutive cols per vec4

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let row0 = wid.y * BM;
    let col0 = wid.x * BN;
    let bat = wid.z + p.batch_base;
    let abase = p.off_a + bat * p.stride_a;
    let bbase = p.off_b + bat * p.stride_b;
    var acc: array<vec4<f32>, 16>;
    let tiles = (p.k + BK - 1u) / BK;
    for (var t = 0u; t < tiles; t = t + 1u) {
        // A tile: 128 rows x 8 q = 256 vec4s, one per invocation.
        if (p.trans_a == 0u) {
            // row-major A: 4 consecutive q of one row
            let r = li / 2u;
            let q4 = (li % 2u) * 4u;
            let gr = row0 + r;
            let gq = t * BK + q4;
            var v = vec4<f32>(0.0);
            if (gr < p.m && gq < p.k) {
                v = a[(abase + gr * p.a_rs + gq) / 4u];
            }
            for (var j = 0u; j < 4u; j = j + 1u) {
                As[(q4 + j) * 32u + r / 4u][r % 4u] = v[j];
            }
        } else {
            // Aᵀ stored k×m: 4 consecutive rows of one q
            let q = li / 32u;
            let r4 = (li % 32u) * 4u;
            let gr = row0 + r4;
            let gq = t * BK + q;
            var v = vec4<f32>(0.0);
            if (gr < p.m && gq < p.k) {
                v = a[(abase + gq * p.a_cs + gr) / 4u];
            }
            As[q * 32u + r4 / 4u] = v;
        }
        // B tile: 8 q x 128 cols = 256 vec4s.
        if (p.trans_b == 0u) {
            let q = li / 32u;
            let c4 = (li % 32u) * 4u;
            let gq = t * BK + q;
            let gc = col0 + c4;
            var v = vec4<f32>(0.0);
            if (gq < p.k && gc < p.n) {
                v = b[(bbase + gq * p.b_rs + gc) / 4u];
            }
            Bs[q * 32u + c4 / 4u] = v;
        } else {
            // Bᵀ stored n×k: 4 consecutive q of one column
            let cc = li / 2u;
            let q4 = (li % 2u) * 4u;
            let gq = t * BK + q4;
            let gc = col0 + cc;
            var v = vec4<f32>(0.0);
            if (gq < p.k && gc < p.n) {
                v = b[(bbase + gc * p.b_cs + gq) / 4u];
            }
            for (var j = 0u; j < 4u; j = j + 1u) {
                Bs[(q4 + j) * 32u + cc / 4u][cc % 4u] = v[j];
            }
        }
        workgroupBarrier();
        for (var q = 0u; q < BK; q = q + 1u) {
            let a0 = As[q * 32u + lid.y];
            let a1 = As[q * 32u + 16u + lid.y];
            let b0 = Bs[q * 32u + lid.x];
            let b1 = Bs[q * 32u + 16u + lid.x];
            for (var r = 0u; r < 4u; r = r + 1u) {
                acc[r * 2u] = fma(vec4<f32>(a0[r]), b0, acc[r * 2u]);
                acc[r * 2u + 1u] = fma(vec4<f32>(a0[r]), b1, acc[r * 2u + 1u]);
                acc[8u + r * 2u] = fma(vec4<f32>(a1[r]), b0, acc[8u + r * 2u]);
                acc[8u + r * 2u + 1u] = fma(vec4<f32>(a1[r]), b1, acc[8u + r * 2u + 1u]);
            }
        }
        workgroupBarrier();
    }
    // acc[h*8 + r*2 + ci] holds row row0 + 64h + 4*ty + r, columns col0 + 64ci + 4*tx + 0..3
    for (var h = 0u; h < 2u; h = h + 1u) {
        for (var r = 0u; r < 4u; r = r + 1u) {
            let row = row0 + 64u * h + 4u * lid.y + r;
            for (var ci = 0u; ci < 2u; ci = ci + 1u) {
                let v = acc[h * 8u + r * 2u + ci];
                for (var j = 0u; j < 4u; j = j + 1u) {
                    let col = col0 + 64u * ci + 4u * lid.x + j;
                    if (row < p.m && col < p.n) {
                        store_c(p.off_c + bat * p.stride_c + row * p.n + col, v[j]);
                    }
                }
            }
        }
    }
}
