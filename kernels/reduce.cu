// reduce.cu — sum / mean / max / min over the middle axis of a contiguous
// [outer, n, inner] view: out[o, i] = op_r x[o, r, i].
//
// Two shapes of the problem, two kernels:
// - inner == 1 (reduce along contiguous rows): one block per row, each thread strides
//   through the row and the block combines the partial results with warp shuffles.
// - inner > 1 (reduce across rows, e.g. a bias gradient summed over the batch): one
//   thread per output column, walking down the rows. Neighbouring threads read
//   neighbouring addresses, so every load is coalesced.
//
// Both leave most of a GPU idle when the outputs are few and the reduced axis long: one
// row of 38M gradient elements (a gradient norm) is one block on one SM, and a bias
// gradient (768 columns summed over 8192 rows) is 768 threads, each waiting on 8192
// loads in turn. So each has a split form, as the LayerNorm's parameter gradients do:
// - rows: reduce_rows_partial gives each row `splits` blocks, each over `chunk`
//   consecutive elements, and reduce_rows_final combines a row's partial results;
// - columns: reduce_cols_partial gives each 32-column tile one block of 32 x 8 threads
//   per chunk of rows, and reduce_cols_final adds the chunks of each column in order.
// The host picks the split from the sizes alone (crates/cuda/src/reduce.rs), not from
// the GPU, so every device gives the same bits.
//
// Accumulation is f32 (f64 for f64), in a fixed order: results do not change from run
// to run.

#define RED_SUM 0
#define RED_MEAN 1
#define RED_MAX 2
#define RED_MIN 3

template <class A> BRRR_DEVICE A red_identity(int op) {
    if (op == RED_MAX) return -A(inf_f64());
    if (op == RED_MIN) return A(inf_f64());
    return A(0);
}

template <class A> BRRR_DEVICE A red_combine(int op, A acc, A x) {
    if (op == RED_MAX) return vmax(acc, x);
    if (op == RED_MIN) return vmin(acc, x);
    return acc + x;
}

template <class T>
BRRR_DEVICE void reduce_rows_impl(T* out, const T* x, u64 outer, u64 n, int op) {
    typedef typename Acc<T>::type A;
    const int block_op = (op == RED_MAX) ? 1 : (op == RED_MIN) ? 2 : 0;
    for (u64 row = blockIdx.x; row < outer; row += gridDim.x) {
        const T* xr = x + row * n;
        A acc = red_identity<A>(op);
        for (u64 j = threadIdx.x; j < n; j += blockDim.x) acc = red_combine(op, acc, to_acc(xr[j]));
        acc = block_reduce(acc, block_op);
        if (threadIdx.x == 0) {
            if (op == RED_MEAN) acc = acc / A(n);
            out[row] = from_acc<T>(acc);
        }
    }
}

template <class T>
BRRR_DEVICE void reduce_cols_impl(T* out, const T* x, u64 outer, u64 n, u64 inner, int op) {
    typedef typename Acc<T>::type A;
    const u64 total = outer * inner;
    for (u64 t = global_thread_id(); t < total; t += global_thread_count()) {
        const u64 o = t / inner;
        const u64 i = t - o * inner;
        const T* xo = x + o * n * inner + i;
        A acc = red_identity<A>(op);
        for (u64 r = 0; r < n; r++) acc = red_combine(op, acc, to_acc(xo[r * inner]));
        if (op == RED_MEAN) acc = acc / A(n);
        out[t] = from_acc<T>(acc);
    }
}

// x * x rounded once, never contracted into a fused multiply-add with the sum it feeds:
// the fused sum of squares is then bitwise a squaring kernel followed by a sum.
BRRR_DEVICE float mul_rn(float a, float b) { return __fmul_rn(a, b); }
BRRR_DEVICE double mul_rn(double a, double b) { return __dmul_rn(a, b); }

// Block b reduces elements [s * chunk, (s + 1) * chunk) of row b / splits, s = b % splits,
// squaring each first if `square` (the gradient norm's sum of squares, with op = sum),
// and writes partial[b]. With splits = 1 this is reduce_rows_impl without the final
// conversion: the same loop, the same block reduction, the same bits.
template <class T>
BRRR_DEVICE void reduce_rows_partial_impl(typename Acc<T>::type* partial, const T* x, u64 outer, u64 n,
                                          u64 splits, u64 chunk, int op, int square) {
    typedef typename Acc<T>::type A;
    const int block_op = (op == RED_MAX) ? 1 : (op == RED_MIN) ? 2 : 0;
    for (u64 b = blockIdx.x; b < outer * splits; b += gridDim.x) {
        const u64 row = b / splits;
        const u64 start = (b - row * splits) * chunk;
        const u64 end = start + chunk < n ? start + chunk : n;
        const T* xr = x + row * n;
        A acc = red_identity<A>(op);
        for (u64 j = start + threadIdx.x; j < end; j += blockDim.x) {
            const A v = to_acc(xr[j]);
            acc = red_combine(op, acc, square ? mul_rn(v, v) : v);
        }
        acc = block_reduce(acc, block_op);
        if (threadIdx.x == 0) partial[b] = acc;
    }
}

