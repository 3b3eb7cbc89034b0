// emu.cpp — the CPU emulator of brrr's CUDA kernels, built as a shared library:
//
//   g++ -std=c++20 -O1 -shared -fPIC -pthread emu.cpp -o libbrrr_cuda_emu.so
//
// (brrr-cuda's `emu` module writes the sources to a directory and runs this command.)
// It compiles every kernel file of kernels/ as host C++ and exposes one C entry point,
// brrr_emu_launch, taking the same arguments as cuLaunchKernel: a kernel name, grid and
// block sizes, dynamic shared memory bytes and an array of pointers to the arguments.
// "Device memory" is ordinary host memory.
#include "emu.h"

#include <barrier>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <pthread.h>

namespace emu {

thread_local dim3 t_thread_idx;
thread_local dim3 t_block_idx;
dim3 g_block_dim;
dim3 g_grid_dim;

struct Warp {
    explicit Warp(int n) : bar(n) {}
    std::barrier<> bar;
    u64 slot[32];
    unsigned addr[32];
    unsigned a[32][4];
    unsigned b[32][2];
};

struct Block {
    explicit Block(int n) : bar(n) {}
    std::barrier<> bar;
    std::vector<std::unique_ptr<Warp>> warps;
};

static thread_local Block* t_block = nullptr;
static thread_local unsigned t_linear = 0;
static std::vector<unsigned char> g_dyn_smem;

void syncthreads() { t_block->bar.arrive_and_wait(); }

static Warp& my_warp() { return *t_block->warps[t_linear / 32]; }

void syncwarp() { my_warp().bar.arrive_and_wait(); }

unsigned lane() { return t_linear % 32; }

u64 warp_exchange(u64 v, unsigned lane_arg, bool is_xor) {
    Warp& w = my_warp();
    const unsigned lane = t_linear % 32;
    w.slot[lane] = v;
    w.bar.arrive_and_wait();
    const unsigned src = (is_xor ? (lane ^ lane_arg) : lane_arg) & 31u;
    const u64 r = w.slot[src];
    w.bar.arrive_and_wait();
    return r;
}

float f16_to_f32(unsigned short h) {
    _Float16 x;
    memcpy(&x, &h, 2);
    return (float)x;
}
unsigned short f32_to_f16(float f) {
    const _Float16 x = (_Float16)f;  // round to nearest even, as cvt.rn.f16.f32
    unsigned short h;
    memcpy(&h, &x, 2);
    return h;
}

float f64_to_f32_rz(double x) {
    float f = (float)x;  // round to nearest even
    if (isnan(x) || isinf(x)) return f;
    if (fabs((double)f) > fabs(x)) f = nextafterf(f, 0.0f);  // rounded away from zero: step back
    return f;
}

unsigned char* dynamic_smem() { return g_dyn_smem.data(); }

unsigned smem_addr(const void* p) {
    const unsigned char* c = static_cast<const unsigned char*>(p);
    if (c < g_dyn_smem.data() || c > g_dyn_smem.data() + g_dyn_smem.size()) abort();
    return (unsigned)(c - g_dyn_smem.data());
}

static unsigned char* smem_ptr(unsigned addr, unsigned bytes) {
    if ((u64)addr + bytes > g_dyn_smem.size()) {
        fprintf(stderr, "emu: shared-memory access at %u+%u outside %zu bytes\n", addr, bytes, g_dyn_smem.size());
        abort();
    }
    return g_dyn_smem.data() + addr;
}

void check_aligned_16(const void* p) {
    if ((uintptr_t)p % 16 != 0) {
        fprintf(stderr, "emu: 16-byte vector access at misaligned address %p\n", p);
        abort();
    }
}

void cp_async_16(unsigned dst, const void* src, int bytes) {
    if (dst % 16 != 0 || ((uintptr_t)src % 16 != 0 && bytes != 0)) {
        fprintf(stderr, "emu: cp.async with misaligned address (smem %u, global %p)\n", dst, src);
        abort();
    }
    unsigned char* d = smem_ptr(dst, 16);
    memset(d, 0, 16);
    if (bytes > 0) memcpy(d, src, (size_t)bytes);
}

// PTX ISA, "Warp-level matrix load instruction: ldmatrix": for .x4, lanes 8j..8j+7 give
// the row addresses of matrix j. Without .trans, lane l receives row l/4, elements
// 2(l%4) and 2(l%4)+1 of each matrix (lower column in the low half); with .trans the
// matrix is read column-major: rows 2(l%4) and 2(l%4)+1 of column l/4.
void ldmatrix_x4(unsigned (&r)[4], unsigned addr, bool trans) {
    Warp& w = my_warp();
    const unsigned lane = t_linear % 32;
    if (addr % 16 != 0) {
        fprintf(stderr, "emu: ldmatrix row address %u not 16-byte aligned\n", addr);
        abort();
    }
    w.addr[lane] = addr;
    w.bar.arrive_and_wait();
    for (int j = 0; j < 4; j++) {
        unsigned short lo, hi;
        if (!trans) {
            const unsigned short* row = reinterpret_cast<const unsigned short*>(smem_ptr(w.addr[j * 8 + lane / 4], 16));
            lo = row[2 * (lane % 4)];
            hi = row[2 * (lane % 4) + 1];
        } else {
            const unsigned short* r0 = reinterpret_cast<const unsigned short*>(smem_ptr(w.addr[j * 8 + 2 * (lane % 4)], 16));
            const unsigned short* r1 = reinterpret_cast<const unsigned short*>(smem_ptr(w.addr[j * 8 + 2 * (lane % 4) + 1], 16));
            lo = r0[lane / 4];
            hi = r1[lane / 4];
        }
        r[j] = (unsigned)lo | ((unsigned)hi << 16);
    }
    w.bar.arrive_and_wait();
}

static float half_bits_to_f32(unsigned short h, bool bf16) {
    if (bf16) return __uint_as_float(((unsigned)h) << 16);
    return f16_to_f32(h);
}

// PTX ISA, "Matrix fragments for mma.m16n8k16 with floating point type": with
// groupID g = lane/4 and threadID_in_group t = lane%4,
//   A (16x16): reg0 = A[g][2t, 2t+1], reg1 = A[g+8][2t, 2t+1], reg2 = A[g][2t+8, 2t+9],
//              reg3 = A[g+8][2t+8, 2t+9]
//   B (16x8):  reg0 = B[2t, 2t+1][g], reg1 = B[2t+8, 2t+9][g]
//   C/D (16x8, f32): d0 = D[g][2t], d1 = D[g][2t+1], d2 = D[g+8][2t], d3 = D[g+8][2t+1]
void mma_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], bool bf16) {
    Warp& w = my_warp();
    const unsigned lane = t_linear % 32;
    for (int i = 0; i < 4; i++) w.a[lane][i] = a[i];
    for (int i = 0; i < 2; i++) w.b[lane][i] = b[i];
    w.bar.arrive_and_wait();
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, t = l % 4;
        const int rows[4] = {g, g + 8, g, g + 8};
        const int cols[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
        for (int i = 0; i < 4; i++) {
            A[rows[i]][cols[i]] = half_bits_to_f32((unsigned short)(w.a[l][i] & 0xffffu), bf16);
            A[rows[i]][cols[i] + 1] = half_bits_to_f32((unsigned short)(w.a[l][i] >> 16), bf16);
        }
        for (int i = 0; i < 2; i++) {
            B[2 * t + 8 * i][g] = half_bits_to_f32((unsigned short)(w.b[l][i] & 0xffffu), bf16);
            B[2 * t + 8 * i + 1][g] = half_bits_to_f32((unsigned short)(w.b[l][i] >> 16), bf16);
        }
    }
    w.bar.arrive_and_wait();
    const int g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; e++) {
        const int row = g + 8 * (e / 2), col = 2 * t + (e % 2);
        float s = d[e];
        for (int k = 0; k < 16; k++) s += A[row][k] * B[k][col];
        d[e] = s;
    }
}

