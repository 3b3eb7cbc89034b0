// common.cuh — the prelude of every brrr CUDA kernel file.
//
// brrr-cuda prepends this file to each kernels/*.cu before handing it to NVRTC, so the
// kernel files do not #include it (NVRTC sees one self-contained program per file).
//
// The kernels include no CUDA header at all: not cuda_fp16.h, not cuda_bf16.h, not
// mma.h. Half-precision values are stored as 16-bit structs and converted with one PTX
// instruction (f16) or a few integer operations (bf16); tensor cores are driven with
// inline PTX (`mma.sync`, `ldmatrix`, `cp.async`). This keeps NVRTC independent of where
// (or whether) a CUDA toolkit's include directory is installed, and shows what the
// header types compile to.
//
// The same sources also compile as plain C++ on the host for kernels/emu (a CPU
// emulator that runs each CUDA thread as an OS thread), where BRRR_EMU is defined and
// every PTX instruction below has a C++ definition with the semantics the PTX ISA
// manual gives it.

#ifndef BRRR_EMU
typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;
typedef int i32;
#define BRRR_DEVICE __device__ __forceinline__
#define BRRR_REGISTER(name)
#define BRRR_DYNAMIC_SMEM(type, name) extern __shared__ __align__(16) type name[]
#endif

// Launch bounds: the most threads per block the host launches a kernel with. The
// compiler then keeps registers per thread low enough for such a block (65536 registers
// per SM: at most 64 per thread for 1024 threads), so a launch never fails for lack of
// registers. Grid-stride kernels are launched with 256 threads, row kernels with up to
// 1024 (one block per row, about four columns per thread).
#define BRRR_FLAT __launch_bounds__(256)
#define BRRR_ROWS __launch_bounds__(1024)

// ---- 16-bit float storage types ------------------------------------------------------

// IEEE binary16 and bfloat16, stored as their bit patterns. Distinct struct types so that
// templates can tell them apart; arithmetic always happens in f32.
struct __align__(2) f16_t {
    unsigned short bits;
};
struct __align__(2) bf16_t {
    unsigned short bits;
};

BRRR_DEVICE float f16_bits_to_f32(unsigned short h) {
#ifdef BRRR_EMU
    return emu::f16_to_f32(h);
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#endif
}

// Round to nearest even, as the hardware instruction does.
BRRR_DEVICE unsigned short f32_to_f16_bits(float f) {
#ifdef BRRR_EMU
    return emu::f32_to_f16(f);
#else
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#endif
}

// bfloat16 is the top half of an f32: widening is a shift.
BRRR_DEVICE float bf16_bits_to_f32(unsigned short b) {
    return __uint_as_float(((unsigned)b) << 16);
}

