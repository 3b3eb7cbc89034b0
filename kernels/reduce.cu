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

#define REDUCE_KERNELS(T, S)                                                                   \
    extern "C" __global__ void BRRR_ROWS reduce_rows_##S(T* out, const T* x, u64 outer, u64 n, int op) { \
        reduce_rows_impl<T>(out, x, outer, n, op);                                             \
    }                                                                                          \
    BRRR_REGISTER(reduce_rows_##S)                                                             \
    extern "C" __global__ void BRRR_FLAT reduce_cols_##S(T* out, const T* x, u64 outer, u64 n, u64 inner, int op) { \
        reduce_cols_impl<T>(out, x, outer, n, inner, op);                                      \
    }                                                                                          \
    BRRR_REGISTER(reduce_cols_##S)

REDUCE_KERNELS(f16_t, f16)
REDUCE_KERNELS(bf16_t, bf16)
REDUCE_KERNELS(float, f32)
REDUCE_KERNELS(double, f64)
