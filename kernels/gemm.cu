// gemm.cu — brrr's own matrix multiplications, numbered like the lessons of the book.
//
//   C[b] = alpha * op(A[b]) . op(B[b]) + beta * C[b],   row-major, C is m x n,
//   op(A) = A (m x k) or A^T (A stored k x m), op(B) = B (k x n) or B^T (B stored n x k).
//
// The production path is cuBLAS. These kernels exist to show *why* cuBLAS is fast, one
// idea at a time, and each is validated against the reference like every other op:
//
//   v1 naive            one thread per C element, operands straight from global memory:
//                       every A and B element is read k/1 times from DRAM/L2.
//   v2 smem tiled       32x32 tiles of A and B are staged in shared memory; each global
//                       element is read once per tile, reused 32 times from SRAM.
//   v3 register-blocked 128x128 block tile, 8x8 outputs per thread held in registers; an
//                       outer product per k step: 16 loads from shared memory feed 64 FMAs.
//   v4 tensor cores     (f16/bf16, sm_80+) 128x128x32 block tiles, 8 warps of 64x32,
//                       `mma.sync.m16n8k16` with f32 accumulators, operands fed by
//                       `ldmatrix` from XOR-swizzled shared memory (no bank conflicts), and
//                       a 4-stage `cp.async` pipeline so global loads of later k tiles
//                       overlap the math on the current one.
//
// Accumulation is f32 (f64 for f64). Batches are blockIdx.z; the host splits batches above
// 65535 (the grid's z limit) into several launches.

// Must match `GemmArgs` in crates/cuda/src/ops.rs.
struct GemmArgs {
    u64 m, n, k;
    u64 stride_a, stride_b, stride_c;
    float alpha, beta;
    i32 trans_a, trans_b;
};

template <class T> BRRR_DEVICE typename Acc<T>::type load_a(const T* A, const GemmArgs& g, u64 i, u64 p) {
    return to_acc(g.trans_a ? A[p * g.m + i] : A[i * g.k + p]);
}
template <class T> BRRR_DEVICE typename Acc<T>::type load_b(const T* B, const GemmArgs& g, u64 p, u64 j) {
    return to_acc(g.trans_b ? B[j * g.k + p] : B[p * g.n + j]);
}
// C = alpha * acc + beta * C; C is not read when beta == 0 (so NaN garbage in a fresh
// buffer does not leak into the result), as in BLAS. C's element type TC is T, or float
// for f16/bf16 operands (mixed precision: the f32 accumulator is stored unrounded).
template <class T, class TC> BRRR_DEVICE void store_c(TC* C, u64 idx, typename Acc<T>::type acc, const GemmArgs& g) {
    typedef typename Acc<T>::type A;
    A r = A(g.alpha) * acc;
    if (g.beta != 0.0f) r += A(g.beta) * A(to_acc(C[idx]));
    C[idx] = from_acc<TC>(r);
}

// ---- v1: naive -------------------------------------------------------------------------
// Block (16, 16); thread (x, y) computes C[by*16 + y][bx*16 + x].

template <class T, class TC> BRRR_DEVICE void gemm_v1_impl(TC* C, const T* A, const T* B, const GemmArgs& g) {
    typedef typename Acc<T>::type Ac;
    const u64 b = blockIdx.z;
    A += b * g.stride_a;
    B += b * g.stride_b;
    C += b * g.stride_c;
    const u64 i = (u64)blockIdx.y * 16 + threadIdx.y;
    const u64 j = (u64)blockIdx.x * 16 + threadIdx.x;
    if (i >= g.m || j >= g.n) return;
    Ac acc = Ac(0);
    for (u64 p = 0; p < g.k; p++) acc += load_a(A, g, i, p) * load_b(B, g, p, j);
    store_c<T, TC>(C, i * g.n + j, acc, g);
}

// ---- v2: shared-memory tiling --------------------------------------------------------------
// Block (32, 32). Per k tile, each thread loads one element of A and one of B into shared
// memory; then each thread does 32 FMAs out of shared memory. The +1 column of padding
// keeps the column reads of Bs... and the row writes of As on distinct banks.

#define V2_TILE 32