// Round to nearest even by adding 0x7fff plus the lowest kept bit, then truncating;
// NaN stays a (quiet) NaN. Bit-identical to `half::bf16::from_f32` and to
// `cvt.rn.bf16.f32`.
BRRR_DEVICE unsigned short f32_to_bf16_bits(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (unsigned short)((u >> 16) | 0x0040u);
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

// f64 -> f32 rounding toward zero.
BRRR_DEVICE float f64_to_f32_rz(double x) {
#ifdef BRRR_EMU
    return emu::f64_to_f32_rz(x);
#else
    float f;
    asm("cvt.rz.f32.f64 %0, %1;" : "=f"(f) : "d"(x));
    return f;
#endif
}

BRRR_DEVICE float inf_f32() { return __uint_as_float(0x7f800000u); }
BRRR_DEVICE double inf_f64() { return __longlong_as_double(0x7ff0000000000000ll); }
BRRR_DEVICE float nan_f32() { return __uint_as_float(0x7fc00000u); }

BRRR_DEVICE bool is_finite(float x) { return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u; }
BRRR_DEVICE bool is_finite(double x) {
    return (__double_as_longlong(x) & 0x7ff0000000000000ll) != 0x7ff0000000000000ll;
}
BRRR_DEVICE bool is_nan(float x) { return (__float_as_uint(x) & 0x7fffffffu) > 0x7f800000u; }
BRRR_DEVICE bool is_nan(double x) {
    return (__double_as_longlong(x) & 0x7fffffffffffffffll) > 0x7ff0000000000000ll;
}

// ---- compute types -------------------------------------------------------------------

// Every float dtype computes in f32, except f64 which computes in f64.
template <class T> struct Acc {
    typedef float type;
};
template <> struct Acc<double> {
    typedef double type;
};

BRRR_DEVICE float to_acc(float x) { return x; }
BRRR_DEVICE double to_acc(double x) { return x; }
BRRR_DEVICE float to_acc(f16_t x) { return f16_bits_to_f32(x.bits); }
BRRR_DEVICE float to_acc(bf16_t x) { return bf16_bits_to_f32(x.bits); }

template <class T> BRRR_DEVICE T from_acc(typename Acc<T>::type x);
template <> BRRR_DEVICE float from_acc<float>(float x) { return x; }
template <> BRRR_DEVICE double from_acc<double>(double x) { return x; }
template <> BRRR_DEVICE f16_t from_acc<f16_t>(float x) {
    f16_t r;
    r.bits = f32_to_f16_bits(x);
    return r;
}
template <> BRRR_DEVICE bf16_t from_acc<bf16_t>(float x) {
    bf16_t r;
    r.bits = f32_to_bf16_bits(x);
    return r;
}

// 16 bytes of T: the unit of a vectorized load or store (4 f32, 8 bf16). Whole-buffer
// pointers from brrr's allocator are 256-byte aligned; the host checks the rest.
template <class T> struct __align__(16) Pack {
    T v[16 / sizeof(T)];
};

// `p` seen as packs. A 16-byte load or store at an address that is not a multiple of 16
// faults on a GPU ("misaligned address") but reads the right bytes on a CPU, so the
// emulator checks every such view: a host-side alignment test that lets a bad offset
// through fails there too, not first on a GPU.
template <class T> BRRR_DEVICE const Pack<T>* as_packs(const T* p) {
#ifdef BRRR_EMU
    emu::check_aligned_16(p);
#endif
    return reinterpret_cast<const Pack<T>*>(p);
}
template <class T> BRRR_DEVICE Pack<T>* as_packs(T* p) {
#ifdef BRRR_EMU
    emu::check_aligned_16(p);
#endif
    return reinterpret_cast<Pack<T>*>(p);
}

// ---- reductions ----------------------------------------------------------------------

BRRR_DEVICE float vmax(float a, float b) { return fmaxf(a, b); }
BRRR_DEVICE double vmax(double a, double b) { return fmax(a, b); }
BRRR_DEVICE float vmin(float a, float b) { return fminf(a, b); }
BRRR_DEVICE double vmin(double a, double b) { return fmin(a, b); }

// f32 / f64 overloads of the math the kernels use, so templates over the compute type
// call the right precision.
BRRR_DEVICE float m_exp(float x) { return expf(x); }
BRRR_DEVICE double m_exp(double x) { return exp(x); }
BRRR_DEVICE float m_log(float x) { return logf(x); }
BRRR_DEVICE double m_log(double x) { return log(x); }
BRRR_DEVICE float m_sqrt(float x) { return sqrtf(x); }
BRRR_DEVICE double m_sqrt(double x) { return sqrt(x); }
BRRR_DEVICE float m_tanh(float x) { return tanhf(x); }
BRRR_DEVICE double m_tanh(double x) { return tanh(x); }
BRRR_DEVICE float m_abs(float x) { return fabsf(x); }
BRRR_DEVICE double m_abs(double x) { return fabs(x); }

template <class A> BRRR_DEVICE A warp_sum(A v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <class A> BRRR_DEVICE A warp_max(A v) {
    for (int o = 16; o > 0; o >>= 1) v = vmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
template <class A> BRRR_DEVICE A warp_min(A v) {
    for (int o = 16; o > 0; o >>= 1) v = vmin(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Reduces `v` over the block and returns the result to every thread. `op` 0 = sum,
// 1 = max, 2 = min. blockDim.x must be a multiple of 32 (and at most 1024); the block
// must be one-dimensional. Contains __syncthreads: every thread must call it.
template <class A> BRRR_DEVICE A block_reduce(A v, int op) {
    __shared__ A partial[32];
    __shared__ A result;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int nwarps = blockDim.x >> 5;
    v = op == 0 ? warp_sum(v) : op == 1 ? warp_max(v) : warp_min(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        A w = lane < nwarps ? partial[lane] : (op == 0 ? A(0) : partial[0]);
        w = op == 0 ? warp_sum(w) : op == 1 ? warp_max(w) : warp_min(w);
        if (lane == 0) result = w;
    }
    __syncthreads();
    A r = result;
    // A second call right after this one must not overwrite `result` before every
    // thread has read it.
    __syncthreads();
    return r;
}

// The online softmax's running (max m, sum s of exp(z - m)) taking a pack of V values at
// once (Milakov & Gimelshein, 2018): the pack's largest value rescales s once, then each
// value is added. -inf values (masked) add nothing; NaN propagates into s.
template <class A, int V> BRRR_DEVICE void online_max_sum_pack(A& m, A& s, const A (&z)[V]) {
    const A neg_inf = -A(inf_f64());
    A pm = neg_inf;
#pragma unroll
    for (int e = 0; e < V; e++) pm = vmax(pm, z[e]);
    if (pm > m) {
        s *= m_exp(m - pm);
        m = pm;
    }
#pragma unroll
    for (int e = 0; e < V; e++) {
        if (z[e] != neg_inf) s += m_exp(z[e] - m);
    }
}

// ---- 64-bit index helpers ------------------------------------------------------------

BRRR_DEVICE u64 global_thread_id() {
    return (u64)blockIdx.x * blockDim.x + threadIdx.x;
}
BRRR_DEVICE u64 global_thread_count() { return (u64)gridDim.x * blockDim.x; }

// ---- PTX wrappers for the tensor-core GEMM (sm_80 and newer) ----------------------------

#if defined(BRRR_EMU) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800)
#define BRRR_HAS_SM80 1
#endif

#ifdef BRRR_HAS_SM80
// The 32-bit shared-state-space address of a generic pointer to shared memory, which is
// what ldmatrix and cp.async take.
BRRR_DEVICE unsigned smem_addr(const void* p) {
#ifdef BRRR_EMU
    return emu::smem_addr(p);
#else
    unsigned a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
#endif
}

// Copies 16 bytes global -> shared without passing through registers; `bytes` = 0
// writes 16 zero bytes instead (used for tiles that stick out of the matrix).
BRRR_DEVICE void cp_async_16(unsigned dst, const void* src, int bytes) {
#ifdef BRRR_EMU
    emu::cp_async_16(dst, src, bytes);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes));
#endif
}
BRRR_DEVICE void cp_async_commit() {
#ifndef BRRR_EMU
    asm volatile("cp.async.commit_group;");
#endif
}
// Waits until at most N committed groups of this thread are still in flight.
template <int N> BRRR_DEVICE void cp_async_wait() {
#ifndef BRRR_EMU
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
#endif
}

// Four 8x8 b16 matrices from shared memory; lane l gives the address of row l%8 of
// matrix l/8. Without .trans lane l receives (row l/4, cols 2(l%4), 2(l%4)+1) of each
// matrix; with .trans it receives (rows 2(l%4), 2(l%4)+1, col l/4).
BRRR_DEVICE void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
#ifdef BRRR_EMU
    emu::ldmatrix_x4(r, addr, false);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#endif
}
BRRR_DEVICE void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
#ifdef BRRR_EMU
    emu::ldmatrix_x4(r, addr, true);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#endif
}

// D = A(16x16, row) * B(16x8, col) + D with f32 accumulators. Fragment layout, with
// g = lane/4 and t = lane%4: a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..],
// a[3] = A[g+8][2t+8..]; b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g];
// d[0..1] = D[g][2t..2t+1], d[2..3] = D[g+8][2t..2t+1].
template <class T> BRRR_DEVICE void mma_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]);
template <> BRRR_DEVICE void mma_16816<bf16_t>(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
#ifdef BRRR_EMU
    emu::mma_16816(d, a, b, true);
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
template <> BRRR_DEVICE void mma_16816<f16_t>(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
#ifdef BRRR_EMU
    emu::mma_16816(d, a, b, false);
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
#endif  // BRRR_HAS_SM80
