// emu.h — run brrr's CUDA kernels on the CPU, for testing on machines without a GPU.
//
// Every CUDA thread becomes an OS thread; a block's threads run together (so
// __syncthreads is a real barrier and warp shuffles exchange real values), and blocks run
// one after another. `__shared__` variables become function-local statics, which is
// exactly "one copy per block" when one block runs at a time. The few PTX instructions
// the kernels use (cvt to f16, ldmatrix, mma.sync, cp.async) are implemented here from
// the fragment layouts of the PTX ISA manual, so the tensor-core GEMM's indexing is
// checked too.
//
// What it cannot check: timing, memory-ordering races between warps that a real GPU
// might expose (the emulator's cp.async completes immediately), and anything about
// performance. It is a correctness tool, orders of magnitude slower than a GPU.
#pragma once
#define BRRR_EMU 1

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include <cstdlib>
#include <type_traits>
#include <utility>

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;
typedef int i32;

struct dim3 {
    unsigned x, y, z;
};

namespace emu {
extern thread_local dim3 t_thread_idx;
extern thread_local dim3 t_block_idx;
extern dim3 g_block_dim;
extern dim3 g_grid_dim;

void syncthreads();
// A barrier of the calling thread's warp (__syncwarp).
void syncwarp();
// The calling thread's lane: its linear index in the block modulo 32, as warps are formed.
unsigned lane();
// Exchanges one 64-bit value across the calling thread's warp: every lane deposits
// `v` and gets back the value deposited by lane `src_lane(lane)`.
u64 warp_exchange(u64 v, unsigned src_lane_xor, bool is_xor);

float f16_to_f32(unsigned short h);
unsigned short f32_to_f16(float f);
float f64_to_f32_rz(double x);

unsigned char* dynamic_smem();
unsigned smem_addr(const void* p);
void cp_async_16(unsigned dst, const void* src, int bytes);
// Aborts with a message when `p` is not 16-byte aligned (a vectorized access would fault).
void check_aligned_16(const void* p);
void ldmatrix_x4(unsigned (&r)[4], unsigned addr, bool trans);
void mma_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], bool bf16);

typedef void (*Thunk)(void* fn, void** args);
void register_kernel(const char* name, void* fn, Thunk thunk);

template <class... A, size_t... I>
void call_with(void (*f)(A...), void** args, std::index_sequence<I...>) {
    f(*static_cast<std::remove_reference_t<A>*>(args[I])...);
}
template <class... A> void thunk(void* fn, void** args) {
    call_with(reinterpret_cast<void (*)(A...)>(fn), args, std::index_sequence_for<A...>{});
}
struct Registrar {
    template <class... A> Registrar(const char* name, void (*f)(A...)) {
        register_kernel(name, reinterpret_cast<void*>(f), &thunk<A...>);
    }
};
}  // namespace emu

#define threadIdx (emu::t_thread_idx)
#define blockIdx (emu::t_block_idx)
#define blockDim (emu::g_block_dim)
#define gridDim (emu::g_grid_dim)
#define __global__
#define __device__
#define __forceinline__
#define __shared__ static
#define __align__(n) alignas(n)
#define __launch_bounds__(...)
#define __syncthreads() emu::syncthreads()
#define __syncwarp(...) emu::syncwarp()
#define __trap() abort()
#define BRRR_DEVICE inline
#define BRRR_DYNAMIC_SMEM(type, name) type* name = reinterpret_cast<type*>(emu::dynamic_smem())
#define BRRR_REGISTER(name) static emu::Registrar emu_registrar_##name(#name, &name);

inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
// The host compiler is not asked for FMA (no -march), so a product is rounded once, as
// the device intrinsics promise.
inline float __fmul_rn(float a, float b) { return a * b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __longlong_as_double(long long u) {
    double f;
    memcpy(&f, &u, 8);
    return f;
}
inline long long __double_as_longlong(double f) {
    long long u;
    memcpy(&u, &f, 8);
    return u;
}

template <class T> T __shfl_xor_sync(unsigned, T v, int lane_mask) {
    static_assert(sizeof(T) <= 8, "shuffle of at most 64 bits");
    u64 bits = 0;
    memcpy(&bits, &v, sizeof(T));
    bits = emu::warp_exchange(bits, (unsigned)lane_mask, true);
    T r;
    memcpy(&r, &bits, sizeof(T));
    return r;
}

// Bit `lane` set for every lane whose `pred` is true: an OR across the warp in five
// butterfly exchanges. Like the tests' other warp operations, every lane of the warp
// must call it (the kernels pass the full mask 0xffffffff).
inline unsigned __ballot_sync(unsigned, int pred) {
    u64 bits = pred ? (1ull << emu::lane()) : 0ull;
    for (unsigned o = 16; o > 0; o >>= 1) bits |= emu::warp_exchange(bits, o, true);
    return (unsigned)bits;
}
// 1 + the index of the lowest set bit, 0 when none (CUDA's __ffs).
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