template <class T, class TC> BRRR_DEVICE void gemm_v2_impl(TC* C, const T* A, const T* B, const GemmArgs& g) {
    typedef typename Acc<T>::type Ac;
    __shared__ Ac As[V2_TILE][V2_TILE + 1];
    __shared__ Ac Bs[V2_TILE][V2_TILE + 1];
    const u64 b = blockIdx.z;
    A += b * g.stride_a;
    B += b * g.stride_b;
    C += b * g.stride_c;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const u64 i = (u64)blockIdx.y * V2_TILE + ty;
    const u64 j = (u64)blockIdx.x * V2_TILE + tx;
    Ac acc = Ac(0);
    for (u64 k0 = 0; k0 < g.k; k0 += V2_TILE) {
        As[ty][tx] = (i < g.m && k0 + tx < g.k) ? load_a(A, g, i, k0 + tx) : Ac(0);
        Bs[ty][tx] = (k0 + ty < g.k && j < g.n) ? load_b(B, g, k0 + ty, j) : Ac(0);
        __syncthreads();
#pragma unroll
        for (int p = 0; p < V2_TILE; p++) acc += As[ty][p] * Bs[p][tx];
        __syncthreads();
    }
    if (i < g.m && j < g.n) store_c<T, TC>(C, i * g.n + j, acc, g);
}

// ---- v3: register blocking ----------------------------------------------------------------
// 256 threads compute a 128x128 tile of C; thread (tr, tc) = (tid / 16, tid % 16) owns the
// 8x8 sub-tile rows tr*8.., cols tc*8... Per k step (BK = 8) the block stages a 128x8 slice
// of A (transposed: As[p][i], so a thread's 8 A values are contiguous) and an 8x128 slice
// of B. Each thread then does 8 outer products of an 8-vector of A by an 8-vector of B:
// 64 FMAs for 16 shared-memory loads, where v2 needed 2 loads per FMA.

#define V3_BM 128
#define V3_BN 128
#define V3_BK 8
#define V3_TM 8
#define V3_TN 8

template <class T, class TC> BRRR_DEVICE void gemm_v3_impl(TC* C, const T* A, const T* B, const GemmArgs& g) {
    typedef typename Acc<T>::type Ac;
    __shared__ Ac As[V3_BK][V3_BM];
    __shared__ Ac Bs[V3_BK][V3_BN];
    const u64 b = blockIdx.z;
    A += b * g.stride_a;
    B += b * g.stride_b;
    C += b * g.stride_c;
    const int tid = threadIdx.x;
    const int tr = tid / 16, tc = tid % 16;
    const u64 bm = (u64)blockIdx.y * V3_BM, bn = (u64)blockIdx.x * V3_BN;
    Ac acc[V3_TM][V3_TN];
#pragma unroll
    for (int r = 0; r < V3_TM; r++)
#pragma unroll
        for (int c = 0; c < V3_TN; c++) acc[r][c] = Ac(0);
    Ac ra[V3_TM], rb[V3_TN];
    for (u64 k0 = 0; k0 < g.k; k0 += V3_BK) {
        // 128*8 = 1024 elements of each operand, 4 per thread. The index order follows the
        // operand's contiguous dimension so that neighbouring threads load neighbouring
        // addresses.
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const int e = tid + l * 256;
            int i, p;
            if (g.trans_a) {
                p = e / V3_BM;
                i = e % V3_BM;
            } else {
                i = e / V3_BK;
                p = e % V3_BK;
            }
            const u64 gi = bm + i, gp = k0 + p;
            As[p][i] = (gi < g.m && gp < g.k) ? load_a(A, g, gi, gp) : Ac(0);
            int q, jj;
            if (g.trans_b) {
                jj = e / V3_BK;
                q = e % V3_BK;
            } else {
                q = e / V3_BN;
                jj = e % V3_BN;
            }
            const u64 gq = k0 + q, gj = bn + jj;
            Bs[q][jj] = (gq < g.k && gj < g.n) ? load_b(B, g, gq, gj) : Ac(0);
        }
        __syncthreads();
#pragma unroll
        for (int p = 0; p < V3_BK; p++) {
#pragma unroll
            for (int r = 0; r < V3_TM; r++) ra[r] = As[p][tr * V3_TM + r];
#pragma unroll
            for (int c = 0; c < V3_TN; c++) rb[c] = Bs[p][tc * V3_TN + c];
#pragma unroll
            for (int r = 0; r < V3_TM; r++)
#pragma unroll
                for (int c = 0; c < V3_TN; c++) acc[r][c] += ra[r] * rb[c];
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < V3_TM; r++) {
        const u64 i = bm + tr * V3_TM + r;
        if (i >= g.m) continue;
#pragma unroll
        for (int c = 0; c < V3_TN; c++) {
            const u64 j = bn + tc * V3_TN + c;
            if (j < g.n) store_c<T, TC>(C, i * g.n + j, acc[r][c], g);
        }
    }
}