// One block per row: combines the row's `splits` partial results in a fixed order.
template <class T>
BRRR_DEVICE void reduce_rows_final_impl(T* out, const typename Acc<T>::type* partial, u64 outer, u64 splits,
                                        u64 n, int op) {
    typedef typename Acc<T>::type A;
    const int block_op = (op == RED_MAX) ? 1 : (op == RED_MIN) ? 2 : 0;
    for (u64 row = blockIdx.x; row < outer; row += gridDim.x) {
        A acc = red_identity<A>(op);
        for (u64 s = threadIdx.x; s < splits; s += blockDim.x) acc = red_combine(op, acc, partial[row * splits + s]);
        acc = block_reduce(acc, block_op);
        if (threadIdx.x == 0) {
            if (op == RED_MEAN) acc = acc / A(n);
            out[row] = from_acc<T>(acc);
        }
    }
}

// Block (32, 8): output column c = blockIdx.x * 32 + threadIdx.x of the cols = outer *
// inner outputs, rows [blockIdx.y * rows_per_chunk, ...) shared out over threadIdx.y and
// combined through shared memory in the order y = 0..7. Writes partial[chunk][c].
template <class T>
BRRR_DEVICE void reduce_cols_partial_impl(typename Acc<T>::type* partial, const T* x, u64 outer, u64 n,
                                          u64 inner, u64 rows_per_chunk, int op) {
    typedef typename Acc<T>::type A;
    __shared__ A lanes[8][33];
    const u64 cols = outer * inner;
    const u64 c = (u64)blockIdx.x * 32 + threadIdx.x;
    const u64 r0 = (u64)blockIdx.y * rows_per_chunk;
    const u64 r1 = r0 + rows_per_chunk < n ? r0 + rows_per_chunk : n;
    A acc = red_identity<A>(op);
    if (c < cols) {
        const u64 o = c / inner;
        const T* xc = x + o * n * inner + (c - o * inner);
        for (u64 r = r0 + threadIdx.y; r < r1; r += 8) acc = red_combine(op, acc, to_acc(xc[r * inner]));
    }
    lanes[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        for (int k = 1; k < 8; k++) acc = red_combine(op, acc, lanes[k][threadIdx.x]);
        partial[(u64)blockIdx.y * cols + c] = acc;
    }
}

// Thread per output column: adds its `chunks` partial results in chunk order.
template <class T>
BRRR_DEVICE void reduce_cols_final_impl(T* out, const typename Acc<T>::type* partial, u64 cols, u64 chunks,
                                        u64 n, int op) {
    typedef typename Acc<T>::type A;
    for (u64 c = global_thread_id(); c < cols; c += global_thread_count()) {
        A acc = red_identity<A>(op);
        for (u64 k = 0; k < chunks; k++) acc = red_combine(op, acc, partial[k * cols + c]);
        if (op == RED_MEAN) acc = acc / A(n);
        out[c] = from_acc<T>(acc);
    }
}

#define REDUCE_KERNELS(T, S)                                                                   \
    extern "C" __global__ void BRRR_ROWS reduce_rows_##S(T* out, const T* x, u64 outer, u64 n, int op) { \
        reduce_rows_impl<T>(out, x, outer, n, op);                                             \
    }                                                                                          \
    BRRR_REGISTER(reduce_rows_##S)                                                             \
    extern "C" __global__ void BRRR_FLAT reduce_cols_##S(T* out, const T* x, u64 outer, u64 n, u64 inner, int op) { \
        reduce_cols_impl<T>(out, x, outer, n, inner, op);                                      \
    }                                                                                          \
    BRRR_REGISTER(reduce_cols_##S)                                                             \
    extern "C" __global__ void BRRR_ROWS reduce_rows_partial_##S(Acc<T>::type* partial, const T* x, u64 outer, \
                                                       u64 n, u64 splits, u64 chunk, int op, int square) { \
        reduce_rows_partial_impl<T>(partial, x, outer, n, splits, chunk, op, square);           \
    }                                                                                          \
    BRRR_REGISTER(reduce_rows_partial_##S)                                                     \
    extern "C" __global__ void BRRR_ROWS reduce_rows_final_##S(T* out, const Acc<T>::type* partial, u64 outer, \
                                                     u64 splits, u64 n, int op) {               \
        reduce_rows_final_impl<T>(out, partial, outer, splits, n, op);                          \
    }                                                                                          \
    BRRR_REGISTER(reduce_rows_final_##S)                                                       \
    extern "C" __global__ void BRRR_FLAT reduce_cols_partial_##S(Acc<T>::type* partial, const T* x, u64 outer, \
                                                       u64 n, u64 inner, u64 rows_per_chunk, int op) { \
        reduce_cols_partial_impl<T>(partial, x, outer, n, inner, rows_per_chunk, op);           \
    }                                                                                          \
    BRRR_REGISTER(reduce_cols_partial_##S)                                                     \
    extern "C" __global__ void BRRR_FLAT reduce_cols_final_##S(T* out, const Acc<T>::type* partial, u64 cols, \
                                                     u64 chunks, u64 n, int op) {               \
        reduce_cols_final_impl<T>(out, partial, cols, chunks, n, op);                           \
    }                                                                                          \
    BRRR_REGISTER(reduce_cols_final_##S)

REDUCE_KERNELS(f16_t, f16)
REDUCE_KERNELS(bf16_t, bf16)
REDUCE_KERNELS(float, f32)
REDUCE_KERNELS(double, f64)