struct Entry {
    void* fn;
    Thunk thunk;
};
static std::map<std::string, Entry>& registry() {
    static std::map<std::string, Entry> r;
    return r;
}
void register_kernel(const char* name, void* fn, Thunk thunk) { registry()[name] = Entry{fn, thunk}; }

}  // namespace emu

// ---- the kernels ----------------------------------------------------------------------
#include "common.cuh"
#include "elementwise.cu"
#include "reduce.cu"
#include "softmax.cu"
#include "layernorm.cu"
#include "embedding.cu"
#include "cross_entropy.cu"
#include "optim.cu"
#include "gemm.cu"

// ---- launching ------------------------------------------------------------------------

namespace {
std::string g_error;
std::mutex g_launch_mutex;

struct ThreadArgs {
    emu::Block* block;
    dim3 tid;
    unsigned linear;
    const emu::Entry* entry;
    void** args;
};

// One OS thread per CUDA thread of a block, started once per launch: each runs its
// thread of every block in turn, and the block's barrier at the end of each block keeps
// the blocks one after another (their `__shared__` variables are one static per kernel).
// Starting the threads once per launch instead of once per block is what makes the
// emulator usable on large grids: thread creation, not the kernels, was its cost.
void* thread_main(void* p) {
    ThreadArgs* a = static_cast<ThreadArgs*>(p);
    emu::t_block = a->block;
    emu::t_linear = a->linear;
    emu::t_thread_idx = a->tid;
    const dim3 grid = emu::g_grid_dim;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                emu::t_block_idx = dim3{bx, by, bz};
                a->entry->thunk(a->entry->fn, a->args);
                a->block->bar.arrive_and_wait();
            }
    return nullptr;
}
}  // namespace