// Operands T, output TC; S names them (`f16`, or `bf16_f32` for bf16 into f32).
#define GEMM_SIMT_KERNELS(T, TC, S)                                                            \
    extern "C" __global__ void BRRR_FLAT gemm_v1_##S(TC* C, const T* A, const T* B, GemmArgs g) { gemm_v1_impl<T, TC>(C, A, B, g); } \
    BRRR_REGISTER(gemm_v1_##S)                                                                 \
    extern "C" __global__ void BRRR_ROWS gemm_v2_##S(TC* C, const T* A, const T* B, GemmArgs g) { gemm_v2_impl<T, TC>(C, A, B, g); } \
    BRRR_REGISTER(gemm_v2_##S)                                                                 \
    extern "C" __global__ void __launch_bounds__(256) gemm_v3_##S(TC* C, const T* A, const T* B, GemmArgs g) { \
        gemm_v3_impl<T, TC>(C, A, B, g);                                                       \
    }                                                                                          \
    BRRR_REGISTER(gemm_v3_##S)

GEMM_SIMT_KERNELS(f16_t, f16_t, f16)
GEMM_SIMT_KERNELS(bf16_t, bf16_t, bf16)
GEMM_SIMT_KERNELS(float, float, f32)
GEMM_SIMT_KERNELS(double, double, f64)
// Mixed precision: 16-bit operands accumulated into an f32 C.
GEMM_SIMT_KERNELS(f16_t, float, f16_f32)
GEMM_SIMT_KERNELS(bf16_t, float, bf16_f32)

// ---- v4: tensor cores ------------------------------------------------------------------------
//
// Tile geometry. A block computes BM x BN of C with 8 warps in a 2 x 4 grid; a warp owns
// 64 x 32 = 4 x 4 mma tiles of 16 x 8. The k loop advances BK = 32 at a time, as two
// k16 mma steps.
//
// Shared memory holds each operand tile in the layout it has in global memory, so the
// copy is a straight 16-byte cp.async per chunk:
//   "K-major" tile  (A not transposed, B transposed): ROWS=128 rows of 32 k values,
//                   64 bytes = 4 chunks of 16 B per row;
//   "MN-major" tile (A transposed, B not transposed): 32 k rows of 128 values,
//                   256 bytes = 16 chunks per row.
// ldmatrix reads 8 rows x 16 B at one chunk position per phase. Unswizzled, those 8 rows
// hit the same 4 banks (4-way conflict for K-major, 8-way for MN-major). XOR-ing the
// chunk index with bits of the row number puts the 8 reads on 8 distinct 16-byte bank
// groups:  K-major: chunk ^ ((row >> 1) & 3),  MN-major: chunk ^ (row & 7).
// ldmatrix (plain or .trans) then delivers exactly the mma fragments for either layout.
//
// Requirements (checked on the host): dtype f16/bf16, sm_80+, the contiguous extent of
// each operand (k or m for A, n or k for B) a multiple of 8 elements, batch strides
// multiples of 8, 16-byte aligned base pointers. A 16-byte chunk is then entirely inside
// or entirely outside the matrix, and chunks outside are zero-filled by cp.async.

#define TC_BM 128
#define TC_BN 128
#define TC_BK 32
#define TC_WARPS_M 2
#define TC_WARPS_N 4
#define TC_THREADS (TC_WARPS_M * TC_WARPS_N * 32)
#define TC_WM (TC_BM / TC_WARPS_M)
#define TC_WN (TC_BN / TC_WARPS_N)
#define TC_MT (TC_WM / 16)
#define TC_NT (TC_WN / 8)
#define TC_STAGES 4
#define TC_A_BYTES (TC_BM * TC_BK * 2)
#define TC_B_BYTES (TC_BN * TC_BK * 2)
#define TC_STAGE_BYTES (TC_A_BYTES + TC_B_BYTES)
// Dynamic shared memory per block: 4 stages x 16 KiB = 64 KiB (the host raises the
// kernel's limit above the default 48 KiB).
#define TC_SMEM_BYTES (TC_STAGES * TC_STAGE_BYTES)

#ifdef BRRR_HAS_SM80

// Byte offset of 16-byte chunk `chunk` of row `row` in a K-major tile (4 chunks per row).
BRRR_DEVICE unsigned tc_off_kmajor(unsigned row, unsigned chunk) {
    return row * 64u + ((chunk ^ ((row >> 1) & 3u)) << 4);
}
// Byte offset in an MN-major tile of COLS b16 per row (COLS / 8 >= 8 chunks per row).
template <int COLS> BRRR_DEVICE unsigned tc_off_mnmajor(unsigned row, unsigned chunk) {
    return row * (unsigned)(COLS * 2) + ((chunk ^ (row & 7u)) << 4);
}

// Issues the cp.async copies of k tile `kt` of A and B into shared-memory stage `s`.
template <class T, bool TA, bool TB>
BRRR_DEVICE void tc_load_stage(unsigned s_a, unsigned s_b, const T* A, const T* B, const GemmArgs& g,
                               u64 bm, u64 bn, u64 kt, int tid) {
    const u64 k0 = kt * TC_BK;
#pragma unroll
    for (int l = 0; l < (TC_BM * TC_BK / 8) / TC_THREADS; l++) {
        const unsigned q = tid + l * TC_THREADS;
        unsigned dst;
        u64 gr, gc;  // (row, col) of the chunk's first element in A as stored
        bool ok;
        if (!TA) {  // A stored m x k: K-major tile
            const unsigned row = q >> 2, ch = q & 3u;
            gr = bm + row;
            gc = k0 + ch * 8;
            ok = gr < g.m && gc < g.k;
            dst = s_a + tc_off_kmajor(row, ch);
        } else {  // A stored k x m: MN-major tile
            const unsigned row = q / (TC_BM / 8), ch = q % (TC_BM / 8);
            gr = k0 + row;
            gc = bm + ch * 8;
            ok = gr < g.k && gc < g.m;
            dst = s_a + tc_off_mnmajor<TC_BM>(row, ch);
        }
        const u64 ld = TA ? g.m : g.k;
        const T* src = ok ? A + gr * ld + gc : A;
        cp_async_16(dst, src, ok ? 16 : 0);
    }
#pragma unroll
    for (int l = 0; l < (TC_BN * TC_BK / 8) / TC_THREADS; l++) {
        const unsigned q = tid + l * TC_THREADS;
        unsigned dst;
        u64 gr, gc;
        bool ok;
        if (TB) {  // B stored n x k: K-major tile
            const unsigned row = q >> 2, ch = q & 3u;
            gr = bn + row;
            gc = k0 + ch * 8;
            ok = gr < g.n && gc < g.k;
            dst = s_b + tc_off_kmajor(row, ch);
        } else {  // B stored k x n: MN-major tile
            const unsigned row = q / (TC_BN / 8), ch = q % (TC_BN / 8);
            gr = k0 + row;
            gc = bn + ch * 8;
            ok = gr < g.k && gc < g.n;
            dst = s_b + tc_off_mnmajor<TC_BN>(row, ch);
        }
        const u64 ld = TB ? g.k : g.n;
        const T* src = ok ? B + gr * ld + gc : B;
        cp_async_16(dst, src, ok ? 16 : 0);
    }
}

template <class T, bool TA, bool TB>
BRRR_DEVICE void gemm_v4_impl(T* C, const T* A, const T* B, const GemmArgs& g) {
    BRRR_DYNAMIC_SMEM(unsigned char, smem);
    const u64 b = blockIdx.z;
    A += b * g.stride_a;
    B += b * g.stride_b;
    C += b * g.stride_c;
    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int wm = warp / TC_WARPS_N, wn = warp % TC_WARPS_N;
    const u64 bm = (u64)blockIdx.y * TC_BM, bn = (u64)blockIdx.x * TC_BN;
    const unsigned s_base = smem_addr(smem);
    const u64 ktiles = (g.k + TC_BK - 1) / TC_BK;

    float acc[TC_MT][TC_NT][4];
#pragma unroll
    for (int i = 0; i < TC_MT; i++)
#pragma unroll
        for (int j = 0; j < TC_NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

    // Prologue: start the first STAGES-1 tiles.
#pragma unroll
    for (int s = 0; s < TC_STAGES - 1; s++) {
        if ((u64)s < ktiles) {
            const unsigned sa = s_base + s * TC_STAGE_BYTES;
            tc_load_stage<T, TA, TB>(sa, sa + TC_A_BYTES, A, B, g, bm, bn, (u64)s, tid);
        }
        cp_async_commit();
    }

    for (u64 kt = 0; kt < ktiles; kt++) {
        // Tile kt has landed once at most STAGES-2 of this thread's groups are pending;
        // the barrier makes every thread's copies visible and guarantees that nobody is
        // still reading the stage about to be overwritten (it held tile kt-1).
        cp_async_wait<TC_STAGES - 2>();
        __syncthreads();
        {
            const u64 next = kt + TC_STAGES - 1;
            if (next < ktiles) {
                const unsigned sa = s_base + (unsigned)(next % TC_STAGES) * TC_STAGE_BYTES;
                tc_load_stage<T, TA, TB>(sa, sa + TC_A_BYTES, A, B, g, bm, bn, next, tid);
            }
            cp_async_commit();  // possibly empty, which keeps the group count uniform
        }
        const unsigned sa = s_base + (unsigned)(kt % TC_STAGES) * TC_STAGE_BYTES;
        const unsigned sb = sa + TC_A_BYTES;
#pragma unroll
        for (int kk = 0; kk < TC_BK; kk += 16) {
            unsigned af[TC_MT][4];
            unsigned bfr[TC_NT][2];
            const int j = lane >> 3, rr = lane & 7;
#pragma unroll
            for (int mi = 0; mi < TC_MT; mi++) {
                const unsigned m0 = wm * TC_WM + mi * 16;
                if (!TA) {
                    // matrices: (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15)
                    const unsigned row = m0 + (lane & 15);
                    const unsigned ch = (kk >> 3) + (lane >> 4);
                    ldmatrix_x4(af[mi], sa + tc_off_kmajor(row, ch));
                } else {
                    // stored [k][m]; same four matrices, transposed on load
                    const unsigned row = kk + (j >> 1) * 8 + rr;
                    const unsigned ch = (m0 >> 3) + (j & 1);
                    ldmatrix_x4_trans(af[mi], sa + tc_off_mnmajor<TC_BM>(row, ch));
                }
            }
#pragma unroll
            for (int np = 0; np < TC_NT / 2; np++) {
                const unsigned n0 = wn * TC_WN + np * 16;
                unsigned r[4];
                if (TB) {
                    // stored [n][k]: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
                    const unsigned row = n0 + (j >> 1) * 8 + rr;
                    const unsigned ch = (kk >> 3) + (j & 1);
                    ldmatrix_x4(r, sb + tc_off_kmajor(row, ch));
                } else {
                    // stored [k][n]: (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15)
                    const unsigned row = kk + (j & 1) * 8 + rr;
                    const unsigned ch = (n0 >> 3) + (j >> 1);
                    ldmatrix_x4_trans(r, sb + tc_off_mnmajor<TC_BN>(row, ch));
                }
                bfr[2 * np][0] = r[0];
                bfr[2 * np][1] = r[1];
                bfr[2 * np + 1][0] = r[2];
                bfr[2 * np + 1][1] = r[3];
            }
#pragma unroll
            for (int mi = 0; mi < TC_MT; mi++)
#pragma unroll
                for (int ni = 0; ni < TC_NT; ni++) mma_16816<T>(acc[mi][ni], af[mi], bfr[ni]);
        }
    }
    cp_async_wait<0>();

    // Epilogue: accumulator (mi, ni, e) is C[g + 8*(e/2)][2t + e%2] of the 16x8 tile.
    const int gq = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int mi = 0; mi < TC_MT; mi++) {
#pragma unroll
        for (int ni = 0; ni < TC_NT; ni++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const u64 i = bm + wm * TC_WM + mi * 16 + gq + 8 * (e >> 1);
                const u64 jj = bn + wn * TC_WN + ni * 8 + 2 * t4 + (e & 1);
                if (i < g.m && jj < g.n) store_c<T, T>(C, i * g.n + jj, acc[mi][ni][e], g);
            }
        }
    }
}

#endif  // BRRR_HAS_SM80

#ifdef BRRR_HAS_SM80
#define TC_BODY(T, TA, TB) gemm_v4_impl<T, TA, TB>(C, A, B, g);
#else
#define TC_BODY(T, TA, TB) __trap();
#endif

#define GEMM_TC_KERNEL(T, S, L, TA, TB)                                                        \
    extern "C" __global__ void __launch_bounds__(TC_THREADS) gemm_v4_##S##_##L(T* C, const T* A, const T* B, \
                                                                              GemmArgs g) {    \
        TC_BODY(T, TA, TB)                                                                     \
    }                                                                                          \
    BRRR_REGISTER(gemm_v4_##S##_##L)

#define GEMM_TC_FOR(T, S)                       \
    GEMM_TC_KERNEL(T, S, nn, false, false)      \
    GEMM_TC_KERNEL(T, S, nt, false, true)       \
    GEMM_TC_KERNEL(T, S, tn, true, false)       \
    GEMM_TC_KERNEL(T, S, tt, true, true)

GEMM_TC_FOR(f16_t, f16)
GEMM_TC_FOR(bf16_t, bf16)