extern "C" const char* brrr_emu_error() { return g_error.c_str(); }

extern "C" int brrr_emu_kernel_count() { return (int)emu::registry().size(); }

// Returns 0 on success, 1 for an unknown kernel, 2 for an invalid launch configuration,
// 3 if a thread could not be started.
extern "C" int brrr_emu_launch(const char* name, const unsigned* grid, const unsigned* block, unsigned smem,
                               void** args) {
    std::lock_guard<std::mutex> lock(g_launch_mutex);
    auto it = emu::registry().find(name);
    if (it == emu::registry().end()) {
        g_error = std::string("unknown kernel ") + name;
        return 1;
    }
    const unsigned nthreads = block[0] * block[1] * block[2];
    if (nthreads == 0 || nthreads > 1024 || nthreads % 32 != 0 || grid[0] == 0 || grid[1] == 0 || grid[2] == 0 ||
        grid[1] > 65535 || grid[2] > 65535) {
        g_error = std::string("invalid launch configuration for ") + name +
                  " (the emulator needs 32..1024 threads per block, a multiple of 32)";
        return 2;
    }
    emu::g_grid_dim = dim3{grid[0], grid[1], grid[2]};
    emu::g_block_dim = dim3{block[0], block[1], block[2]};
    emu::g_dyn_smem.assign(smem, 0xcd);  // garbage, as real shared memory would hold
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 512 * 1024);
    std::vector<pthread_t> threads(nthreads);
    std::vector<ThreadArgs> targs(nthreads);
    emu::Block blk((int)nthreads);
    for (unsigned w = 0; w < nthreads / 32; w++) blk.warps.emplace_back(new emu::Warp(32));
    for (unsigned i = 0; i < nthreads; i++) {
        const unsigned tx = i % block[0];
        const unsigned ty = (i / block[0]) % block[1];
        const unsigned tz = i / (block[0] * block[1]);
        targs[i] = ThreadArgs{&blk, dim3{tx, ty, tz}, i, &it->second, args};
        if (pthread_create(&threads[i], &attr, thread_main, &targs[i]) != 0) {
            // Cannot continue safely: threads already started wait on barriers.
            fprintf(stderr, "emu: pthread_create failed\n");
            abort();
        }
    }
    for (unsigned i = 0; i < nthreads; i++) pthread_join(threads[i], nullptr);
    pthread_attr_destroy(&attr);
    return 0;
}
